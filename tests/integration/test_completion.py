"""Shell completion in a real bash: the hook from `distlaunch completion bash`, called as bash calls it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.cli import main
from launcher.rundir import RunDir
from tests.integration.jobtools import REPO

BASH_DRIVER = r"""
set -e
source <(distlaunch completion bash)
spec=$(complete -p distlaunch)
echo "SPEC $spec"
fn=$(sed -E 's/.*-F ([^ ]+).*/\1/' <<< "$spec")
complete_line() {
    COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}
    read -ra COMP_WORDS <<< "$COMP_LINE"
    [[ "$COMP_LINE" == *" " ]] && COMP_WORDS+=("")
    COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
    COMPREPLY=()
    "$fn" distlaunch "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
    echo "LINE $1"
    # compgen filters the candidates the hook gave, the way completion shows them
    compgen -W "${COMPREPLY[*]}" -- "${COMP_WORDS[COMP_CWORD]}" | sort | sed 's/^/  /'
}
for line in "$@"; do complete_line "$line"; done
"""


def make_run(root: Path, run_id: str, tasks: list[str]) -> None:
    rd = RunDir.create(run_id, root / "runs" / run_id)
    rd.write_state({"run_id": run_id, "name": "demo", "tasks": {t: {"host": "local"} for t in tasks}})
    rd.close()


def complete_in_bash(home: Path, *lines: str) -> dict[str, list[str]]:
    if shutil.which("bash") is None:
        pytest.skip("bash not installed")
    env = {**os.environ, "DISTLAUNCH_HOME": str(home),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(["bash", "-c", BASH_DRIVER, "driver", *lines], capture_output=True, text=True,
                            env=env, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert out[0].startswith("SPEC complete") and out[0].rstrip().endswith(" distlaunch"), out[0]
    assert " -F " in out[0]
    answers: dict[str, list[str]] = {}
    current = ""
    for line in out[1:]:
        if line.startswith("LINE "):
            current = line[5:]
            answers[current] = []
        else:
            answers[current].append(line.strip())
    return answers


def test_bash_completes_verbs_run_ids_and_task_ids(tmp_path: Path) -> None:
    home = tmp_path / "home"
    make_run(home, "mnist-20260101-000000-aaaa", ["chief:0", "ps:0", "worker:0", "worker:1"])
    make_run(home, "other-20260102-000000-bbbb", ["worker:0"])
    answers = complete_in_bash(
        home,
        "distlaunch ",
        "distlaunch ru",
        "distlaunch logs ",
        "distlaunch logs mn",
        "distlaunch logs mnist-20260101-000000-aaaa ",
        "distlaunch restart mnist-20260101-000000-aaaa w",
        "distlaunch tfconfig cluster_profiles/local.toml ",
        "distlaunch up --no",
        "distlaunch completion ",
        "distlaunch check cluster_profiles/lo",
        "distlaunch init examples/p",
        "distlaunch stacks ",
        "distlaunch stacks mnist-20260101-000000-aaaa w",
        "distlaunch stacks mnist-20260101-000000-aaaa worker:0 ",
        "distlaunch stacks --na",
    )
    verbs = answers["distlaunch "]
    assert {"up", "check", "init", "runs", "logs", "schema", "export", "completion"} <= set(verbs)
    assert answers["distlaunch ru"] == ["runs"]
    assert answers["distlaunch logs "] == ["mnist-20260101-000000-aaaa", "other-20260102-000000-bbbb"]
    assert answers["distlaunch logs mn"] == ["mnist-20260101-000000-aaaa"]
    assert answers["distlaunch logs mnist-20260101-000000-aaaa "] == ["chief:0", "ps:0", "worker:0", "worker:1"]
    assert answers["distlaunch restart mnist-20260101-000000-aaaa w"] == ["worker:0", "worker:1"]
    assert answers["distlaunch tfconfig cluster_profiles/local.toml "] == ["chief:0", "ps:0", "worker:0",
                                                                          "worker:1"]
    assert answers["distlaunch up --no"] == ["--no-tui"]
    assert answers["distlaunch completion "] == ["bash", "fish", "zsh"]
    assert answers["distlaunch check cluster_profiles/lo"] == ["cluster_profiles/local.toml"]
    assert answers["distlaunch init examples/p"] == ["examples/print_steps.py", "examples/ps_mnist.py"]
    assert "stacks" in verbs
    # stacks [RUN] [TASK...]: run ids, and the task ids of the most recent run, then of the run named
    assert answers["distlaunch stacks "] == ["mnist-20260101-000000-aaaa", "other-20260102-000000-bbbb",
                                             "worker:0"]
    assert answers["distlaunch stacks mnist-20260101-000000-aaaa w"] == ["worker:0", "worker:1"]
    assert answers["distlaunch stacks mnist-20260101-000000-aaaa worker:0 "] == ["chief:0", "ps:0", "worker:1"]
    assert answers["distlaunch stacks --na"] == ["--native"]


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_hooks_name_distlaunch(shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", shell]) == 0
    out = capsys.readouterr().out
    assert "distlaunch" in out and "_ARGCOMPLETE" in out
    if shell == "fish":
        assert "complete --command distlaunch" in out or "complete -c distlaunch" in out


def test_an_unknown_shell_is_refused_with_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["completion", "tcsh"])
    assert exit_info.value.code == 2
    assert "choose from bash, zsh, fish" in capsys.readouterr().err.replace("'", "")
