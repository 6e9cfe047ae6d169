"""`h`: the hosts view, nvitop-like: per host its tasks, their CPU and memory, its network with a
sparkline of each direction, and each GPU with utilisation and memory bars, the tasks holding it and
its health: temperature, power against its limit, SM clock, the reasons it is held back, ECC
errors and the latest Xid, with sparklines of its use and heat. A host without GPUs is normal here."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rich.style import Style
from rich.text import Text
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from launcher import events as ev
from launcher.telemetry.gpufaults import xid_text
from launcher.telemetry.hosttrends import HostTrends
from launcher.telemetry.jobview import JobView, TaskView, task_sort_key
from tui import format as fmt

BAR_CELLS = 12
SPARK_CELLS = 12
HEALTH_KEYS = ("temp_c", "power_w", "power_limit_w", "sm_clock_mhz", "sm_clock_max_mhz", "throttle",
               "ecc_corrected", "ecc_uncorrected", "xid_count", "xid")


@dataclass
class GpuSummary:
    index: int
    util: float | None = None
    mem_used: int | None = None
    mem_total: int | None = None
    holders: list[str] = field(default_factory=list)
    #: the health fields of its latest entry (launcher/agent/nvml.py's ``gpu_health``, ``xid_count``, ``xid``)
    health: dict[str, object] = field(default_factory=dict)


@dataclass
class HostSummary:
    name: str
    tasks: list[TaskView] = field(default_factory=list)
    gpus: dict[int, GpuSummary] = field(default_factory=dict)
    down: bool = False
    #: its latest `host` event: (state, reason), where one came (unreachable, lost, drained, spare, up)
    state: tuple[str, str] | None = None

    @property
    def live(self) -> list[TaskView]:
        """Its tasks whose readings are live (none while the host does not answer)."""
        return [] if self.down else self.tasks

    @property
    def cpu_percent(self) -> float | None:
        values = [t.cpu_percent for t in self.live if t.cpu_percent is not None]
        return sum(values) if values else None

    @property
    def rss_bytes(self) -> int | None:
        values = [t.rss_bytes for t in self.live if t.rss_bytes is not None]
        return sum(values) if values else None


def _number(value: object) -> float | None:
    return ev.finite(value) if value is not None else None


def host_summaries(view: JobView) -> list[HostSummary]:
    """The job's hosts in name order, each with its tasks (task order) and the GPUs they sampled."""
    hosts: dict[str, HostSummary] = {}
    for task in sorted(view.tasks.values(), key=lambda t: task_sort_key(t.task_id)):
        name = task.host or "(not placed)"
        host = hosts.setdefault(name, HostSummary(name, down=name in view.hosts_down))
        host.tasks.append(task)
        if task.state in ev.FINAL_TASK_STATES:
            continue  # its last sample says nothing about the GPU now
        for gpu in task.gpus:
            index = gpu.get("index")
            if not isinstance(index, int):
                continue
            summary = host.gpus.setdefault(index, GpuSummary(index))
            summary.holders.append(task.task_id)
            util, used, total = (_number(gpu.get(k)) for k in ("util_percent", "mem_used_bytes", "mem_total_bytes"))
            summary.util = util if util is not None else summary.util
            summary.mem_used = int(used) if used is not None else summary.mem_used
            summary.mem_total = int(total) if total is not None else summary.mem_total
            summary.health.update((k, gpu[k]) for k in HEALTH_KEYS if gpu.get(k) is not None)
    for name, (state, reason, _ts) in view.host_states.items():  # spares, and hosts the tasks left
        host = hosts.setdefault(name, HostSummary(name, down=name in view.hosts_down))
        host.state = (state, reason)
    return sorted(hosts.values(), key=lambda h: h.name)


def _bar(percent: float | None, style: str) -> Text:
    return Text.assemble(("▕", "dim"), (fmt.bar(percent, BAR_CELLS), style), ("▏", "dim"))


def hosts_text(view: JobView) -> Text:
    """The whole view as one text (lines joined); the panel draws `hosts_lines` line by line."""
    return Text("\n").join(hosts_lines(view))


