"""The agent's OOM-killer evidence, read from a cgroup tree, /proc and a kernel log given to it."""

from __future__ import annotations

from pathlib import Path

from launcher.agent.oomcheck import OomWatch, kmsg_oom_pids, memory_counter_files, oom_kill_count

V2_EVENTS = "low 0\nhigh 0\nmax 12\noom 1\noom_kill {n}\noom_group_kill 0\n"
V1_CONTROL = "oom_kill_disable 0\nunder_oom 0\noom_kill {n}\n"


def fake_host(tmp: Path, pid: int, cgroup_lines: str) -> OomWatch:
    proc = tmp / "proc" / str(pid)
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text(cgroup_lines)
    return OomWatch(proc_root=str(tmp / "proc"), cgroup_root=str(tmp / "cg"), kmsg=str(tmp / "kmsg"))


def test_counters_are_read_from_either_cgroup_version() -> None:
    assert oom_kill_count(V2_EVENTS.format(n=3)) == 3
    assert oom_kill_count(V1_CONTROL.format(n=0)) == 0
    assert oom_kill_count("oom 1\n") is None
    files = memory_counter_files("12:cpu,cpuacct:/a\n4:memory:/job/x\n0::/user.slice/t\n", "/cg")
    assert files == ["/cg/memory/job/x/memory.oom_control", "/cg/user.slice/t/memory.events",
                     "/cg/unified/user.slice/t/memory.events"]


def test_a_cgroup_v2_oom_kill_after_the_task_was_seen_is_evidence(tmp_path: Path) -> None:
    watch = fake_host(tmp_path, 41, "0::/jobs/t1\n")
    events = tmp_path / "cg" / "jobs" / "t1" / "memory.events"
    events.parent.mkdir(parents=True)
    events.write_text(V2_EVENTS.format(n=2))  # kills before this task: not its own
    watch.see([41], 3 * 2**30)
    watch.see([41], 2 * 2**30)
    assert not watch.oom_killed() and watch.peak_rss == 3 * 2**30
    events.write_text(V2_EVENTS.format(n=3))
    assert watch.oom_killed()


def test_a_cgroup_v1_oom_kill_is_evidence(tmp_path: Path) -> None:
    watch = fake_host(tmp_path, 42, "4:memory:/jobs/t2\n0::/\n")
    control = tmp_path / "cg" / "memory" / "jobs" / "t2" / "memory.oom_control"
    control.parent.mkdir(parents=True)
    control.write_text(V1_CONTROL.format(n=0))
    watch.see([42])
    assert not watch.oom_killed()
    control.write_text(V1_CONTROL.format(n=1))
    assert watch.oom_killed()


def test_the_kernel_log_names_a_process_of_the_task_killed_after_it_started(tmp_path: Path) -> None:
    watch = fake_host(tmp_path, 43, "0::/\n")
    watch.see([43])
    later = watch.since_usec + 5_000_000
    (tmp_path / "kmsg").write_text(
        f"3,100,{watch.since_usec - 10},-;Out of memory: Killed process 43 (python3) total-vm:9000kB\n"
        f"6,101,{later},-;Memory cgroup out of memory: Killed process 44 (python3) total-vm:9000kB\n")
    assert not watch.oom_killed()  # pid 43's kill was before this start; 44 is not the task's
    with (tmp_path / "kmsg").open("a") as f:
        f.write(f"6,102,{later},-;oom-kill:constraint=CONSTRAINT_MEMCG,task=python3,pid=43,uid=0\n"
                " SUBSYSTEM=memory\n")
    assert watch.oom_killed()
    assert kmsg_oom_pids([f"3,1,{later},-;Killed process 7 (x)"], later + 1) == set()
    assert OomWatch(kmsg=str(tmp_path / "absent")).oom_killed() is False
