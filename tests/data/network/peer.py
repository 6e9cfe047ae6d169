"""Two tasks of a job reaching each other on their TF_CONFIG addresses, without TensorFlow.

worker:0 listens on its own port and answers each connection with "hello from worker:0";
worker:1 connects to worker:0's address until it answers, prints "REACHED <answer>", and then
both wait until the file $STOP_FILE exists. Stdlib only: fast to start under a loaded machine."""

import json
import os
import socket
import sys
import time

config = json.loads(os.environ["TF_CONFIG"])
me = config["task"]["index"]
peer = config["cluster"]["worker"][0]
host, port = peer.rsplit(":", 1)
stop = os.environ["STOP_FILE"]
if me == 0:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("", int(port)))
    server.listen(8)
    server.settimeout(0.2)
    print("LISTENING", port, flush=True)
    while not os.path.exists(stop):
        try:
            conn, _ = server.accept()
        except TimeoutError:
            continue
        with conn:
            conn.sendall(b"hello from worker:0\n")
else:
    deadline = time.monotonic() + 120
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=2) as conn:
                print("REACHED", conn.recv(100).decode().strip(), flush=True)
                break
        except OSError as exc:
            if time.monotonic() > deadline:
                sys.exit(f"worker:0 not reached in 120 s: {exc}")
            time.sleep(0.2)
    while not os.path.exists(stop):
        time.sleep(0.2)
