"""The layout's rules (docs/ARCHITECTURE.md, "What may import what"), checked on the source tree.

Sizes are not among them: ``python -m tests.sizes`` reports them (docs/contributing.md).

Every import counts, also one inside a function or under ``TYPE_CHECKING``: a lazy import is still
a dependency a reader has to follow.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

from launcher.remote import agentpack
from tests import sizes

ROOT = Path(__file__).resolve().parents[2]
MAX_LOOSE_MODULES = 14
#: what runs on each host and inside the tasks (the agent zipapp holds exactly these)
HOST_PACKAGES = ("launcher.agent", "launcher.autolog", "launcher.protocol")
HOST_MODULES = ("launcher", "launcher.events", "launcher.report")
#: imported by host code only inside a function, each where the host may not have it
OPTIONAL_ON_HOSTS = {"psutil", "pynvml", "tensorflow", "keras", "tf_keras"}
#: package circles left as they are for now, each with why; no other may appear, and one that is gone
#: must leave this list
KNOWN_PACKAGE_CIRCLES: list[list[str]] = []


def _modules() -> dict[str, Path]:
    found = {}
    for top in ("launcher", "tui"):
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> Iterator[tuple[str, ast.stmt, bool]]:
    """(imported module, statement, at module level) for every import of ``name``; a ``from p import m``
    of a submodule ``m`` counts as an import of ``p.m``."""
    tree = ast.parse(path.read_text(), str(path))
    top_level = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node, id(node) in top_level
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name if path.name == "__init__.py" else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield (sub if sub in MODULES else base), node, id(node) in top_level


def _own(target: str) -> str | None:
    """The module of this tree that ``target`` names (a package's ``__init__`` for a package)."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        deps = {_own(target) for target, _, _ in _imports(name, path)}
        graph[name] = {d for d in deps if d is not None and d != name}
    return graph


def _package(module: str) -> str:
    """The package a module counts in: ``launcher.x`` for ``launcher.x.y``; a loose module of
    ``launcher/`` is a package of its own; ``tui`` whole."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "launcher" else parts[0]


def _package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    packages: dict[str, set[str]] = {}
    for module, deps in graph.items():
        own = _package(module)
        packages.setdefault(own, set()).update(p for p in map(_package, deps) if p != own)
    return packages


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def _is_host_code(name: str) -> bool:
    return name in HOST_MODULES or any(name == p or name.startswith(p + ".") for p in HOST_PACKAGES)


def test_the_size_report_measures_every_module_and_class_and_fails_on_none(capsys):
    """Sizes are a report (``python -m tests.sizes``), not a gate: split by concept, not by count."""
    modules, classes = sizes.measure()
    assert {s.name for s in modules} == set(MODULES)
    assert [s.lines for s in classes] == sorted((s.lines for s in classes), reverse=True)
    assert "launcher.supervise.supervisor.Supervisor" in {s.name for s in classes}
    print(sizes.report(top=5))
    out = capsys.readouterr().out
    assert f"{modules[0].lines:5d}  {modules[0].name}" in out and classes[0].name in out


def test_no_import_circle_lazy_imports_included():
    assert _cycles(_graph()) == []


def test_cycle_finder_sees_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle_between_packages_lazy_imports_included():
    assert sorted(_cycles(_package_graph(_graph()))) == sorted(KNOWN_PACKAGE_CIRCLES)


def test_the_plan_imports_no_transport_and_no_subprocess():
    """OpenSSH's resolution of aliases is the transport's, done before ``build_plan`` (which takes its
    result); tests/unit/test_plan_hosts.py checks that building a plan starts no process."""
    targets = {target for target, _, _ in _imports("launcher.plan", MODULES["launcher.plan"])}
    assert sorted(t for t in targets if t.startswith(("launcher.transport", "subprocess"))) == []


def test_packages_are_the_folders_of_launcher_its_loose_modules_and_tui():
    graph = {"launcher.supervise.core": {"launcher.remote.session", "launcher.supervise.links"},
             "launcher.supervise.links": set(), "launcher.remote.session": {"launcher.runclean"},
             "launcher.runclean": {"launcher.supervise.daemon"}, "launcher.supervise.daemon": set(),
             "tui.app": {"tui.frame", "launcher.plan"}, "tui.frame": set(), "launcher.plan": set()}
    packages = _package_graph(graph)
    assert packages == {"launcher.supervise": {"launcher.remote"}, "launcher.remote": {"launcher.runclean"},
                        "launcher.runclean": {"launcher.supervise"}, "tui": {"launcher.plan"},
                        "launcher.plan": set()}
    assert _cycles(packages) == [["launcher.remote", "launcher.runclean", "launcher.supervise"]]


def test_no_two_modules_share_a_file_name():
    """A name says what a module is: two ``stacks.py`` (the verb, the agent's reader) made every
    import and every path in the docs a question. ``__init__`` and ``__main__`` excepted."""
    by_name: dict[str, list[str]] = {}
    for name, path in MODULES.items():
        if path.stem not in ("__init__", "__main__"):
            by_name.setdefault(path.name, []).append(name)
    assert {n: m for n, m in by_name.items() if len(m) > 1} == {}


def test_few_loose_modules_at_the_top_of_launcher():
    loose = sorted(p.name for p in (ROOT / "launcher").glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= MAX_LOOSE_MODULES, loose


def test_host_and_task_code_imports_no_launcher_side_code_and_only_the_stdlib_at_import():
    wrong = []
    for name, path in MODULES.items():
        if not _is_host_code(name):
            continue
        for target, node, at_import in _imports(name, path):
            top = target.partition(".")[0]
            if top in ("launcher", "tui"):
                own = _own(target)
                if own is None or not _is_host_code(own):
                    wrong.append(f"{name}:{node.lineno} imports {target} (launcher-side)")
            elif top == "__future__" or top in sys.stdlib_module_names:
                continue
            elif at_import or top not in OPTIONAL_ON_HOSTS:
                wrong.append(f"{name}:{node.lineno} imports {target} (not in the stdlib)")
    assert wrong == []


def test_launcher_never_imports_textual_and_the_dashboard_only_when_it_is_opened():
    wrong = []
    for name, path in MODULES.items():
        if not name.startswith("launcher"):
            continue
        for target, node, at_import in _imports(name, path):
            top = target.partition(".")[0]
            if top == "textual" or (top == "tui" and at_import):
                wrong.append(f"{name}:{node.lineno} imports {target}")
    assert wrong == []


def test_the_zipapp_ships_exactly_the_host_side_code():
    shipped = {name.removeprefix("launcher/").removesuffix(".py") for name in agentpack.agent_sources()
               if name.startswith("launcher/")}
    expected = {m.replace(".", "/").removeprefix("launcher").lstrip("/") or "__init__"
                for m in MODULES if _is_host_code(m)}
    expected = {f"{m}/__init__" if (ROOT / "launcher" / m).is_dir() else m for m in expected}
    assert shipped == expected - set(agentpack.NOT_SHIPPED)


#: the archive is uploaded on every host's one exec of a launch (bytecode included): 492 KiB today
#: (the agent's own detail, moved from docs/ARCHITECTURE.md into its module docstrings, ~14 KiB with
#: their bytecode copies, took it past the 480 KiB before)
#: (taskcgroup.py, the sweep's sessions and cgroups, took it past 320 KiB; tasks in containers,
#: issue 38: containerrt, taskcontainer and containercheck, ~44 KiB, and autolog's step time,
#: ~20 KiB, past the 336 KiB this was before; the protocol package, both line protocols, ~19 KiB,
#: past the 416 KiB before that; the container runtimes as one adapter class each, ~6 KiB, and autolog's
#: last reading at exit and train calls recognised without an optimizer, past the 448 KiB before that;
#: the protocol modules split by concept, the typed agent requests and the metric names, ~12 KiB, the
#: detail of docs/ARCHITECTURE.md moved into the shipped modules' docstrings, ~12 KiB, and a preemption
#: notice bounded in bytes and time, a retired mark never waited on, ~4 KiB, past the 480 KiB before;
#: issue 54's checkpoints: the event kind, the agent's checkpoint line and watched directories,
#: autolog's checkpoint writers, past the 512 KiB before; issue 59's private network for all-local
#: jobs, netns.py with its bytecode, ~11 KiB, and the requeued event kind, past the 576 KiB before)
MAX_ZIPAPP_BYTES = 592 * 1024


def test_the_zipapp_stays_small():
    size = len(agentpack.pack_zipapp(agentpack.with_bytecode(agentpack.agent_sources())))
    assert size <= MAX_ZIPAPP_BYTES, f"{size} bytes"
