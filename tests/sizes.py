"""How big each module and class is: a report to read before a change, never a gate.

    python -m tests.sizes [--top N]

A module past ~500 lines or a class past ~400 is often two concepts: look for where they part
(docs/contributing.md, "Sizes"). Many are one concept and read well long; split by concept, never to
get under a number.
"""

from __future__ import annotations

import argparse
import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: where a reader starts to ask whether a module or a class holds two concepts
MODULE_HINT = 500
CLASS_HINT = 400


@dataclass(frozen=True)
class Size:
    name: str  # dotted: launcher.supervise.core, or launcher.supervise.core.LineFeed
    lines: int


def measure(root: Path = ROOT) -> tuple[list[Size], list[Size]]:
    """Every module of launcher/ and tui/ and every class in them, largest first."""
    modules: list[Size] = []
    classes: list[Size] = []
    for top in ("launcher", "tui"):
        for path in sorted((root / top).rglob("*.py")):
            text = path.read_text()
            name = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
            modules.append(Size(name, text.count("\n")))
            for node in ast.walk(ast.parse(text, str(path))):
                if isinstance(node, ast.ClassDef):
                    end = node.end_lineno or node.lineno
                    classes.append(Size(f"{name}.{node.name}", end - node.lineno + 1))
    return (sorted(modules, key=lambda s: -s.lines), sorted(classes, key=lambda s: -s.lines))


def report(top: int = 15, root: Path = ROOT) -> str:
    modules, classes = measure(root)
    lines = [f"largest modules (a hint at {MODULE_HINT} lines):"]
    lines += [f"  {s.lines:5d}  {s.name}{'  *' if s.lines > MODULE_HINT else ''}" for s in modules[:top]]
    lines.append(f"largest classes (a hint at {CLASS_HINT} lines):")
    lines += [f"  {s.lines:5d}  {s.name}{'  *' if s.lines > CLASS_HINT else ''}" for s in classes[:top]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sizes", description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=15, help="how many of each to list (default 15)")
    print(report(parser.parse_args(argv).top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
