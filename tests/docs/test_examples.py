"""The shell examples of the README and the docs that can run on any machine, run as written.

A fenced block right after a `<!-- runnable -->` line (invisible on GitHub and on the site) is
runnable: each page's runnable blocks run in order, each as one bash script that must exit 0, in a
fresh folder holding copies of `cluster_profiles/` and `examples/` (the paths a newcomer copies
from the repository root), with this checkout's `distlaunch` first on PATH and HOME and the state
root in that folder. Blocks that need hosts, a GPU, Slurm or minutes of training are not marked.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MARK = "<!-- runnable -->"
FENCE = re.compile(r"^(```+|~~~+)")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    text: str


def runnable_blocks(page: Path) -> list[Block]:
    """The runnable blocks of one Markdown page. A mark not followed by a fenced block is an error."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks = []
    for number, line in enumerate(lines):
        if line.strip() != MARK:
            continue
        opening = lines[number + 1] if number + 1 < len(lines) else ""
        fence = FENCE.match(opening)
        if fence is None or opening[fence.end():].strip() not in ("sh", "bash", "console", "shell"):
            raise ValueError(f"{page}:{number + 1}: {MARK} must be followed by a ```sh block")
        end = next(i for i in range(number + 2, len(lines)) if lines[i].startswith(fence.group(1)))
        blocks.append(Block(page, number + 2, "\n".join(lines[number + 2:end])))
    return blocks


def pages() -> list[Path]:
    docs = sorted(p for p in (REPO / "docs").rglob("*.md") if "recordings" not in p.parts)
    return [REPO / "README.md", *docs]


PAGES_WITH_EXAMPLES = [p for p in pages() if runnable_blocks(p)]


def test_the_commands_a_newcomer_copies_are_runnable() -> None:
    text = "\n".join(b.text for p in pages() for b in runnable_blocks(p))
    for command in ("distlaunch check cluster_profiles/local.toml", "distlaunch tfconfig cluster_profiles/local.toml",
                    "distlaunch init ", "distlaunch export tfjob ", "distlaunch export sbatch ",
                    "distlaunch check --no-remote "):
        assert command in text, f"no runnable example runs `{command}`"
    assert runnable_blocks(REPO / "README.md"), "the README's first commands must be runnable examples"


def test_a_mark_without_a_block_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"{MARK}\n\n    distlaunch check x.toml\n")
    with pytest.raises(ValueError, match="must be followed by a"):
        runnable_blocks(page)
    page.write_text(f"text\n{MARK}\n```sh\necho one\n\necho two\n```\nafter\n")
    assert runnable_blocks(page) == [Block(page, 3, "echo one\n\necho two")]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("page", PAGES_WITH_EXAMPLES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_runnable_examples_of_a_page_run(page: Path, tmp_path: Path) -> None:
    for folder in ("cluster_profiles", "examples"):
        shutil.copytree(REPO / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, HOME=str(tmp_path / "home"), DISTLAUNCH_HOME=str(tmp_path / "state"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    (tmp_path / "home").mkdir()
    for block in runnable_blocks(page):
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.text], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=90)
        where = f"{page.relative_to(REPO)}:{block.line}"
        assert done.returncode == 0, f"{where} exited {done.returncode}:\n{block.text}\n{done.stdout}{done.stderr}"
