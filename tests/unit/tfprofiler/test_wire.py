"""The protobuf wire reader behind `distlaunch profile`'s analysis (launcher/tfprofiler/wire.py)."""

from __future__ import annotations

import struct

import pytest

from launcher.tfprofiler import wire


def varint(n: int) -> bytes:
    out = b""
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def field(number: int, wire_type: int, payload: bytes) -> bytes:
    return varint(number << 3 | wire_type) + payload


def length(number: int, data: bytes) -> bytes:
    return field(number, 2, varint(len(data)) + data)


def test_reads_doubles_strings_nested_and_any() -> None:
    inner = field(1, 1, struct.pack("<d", 30.5)) + length(2, b"input-bound")
    wrapped_any = length(1, b"type.googleapis.com/x") + length(2, inner)
    data = field(11, 1, struct.pack("<d", 96.8)) + length(7, wrapped_any) + field(3, 0, varint(300)) + \
        length(4, wrapped_any) + length(4, wrapped_any)
    msg = wire.fields(data)
    assert wire.double(msg, 11) == 96.8
    assert msg[3] == [300]
    nested = wire.any_value(wire.message(msg, 7))
    assert wire.double(nested, 1) == 30.5 and wire.text(nested, 2) == "input-bound"
    assert len(wire.messages(msg, 4)) == 2
    assert wire.double(msg, 99, default=-1.0) == -1.0 and wire.text(msg, 99) == ""


def test_truncated_data_is_an_error() -> None:
    with pytest.raises(ValueError):
        wire.fields(length(2, b"abcdef")[:-2])
