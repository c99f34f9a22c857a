"""A minimal read-only FlatBuffers reader over a memory-mapped file (what the TFLite schema needs).

Hand-written rather than the ``flatbuffers`` package plus generated schema classes: the generated
readers copy every vector they return, and we want a weight buffer as an *offset into the file*
(so NumPy can view it through the mmap without reading it). The format, from the FlatBuffers
specification (little-endian throughout):

- the file starts with a ``uoffset`` (u32) to the root table; bytes 4..8 hold the file identifier;
- a table starts with an ``soffset`` (i32): its vtable is at ``table - soffset``; the vtable holds
  ``u16`` vtable size, ``u16`` table size, then one ``u16`` per field (offset from the table start,
  0 = absent, the field takes its default);
- a reference field (table, vector, string) holds a ``uoffset`` relative to the field's own position;
- a vector is a ``u32`` element count followed by the elements (tables: one ``uoffset`` each);
- a string is a vector of bytes followed by a NUL.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from convert.ir import ModelFormatError

__all__ = ["Table", "identifier", "root"]

_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U16 = struct.Struct("<H")


class _Bounds:
    """The byte source with bound checks that turn a truncated or corrupt file into one clear error."""

    def __init__(self, buf: memoryview | bytes, source: str) -> None:
        self.buf = buf
        self.size = len(buf)
        self.source = source

    def check(self, pos: int, nbytes: int, what: str) -> None:
        if pos < 0 or pos + nbytes > self.size:
            raise ModelFormatError(f"{self.source}: {what} at byte {pos} runs past the end of the file "
                                   f"({self.size} bytes): truncated or not a TFLite flatbuffer")

    def u32(self, pos: int, what: str) -> int:
        self.check(pos, 4, what)
        return _U32.unpack_from(self.buf, pos)[0]


@dataclass(frozen=True, slots=True)
class Table:
    """One FlatBuffers table: read its fields by index (the order of the schema's declarations)."""

    src: _Bounds
    pos: int
    kind: str  # the schema's table name, for messages

    def _field(self, index: int) -> int:
        """Return the absolute position of field ``index``, or 0 when the field is absent."""
        src = self.src
        src.check(self.pos, 4, f"a {self.kind}")
        vtable = self.pos - _I32.unpack_from(src.buf, self.pos)[0]
        src.check(vtable, 4, f"the vtable of a {self.kind}")
        vsize = _U16.unpack_from(src.buf, vtable)[0]
        slot = 4 + 2 * index
        if slot + 2 > vsize:
            return 0
        src.check(vtable + slot, 2, f"the vtable of a {self.kind}")
        off = _U16.unpack_from(src.buf, vtable + slot)[0]
        return self.pos + off if off else 0

    def has(self, index: int) -> bool:
        """Return True when field ``index`` is present."""
        return self._field(index) != 0

    def scalar(self, index: int, fmt: str, default: float | int | bool = 0) -> float | int | bool:
        """Return a scalar field (``struct`` format such as ``"<i"``) or its default."""
        pos = self._field(index)
        if not pos:
            return default
        size = struct.calcsize(fmt)
        self.src.check(pos, size, f"a field of a {self.kind}")
        return struct.unpack_from(fmt, self.src.buf, pos)[0]

    def _target(self, index: int) -> int:
        pos = self._field(index)
        if not pos:
            return 0
        target = pos + self.src.u32(pos, f"a reference in a {self.kind}")
        self.src.check(target, 4, f"data of a {self.kind}")
        return target

    def table(self, index: int, kind: str) -> Table | None:
        """Return the sub-table of field ``index`` (None when absent)."""
        target = self._target(index)
        if not target:
            return None
        return Table(self.src, target, kind)

    def tables(self, index: int, kind: str) -> list[Table]:
        """Return a vector of tables (empty when absent)."""
        target = self._target(index)
        if not target:
            return []
        n = self.src.u32(target, f"a vector in a {self.kind}")
        self.src.check(target + 4, 4 * n, f"a vector of {n} {kind} tables")
        out = []
        for i in range(n):
            elem = target + 4 + 4 * i
            pos = elem + _U32.unpack_from(self.src.buf, elem)[0]
            self.src.check(pos, 4, f"a {kind} (element {i} of {n})")
            out.append(Table(self.src, pos, kind))
        return out

    def vector_span(self, index: int, itemsize: int) -> tuple[int, int]:
        """Return ``(byte position, element count)`` of a scalar vector ((0, 0) when absent)."""
        target = self._target(index)
        if not target:
            return 0, 0
        n = self.src.u32(target, f"a vector in a {self.kind}")
        self.src.check(target + 4, n * itemsize, f"a vector of {n} values in a {self.kind}")
        return target + 4, n

    def vector(self, index: int, dtype: str) -> np.ndarray:
        """Return a scalar vector as a NumPy array (a copy: these are small: shapes, scales)."""
        dt = np.dtype(dtype)
        pos, n = self.vector_span(index, dt.itemsize)
        if not n:
            return np.zeros(0, dt)
        return np.frombuffer(self.src.buf, dt, count=n, offset=pos).copy()

    def string(self, index: int, default: str = "") -> str:
        """Return a string field (UTF-8; undecodable bytes replaced)."""
        pos, n = self.vector_span(index, 1)
        if not pos:
            return default
        return bytes(self.src.buf[pos:pos + n]).decode("utf-8", "replace")


def identifier(buf: memoryview | bytes) -> bytes:
    """Return the 4-byte file identifier (``b"TFL3"`` for TFLite) or b"" when the file is too short."""
    return bytes(buf[4:8]) if len(buf) >= 8 else b""


def root(buf: memoryview | bytes, source: str, kind: str) -> Table:
    """Return the root table of a flatbuffer."""
    src = _Bounds(buf, source)
    pos = src.u32(0, "the root offset")
    src.check(pos, 4, f"the root {kind}")
    vtable = pos - _I32.unpack_from(buf, pos)[0]
    src.check(vtable, 4, f"the vtable of the root {kind}")
    return Table(src, pos, kind)
