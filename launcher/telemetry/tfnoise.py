"""TensorFlow's start-up lines: what they look like, in one table, and a filter that folds them.

Every TensorFlow process prints a few lines from its C++ runtime when it starts (oneDNN, the CUDA
stubs of a CPU build, CPU instruction sets, plugins registered twice), again at every restart.
They say nothing about the job, so the dashboard's log pane and the failure report fold them into
one line; `events.jsonl`, the task logs and `distlaunch logs` keep every one of them.

A line is start-up noise only when it matches a row of `STARTUP_LINES` whole: the C++ log prefix
(severity I, W or E: never F, a fatal check) of the named source file, and the known message. A
Python traceback, an exception line or any other error is never matched. Each row carries
examples of the real lines it stands for; tests/unit/telemetry/test_tfnoise.py checks every row against
them and against output captured from a real TensorFlow (tests/data/tf_startup/).

Stdlib only: the launcher's printer and the dashboard both use it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# absl's prefix (TF >= 2.16):       "I0000 00:00:1795531818.913117     845 port.cc:153] " (the seconds are
#                                   Unix time while absl logging is not initialised, else "14:03:07.123")
# TF's own before it (2.x):         "2023-11-20 12:00:00.123456: I tensorflow/core/util/port.cc:113] "
_PREFIX = (r"(?:[IWE]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ |\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWE] )"
           r"(?:\S+/)?")


@dataclass(frozen=True)
class StartupLine:
    """One kind of start-up line: the C++ file that logs it (None: a line without the log prefix),
    the start of its message, an optional line that follows it, and real examples of both."""

    name: str
    source: str | None
    message: str
    examples: tuple[str, ...]
    continuation: str | None = None

    def pattern(self) -> re.Pattern[str]:
        if self.source is None:
            return re.compile(self.message)
        return re.compile(_PREFIX + re.escape(self.source) + r":\d+\] " + self.message)


STARTUP_LINES: tuple[StartupLine, ...] = (
    StartupLine(
        "absl InitializeLog", None,
        r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$",
        ("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",)),
    StartupLine(
        "oneDNN", "port.cc", r"oneDNN custom operations are on\. ",
        ("I0000 00:00:1795531818.913117     845 port.cc:153] oneDNN custom operations are on. You may see "
         "slightly different numerical results due to floating-point round-off errors from different "
         "computation orders. To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.",
         "2023-11-20 12:00:00.123456: I tensorflow/core/util/port.cc:113] oneDNN custom operations are on. "
         "You may see slightly different numerical results due to floating-point round-off errors from "
         "different computation orders. To turn them off, set the environment variable "
         "`TF_ENABLE_ONEDNN_OPTS=0`.")),
    StartupLine(
        "cudart stub", "cudart_stub.cc",
        r"(?:Could not find cuda drivers on your machine, GPU will not be used\.$"
        r"|Ignore above cudart dlerror if you do not have a GPU set up on your machine\.$)",
        ("I0000 00:00:1795531818.913458     845 cudart_stub.cc:31] Could not find cuda drivers on your "
         "machine, GPU will not be used.",
         "2023-11-20 12:00:00.123456: I tensorflow/tsl/cuda/cudart_stub.cc:28] Could not find cuda drivers "
         "on your machine, GPU will not be used.",
         "2021-06-01 12:00:00.123456: I tensorflow/stream_executor/cuda/cudart_stub.cc:29] Ignore above "
         "cudart dlerror if you do not have a GPU set up on your machine.")),
    StartupLine(
        "libcudart not found", "dso_loader.cc", r"Could not load dynamic library 'libcudart\.so",
        ("2021-06-01 12:00:00.123456: W tensorflow/stream_executor/platform/default/dso_loader.cc:64] Could "
         "not load dynamic library 'libcudart.so.11.0'; dlerror: libcudart.so.11.0: cannot open shared "
         "object file: No such file or directory",)),
    StartupLine(
        "CPU instructions", "cpu_feature_guard.cc",
        r"(?:This TensorFlow binary is optimized |Your CPU supports instructions that this TensorFlow binary)",
        ("I0000 00:00:1795531819.158053     845 cpu_feature_guard.cc:227] This TensorFlow binary is optimized "
         "to use available CPU instructions in performance-critical operations.",
         "2023-11-20 12:00:00.123456: I tensorflow/core/platform/cpu_feature_guard.cc:182] This TensorFlow "
         "binary is optimized to use available CPU instructions in performance-critical operations.",
         "2022-03-01 12:00:00.123456: I tensorflow/core/platform/cpu_feature_guard.cc:151] This TensorFlow "
         "binary is optimized with oneAPI Deep Neural Network Library (oneDNN) to use the following CPU "
         "instructions in performance-critical operations:  AVX2 FMA",
         "2020-01-01 12:00:00.123456: I tensorflow/core/platform/cpu_feature_guard.cc:142] Your CPU supports "
         "instructions that this TensorFlow binary was not compiled to use: AVX2 FMA",
         "To enable the following instructions: AVX2 AVX512F AVX512_VNNI AVX512_BF16 AVX512_FP16 AVX_VNNI "
         "AMX_TILE AMX_INT8 AMX_BF16 FMA, in other operations, rebuild TensorFlow with the appropriate "
         "compiler flags.",
         "To enable them in other operations, rebuild TensorFlow with the appropriate compiler flags."),
        continuation=r"To enable (?:the following instructions: .*, in other operations|them in other "
                     r"operations), rebuild TensorFlow with the appropriate compiler flags\.$"),
    StartupLine(
        "cuInit failed", "cuda_platform.cc", r"failed call to cuInit: ",
        ("E0000 00:00:1795531821.424901     845 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA "
         "error: Failed call to cuInit: UNKNOWN ERROR (303)",)),
    StartupLine(
        "cuInit failed (before 2.19)", "cuda_driver.cc", r"failed call to cuInit: ",
        ("2024-03-01 12:00:00.123456: E external/local_xla/xla/stream_executor/cuda/cuda_driver.cc:282] "
         "failed call to cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected",
         "E0000 00:00:1721000000.123456   12345 cuda_driver.cc:152] failed call to cuInit: INTERNAL: CUDA "
         "error: Failed call to cuInit: UNKNOWN ERROR (303)")),
    StartupLine(
        "cuDNN factory", "cuda_dnn.cc", r"Unable to register cuDNN factory: Attempting to register factory for "
        r"plugin cuDNN when one has already been registered",
        ("2024-03-01 12:00:00.123456: E external/local_xla/xla/stream_executor/cuda/cuda_dnn.cc:9261] Unable to "
         "register cuDNN factory: Attempting to register factory for plugin cuDNN when one has already been "
         "registered",
         "E0000 00:00:1733000000.123456   12345 cuda_dnn.cc:8310] Unable to register cuDNN factory: Attempting "
         "to register factory for plugin cuDNN when one has already been registered")),
    StartupLine(
        "cuFFT factory", "cuda_fft.cc", r"Unable to register cuFFT factory: Attempting to register factory for "
        r"plugin cuFFT when one has already been registered",
        ("2024-03-01 12:00:00.123456: E external/local_xla/xla/stream_executor/cuda/cuda_fft.cc:607] Unable to "
         "register cuFFT factory: Attempting to register factory for plugin cuFFT when one has already been "
         "registered",
         "E0000 00:00:1733000000.123456   12345 cuda_fft.cc:477] Unable to register cuFFT factory: Attempting "
         "to register factory for plugin cuFFT when one has already been registered")),
    StartupLine(
        "cuBLAS factory", "cuda_blas.cc", r"Unable to register cuBLAS factory: Attempting to register factory "
        r"for plugin cuBLAS when one has already been registered",
        ("2024-03-01 12:00:00.123456: E external/local_xla/xla/stream_executor/cuda/cuda_blas.cc:1515] Unable "
         "to register cuBLAS factory: Attempting to register factory for plugin cuBLAS when one has already "
         "been registered",
         "E0000 00:00:1733000000.123456   12345 cuda_blas.cc:1418] Unable to register cuBLAS factory: "
         "Attempting to register factory for plugin cuBLAS when one has already been registered")),
    StartupLine(
        "computation placer", "computation_placer.cc", r"computation placer already registered\. ",
        ("W0000 00:00:1745000000.123456   12345 computation_placer.cc:177] computation placer already "
         "registered. Please check linkage and avoid linking the same target more than once.",)),
    StartupLine(
        "TF-TRT", "py_utils.cc", r"TF-TRT Warning: Could not find TensorRT$",
        ("2024-03-01 12:00:00.123456: W tensorflow/compiler/tf2tensorrt/utils/py_utils.cc:38] TF-TRT "
         "Warning: Could not find TensorRT",
         "W0000 00:00:1733000000.123456   12345 py_utils.cc:38] TF-TRT Warning: Could not find TensorRT")),
)

_MATCHERS = tuple((row.pattern(), re.compile(row.continuation) if row.continuation else None)
                  for row in STARTUP_LINES)


class StartupFilter:
    """Says of each line of ONE task's output, in order, whether it is a start-up line.

    Stateful because of continuations: "To enable the following instructions: ..." is start-up
    noise only right after the cpu_feature_guard line it belongs to."""

    def __init__(self) -> None:
        self._continuation: re.Pattern[str] | None = None

    def hides(self, line: str) -> bool:
        text = line.rstrip("\r\n")
        expected, self._continuation = self._continuation, None
        if expected is not None and expected.match(text):
            return True
        for pattern, continuation in _MATCHERS:
            if pattern.match(text):
                self._continuation = continuation
                return True
        return False


def split_startup(lines: Iterable[str]) -> tuple[list[str], int]:
    """The lines that are not start-up noise, in order, and how many were left out."""
    startup, kept = StartupFilter(), []
    hidden = 0
    for line in lines:
        if startup.hides(line):
            hidden += 1
        else:
            kept.append(line)
    return kept, hidden


def hidden_note(count: int, how_to_show: str) -> str:
    """The one line that stands for `count` folded start-up lines."""
    plural = "line" if count == 1 else "lines"
    return f"{count} TensorFlow start-up {plural} hidden; {how_to_show}"
