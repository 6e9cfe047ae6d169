"""`check`'s CUDA/CUDNN column: a TensorFlow built with CUDA shows it only where the CUDA runtime it was
built for can be loaded (issue 56: tensorflow-cpu showed "CUDA 12.5.1, cuDNN 9" on a CPU machine)."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.remote.preflight import TF_CHECK

FAKE_TF = """class sysconfig:
    @staticmethod
    def get_build_info():
        return {"is_cuda_build": True, "cuda_version": "12.5.1", "cudnn_version": "9"}
__version__ = "2.21.0"
"""


def _version_line(site: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run([sys.executable, "-c", TF_CHECK], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_cuda_shows_only_where_its_runtime_is_there(tmp_path: Path) -> None:
    if (ctypes.util.find_library("cudart") or "").startswith("libcudart.so.12"):
        pytest.skip("this machine has a CUDA 12 runtime of its own")
    (tmp_path / "tensorflow").mkdir()
    (tmp_path / "tensorflow" / "__init__.py").write_text(FAKE_TF)
    assert _version_line(tmp_path).split()[2:] == ["(imported)"]  # a CPU machine: no CUDA column
    lib = tmp_path / "nvidia" / "cuda_runtime" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcudart.so.13").write_bytes(b"")  # another major version: TensorFlow cannot load it
    assert _version_line(tmp_path).split()[2:] == ["(imported)"]
    (lib / "libcudart.so.12").write_bytes(b"")  # the nvidia-cuda-runtime-cu12 wheel
    assert _version_line(tmp_path).split()[2:] == ["(imported)", "cuda", "12.5.1", "cudnn", "9"]
