"""The tasks gpu_truth.py has distlaunch start: a GPU loop at a known duty cycle, a task with no GPU,
a process that holds GPU memory, a task that runs out of GPU memory.

``--backend torch`` / ``cupy`` (``auto``: whichever imports and sees a GPU) on the GPU machine;
``--backend cpu`` in the rehearsal: a CPU loop (SHA-256 over a block, a native call, as a CUDA call
is) stands in for the matrix multiplies and registers with the stand-in GPU
(benchmarks/gpu_truth_fake.py). Every line it prints starts with ``gpu_truth:``.

    loop   allocate --mem-mib, print "ready", wait for the go file (the window's start time), then
           each --period be busy for duty x period and idle for the rest, from go + delay on;
           until the stop file appears (or --max-seconds)
    idle   the task with no GPU: sleeps until the stop file appears
    hold   allocate --mem-mib, print "ready", sleep until stdin closes (or --max-seconds)
    oom    allocate twice the GPU's memory at once: the error ends the task
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def say(text: str) -> None:
    print(f"gpu_truth: {text}", flush=True)


class Device:
    """A backend: ``hold(bytes)`` keeps memory on the GPU, ``step()`` runs one short burst of work
    and waits for it to finish, ``oom()`` asks for more memory than there is."""

    name = "?"

    def hold(self, nbytes: int) -> None:
        raise NotImplementedError

    def step(self) -> None:
        raise NotImplementedError

    def busy(self, start: float, end: float) -> None:
        """The span [start, end] was busy (only the stand-in records it)."""

    def oom(self) -> None:
        raise NotImplementedError


class TorchDevice(Device):
    name = "torch"

    def __init__(self) -> None:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
        self.torch = torch
        self.a = torch.randn(4096, 4096, device="cuda")
        self.b = torch.randn(4096, 4096, device="cuda")
        self.kept: list[Any] = []

    def hold(self, nbytes: int) -> None:
        self.kept.append(self.torch.ones(nbytes, dtype=self.torch.uint8, device="cuda"))
        self.torch.cuda.synchronize()

    def step(self) -> None:
        self.c = self.a @ self.b
        self.torch.cuda.synchronize()

    def oom(self) -> None:
        total = self.torch.cuda.get_device_properties(0).total_memory
        self.torch.empty(2 * total, dtype=self.torch.uint8, device="cuda")


class CupyDevice(Device):
    name = "cupy"

    def __init__(self) -> None:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
        self.cupy = cupy
        self.a = cupy.random.random((4096, 4096), dtype=cupy.float32)
        self.b = cupy.random.random((4096, 4096), dtype=cupy.float32)
        self.kept: list[Any] = []

    def hold(self, nbytes: int) -> None:
        self.kept.append(self.cupy.ones(nbytes, dtype=self.cupy.uint8))
        self.cupy.cuda.Device().synchronize()

    def step(self) -> None:
        self.c = self.a @ self.b
        self.cupy.cuda.Device().synchronize()

    def oom(self) -> None:
        total = self.cupy.cuda.runtime.memGetInfo()[1]
        self.cupy.empty(2 * total, dtype=self.cupy.uint8)


class CpuStandIn(Device):
    """REHEARSAL: host memory and a CPU loop, registered with the stand-in GPU's state directory."""

    name = "cpu (REHEARSAL stand-in)"

    def __init__(self, state_dir: str) -> None:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import gpu_truth_fake

        self.reg = gpu_truth_fake.Registration(state_dir, 0)
        self.block = os.urandom(256 << 10)
        self.kept: list[bytearray] = []

    def hold(self, nbytes: int) -> None:
        block = bytearray(nbytes)
        for i in range(0, nbytes, 4096):  # touch every page: the memory is really held
            block[i] = 1
        self.kept.append(block)
        self.reg.mem_bytes += nbytes
        self.reg.write()

    def step(self) -> None:
        hashlib.sha256(self.block).digest()

    def busy(self, start: float, end: float) -> None:
        self.reg.add_busy(start, end)

    def oom(self) -> None:
        # torch's own exception type and the first words of its caching allocator's message
        # (c10/cuda/CUDACachingAllocator.cpp): what a task's traceback shows on a real GPU
        error = type("OutOfMemoryError", (RuntimeError,), {"__module__": "torch"})
        raise error("CUDA out of memory. Tried to allocate 32.00 GiB. GPU 0 has a total capacity of 16.00 GiB "
                    "of which 15.50 GiB is free. (REHEARSAL stand-in: no CUDA call was made)")


