"""`make screenshot`: the real dashboard, fed a recorded run of `make demo`, saved as SVG."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from tui.screenshot import RECORDING, SHOTS, main, read_recording, take


def svg_rows(path: Path) -> list[str]:
    """The terminal's lines as text, from Rich's SVG export (one <text> per run of a style)."""
    rows: dict[float, list[tuple[float, str]]] = {}
    for match in re.finditer(r'<text class="[^"]*" x="([\d.]+)" y="([\d.]+)"[^>]*>(.*?)</text>',
                             path.read_text(encoding="utf-8")):
        rows.setdefault(float(match[2]), []).append((float(match[1]), html.unescape(match[3])))
    return ["".join(text for _, text in sorted(parts)).replace("\xa0", " ") for _, parts in sorted(rows.items())]


async def test_the_picture_shows_the_demo_training(tmp_path: Path) -> None:
    events = read_recording(RECORDING, 35)
    saved = await take(events, tmp_path / "dashboard.svg", (160, 46))
    assert saved == tmp_path / "dashboard.svg"
    text = "\n".join(svg_rows(saved))
    assert "distlaunch" in text and "local-ps" in text and "job Running" in text
    assert re.search(r"chief:0\s+local\s+running\s+0\s+\d{4}\s", text)  # thousands of steps, live
    for task in ("ps:0", "worker:0", "worker:1"):
        assert re.search(rf"{task}\s+local\s+running", text)
    # the chief's log: TensorFlow's start-up lines folded, where training starts said
    assert "7 TensorFlow start-up lines hidden; press v to show" in text
    assert "starting at step 0; training for 45 s" in text
    assert "cudart_stub" not in text
    assert "loss vs step" in text


VIEWS = {  # what each picture of the docs must show, from its recording
    "hosts": ["local          4/4 tasks running", "of 2 cores", "no GPU"],
    "placement": ["9 variables", "hidden/kernel", "ps:0"],
    "step-time": ["slow-peer [multi_worker_mirrored]", "wait worker:1", "worker:0 step time", "waiting for worker:1"],
    "stacks": ["suspect: worker:1", "it is stopped (wchan do_signal_stop)", "innermost frame of your code"],
    "timeline": ["root cause: worker:1", "stacks taken: suspect worker:1", "job Failed: stopped by `distlaunch down`"],
}


def test_every_picture_of_the_docs_has_a_shot_and_a_recording() -> None:
    assert set(SHOTS) == {"dashboard", *VIEWS}
    for shot in SHOTS.values():
        assert shot.events.is_file() and shot.output.suffix == ".svg"


@pytest.mark.parametrize("name", sorted(VIEWS))
async def test_each_view_of_the_docs_is_drawn_from_its_recording(name: str, tmp_path: Path) -> None:
    shot = SHOTS[name]
    saved = await take(read_recording(shot.events, shot.at), tmp_path / f"{name}.svg", shot=shot)
    text = "\n".join(svg_rows(saved))
    for wanted in VIEWS[name]:
        assert wanted in text, (name, wanted)


@pytest.mark.parametrize("argv", [["--events", "/nonexistent/events.jsonl"], ["--size", "wide"]])
def test_a_wrong_argument_is_one_line_and_exit_2(argv: list[str], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "-o", str(tmp_path / "x.svg")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("screenshot: ")
    assert not (tmp_path / "x.svg").exists()
