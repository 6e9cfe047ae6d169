"""The moving parts of gpu_truth.py: distlaunch as a subprocess, nvidia-smi beside it, process
trees from /proc, the profiles, and the sub-checks that each start a short run (parity, gpu_busy,
out of memory, stacks, the sampler's own cost). The comparisons themselves are in
gpu_truth_compare.py. Standard library only (and distlaunch from this tree): the GPU machine has
Python, PyTorch or CuPy, nvidia-ml-py and psutil, nothing else of ours but what travels.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
LOAD = HERE / "gpu_truth_load.py"
CLI = [sys.executable, "-c", "import sys; from launcher.cli import main; sys.exit(main())"]
SMI_TIMEOUT_S = 10.0


@dataclass
class Setup:
    """Where and how this run works: real GPU or rehearsal, the folder, the environment."""

    rehearse: bool
    out: Path
    gpu: int = 0
    backend: str = "auto"
    fake_state: Path | None = None
    #: prepended to PYTHONPATH and PATH for every distlaunch call (the rehearsal's stand-ins)
    extra_env: dict[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        paths = [self.extra_env.get("PYTHONPATH"), str(REPO), env.get("PYTHONPATH")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        if self.extra_env.get("PATH"):
            env["PATH"] = self.extra_env["PATH"] + os.pathsep + env.get("PATH", "")
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def load_argv(self) -> list[str]:
        """The load script's backend arguments."""
        if self.rehearse:
            return ["--backend", "cpu", "--fake-gpu", str(self.fake_state)]
        return ["--backend", self.backend]

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, check=False,
                              env=self.env(), cwd=self.out)


# -- nvidia-smi ---------------------------------------------------------------------------------------------


def smi(setup: Setup, *args: str) -> str:
    done = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=SMI_TIMEOUT_S,
                          check=False, env=setup.env())
    if done.returncode != 0:
        raise RuntimeError(f"nvidia-smi {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()[:300]}")
    return done.stdout


def _num(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None


def smi_gpu(setup: Setup) -> dict[str, Any] | None:
    """One reading of GPU ``setup.gpu``: util percent, memory used and total in bytes."""
    text = smi(setup, "--query-gpu=index,utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits")
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) >= 4 and _num(fields[0]) == setup.gpu:
            util, used, total = (_num(f) for f in fields[1:4])
            return {"util": util, "mem_used": None if used is None else int(used * 2**20),
                    "mem_total": None if total is None else int(total * 2**20)}
    return None


def smi_apps(setup: Setup) -> dict[int, int | None]:
    """``{pid: used bytes}`` of every compute process (all GPUs: a one-GPU machine here)."""
    out: dict[int, int | None] = {}
    for line in smi(setup, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits").splitlines():
        fields = [f.strip() for f in line.split(",")]
        pid = _num(fields[0]) if fields else None
        if pid is not None and len(fields) >= 2:
            used = _num(fields[1])
            out[int(pid)] = None if used is None else int(used * 2**20)
    return out


def smi_identity(setup: Setup) -> dict[str, Any]:
    """The GPU's model, driver and the driver's CUDA version, as nvidia-smi shows them."""
    text = smi(setup, "--query-gpu=index,name,driver_version", "--format=csv,noheader,nounits")
    ident: dict[str, Any] = {"name": None, "driver": None}
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) >= 3 and _num(fields[0]) == setup.gpu:
            ident = {"name": fields[1], "driver": fields[2]}
    found = re.search(r"CUDA Version:\s*([0-9.]+)", smi(setup))
    ident["cuda"] = found.group(1) if found else None
    return ident


# -- process trees -------------------------------------------------------------------------------------------


def children_map() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        out.setdefault(ppid, []).append(int(name))
    return out


def tree(root: int, kids: dict[int, list[int]]) -> list[int]:
    seen: list[int] = []
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid not in seen:
            seen.append(pid)
            stack.extend(kids.get(pid, []))
    return sorted(seen)


def cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


