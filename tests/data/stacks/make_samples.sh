#!/bin/sh
# Re-creates the samples of this directory from a real hung process (see README.md).
set -e
cd "$(dirname "$0")"
SPY=${PYSPY:-py-spy}
: > faulthandler.txt
python3 hang.py "$PWD/faulthandler.txt" &
P=$!
sleep 1.5
"$SPY" dump --pid $P > pyspy.txt
"$SPY" dump --pid $P --full-filenames > pyspy_full.txt
"$SPY" dump --pid $P --native --full-filenames > pyspy_native.txt
kill -USR2 $P; sleep 0.3
kill -USR2 $P; sleep 0.3   # the file is appended to: two dumps, the parser reads the last
kill -STOP $P; sleep 0.3
"$SPY" dump --pid $P --nonblocking --full-filenames > pyspy_stopped_nonblocking.txt
"$SPY" dump --pid $P > pyspy_stopped_blocking.txt 2>&1 || true
kill -CONT $P; kill $P
sed -i "s#$PWD/#/work/tests/data/stacks/#g" faulthandler.txt pyspy*.txt
