"""The placement of the variables on the parameter servers, as the dashboard and `status` show it,
and the order tasks are listed in."""

from __future__ import annotations

from dataclasses import dataclass, field

from launcher.telemetry import eventcheck

IMBALANCE_RATIO = 1.5  # a ps holding more than this times the mean bytes per ps is flagged
ROLE_ORDER = {"chief": 0, "ps": 1, "worker": 2, "evaluator": 3}


def task_sort_key(task_id: str) -> tuple[int, str, int]:
    """Chief first, then ps, workers, evaluator; indices numerically (worker:10 after worker:9)."""
    role, _, index = task_id.partition(":")
    return (ROLE_ORDER.get(role, 9), role, int(index) if index.isdigit() else 0)


@dataclass
class VariablePlacement:
    name: str
    task: str
    bytes: int
    shape: str
    dtype: str


@dataclass
class PlacementView:
    """Where each variable lives; the latest report of a variable wins."""

    variables: dict[str, VariablePlacement] = field(default_factory=dict)

    def apply(self, variables: list[dict[str, object]]) -> None:
        for var in variables:
            name = str(var.get("name", "?"))
            task = str(var.get("task") or var.get("device") or "?")
            size = var.get("bytes")
            self.variables[name] = VariablePlacement(
                name=name, task=task, bytes=eventcheck.as_int(size, 0),
                shape=str(var.get("shape", "")), dtype=str(var.get("dtype", "")))

    @property
    def holders(self) -> list[str]:
        """The tasks holding variables, ps first in task order."""
        return sorted({v.task for v in self.variables.values()}, key=task_sort_key)

    def bytes_per_task(self) -> dict[str, int]:
        totals = dict.fromkeys(self.holders, 0)
        for var in self.variables.values():
            totals[var.task] += var.bytes
        return totals

    def imbalance(self) -> tuple[str, float] | None:
        """(task, max/mean) when one holder has more than `IMBALANCE_RATIO` x the mean, else None."""
        totals = self.bytes_per_task()
        if len(totals) < 2:
            return None
        mean = sum(totals.values()) / len(totals)
        task, most = max(totals.items(), key=lambda kv: kv[1])
        if mean > 0 and most > IMBALANCE_RATIO * mean:
            return task, most / mean
        return None
