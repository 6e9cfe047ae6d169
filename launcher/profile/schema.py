"""The profile's JSON Schema (draft 2020-12), generated from ``keys.py``: what editors validate with.

Taplo and VS Code's Even Better TOML read it through a ``#:schema`` line at the top of a profile.
Only keywords that draft 7 validators read the same way are used, so older editor plugins agree.
It checks what one key can be checked for alone; the reader also checks what spans keys
(colliding ports, GPUs a host does not offer, placeholders in commands).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from launcher.errors import UserError
from launcher.profile.keys import (
    ENV_NAME_PATTERN,
    HOST_NAME_PATTERN,
    RATE_PATTERN,
    SINGLE_TASK_ROLES,
    SIZE_PATTERN,
    TOP_KEYS,
    Key,
    Table,
)


def profile_schema() -> dict[str, Any]:
    """The whole schema as a JSON-ready dict."""
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "distlaunch cluster profile",
    }
    schema.update(_table_schema(TOP_KEYS))
    return schema


def schema_text() -> str:
    return json.dumps(profile_schema(), indent=2) + "\n"


def run_schema(output: Path | None) -> int:
    """``distlaunch schema [-o FILE]``."""
    text = schema_text()
    if output is None:
        print(text, end="")
    else:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UserError(f"{output}: cannot write the schema: {exc.strerror or exc}; "
                            "give a writable path") from None
    return 0


def _table_schema(table: Table) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "description": table.doc,
        "properties": {key.name: _key_schema(key) for key in table.keys},
        "additionalProperties": False,
    }
    required = [key.name for key in table.keys if key.required]
    if required:
        schema["required"] = required
    return schema


def _key_schema(key: Key) -> dict[str, Any]:
    schema: dict[str, Any] = {"description": key.doc}
    schema.update(_kind_schema(key))
    if key.default is not None:
        schema["default"] = key.default
    return schema


def _kind_schema(key: Key) -> dict[str, Any]:
    kind = key.kind
    if kind == "string":
        if key.pattern:  # launcher/profile/names.py: each such pattern also refuses a blank value
            return {"type": "string", "pattern": key.pattern}
        return {"type": "string", "pattern": r"\S"} if key.nonblank else {"type": "string"}
    if kind == "choice":
        return {"type": "string", "enum": list(key.choices)}
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "path_or_false":
        return {"anyOf": [{"type": "string", "pattern": r"\S"}, {"const": False}]}
    if kind == "integer":
        bounds: dict[str, Any] = {"type": "integer"}
        if key.minimum is not None:
            bounds["minimum"] = key.minimum
        if key.maximum is not None:
            bounds["maximum"] = key.maximum
        return bounds
    if kind == "number":
        return {"type": "number", ("exclusiveMinimum" if key.positive else "minimum"): 0}
    if kind == "size":
        return {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": SIZE_PATTERN}]}
    if kind == "rate":
        return {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": RATE_PATTERN}]}
    if kind == "string_list":
        if key.item_pattern:
            return {"type": "array", "items": {"type": "string", "pattern": key.item_pattern}}
        return {"type": "array", "items": {"type": "string"}}
    if kind == "index_list":
        return {"type": "array", "items": {"type": "integer", "minimum": 0}, "uniqueItems": True}
    if kind == "env":
        return {"type": "object", "propertyNames": {"pattern": ENV_NAME_PATTERN},
                "additionalProperties": {"type": "string"}}
    if kind == "regex_map":
        return {"type": "object", "additionalProperties": {"type": "string", "format": "regex"}}
    assert key.table is not None, key.name
    if kind == "table_list":
        return {"type": "array", "items": _table_schema(key.table)}
    if kind == "table":
        return _table_schema(key.table)
    if kind == "table_or_false":
        return {"anyOf": [_table_schema(key.table), {"const": False}]}
    if not key.names:  # any sub-table name that is valid
        return {"type": "object", "propertyNames": {"pattern": HOST_NAME_PATTERN},
                "additionalProperties": _table_schema(key.table)}
    named: dict[str, Any] = {}
    for name in key.names:
        sub = _table_schema(key.table)
        if name in SINGLE_TASK_ROLES and "count" in key.table.names:
            sub["properties"] = dict(sub["properties"], count=dict(sub["properties"]["count"], maximum=1))
        named[name] = sub
    return {"type": "object", "properties": named, "additionalProperties": False}