class SmiPoller(threading.Thread):
    """nvidia-smi once a second beside distlaunch, with the tasks' process trees of the same moment."""

    def __init__(self, setup: Setup, roots: dict[str, int]) -> None:
        super().__init__(daemon=True)
        self.setup, self.roots = setup, roots
        self.records: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            began = time.time()
            try:
                gpu = smi_gpu(self.setup)
                apps = smi_apps(self.setup)
            except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
                self.errors.append(str(exc))
                gpu, apps = None, {}
            kids = children_map()
            trees = {task: tree(pid, kids) for task, pid in self.roots.items()}
            if gpu is not None:
                self.records.append({"ts": (began + time.time()) / 2, **gpu, "apps": apps, "trees": trees})
            self._halt.wait(max(0.0, 1.0 - (time.time() - began)))

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=SMI_TIMEOUT_S * 2)


# -- distlaunch up ------------------------------------------------------------------------------------------


def local_hosts(names: list[str], gpu: int) -> str:
    return "".join(f'[hosts.{n}]\naddress = "localhost"\ntransport = "local"\ngpus = [{gpu}]\n' for n in names)


def write_profile(setup: Setup, name: str, body: str, top: str = "") -> Path:
    path = setup.out / f"{name}.toml"
    path.write_text(f'name = "{name}"\nstrategy = "custom"\nsample_interval = 1.0\norphan_grace_seconds = 20\n'
                    f'{top}\n[defaults]\nworkdir = {json.dumps(str(setup.out))}\nrestart = "never"\n'
                    f'grace_seconds = 5\npython = {json.dumps(sys.executable)}\n{body}')
    return path


def task_command(setup: Setup, mode: str, *extra: str) -> str:
    """A profile's ``command`` (a TOML basic string) running the load script."""
    return json.dumps("{python} " + shlex.join([str(LOAD), mode, *setup.load_argv(), *extra]))


