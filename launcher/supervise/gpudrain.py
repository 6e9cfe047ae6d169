"""The supervisor's part for GPUs that err (issue 58 §2): name the fault, and move the job off a
host whose GPU broke rather than let its tasks crash-loop there.

Every task sample passes through ``faults_in`` on the loop; ``launcher/telemetry/gpufaults.py``
says which show a new Xid or uncorrectable ECC error. ``act`` then:

- raises the ``gpu_error`` condition, its reason the fault in words (``GPU 1 on gpu3: Xid 79 (fell
  off the bus)``), on each task of that host given that GPU, and keeps the fault for the cause of a
  failure there to come (``OutputTails.note_gpu_fault``);
- for a fault that drains (a broken GPU, not the program's own error), drains the host through
  the one drain there is (``HostLoss.drain``, as ``distlaunch drain`` does) when ``on_host_lost``
  is ``replace`` and a spare answers; otherwise it says so in one line and leaves the host in the
  job. Each host is drained, or said to stay, once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from launcher import events as ev
from launcher.events import Event
from launcher.model import Plan
from launcher.supervise.hostloss import HostLoss
from launcher.supervise.lifecycle import TaskRuntime
from launcher.telemetry.causes import OutputTails
from launcher.telemetry.gpufaults import GpuFault, GpuWatch


class GpuOwner(Protocol):
    """What the GPU part uses of the supervisor."""

    @property
    def run_id(self) -> str: ...
    @property
    def plan(self) -> Plan: ...
    @property
    def tasks(self) -> Mapping[str, TaskRuntime]: ...
    @property
    def tails(self) -> OutputTails: ...
    @property
    def hosts(self) -> HostLoss: ...
    @property
    def finishing(self) -> bool: ...
    def publish(self, event: Event, line: str | None = None) -> None: ...
    def notice(self, message: str) -> None: ...


class GpuFaults:
    def __init__(self, sup: GpuOwner) -> None:
        self.sup = sup
        self.watch = GpuWatch()
        #: hosts drained for a GPU fault, or said to stay for want of a spare
        self.handled: set[str] = set()

    def faults_in(self, event: ev.SampleEvent) -> list[GpuFault]:
        """The new faults a task's sample shows (on the loop)."""
        rt = self.sup.tasks.get(str(event.task))
        if rt is None or not event.gpus:
            return []
        return self.watch.on_sample(rt.spec.host, event.gpus, event.ts)

    def act(self, faults: list[GpuFault]) -> None:
        """Name each fault on the tasks holding its GPU; drain the host of one that drains."""
        sup = self.sup
        for fault in faults:
            sup.tails.note_gpu_fault(fault)
            for task_id, rt in sup.tasks.items():
                if rt.spec.host == fault.host and fault.index in rt.spec.gpus and not rt.final:
                    sup.publish(ev.condition_event(sup.run_id, task_id, ev.GPU_ERROR, True, fault.text))
        for fault in faults:
            if fault.drains:
                self._drain(fault)

    def _drain(self, fault: GpuFault) -> None:
        sup, host = self.sup, fault.host
        hosts = sup.hosts
        if host in self.handled or host in hosts.gone or sup.finishing:
            return
        self.handled.add(host)
        policy = sup.plan.profile.on_host_lost
        if policy != "replace":
            sup.notice(f'{fault.text}; {host} stays in the job (on_host_lost = "{policy}": a GPU fault '
                       "drains a host only to a spare)")
            return
        if not any(hosts.reachable(s) for s in hosts.spares):
            sup.notice(f"{fault.text}; no spare to drain {host} to: it stays in the job")
            return
        sup.publish(ev.action_event(sup.run_id, "drain", host, fault.text))
        refused = hosts.drain(host, fault.text)
        if refused is not None:
            sup.notice(f"{fault.text}; the drain of {host} was refused: {refused}")
