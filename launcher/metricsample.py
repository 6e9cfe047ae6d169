"""``distlaunch check PROFILE --metrics-sample LOGFILE``: try the profile's ``[metrics]`` regexes
on a saved log before a long job, with exactly the rules the agent applies (launcher/metricregex.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from launcher.errors import UserError
from launcher.events import REPORT_PREFIX
from launcher.metricregex import MetricRegexes
from launcher.profile import load_profile

#: lines printed per regex outcome before the rest is only counted
SHOW_LINES = 40


def profile_patterns(profile_path: Path) -> dict[str, str]:
    metrics = load_profile(profile_path).metrics
    patterns = {k: v for k, v in (("step", metrics.step), ("loss", metrics.loss)) if v}
    patterns.update(metrics.extra)
    return patterns


def _as_shown(raw: str) -> str:
    """A line as the agent sees it: a progress bar's \\r redraws keep only what shows last."""
    text = raw.rstrip("\r\n")
    if "\r" in text:
        parts = [p for p in text.split("\r") if p]
        text = parts[-1] if parts else ""
    return text


def run_metrics_sample(profile_path: Path, log_path: Path, out: TextIO | None = None) -> int:
    """Print what each regex gives per matching line, then a verdict per regex.

    0 when every regex gave a number somewhere in the log; 2 when one never did (or matched
    without a number), so a script can gate a launch on it.
    """
    out = out or sys.stdout
    patterns = profile_patterns(profile_path)
    if not patterns:
        raise UserError(f"{profile_path}: no [metrics] regexes to try; add e.g. "
                        "loss = 'loss[ =:]+(\\S+)' under [metrics]")
    regexes = MetricRegexes(patterns)
    for name, error in regexes.invalid:
        raise UserError(f"{profile_path}: metrics.{name}: invalid regex ({error}); fix it and try again")
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UserError(f"{log_path}: cannot read the log ({exc.strerror or exc}); give a saved task "
                        "output, e.g. from `distlaunch logs RUN TASK > task.log`") from None
    gave = dict.fromkeys(patterns, 0)
    missed = dict.fromkeys(patterns, 0)
    shown = 0
    lines = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _as_shown(raw)
        if line.startswith(REPORT_PREFIX):
            continue
        lines += 1
        result = regexes.apply(line)
        if not result.matched and not result.misses:
            continue
        for name in result.matched:
            gave[name] += 1
        for miss in result.misses:
            missed[miss.name] += 1
        if shown >= SHOW_LINES:
            continue
        shown += 1
        parts = []
        if result.step is not None:
            parts.append(f"step={result.step}")
        if result.loss is not None:
            parts.append(f"loss={result.loss:.10g}")
        parts.extend(f"{k}={v:.10g}" for k, v in result.values.items())
        parts.extend(f"{m.name}=NO NUMBER (captured {m.captured!r})" for m in result.misses)
        out.write(f"{log_path.name}:{number}: {'  '.join(parts)}\n    {line}\n")
    if shown >= SHOW_LINES:
        out.write(f"... (first {SHOW_LINES} matching lines shown)\n")
    failed = False
    for name, pattern in patterns.items():
        if gave[name] and not missed[name]:
            verdict = f"ok: a number from {gave[name]} of {lines} lines"
        elif gave[name]:
            verdict = f"a number from {gave[name]} lines, NO number from {missed[name]} matching lines"
            failed = True
        elif missed[name]:
            verdict = (f"matched {missed[name]} lines but never captured a number; "
                       "the group must capture the number itself")
            failed = True
        else:
            verdict = f"matched none of {lines} lines"
            failed = True
        out.write(f"metrics.{name} = '{pattern}': {verdict}\n")
    return 2 if failed else 0
