"""Protobuf's wire format, read by hand where parsing a message would load what we want to skip
(ONNX weights, a TensorFlow bundle's data) or where the protobuf classes are not imported yet."""

from __future__ import annotations

__all__ = ["read_varint"]


def read_varint(data: bytes | memoryview | object, pos: int) -> tuple[int, int]:
    """Decode the varint at ``pos`` of ``data`` (bytes, a memoryview or an mmap); return it and the
    position after it.

    Raises:
        ValueError: the data ends inside the varint, or it is longer than 10 bytes.
    """
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:  # type: ignore[arg-type]
            raise ValueError("truncated or overlong varint")
        byte = data[pos]  # type: ignore[index]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