class UpRun:
    """``distlaunch up --json`` as a subprocess; its events gathered as they come."""

    def __init__(self, setup: Setup, profile: Path, run_id: str) -> None:
        self.setup, self.run_id = setup, run_id
        self.run_dir = setup.out / run_id
        self.events: list[dict[str, Any]] = []
        self.stderr_path = setup.out / f"{run_id}.stderr.txt"
        self._stderr = self.stderr_path.open("w")
        self.proc = subprocess.Popen([*CLI, "up", "--json", "--run-dir", str(self.run_dir), "--run-id", run_id,
                                      str(profile)], stdout=subprocess.PIPE, stderr=self._stderr, text=True,
                                     env=setup.env(), cwd=setup.out, start_new_session=True)
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                with self._lock:
                    self.events.append(event)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    def wait_until(self, predicate: Any, timeout: float) -> bool:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if predicate(self.snapshot()):
                return True
            if self.proc.poll() is not None:
                self._reader.join(timeout=5)
                return bool(predicate(self.snapshot()))
            time.sleep(0.1)
        return False

    def pids(self) -> dict[str, int]:
        """Each task's root pid, from its last ``running`` state event."""
        return {e["task"]: e["pid"] for e in self.snapshot()
                if e.get("kind") == "state" and e.get("state") == "running" and e.get("pid")}

    def logs(self, marker: str) -> dict[str, str]:
        """Each task's last output line that starts with ``marker``."""
        return {e["task"]: e["line"] for e in self.snapshot()
                if e.get("kind") == "log" and str(e.get("line", "")).startswith(marker)}

    def finish(self, timeout: float = 60) -> int:
        """Wait for ``up`` to end (SIGTERM to its session after ``timeout``); its exit code."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            code = self.proc.wait(timeout=60)
        self._reader.join(timeout=10)
        self._stderr.close()
        return code

    def stderr(self) -> str:
        return self.stderr_path.read_text() if self.stderr_path.exists() else ""


def _carrying(run_ids: list[str]) -> list[int]:
    wanted = {f"DISTLAUNCH_RUN_ID={r}".encode() for r in run_ids}
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    env = set(f.read().split(b"\0"))
            except OSError:
                continue
            if env & wanted:
                found.append(int(name))
    return sorted(found)


def leftovers(setup: Setup, runs: dict[str, Path], wait_s: float = 15.0) -> dict[str, Any]:
    """Processes that still carry one of these runs' DISTLAUNCH_RUN_ID once ``wait_s`` has passed; where
    some do, ``distlaunch down`` of their runs, and what is left after it."""
    deadline = time.time() + wait_s
    found = _carrying(list(runs))
    while found and time.time() < deadline:
        time.sleep(0.5)
        found = _carrying(list(runs))
    out: dict[str, Any] = {"after_runs": found}
    if found:
        for run_id, run_dir in runs.items():
            if _carrying([run_id]):
                setup.cli("down", str(run_dir), timeout=120)
        out["after_down"] = _carrying(list(runs))
    return out


# -- holder of GPU memory (gpu_busy) ------------------------------------------------------------------------


@contextlib.contextmanager
def holder(setup: Setup, mib: int) -> Any:
    """A process outside any run that holds ``mib`` of GPU memory while the block runs."""
    args = [sys.executable, str(LOAD), "hold", "--mem-mib", str(mib), *setup.load_argv()]
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=setup.env(),
                            cwd=setup.out)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if "ready" not in line:
            raise RuntimeError(f"the GPU memory holder did not start: {line.strip()!r}")
        yield proc.pid
    finally:
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def gpu_busy(setup: Setup) -> dict[str, Any]:
    """`gpu_busy = "refuse"` refuses to start while another process holds memory on the GPU; "warn" warns."""
    out: dict[str, Any] = {}
    with holder(setup, 1024) as pid:
        for policy in ("refuse", "warn"):
            body = local_hosts(["g1"], setup.gpu) + (
                '[roles.worker]\nhosts = ["g1"]\ngpus_per_task = 1\ncommand = "{python} -c pass"\n')
            profile = write_profile(setup, f"gpu-truth-busy-{policy}", body, top=f'gpu_busy = "{policy}"')
            run = UpRun(setup, profile, f"gpu-truth-busy-{policy}-{int(time.time())}")
            code = run.finish(timeout=180)
            err = run.stderr()
            started = any(e.get("kind") == "state" and e.get("state") == "running" for e in run.snapshot())
            line = next((ln for ln in err.splitlines() if "of other processes" in ln), "")
            named = str(pid) in line
            if policy == "refuse":
                ok = code == 2 and not started and named and 'set gpu_busy = "warn"' in line
            else:
                ok = code == 0 and started and named and line.startswith("distlaunch: warning:")
            out[policy] = {"exit_code": code, "tasks_started": started, "line": line, "holder_pid": pid,
                           "holder_named": named, "ok": ok, "run_id": run.run_id}
    return out


def oom(setup: Setup) -> dict[str, Any]:
    """A task that runs out of GPU memory: its failure's cause."""
    body = local_hosts(["g1"], setup.gpu) + (
        f'[roles.worker]\nhosts = ["g1"]\ngpus_per_task = 1\ncommand = {task_command(setup, "oom")}\n')
    profile = write_profile(setup, "gpu-truth-oom", body)
    run = UpRun(setup, profile, f"gpu-truth-oom-{int(time.time())}")
    code = run.finish(timeout=240)
    failed = [e for e in run.snapshot() if e.get("kind") == "state" and e.get("state") == "failed"]
    cause = str(failed[-1].get("cause") or "") if failed else ""
    error = next((e["line"] for e in run.snapshot() if e.get("kind") == "log"
                  and "OutOfMemoryError" in str(e.get("line"))), "")
    return {"exit_code": code, "cause": cause, "error_line": error[:300], "expected": "GPU out of memory",
            "ok": "GPU out of memory" in cause, "run_id": run.run_id}


