"""Autolog's checkpoint writers (launcher/autolog/ckptwriters.py) on stand-in writers: only the
outermost of nested writers reports, after it returned, with the files the inner ones wrote; a
failure of the instrumentation turns autolog off and never the write."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from launcher import report
from launcher.autolog import ckptwriters, recorder
from launcher.autolog.patches import _wrap_method


@pytest.fixture
def lines(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    monkeypatch.setattr(report, "_write_line", out.append)
    monkeypatch.setattr(recorder._state, "on", True)
    monkeypatch.setattr(recorder._state, "warned", False)
    monkeypatch.setattr(recorder, "_newest_step", [70])
    return out


def _classes(directory: Path, where_raises: bool = False) -> tuple[type, type]:
    class Inner:
        def write(self, prefix: str) -> str:
            for name in (prefix + ".index", prefix + ".data-00000-of-00001"):
                Path(name).write_bytes(b"x" * 10)
            return prefix

    class Outer:
        def __init__(self) -> None:
            self.inner = Inner()

        def save(self, epoch: int) -> None:
            self.inner.write(str(directory / f"ckpt-{epoch}"))
            (directory / "checkpoint").write_text("state")

    def outer_where(owner: Any, args: tuple, kwargs: dict, result: Any, frame: Any) -> None:
        if where_raises:
            raise RuntimeError("boom")
        frame.epoch = args[0] + 1

    _wrap_method(Inner, "write", ckptwriters.writer_wrapper("checkpoint", ckptwriters._returned_path))
    _wrap_method(Outer, "save", ckptwriters.writer_wrapper("backup_and_restore", outer_where))
    return Inner, Outer


def test_only_the_outermost_writer_reports_with_what_the_inner_one_wrote(
        tmp_path: Path, lines: list[dict[str, Any]]) -> None:
    (tmp_path / "old.bin").write_bytes(b"old")
    _inner, outer = _classes(tmp_path)
    outer().save(2)
    [line] = lines
    assert (line["kind"], line["api"], line["epoch"], line["step"]) == ("checkpoint", "backup_and_restore", 3, 70)
    assert line["directory"] == str(tmp_path)
    assert line["files"] == ["checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index"]
    assert line["bytes"] == 25 and line["seconds"] >= 0


def test_a_write_alone_reports_its_prefix_and_no_state_file_it_did_not_write(
        tmp_path: Path, lines: list[dict[str, Any]]) -> None:
    (tmp_path / "checkpoint").write_text("older")
    then = os.stat(tmp_path / "checkpoint").st_mtime - 60
    os.utime(tmp_path / "checkpoint", (then, then))
    inner, _outer = _classes(tmp_path)
    assert inner().write(str(tmp_path / "w")) == str(tmp_path / "w")
    [line] = lines
    assert line["api"] == "checkpoint" and line["files"] == ["w.data-00000-of-00001", "w.index"]


def test_a_write_of_which_nothing_remains_is_not_reported(tmp_path: Path, lines: list[dict[str, Any]]) -> None:
    class Gone:
        def write(self, prefix: str) -> str:
            return prefix  # a non-chief's temp directory, removed once written: nothing there

    _wrap_method(Gone, "write", ckptwriters.writer_wrapper("checkpoint", ckptwriters._returned_path))
    Gone().write(str(tmp_path / "removed" / "ckpt-1"))
    assert lines == []


def test_a_failing_instrumentation_turns_autolog_off_and_the_write_goes_on(
        tmp_path: Path, lines: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    _inner, outer = _classes(tmp_path, where_raises=True)
    outer().save(1)
    assert (tmp_path / "ckpt-1.index").is_file() and lines == []
    assert recorder._state.on is False
    assert "checkpoint report (backup_and_restore) failed (RuntimeError: boom)" in capsys.readouterr().err
    outer().save(2)  # autolog off: the write alone
    assert (tmp_path / "ckpt-2.index").is_file() and lines == []


def test_a_write_that_raises_reports_nothing_and_raises_as_it_did(
        tmp_path: Path, lines: list[dict[str, Any]]) -> None:
    class Full:
        def write(self, prefix: str) -> str:
            raise OSError("No space left on device")

    _wrap_method(Full, "write", ckptwriters.writer_wrapper("checkpoint", ckptwriters._returned_path))
    with pytest.raises(OSError, match="No space"):
        Full().write(str(tmp_path / "ckpt"))
    assert lines == [] and recorder._state.on is True


def test_a_folder_written_lists_the_files_under_it(tmp_path: Path, lines: list[dict[str, Any]]) -> None:
    class SavedModel:
        def save(self, path: str) -> str:
            os.makedirs(os.path.join(path, "variables"))
            Path(path, "saved_model.pb").write_bytes(b"p" * 3)
            Path(path, "variables", "variables.index").write_bytes(b"i" * 4)
            return path

    _wrap_method(SavedModel, "save", ckptwriters.writer_wrapper("model_checkpoint", ckptwriters._returned_path))
    SavedModel().save(str(tmp_path / "model-01"))
    [line] = lines
    assert line["files"] == ["model-01/saved_model.pb", "model-01/variables/variables.index"]
    assert line["bytes"] == 7 and line["directory"] == str(tmp_path)
