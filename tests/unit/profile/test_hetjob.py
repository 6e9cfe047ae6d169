"""Roles on their own Slurm partitions (issue 57 §3): ``[roles.X.slurm]`` makes a heterogeneous job,
one component per such role after [slurm]'s own; the batch script says ``#SBATCH hetjob`` between
them; inside a heterogeneous allocation each role's tasks go to its component's nodes, whose steps
name the component (``srun --het-group``); squeue's and scontrol's line per component is read
for the leader's."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from launcher.commands.check import print_plan
from launcher.errors import ProfileError
from launcher.export.sbatch import SubmittedRun, sbatch_script
from launcher.plan import build_plan
from launcher.profile import slurm_env
from launcher.profile.reader import load_profile
from launcher.profile.slurm_env import current_allocation
from launcher.transport.slurm import SlurmHost, leader_state
from launcher.transport.slurmqueue import parse_show_job

SLURM_VARS = ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_HET_SIZE",
              "SLURM_PACK_SIZE", "SLURM_JOB_NODELIST_HET_GROUP_0", "SLURM_JOB_NODELIST_HET_GROUP_1")


@pytest.fixture(autouse=True)
def _outside_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SLURM_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("launcher.profile.hosts.node_addresses", lambda nodes: {n: "10.0.0." + n[-1] for n in nodes})


def _profile(tmp_path: Path, roles: str, slurm: str = 'partition = "gpu"\ntime = "01:00:00"\n') -> Path:
    path = tmp_path / "het.toml"
    path.write_text(f'name = "h"\nstrategy = "parameter_server"\n[defaults]\ncommand = "run"\n'
                    f"[slurm]\n{slurm}\n{roles}")
    return path


PS_ON_CPU = ('[roles.chief]\n[roles.worker]\ncount = 2\n[roles.ps]\ncount = 2\n'
             '[roles.ps.slurm]\npartition = "cpu"\nnodes = 2\nsbatch_args = ["--constraint=big"]\n')


def _allocation(monkeypatch: pytest.MonkeyPatch, groups: list[str]) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    monkeypatch.setenv("SLURM_JOB_NODELIST", groups[0])
    monkeypatch.setenv("SLURM_HET_SIZE", str(len(groups)))
    for index, nodes in enumerate(groups):
        monkeypatch.setenv(f"SLURM_JOB_NODELIST_HET_GROUP_{index}", nodes)


def test_a_role_with_its_own_slurm_table_is_a_component_of_its_own(tmp_path: Path) -> None:
    profile = load_profile(_profile(tmp_path, PS_ON_CPU))
    slurm = profile.slurm
    assert slurm is not None and slurm.heterogeneous
    assert [c.roles for c in slurm.components] == [("chief", "worker"), ("ps",)]
    assert (slurm.components[1].partition, slurm.components[1].nodes) == ("cpu", 2)
    assert slurm.component_of("ps") == 1 and slurm.component_of("worker") == 0


def test_the_batch_script_has_one_hetjob_section_per_component(tmp_path: Path) -> None:
    profile = load_profile(_profile(tmp_path, PS_ON_CPU))
    script = sbatch_script(profile, SubmittedRun("r1", tmp_path / "run", (), (), output=tmp_path / "o"))
    directives = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    split = directives.index("#SBATCH hetjob")
    first, second = directives[:split], directives[split + 1:]
    assert "#SBATCH --comment=distlaunch-run:r1" in first and "#SBATCH --open-mode=append" in first
    assert {"#SBATCH --partition=gpu", "#SBATCH --nodes=1", "#SBATCH --time=01:00:00"} <= set(first)
    assert second == ["#SBATCH --nodes=2", "#SBATCH --time=01:00:00", "#SBATCH --partition=cpu",
                      "#SBATCH --constraint=big"]
    assert directives.count("#SBATCH hetjob") == 1
    # sbatch reads #SBATCH lines until the first command: the component comments are comments
    body = script.splitlines()
    last_directive = max(i for i, line in enumerate(body) if line.startswith("#SBATCH"))
    assert all(line.startswith("#") for line in body[1:last_directive])


def test_check_shows_the_components_outside_an_allocation(tmp_path: Path) -> None:
    import io
    plan = build_plan(load_profile(_profile(tmp_path, PS_ON_CPU)))
    hosts = {t.task_id: t.host for t in plan.tasks}
    assert hosts["ps:0"] == hosts["ps:1"] == "slurm-allocation-het1"
    assert hosts["chief:0"] == hosts["worker:1"] == "slurm-allocation"
    out = io.StringIO()
    print_plan(plan, out)
    text = out.getvalue()
    assert "component 0: chief, worker on 1 node of partition gpu" in text
    assert "component 1: ps on 2 nodes of partition cpu" in text


def test_inside_a_heterogeneous_allocation_each_role_runs_on_its_components_nodes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _allocation(monkeypatch, ["g1", "c[1-2]"])
    allocation = current_allocation()
    assert allocation is not None and allocation.nodes == ("g1", "c1", "c2")
    profile = load_profile(_profile(tmp_path, PS_ON_CPU))
    plan = build_plan(profile)
    hosts = {t.task_id: t.host for t in plan.tasks}
    assert {hosts["ps:0"], hosts["ps:1"]} == {"c1", "c2"}
    assert hosts["chief:0"] == hosts["worker:0"] == hosts["worker:1"] == "g1"
    assert {t.task_id: t.address for t in plan.tasks}["ps:0"].startswith("10.0.0.")  # Slurm's NodeAddr
    step = SlurmHost(profile.hosts["c1"]).srun("true")
    assert "--het-group=1" in step and "--jobid=41" in step, shlex.join(step)
    assert "--het-group=0" in SlurmHost(profile.hosts["g1"]).srun("true")


def test_a_node_in_two_components_is_two_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _allocation(monkeypatch, ["n1", "n1"])
    profile = load_profile(_profile(tmp_path, PS_ON_CPU.replace("nodes = 2\n", "")))
    assert {name: h.slurm_het_group for name, h in profile.hosts.items()} == {"n1": 0, "n1-het1": 1}
    assert all(h.address == "n1" for h in profile.hosts.values())


def test_an_allocation_without_the_component_a_role_needs_is_one_line(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "g1")
    monkeypatch.setenv("SLURM_HET_SIZE", "2")
    monkeypatch.setenv("SLURM_JOB_NODELIST_HET_GROUP_0", "g1")
    monkeypatch.setenv("SLURM_JOB_NODELIST_HET_GROUP_1", "g2")
    three = PS_ON_CPU + '[roles.evaluator]\n[roles.evaluator.slurm]\npartition = "small"\n'
    with pytest.raises(ProfileError, match=r"roles\.evaluator\.slurm: evaluator tasks run in component 2"):
        load_profile(_profile(tmp_path, three))


PS_TABLE = "[roles.ps]\n[roles.ps.slurm]\n"


@pytest.mark.parametrize(("roles", "slurm", "match"), [
    (PS_TABLE + 'partition = "cpu"\n[roles.worker]\n', None, r"roles\.ps\.slurm: needs a \[slurm\]"),
    ('[roles.ps]\nhosts = ["a"]\n[roles.ps.slurm]\n[roles.worker]\n', "",
     r"roles\.ps\.hosts: ps tasks take their hosts"),
    (PS_TABLE + 'sbatch_args = ["--time=5"]\n[roles.worker]\n', "", r"sbatch_args: --time is the whole job's"),
    (PS_TABLE + 'partitoin = "cpu"\n[roles.worker]\n', "", r"roles\.ps\.slurm\.partitoin: unknown key"),
])
def test_mistakes_in_a_roles_slurm_table_are_one_line(tmp_path: Path, roles: str, slurm: str | None,
                                                      match: str) -> None:
    path = tmp_path / "bad.toml"
    head = 'name = "h"\nstrategy = "parameter_server"\n[defaults]\ncommand = "run"\n'
    hosts = '[hosts.a]\naddress = "localhost"\ntransport = "local"\n' if slurm is None else f"[slurm]\n{slurm}\n"
    path.write_text(head + hosts + roles)
    with pytest.raises(ProfileError, match=match) as err:
        load_profile(path)
    assert "\n" not in str(err.value)


def test_one_component_in_all_is_a_homogeneous_job(tmp_path: Path) -> None:
    profile = load_profile(_profile(tmp_path, '[roles.worker]\ncount = 2\n[roles.worker.slurm]\npartition = "cpu"\n',
                                    slurm=""))
    assert profile.slurm is not None and not profile.slurm.heterogeneous
    assert "hetjob" not in sbatch_script(profile)


def test_the_leaders_line_is_the_jobs_state() -> None:
    assert leader_state("7", "RUNNING 7+1\nCOMPLETING 7+0\n") == "COMPLETING"
    assert leader_state("7", "RUNNING 7\n") == "RUNNING"
    assert leader_state("7", "") == ""
    shown = ("JobId=7 HetJobId=7 HetJobOffset=0 JobState=RUNNING Reason=None Requeue=1 Restarts=2\n"
             "JobId=8 HetJobId=7 HetJobOffset=1 JobState=RUNNING Reason=None Requeue=1 Restarts=0\n")
    found = parse_show_job(shown)
    assert found is not None and found.restarts == 2


def test_node_addresses_are_read_from_scontrol(monkeypatch: pytest.MonkeyPatch) -> None:
    class Done:
        returncode = 0
        stdout = ("NodeName=n1 Arch=x86_64 CoresPerSocket=1 NodeAddr=127.0.0.1 NodeHostName=vm\n"
                  "NodeName=n2 Arch=x86_64 NodeAddr=n2 NodeHostName=n2\n")
    monkeypatch.setattr(slurm_env.subprocess, "run", lambda *a, **k: Done())
    assert slurm_env.node_addresses(("n1", "n2")) == {"n1": "127.0.0.1"}


def test_squeue_and_the_lost_sbatch_answer_read_the_leader(monkeypatch: pytest.MonkeyPatch) -> None:
    from launcher.transport import slurmqueue

    class Done:
        returncode = 0
        stderr = ""
        stdout = ""

    answers = {"%T|%r|%S|%B|%e|%i": "RUNNING|None|N/A|n/a|N/A|7+1\nPENDING|BeginTime|N/A|n1|N/A|7+0\n",
               "%i|%k": "7+1|distlaunch-run:r1\n7+0|distlaunch-run:r1\n"}

    def run(argv: list[str], **_: object) -> Done:
        done = Done()
        done.stdout = answers[argv[-1]]
        return done

    monkeypatch.setattr(slurmqueue.subprocess, "run", run)
    monkeypatch.setattr(slurmqueue.getpass, "getuser", lambda: "me")
    info = slurmqueue.query("7")
    assert info is not None and (info.state, info.reason, info.node) == ("PENDING", "BeginTime", "n1")
    assert slurmqueue.find_submitted("r1") == "7"


def test_a_hosts_component_survives_the_run_record_and_reaches_nested_steps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from launcher.agent import containeradapters
    from launcher.runstate import host_from_json, host_to_json

    _allocation(monkeypatch, ["g1", "c1"])
    host = load_profile(_profile(tmp_path, PS_ON_CPU.replace("nodes = 2\n", ""))).hosts["c1"]
    again = host_from_json(host_to_json(host))
    assert again.slurm_het_group == 1  # `down` and `attach` from the login node step into component 1
    step = SlurmHost(again).srun("agent")
    assert step[step.index("env") + 1] == f"{containeradapters.HET_GROUP_VAR}=1"
    # a pyxis container's step, started by the agent inside that step, names the component too
    monkeypatch.setenv(containeradapters.HET_GROUP_VAR, "1")
    assert "--het-group=1" in containeradapters._srun(None, "c1")
    monkeypatch.delenv(containeradapters.HET_GROUP_VAR)
    assert not any(a.startswith("--het-group") for a in containeradapters._srun(None, "c1"))