def stacks(setup: Setup, run_dir: Path, task: str) -> dict[str, Any]:
    """`distlaunch stacks --native` of a task inside its loop: a Python frame of the load script and a
    native frame (on the GPU machine: the CUDA call it waits in)."""
    done = setup.cli("stacks", "--native", "--json", str(run_dir), task, timeout=60)
    (setup.out / "stacks.json").write_text(done.stdout)
    try:
        captures = json.loads(done.stdout)
    except ValueError:
        return {"ok": False, "error": (done.stderr or done.stdout).strip()[-300:]}
    capture: dict[str, Any] = next((c for c in captures if c.get("task") == task), {})
    frames = [f for t in capture.get("threads") or [] for f in t.get("frames") or []]
    python = [f for f in frames if not f[3] and str(f[1]).endswith(LOAD.name)]
    native = [f for f in frames if f[3]]
    cuda = [f for f in native if re.search(r"cuda|cublas|libtorch_cuda|cupy", f"{f[0]} {f[1]}", re.I)]
    return {"method": capture.get("method"), "note": capture.get("note"), "python_frames": len(python),
            "native_frames": len(native), "innermost_python": python[-1][0] if python else None,
            "native_sample": [f"{f[0]} ({os.path.basename(str(f[1]))})" for f in native[-4:]],
            "native_cuda_frames": len(cuda), "ok": bool(python) and bool(native)}


# -- the sampler's own cost ---------------------------------------------------------------------------------


def _ms(values: list[float]) -> dict[str, float]:
    return {"median_ms": round(1000 * statistics.median(values), 3), "max_ms": round(1000 * max(values), 3)}


def sampler_cost(setup: Setup, roots: dict[str, tuple[int, list[int]]], runs: int = 3,
                 passes: int = 20) -> list[dict[str, Any]]:
    """distlaunch's HostSampler in this process over the live tasks: CPU per pass, and each NVML call's
    time, in ``runs`` runs (NVML started afresh each time)."""
    if setup.extra_env.get("PYTHONPATH"):
        sys.path.insert(0, setup.extra_env["PYTHONPATH"])  # the rehearsal's stand-in pynvml
    sys.path.insert(0, str(REPO))
    from launcher.agent import nvml
    from launcher.agent.sampling import HostSampler

    out = []
    for _ in range(runs):
        nvml.reset()
        began = time.perf_counter()
        available = nvml.available()
        init_s = time.perf_counter() - began
        sampler = HostSampler()
        sampler.sample(roots)
        cpu, wall = [], []
        calls: dict[str, list[float]] = {"gpu_stats": [], "compute_processes": [], "process_utilization": []}
        for _ in range(passes):
            time.sleep(0.2)
            c0, w0 = time.thread_time(), time.perf_counter()
            sampler.sample(roots)
            cpu.append(time.thread_time() - c0)
            wall.append(time.perf_counter() - w0)
            for name, values in calls.items():
                t0 = time.perf_counter()
                getattr(nvml, name)(setup.gpu)
                values.append(time.perf_counter() - t0)
        out.append({"nvml": available, "nvml_init_ms": round(1000 * init_s, 1), "passes": passes,
                    "tasks": len(roots), "cpu_per_pass": _ms(cpu), "wall_per_pass": _ms(wall),
                    "nvml_calls": {name: _ms(values) for name, values in calls.items()}})
    nvml.reset()
    return out


def agent_pids(run_dir: Path) -> dict[str, int]:
    out = {}
    for pidfile in sorted((run_dir / "hosts").glob("*/agent.pid")):
        with contextlib.suppress(OSError, ValueError):
            out[pidfile.parent.name] = int(pidfile.read_text().split()[0])
    return out


def which_missing(setup: Setup) -> list[str]:
    """What the real run needs and this machine lacks."""
    missing = []
    if shutil.which("nvidia-smi", path=setup.env()["PATH"]) is None:
        missing.append("nvidia-smi on PATH")
    probe = subprocess.run([sys.executable, "-c", "import pynvml; pynvml.nvmlInit()"], capture_output=True,
                           text=True, timeout=60, check=False, env=setup.env())
    if probe.returncode != 0:
        missing.append("a working NVML (pynvml.nvmlInit(): "
                       + (probe.stderr.strip().splitlines() or ["?"])[-1][:200] + ")")
    return missing