def io_text(machine: dict[str, object], trends: HostTrends | None = None, host: str = "") -> str:
    """``network in 1.2M/s ▂▅▇ out 300K/s ▁▁▂  disk writes 10M/s  free: outputs 120G, run dir 88G``:
    what the host's agent reads of its network (with its trend, given ``trends``), disks and free
    space (empty where it reads none)."""
    def rate(key: str) -> str:
        value = _number(machine.get(key))
        text = "—" if value is None else f"{fmt.human_bytes(int(value))}/s"
        trend = fmt.spark(trends.series(host, key), SPARK_CELLS) if trends is not None else ""
        return f"{text} {trend}" if len(trend) > 1 else text

    parts = []
    if any(_number(machine.get(k)) is not None for k in ("net_rx_bytes_per_s", "net_tx_bytes_per_s")):
        parts.append(f"network in {rate('net_rx_bytes_per_s')} out {rate('net_tx_bytes_per_s')}")
    if _number(machine.get("disk_write_bytes_per_s")) is not None:
        parts.append(f"disk writes {rate('disk_write_bytes_per_s')}")
    free = [f"{label} {fmt.human_bytes(int(value))}" for label, key in (("outputs", "outputs_free_bytes"),
                                                                       ("run dir", "run_dir_free_bytes"))
            if (value := _number(machine.get(key))) is not None]
    if free:
        parts.append("free: " + ", ".join(free))
    return "  ".join(parts)


def health_text(gpu: GpuSummary, trends: HostTrends | None = None, host: str = "") -> Text:
    """``71°C ▂▃▅  350/700 W  SM 1755/1980 MHz  ECC 0 corrected, 0 uncorrectable`` and, in red,
    what holds the GPU back (``throttled: hw_thermal``) and its latest Xid; empty where NVML gave
    none of it (nvidia-smi, no driver)."""
    h = gpu.health
    out = Text()
    if not h:
        return out

    def trend(name: str) -> str:
        line = fmt.spark(trends.series(host, f"gpu{gpu.index}/{name}"), SPARK_CELLS) if trends is not None else ""
        return f" {line}" if len(line) > 1 else ""

    def part(text: str, style: str = "") -> None:
        if out:
            out.append("  ")
        out.append(text, style=style)

    temp, power, limit = (_number(h.get(k)) for k in ("temp_c", "power_w", "power_limit_w"))
    clock, top = _number(h.get("sm_clock_mhz")), _number(h.get("sm_clock_max_mhz"))
    if temp is not None:
        part(f"{temp:.0f}°C{trend('temp_c')}")
    if power is not None:
        part(f"{power:.0f}" + (f"/{limit:.0f}" if limit is not None else "") + f" W{trend('power_w')}")
    if clock is not None:
        part(f"SM {clock:.0f}" + (f"/{top:.0f}" if top is not None else "") + " MHz")
    corrected, uncorrectable = h.get("ecc_corrected"), h.get("ecc_uncorrected")
    if isinstance(corrected, int) or isinstance(uncorrectable, int):
        part(f"ECC {corrected if isinstance(corrected, int) else '—'} corrected, "
             f"{uncorrectable if isinstance(uncorrectable, int) else '—'} uncorrectable",
             "bold red" if isinstance(uncorrectable, int) and uncorrectable else "")
    throttle = h.get("throttle")
    if isinstance(throttle, list) and throttle:
        part("throttled: " + ", ".join(str(r) for r in throttle), "bold dark_orange")
    xids, xid = h.get("xid_count"), h.get("xid")
    if isinstance(xids, int) and xids and isinstance(xid, int):
        part(xid_text(xid) + (f", {xids} Xids" if xids > 1 else ""), "bold red")
    util = trend("util_percent")
    if util:
        part(f"util{util}")
    return out