def open_device(backend: str, fake_gpu: str | None) -> Device:
    if backend == "cpu":
        if not fake_gpu:
            raise SystemExit("gpu_truth_load: --backend cpu needs --fake-gpu")
        return CpuStandIn(fake_gpu)
    choices: dict[str, list[Callable[[], Device]]] = {"torch": [TorchDevice], "cupy": [CupyDevice],
                                                      "auto": [TorchDevice, CupyDevice]}
    makers = choices[backend]
    errors = []
    for make in makers:
        try:
            return make()
        except Exception as exc:  # ImportError, no device: try the next one
            errors.append(f"{make.__name__}: {type(exc).__name__}: {exc}")
    raise SystemExit("gpu_truth_load: no GPU backend: " + "; ".join(errors))


def _pick(values: str, index: int) -> float:
    items = [float(v) for v in values.split(",")]
    return items[min(index, len(items) - 1)]


def wait_for_file(path: str, deadline: float) -> str | None:
    while time.time() < deadline:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            text = ""
        if text:
            return text
        time.sleep(0.05)
    return None


def loop(args: argparse.Namespace, device: Device) -> int:
    duty = _pick(args.duty, args.index)
    delay = _pick(args.delay, args.index)
    device.hold(int(_pick(args.mem_mib, args.index) * (1 << 20)))
    device.step()  # the first call pays for the backend's start-up, before the window
    say(f"ready backend={device.name} pid={os.getpid()} duty={duty} delay={delay}")
    end = time.time() + args.max_seconds
    go = wait_for_file(args.go, end)
    if go is None:
        say("no go file: giving up")
        return 1
    start = float(go) + delay
    while time.time() < start and not os.path.exists(args.stop):
        time.sleep(0.05)
    say(f"busy from {time.time():.3f} duty={duty}")
    period = args.period
    while time.time() < end and not os.path.exists(args.stop):
        began = time.time()
        until = began + duty * period
        while time.time() < until:
            device.step()
        device.busy(began, time.time())
        rest = began + period - time.time()
        if rest > 0:
            time.sleep(rest)
    say("stop")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["loop", "idle", "hold", "oom"])
    p.add_argument("--backend", choices=["auto", "torch", "cupy", "cpu"], default="auto")
    p.add_argument("--fake-gpu", help="the stand-in GPU's state directory (--backend cpu)")
    p.add_argument("--index", type=int, default=0, help="which of the comma lists below is this task's")
    p.add_argument("--duty", default="1.0", help="busy share of each period, per index")
    p.add_argument("--delay", default="0", help="seconds after the go time before the loop starts, per index")
    p.add_argument("--mem-mib", default="1024", help="GPU memory to hold, per index")
    p.add_argument("--period", type=float, default=0.02,
                   help="seconds per busy+idle cycle: short, so that any sample period sees the duty cycle")
    p.add_argument("--go", default="go")
    p.add_argument("--stop", default="stop")
    p.add_argument("--max-seconds", type=float, default=300.0)
    args = p.parse_args(argv)
    if args.mode == "idle":
        say(f"no GPU: CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r} pid={os.getpid()}")
        wait_for_file(args.stop, time.time() + args.max_seconds)
        return 0
    device = open_device(args.backend, args.fake_gpu)
    if args.mode == "oom":
        say(f"asking {device.name} for twice the GPU's memory")
        device.oom()
        say("no error: the allocation did not fail")
        return 3
    if args.mode == "hold":
        device.hold(int(float(args.mem_mib) * (1 << 20)))
        say(f"ready backend={device.name} pid={os.getpid()}")
        deadline = time.time() + args.max_seconds
        while time.time() < deadline and sys.stdin.readline():
            pass
        return 0
    return loop(args, device)


if __name__ == "__main__":
    sys.exit(main())
