"""What both generated pages need of Markdown: table cells and anchors that read the same on
GitHub and on the docs site."""

from __future__ import annotations

import re

_CODE = re.compile(r"(`[^`]*`)")


def cell(text: str) -> str:
    """``text`` as one table cell: one line, ``|`` escaped and ``<``, ``>``, ``&`` as entities (else a raw
    HTML tag) outside code. A ``|`` inside code has no form both read: GitHub wants it escaped there
    too, Python-Markdown shows the backslash; so there is none (ValueError)."""
    parts = _CODE.split(" ".join(text.split()))
    for i, part in enumerate(parts):
        if part.startswith("`"):
            if "|" in part:
                raise ValueError(f"a table cell cannot hold {part} on both GitHub and the docs site")
        else:
            parts[i] = part.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
    return "".join(parts)


def slug(heading: str) -> str:
    """The anchor GitHub and the docs site (pymdownx.slugs, case lower) both give a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
