#!/usr/bin/env bash
# GPU truth (issue 47) on the GPU machine in one call: install what travels as wheels, check that the
# machine has what the run needs, run benchmarks/gpu_truth.py, and leave its files in $OUT.
#
#   bash benchmarks/gpu_truth_device.sh [gpu_truth.py arguments, e.g. --seconds 60]
#
# From the repository root. The machine's python3 (PYTHON=... to choose another) must have psutil,
# nvidia-ml-py and PyTorch or CuPy; distlaunch itself runs from this tree (PYTHONPATH), and `up`,
# `check` and `stacks` need nothing of its other dependencies. What it lacks travels as wheels in
# $GPU_TRUTH_WHEELS (default .whl): py-spy for `stacks --native`, built for Python 3.12 (see
# benchmarks/README.md, "GPU truth"). Files: $OUT (the device tool's folder; /tmp/gpu-truth-out
# elsewhere) gets results.json, summary.txt, the nvidia-smi readings, the main run's events, the
# stacks capture and a tarball of the whole folder (at most 8 files come back). Exit code: gpu_truth.py's.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
PY=${PYTHON:-python3}
WHEELS=${GPU_TRUTH_WHEELS:-.whl}
SITE=${GPU_TRUTH_SITE:-/tmp/gpu-truth-site}
DEST=${OUT:-/tmp/gpu-truth-out}
WORK=/tmp/gpu-truth-run
mkdir -p "$DEST"

if compgen -G "$WHEELS/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
        "$WHEELS"/*.whl || { echo "gpu_truth_device: the wheels in $WHEELS did not install" >&2; exit 2; }
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
    export PATH="$SITE/bin:$PATH"
fi

"$PY" - "$@" <<'EOF' || exit 2
import importlib.util, shutil, sys
rehearse = "--rehearse" in sys.argv[1:]
missing = [] if sys.version_info >= (3, 11) else ["Python >= 3.11 (distlaunch's own)"]
missing += [m for m in ("psutil", "pynvml") if importlib.util.find_spec(m) is None]
if not rehearse:
    if not shutil.which("nvidia-smi"):
        missing.append("nvidia-smi")
    if importlib.util.find_spec("torch") is None and importlib.util.find_spec("cupy") is None:
        missing.append("torch or cupy")
if not shutil.which("py-spy"):
    missing.append("py-spy (a wheel in the wheelhouse): stacks --native is checked with it")
print("gpu_truth_device: python %s at %s; missing: %s" % (sys.version.split()[0], sys.executable,
                                                        ", ".join(missing) or "nothing"), flush=True)
sys.exit(1 if [m for m in missing if not m.startswith("py-spy")] else 0)
EOF

rm -rf "$WORK"
PYTHONUNBUFFERED=1 "$PY" benchmarks/gpu_truth.py --out "$WORK" "$@" | tee "$DEST/stdout.txt"
code=${PIPESTATUS[0]}
for f in results.json summary.txt nvidia_smi.jsonl main.events.jsonl stacks.json; do
    [ -f "$WORK/$f" ] && cp "$WORK/$f" "$DEST/"
done
tar -czf "$DEST/gpu-truth-all.tar.gz" --exclude=agent.pyz --exclude=fake -C "$(dirname "$WORK")" \
    "$(basename "$WORK")" 2>/dev/null || true
echo "gpu_truth_device: exit $code; files in $DEST: $(ls "$DEST" | tr '\n' ' ')"
exit "$code"
