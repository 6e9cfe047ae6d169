"""spec.json as one record (launcher/agent/spec.py ``AgentSpec``): the launcher builds it and sends
``to_dict()``, the agent writes that and reads it back; the file's bytes are those of before."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from launcher.agent.agentfiles import write_specs
from launcher.agent.spec import AgentSpec

FULL = AgentSpec(run="r-1", task="worker:0", command="python3 t.py", workdir="/w", host="h1", incarnation=2,
                 restarts=1, env={"TF_CONFIG": "{}"}, grace_seconds=5, orphan_grace_seconds=30.0,
                 sample_interval=0.5, metrics={"step": r"step (\d+)"}, gpus=[0, 1], setup=["source v/bin/activate"],
                 shell="bash -lc", autolog=False, script_in_env=True, container={"image": "i", "runtime": "docker"},
                 outputs="/o", preemption_notice="true", checkpoint_dir="ckpt")

#: the file as the launcher's dict literal made it before the record was built by the launcher (and
#: checkpoint_dir, issue 54)
FILE = ('{"autolog": false, "checkpoint_dir": "ckpt", "command": "python3 t.py", '
        '"container": {"image": "i", "runtime": "docker"}, '
        '"env": {"TF_CONFIG": "{}"}, "gpus": [0, 1], "grace_seconds": 5, "host": "h1", "incarnation": 2, '
        '"metrics": {"step": "step (\\\\d+)"}, "orphan_grace_seconds": 30.0, "outputs": "/o", '
        '"preemption_notice": "true", "restarts": 1, "run": "r-1", "sample_interval": 0.5, '
        '"script_in_env": true, "setup": ["source v/bin/activate"], "shell": "bash -lc", "task": "worker:0", '
        '"workdir": "/w"}\n')


def test_every_field_goes_into_the_file_and_reads_back() -> None:
    assert set(FULL.to_dict()) == {f.name for f in dataclasses.fields(AgentSpec)}
    assert AgentSpec.from_dict(json.loads(json.dumps(FULL.to_dict()))) == FULL


def test_the_file_has_the_bytes_of_before(tmp_path: Path) -> None:
    write_specs(str(tmp_path), {"worker-0": FULL.to_dict()})
    path = tmp_path / "tasks" / "worker-0" / "spec.json"
    assert path.read_text() == FILE
    assert AgentSpec.load(str(path)) == FULL


def test_a_bare_spec_reads_with_the_defaults() -> None:
    bare = AgentSpec.from_dict({"run": "r", "task": "ps:0", "command": "c", "workdir": "/w"})
    assert bare == AgentSpec(run="r", task="ps:0", command="c", workdir="/w")
    assert AgentSpec.from_dict(bare.to_dict()) == bare
