"""The agent zipapp: what it holds, that it is reproducible, and that it runs on its own."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from launcher.remote import agentpack

PACKAGE_DIR = Path(agentpack.__file__).parent.parent


def test_zipapp_holds_main_and_every_host_module_present_in_the_tree():
    names = set(zipfile.ZipFile(io.BytesIO(agentpack.build_agent_zipapp())).namelist())
    present = [m for m in agentpack.AGENT_MODULES if (PACKAGE_DIR / f"{m}.py").exists()]
    expected = {"__main__.py"} | {f"launcher/{m}.py" for m in present} | {f"launcher/{m}.pyc" for m in present}
    expected.add(f"{agentpack.SITE_DIR}/sitecustomize.py")  # autolog's start-up hook, a directory of its own
    assert names == expected
    assert {"launcher/__init__.py", "launcher/events.py", "launcher/agent/__init__.py",
            "launcher/agent/hostagent.py"} <= names


def test_zipapp_is_deterministic_and_cached():
    first = agentpack.build_agent_zipapp()
    assert agentpack.build_agent_zipapp() is first
    sources = agentpack.agent_sources()
    packed = agentpack.pack_zipapp(sources)
    assert agentpack.pack_zipapp(dict(reversed(list(sources.items())))) == packed
    for info in zipfile.ZipFile(io.BytesIO(packed)).infolist():
        assert info.date_time == (1980, 1, 1, 0, 0, 0)


def test_bytecode_is_used_by_this_python_and_ignored_by_another(tmp_path):
    pyz = tmp_path / "agent.pyz"
    pyz.write_bytes(agentpack.build_agent_zipapp())
    probe = "import launcher.agent as a; print(a.__loader__.get_filename('launcher.agent'))"
    ran = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(pyz)!r}); {probe}"],
                         capture_output=True, text=True, timeout=30, check=True)
    assert ran.stdout.strip().endswith("agent/__init__.pyc")
    # a bytecode file from another interpreter (wrong magic number) falls back to the source
    files = agentpack.agent_sources()
    stale = {name: data for name, data in agentpack.with_bytecode(files).items()}
    stale = {n: (b"\0\0\0\0" + d[4:] if n.endswith(".pyc") else d) for n, d in stale.items()}
    other = tmp_path / "other.pyz"
    other.write_bytes(agentpack.pack_zipapp(stale))
    out = subprocess.run([sys.executable, "-I", "-S", str(other), "preflight"], capture_output=True,
                         text=True, timeout=30, check=True)
    assert json.loads(out.stdout)["python"]


def test_zipapp_runs_without_site_packages_or_the_source_tree(tmp_path):
    pyz = tmp_path / "agent.pyz"
    pyz.write_bytes(agentpack.build_agent_zipapp())
    # -I ignores PYTHONPATH and the cwd, -S drops site-packages: only the stdlib and the zipapp remain
    out = subprocess.run([sys.executable, "-I", "-S", str(pyz), "preflight"], capture_output=True,
                         text=True, timeout=30, cwd=tmp_path, check=True)
    assert set(json.loads(out.stdout)) == {"python", "psutil", "pynvml"}
    modules = [m for m in agentpack.AGENT_MODULES if m != "__init__" and (PACKAGE_DIR / f"{m}.py").exists()]
    imports = ", ".join("launcher." + m.replace("/__init__", "").replace("/", ".") for m in modules)
    code = f"import sys; sys.path.insert(0, {str(pyz)!r}); import {imports}"
    subprocess.run([sys.executable, "-I", "-S", "-c", code], check=True, timeout=30, cwd=tmp_path)


def test_agent_command_quotes_every_part():
    command = agentpack.agent_command("python3", "/runs/my run/agent.pyz", "run", "--task-dir", "/x/it's")
    assert command == "python3 '/runs/my run/agent.pyz' run --task-dir '/x/it'\"'\"'s'"


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    """A state dir of the test's own, and no archive built in this process yet (before and after)."""
    monkeypatch.setenv("DISTLAUNCH_HOME", str(tmp_path))
    agentpack.build_agent_zipapp.cache_clear()
    yield tmp_path
    agentpack.build_agent_zipapp.cache_clear()


def test_the_built_archive_is_kept_under_a_hash_of_its_sources(state_dir, monkeypatch):
    built = agentpack.build_agent_zipapp()
    kept = list((state_dir / "cache").glob("agent-*.pyz"))
    assert len(kept) == 1 and kept[0].read_bytes() == built
    agentpack.build_agent_zipapp.cache_clear()

    def no_packing(_files):
        raise AssertionError("packed again although the archive was kept")

    monkeypatch.setattr(agentpack, "pack_zipapp", no_packing)
    assert agentpack.build_agent_zipapp() == built
    sources = agentpack.agent_sources()
    changed = dict(sources, **{"launcher/events.py": sources["launcher/events.py"] + b"\n"})
    assert agentpack._cache_key(changed)[1] != agentpack._cache_key(sources)[1]
    assert kept[0].name.endswith(f"-{hashlib.sha256(built).hexdigest()}.pyz")  # its own sha256 in its name


def test_a_kept_archive_whose_bytes_are_not_the_sha256_in_its_name_is_built_again(state_dir):
    built = agentpack.build_agent_zipapp()
    kept = next((state_dir / "cache").glob("agent-*.pyz"))
    other = agentpack.pack_zipapp({"__main__.py": b"print('not the agent')\n"})  # whole, private, ours
    kept.write_bytes(other)
    agentpack.build_agent_zipapp.cache_clear()
    assert agentpack.build_agent_zipapp() == built
    assert kept.read_bytes() == built


def test_a_kept_archive_that_is_not_whole_is_built_again(state_dir):
    built = agentpack.build_agent_zipapp()
    kept = next((state_dir / "cache").glob("agent-*.pyz"))
    kept.write_bytes(built[: len(built) // 2])  # a crash mid-write
    agentpack.build_agent_zipapp.cache_clear()
    assert agentpack.build_agent_zipapp() == built
    assert kept.read_bytes() == built
