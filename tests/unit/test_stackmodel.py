"""The stack model against real py-spy and faulthandler output (tests/data/stacks/README.md)."""

from __future__ import annotations

from pathlib import Path

from launcher import stackmodel as sm

DATA = Path(__file__).resolve().parent.parent / "data" / "stacks"


def _read(name: str) -> str:
    return (DATA / name).read_text()


def _capture(task: str, text: str, state: str = sm.SLEEPING, pid: int = 10) -> sm.TaskStacks:
    return sm.TaskStacks(task, "hostA", pid, state, "hrtimer_nanosleep", sm.PYSPY, sm.parse_pyspy_dump(text))


def test_pyspy_dump_threads_oldest_first_newest_last() -> None:
    threads = sm.parse_pyspy_dump(_read("pyspy_full.txt"))
    assert [t.name for t in threads] == ["MainThread", "heartbeat"]
    main = threads[0]
    assert main.ident.isdigit()
    assert [(f.function, Path(f.file).name, f.line) for f in main.frames] == [
        ("<module>", "hang.py", 22), ("wait_for_peer", "hang.py", 19)]
    assert threads[1].frames[-1].function == "heartbeat"
    assert threads[1].frames[0].function == "Thread._bootstrap"


def test_pyspy_native_frames_are_marked_and_do_not_change_the_key() -> None:
    native = sm.parse_pyspy_dump(_read("pyspy_native.txt"))
    plain = sm.parse_pyspy_dump(_read("pyspy_full.txt"))
    main = native[0]
    assert main.frames[-1] == sm.Frame("clock_nanosleep", "/usr/lib/x86_64-linux-gnu/libc.so.6", None, True)
    assert main.frames[0].native and main.frames[0].function.startswith("0x")
    assert [t.key() for t in native] == [t.key() for t in plain]
    assert sm.user_frame(main) == sm.Frame("wait_for_peer", "/work/tests/data/stacks/hang.py", 19)


def test_pyspy_error_output_has_no_threads() -> None:
    assert sm.parse_pyspy_dump(_read("pyspy_stopped_blocking.txt")) == []
    assert len(sm.parse_pyspy_dump(_read("pyspy_stopped_nonblocking.txt"))) == 2


def test_faulthandler_reads_the_last_of_appended_dumps() -> None:
    threads = sm.parse_faulthandler(_read("faulthandler.txt"))
    assert len(threads) == 2
    capture = sm.TaskStacks("worker:0", "h", 1, sm.SLEEPING, None, sm.FAULTHANDLER, threads)
    main = capture.main_thread()
    assert main is not None and main.ident.startswith("0x")
    assert [f.label for f in main.frames] == ["<module> (hang.py:22)", "wait_for_peer (hang.py:19)"]
    assert sm.user_frame(capture) == sm.Frame("wait_for_peer", "/work/tests/data/stacks/hang.py", 19)
    # the same program read by py-spy and by faulthandler groups together
    spy = _capture("worker:1", _read("pyspy_full.txt"))
    assert len(sm.group([capture, spy])) == 1


def test_user_frame_skips_libraries() -> None:
    thread = sm.ThreadStack("MainThread", "1", [
        sm.Frame("<module>", "/home/u/train.py", 30),
        sm.Frame("fit", "/venv/lib/python3.11/site-packages/keras/src/engine/training.py", 1700),
        sm.Frame("step", "/home/u/train.py", 12),
        sm.Frame("run", "/opt/tf/tensorflow/python/eager/execute.py", 53),
        sm.Frame("wait", "/usr/lib/python3.11/threading.py", 320),
        sm.Frame("_find_and_load", "<frozen importlib._bootstrap>", 1176),
        sm.Frame("hook", "/tmp/agent.pyz/launcher/autolog_patches.py", 40),
        sm.Frame("time_sleep", "libpython3.11.so", None, True),
    ])
    assert sm.user_frame(thread) == sm.Frame("step", "/home/u/train.py", 12)
    assert sm.user_frame(sm.ThreadStack("x", "1", [sm.Frame("run", "threading.py", 982)])) is None
    assert sm.user_frame(sm.TaskStacks("w:0", "h", None, sm.GONE)) is None


def test_json_round_trip() -> None:
    capture = _capture("worker:3", _read("pyspy_native.txt"))
    capture.note = "a note"
    again = sm.TaskStacks.from_json(capture.to_json())
    assert again == capture