def hosts_lines(view: JobView) -> list[Text]:
    hosts = host_summaries(view)
    if not hosts:
        return [Text("no tasks yet", style="dim")]
    out = Text(no_wrap=True)
    for i, host in enumerate(hosts):
        if i:
            out.append("\n")
        running = sum(1 for t in host.tasks if t.state == ev.RUNNING)
        out.append(f"{host.name:<14}", style="bold")
        out.append(f" {running}/{len(host.tasks)} tasks running")
        state, reason = host.state or ("up", "")
        if state != "up" or host.down:
            label = (state if state != "up" else "unreachable").upper()
            out.append(f"  {label}", style="dim" if state == "spare" else "bold red")
            if reason:
                out.append(f" ({reason})", style="dim")
        machine = view.machines.get(host.name) or {}
        if machine:
            cores = machine.get("cpus")
            used, total = _number(machine.get("mem_used_bytes")), _number(machine.get("mem_total_bytes"))
            mem_pct = 100 * used / total if used is not None and total else None
            out.append("\n  host CPU   ")
            out.append_text(_bar(_number(machine.get("cpu_percent")), "green"))
            out.append(f" {fmt.number(_number(machine.get('cpu_percent')), '{:.0f}')}%".ljust(7))
            out.append(f" of {cores} cores" if isinstance(cores, int) else "")
            out.append("  memory ")
            out.append_text(_bar(mem_pct, "cyan"))
            out.append(f" {fmt.human_bytes(int(used) if used is not None else None)}"
                       f"/{fmt.human_bytes(int(total) if total is not None else None)}")
            io = io_text(machine, view.host_trends, host.name)
            if io:
                out.append("\n  " + io)
        cpu = host.cpu_percent
        out.append("\n  tasks' CPU ")
        out.append_text(_bar(cpu, "green"))
        out.append(f" {fmt.number(cpu, '{:.0f}')}%".ljust(7))
        out.append(f"  memory (RSS) {fmt.human_bytes(host.rss_bytes)}\n")
        if not host.gpus:
            out.append("  no GPU\n", style="dim")
        for gpu in sorted(host.gpus.values(), key=lambda g: g.index):
            mem_pct = 100 * gpu.mem_used / gpu.mem_total if gpu.mem_used is not None and gpu.mem_total else None
            out.append(f"  GPU{gpu.index:<2} util ")
            out.append_text(_bar(gpu.util, "magenta"))
            out.append(f" {fmt.number(gpu.util, '{:.0f}')}%".ljust(6))
            out.append(" mem ")
            out.append_text(_bar(mem_pct, "cyan"))
            out.append(f" {fmt.human_bytes(gpu.mem_used)}/{fmt.human_bytes(gpu.mem_total)}".ljust(13))
            out.append("  " + ", ".join(gpu.holders), style="bold")
            out.append("\n")
            health = health_text(gpu, view.host_trends, host.name)
            if health:
                out.append("        ")
                out.append_text(health)
                out.append("\n")
        for task in host.tasks:
            out.append(f"    {task.task_id:<12}", style="bold")
            out.append(f"{task.state:<11}", style=fmt.STATE_STYLES.get(task.state, ""))
            if host.down and task.state not in ev.FINAL_TASK_STATES:
                age = task.age(view.rate_clock(time.time()))
                out.append(f"last seen {fmt.duration(age)} ago" if age is not None else "not heard of", style="dim")
                out.append("\n")
                continue
            out.append(f"cpu {fmt.number(task.cpu_percent, '{:.0f}'):>4}%  rss {fmt.human_bytes(task.rss_bytes):>6}")
            if task.conditions:
                out.append("  " + " ".join(sorted(task.conditions)).upper(), style="bold dark_orange")
            out.append("\n")
    out.rstrip()
    return list(out.split("\n"))


class HostsPanel(ScrollView, can_focus=True):
    """The hosts view, rebuilt from the `JobView` once a second while it is shown; drawn with the
    Line API, so only the lines on screen are rendered (a 256-task job has ~300 lines)."""

    DEFAULT_CSS = "HostsPanel { scrollbar-size-vertical: 1; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.lines: list[Text] = []
        self._base_style = Style()

    @property
    def plain(self) -> str:
        return "\n".join(line.plain for line in self.lines)

    def sync(self, view: JobView) -> None:
        self.lines = hosts_lines(view)
        self.virtual_size = Size(max((line.cell_len for line in self.lines), default=0), len(self.lines))
        self.refresh()

    def render_lines(self, crop: Region) -> list[Strip]:
        self._base_style = self.rich_style
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        width, base = self.size.width, self._base_style
        index = int(self.scroll_offset.y) + y
        if index >= len(self.lines):
            return Strip.blank(width, base)
        strip = Strip(list(self.lines[index].render(self.app.console)))
        return strip.crop(int(self.scroll_offset.x)).crop_extend(0, width, base).apply_style(base)
