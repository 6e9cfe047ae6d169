"""A reader of the protobuf wire format, for the few messages TensorFlow's profiler tools return.

TensorFlow's wheel carries the converter (``xspace_to_tools_data``) but not the Python classes of
what it returns (``OverviewPage``, ``InputPipelineAnalysisResult``, in ``xprof``'s protos); the
fields read here are few and their numbers are fixed by those protos, so a message is read as
``{field number: [values]}`` and the caller picks the numbers it knows.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

Fields = dict[int, list[object]]


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise ValueError("varint too long")


def _items(data: bytes) -> Iterator[tuple[int, int, object]]:
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: object
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value = data[pos:pos + 8]
            pos += 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            value = data[pos:pos + size]
            pos += size
        elif wire == 5:
            value = data[pos:pos + 4]
            pos += 4
        else:
            raise ValueError(f"wire type {wire} is not read here")
        if pos > len(data):
            raise ValueError("truncated field")
        yield number, wire, value


def fields(data: bytes) -> Fields:
    """Every field of one message: number -> raw values (ints, 8/4-byte chunks, byte strings)."""
    found: Fields = {}
    for number, _, value in _items(data):
        found.setdefault(number, []).append(value)
    return found


def double(msg: Fields, number: int, default: float = 0.0) -> float:
    values = msg.get(number)
    if not values or not isinstance(values[-1], bytes) or len(values[-1]) != 8:
        return default
    return float(struct.unpack("<d", values[-1])[0])


def text(msg: Fields, number: int) -> str:
    values = msg.get(number)
    if not values or not isinstance(values[-1], bytes):
        return ""
    return values[-1].decode("utf-8", "replace")


def message(msg: Fields, number: int) -> Fields:
    values = msg.get(number)
    return fields(values[-1]) if values and isinstance(values[-1], bytes) else {}


def messages(msg: Fields, number: int) -> list[Fields]:
    return [fields(v) for v in msg.get(number, []) if isinstance(v, bytes)]


def any_value(msg: Fields) -> Fields:
    """The message inside a ``google.protobuf.Any`` (field 2 holds its bytes)."""
    return message(msg, 2)
