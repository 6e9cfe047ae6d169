"""A GPU that errs, in words: Xid events and uncorrectable ECC errors from the agents' samples.

Each sample's GPU entries carry ``xid_count`` (the Xids NVML reported for that GPU since the run's
agent on the host started) with the latest ``xid``, and ``ecc_uncorrected`` (NVML's volatile count,
since the driver loaded). ``GpuWatch`` follows them per (host, GPU): a count of Xids that grew, or
an uncorrectable count that grew past the first one seen, is a ``GpuFault``, said as
``GPU 1 on gpu3: Xid 79 (fell off the bus)``.

Some Xids say the hardware or the driver broke (the GPU fell off the bus, a double-bit ECC error,
an NVLink error): the host should leave the job (``GpuFault.drains``). Others are usually the
program's own doing (an illegal address is Xid 31 or 13): the fault is named, the host stays,
since a spare would run the same program into the same error.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: what common Xids mean, in a few words (NVIDIA's Xid catalogue names them)
XID_MEANINGS: dict[int, str] = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    32: "invalid push buffer stream",
    43: "GPU stopped processing",
    45: "preemptive cleanup after an earlier error",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    68: "video processor exception",
    69: "graphics engine class error",
    74: "NVLink error",
    79: "fell off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    109: "context switch timeout",
    119: "GSP RPC timeout",
    120: "GSP error",
}

#: Xids that say the GPU, its memory, its links or its firmware failed: the host is drained
DRAINING_XIDS = frozenset({48, 62, 64, 74, 79, 94, 95, 119, 120})


def xid_text(xid: int) -> str:
    """``Xid 79 (fell off the bus)``; an Xid not in the table by its number alone."""
    meaning = XID_MEANINGS.get(xid)
    return f"Xid {xid} ({meaning})" if meaning else f"Xid {xid}"


@dataclass(frozen=True)
class GpuFault:
    host: str
    index: int
    #: ``Xid 79 (fell off the bus)``, ``2 uncorrectable ECC errors``
    what: str
    #: the host should leave the job (a broken GPU), rather than only be named
    drains: bool
    #: when its sample was taken (unix time)
    seen: float = 0.0

    @property
    def text(self) -> str:
        """``GPU 1 on gpu3: Xid 79 (fell off the bus)``: a cause, a condition's reason, a drain's."""
        return f"GPU {self.index} on {self.host}: {self.what}"


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


class GpuWatch:
    """The Xid and uncorrectable ECC counts last seen per (host, GPU index); ``on_sample`` answers
    the faults a sample shows that were not seen before. Several tasks sharing a GPU report the
    same counts: only the first sample that shows a change is a fault."""

    def __init__(self) -> None:
        self._xids: dict[tuple[str, int], int] = {}
        self._ecc: dict[tuple[str, int], int] = {}

    def on_sample(self, host: str, gpus: Iterable[Mapping[str, Any]], seen: float = 0.0) -> list[GpuFault]:
        faults: list[GpuFault] = []
        for gpu in gpus:
            index = gpu.get("index")
            if type(index) is not int:
                continue
            key = (host, index)
            xids, xid = _count(gpu.get("xid_count")), gpu.get("xid")
            if xids is not None:
                before = self._xids.get(key, 0)
                # a new agent on the host counts from 0 again: fewer than before is a new count
                if xids > before or (xids < before and xids > 0):
                    code = xid if type(xid) is int else None
                    what = xid_text(code) if code is not None else "an Xid error"
                    faults.append(GpuFault(host, index, what, code in DRAINING_XIDS, seen))
                self._xids[key] = xids
            ecc = _count(gpu.get("ecc_uncorrected"))
            if ecc is not None:
                first = key not in self._ecc
                before = self._ecc.get(key, ecc)
                if not first and ecc > before:
                    grew = ecc - before
                    faults.append(GpuFault(host, index, f"{grew} uncorrectable ECC error{'s' if grew > 1 else ''}",
                                           True, seen))
                self._ecc[key] = ecc
        return faults
