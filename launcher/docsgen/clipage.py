"""The command-line reference (``docs/reference/cli.md``), written from ``launcher/cli.py``'s parser.

One section per verb (``export``'s targets each a verb of their own): its help line, a synopsis and
a table of its arguments with their help, as ``distlaunch VERB --help`` has them. The synopsis is
built here rather than taken from argparse's usage, whose wrapping changes with the terminal and
the Python version.
"""

from __future__ import annotations

import argparse

from launcher.cli import build_parser
from launcher.docsgen.markdown import cell


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each sub-command, in the order they were added."""
    found: list[tuple[str, str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                found.append((name, helps.get(name, ""), sub))
    return found


def _shown(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.help != argparse.SUPPRESS
            and not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)]


def _metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        return action.metavar if isinstance(action.metavar, str) else " ".join(action.metavar)
    if action.choices is not None:
        return "|".join(str(c) for c in action.choices)
    return action.dest.upper()


def _word(action: argparse.Action) -> str:
    """One argument as the synopsis writes it."""
    if not action.option_strings:
        name = _metavar(action)
        if action.nargs == "?":
            return name if name.startswith("[") else f"[{name}]"
        if action.nargs == "*":
            return name if name.startswith("[") else f"[{name} ...]"
        return name
    flag = max(action.option_strings, key=len)
    if action.nargs == 0:
        if isinstance(action, argparse.BooleanOptionalAction):
            return f"--[no-]{action.option_strings[0].removeprefix('--')}"
        return flag
    return f"{flag} {_metavar(action)}"


def synopsis(prog: str, parser: argparse.ArgumentParser) -> str:
    """``distlaunch up PROFILE [--no-tui | --json] [--detach] ...``."""
    grouped: dict[int, argparse._MutuallyExclusiveGroup] = {}
    for exclusive in parser._mutually_exclusive_groups:
        for member in exclusive._group_actions:
            grouped[id(member)] = exclusive
    words = [prog]
    done: set[int] = set()
    for action in _shown(parser):
        group = grouped.get(id(action))
        if group is not None:
            if id(group) not in done:
                done.add(id(group))
                words.append("[" + " | ".join(_word(a) for a in group._group_actions) + "]")
            continue
        word = _word(action)
        optional = action.option_strings and not action.required
        words.append(f"[{word}]" if optional else word)
    if parser.epilog and "--" in parser.epilog:
        words.append("[-- ARGS ...]")
    return " ".join(words)


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if "%(" in text:
        text = text % {**vars(action), "prog": ""}
    if action.choices is not None:
        text += " (one of " + ", ".join(f"`{c}`" for c in action.choices) + ")"
    return cell(text)


def _table_metavar(action: argparse.Action) -> str:
    """The metavar in the table: a name without ``|`` (choices and alternatives are in the synopsis and
    the meaning), since a table cell cannot show one inside code on both GitHub and the site."""
    name = _metavar(action)
    return action.dest.upper() if "|" in name else name


def _names(action: argparse.Action) -> str:
    if not action.option_strings:
        return cell(f"`{_table_metavar(action)}`")
    value = "" if action.nargs == 0 else f" {_table_metavar(action)}"
    return cell(", ".join(f"`{o}{value}`" for o in action.option_strings))


def _section(prog: str, summary: str, parser: argparse.ArgumentParser) -> list[str]:
    out = ["", f"## {prog}", "", summary[:1].upper() + summary[1:] + ".", "", f"    {synopsis(prog, parser)}"]
    actions = _shown(parser)
    if actions:
        out += ["", "| argument | meaning |", "| --- | --- |"]
        out += [f"| {_names(a)} | {_help(a)} |" for a in actions]
    if parser.epilog:
        out += ["", parser.epilog]
    return out


def cli_reference() -> str:
    """The whole page."""
    parser = build_parser()
    verbs: list[tuple[str, str, argparse.ArgumentParser]] = []
    for name, summary, sub in _subcommands(parser):
        targets = _subcommands(sub)
        if targets:
            verbs += [(f"distlaunch {name} {t}", s, p) for t, s, p in targets]
        else:
            verbs.append((f"distlaunch {name}", summary, sub))
    out = [
        "<!-- Generated by `python -m launcher.docsgen` from launcher/cli.py's parser: edit the parser, "
        "then run `make docs`. -->",
        "",
        "# Command-line reference",
        "",
        f"{parser.description} Every verb, from the argument parser itself (`distlaunch VERB --help` "
        "says the same). `RUN` is a run id or a run directory; where it may be left out, the most "
        "recent run. What the verbs are for, with examples: [running a job](../running.md) and "
        "[runs and their files](../runs.md).",
        "",
        f"    {synopsis('distlaunch', parser)} VERB ...",
        "",
        "Verbs: " + ", ".join(f"[{prog.removeprefix('distlaunch ')}](#{prog.replace(' ', '-')})"
                              for prog, _, _ in verbs) + ".",
    ]
    for prog, summary, sub in verbs:
        out += _section(prog, summary, sub)
    return "\n".join(out) + "\n"