def test_compress_tasks() -> None:
    tasks = [f"worker:{i}" for i in (7, 0, 2, 3, 4, 5, 6)]
    assert sm.compress_tasks(tasks) == "worker:0, worker:2-7 (7)"
    assert sm.compress_tasks(["chief:0", "ps:0", "ps:1", "worker:1"]) == "chief:0, ps:0-1, worker:1 (4)"
    assert sm.compress_tasks(["worker:1"]) == "worker:1"


def _stack(*frames: tuple[str, int]) -> str:
    """py-spy text of a main thread with these (function, line) frames, newest first."""
    lines = ['Thread 1 (idle): "MainThread"']
    lines += [f"    {name} (/home/u/train.py:{line})" for name, line in frames]
    return "\n".join(lines) + "\n"


def test_odd_one_out_is_the_suspect_and_its_group_comes_first() -> None:
    waiting = _stack(("allreduce", 40), ("<module>", 50))
    captures = [_capture(f"worker:{i}", waiting) for i in range(8) if i != 1]
    captures.append(_capture("worker:1", _stack(("wait_for_peer", 4), ("<module>", 50))))
    captures.append(_capture("chief:0", _stack(("save", 9), ("<module>", 50))))
    found = sm.suspect(captures)
    assert found is not None and found[0] == "worker:1"
    assert "wait_for_peer (train.py:4)" in found[1]
    groups = sm.group(captures)
    assert [g.label for g in groups] == ["worker:1", "worker:0, worker:2-7 (7)", "chief:0"]
    assert groups[0].suspect and not groups[1].suspect
    assert groups[1].sample.task == "worker:0"


def test_stopped_beats_disk_wait_beats_odd_one_out() -> None:
    same = _stack(("step", 4), ("<module>", 50))
    captures = [_capture(f"worker:{i}", same) for i in range(4)]
    captures.append(_capture("worker:4", _stack(("other", 1))))
    captures.append(sm.TaskStacks("ps:0", "h", 5, sm.DISK_WAIT, "io_schedule"))
    assert sm.suspect(captures) == ("ps:0", "it is in disk wait (D) (wchan io_schedule)")
    captures.append(sm.TaskStacks("ps:1", "h", 6, sm.STOPPED, "do_signal_stop"))
    assert sm.suspect(captures) == ("ps:1", "it is stopped (wchan do_signal_stop)")
    assert sm.suspect(captures[:4]) is None  # all alike: nobody stands out
    # two tasks that differ: neither is the odd one out
    assert sm.suspect([_capture("worker:0", same), _capture("worker:1", _stack(("x", 1)))]) is None


def test_answered_and_state_words() -> None:
    assert sm.state_word("D") == sm.DISK_WAIT and sm.state_word("T") == sm.STOPPED
    assert sm.TaskStacks("w:0", "h", 1, sm.STOPPED).answered
    assert not sm.TaskStacks("w:0", "h", 1, sm.SLEEPING, note="install py-spy").answered


def test_a_stopped_suspect_stands_alone_even_with_the_same_stack() -> None:
    text = _read("pyspy_full.txt")
    captures = [_capture(f"worker:{i}", text) for i in range(3)]
    captures[1].state = sm.STOPPED
    groups = sm.group(captures)
    assert [(g.label, g.suspect) for g in groups] == [("worker:1", True), ("worker:0, worker:2 (2)", False)]


def test_the_main_thread_of_a_faulthandler_dump_under_python_m() -> None:
    worker = sm.ThreadStack("", "0x2", [sm.Frame("_bootstrap", "/usr/lib/python3.11/threading.py", 1002),
                                        sm.Frame("loop", "/home/u/pkg/io.py", 5)])
    main = sm.ThreadStack("", "0x1", [sm.Frame("_run_module_as_main", "<frozen runpy>", 198),
                                      sm.Frame("_run_code", "<frozen runpy>", 88),
                                      sm.Frame("<module>", "/home/u/pkg/__main__.py", 3),
                                      sm.Frame("wait_for_peer", "/home/u/pkg/__main__.py", 9)])
    capture = sm.TaskStacks("worker:0", "h", 1, sm.SLEEPING, threads=[worker, main])
    assert capture.main_thread() is main
    assert sm.user_frame(capture) == sm.Frame("wait_for_peer", "/home/u/pkg/__main__.py", 9)
