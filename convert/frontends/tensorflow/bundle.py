"""Read a SavedModel's variables (a TensorFlow "tensor bundle") as views of the mapped data files.

A bundle is ``<prefix>.index`` plus ``<prefix>.data-NNNNN-of-MMMMM`` shards. The index is a
LevelDB-format table (an "SSTable") mapping each checkpoint key to a serialised
``BundleEntryProto`` (dtype, shape, shard, offset, size); the key ``""`` holds the
``BundleHeaderProto`` (shard count, endianness). Tensors are stored as raw little-endian bytes, so
each one is a NumPy view of its shard mapped read-only: reading the index reads no weights.

Format facts, from TensorFlow's ``tensor_bundle.proto`` and LevelDB's ``table_format.md``:

- The table ends in a 48-byte footer: two block handles (metaindex, index: varint64 offset and
  size each), zero padding to 40 bytes, the magic ``0xdb4775248b80fb57`` (little-endian).
- A block is its entries, then ``uint32`` restart offsets, then their ``uint32`` count; five
  trailer bytes follow it in the file (compression type, CRC). Each entry is varint32 ``shared``
  (bytes of the previous key kept), varint32 ``non_shared``, varint32 value length, the new key
  bytes, the value.
- The index block maps the last key of each data block to that block's handle.
- A ``DT_STRING`` scalar is stored as a varint64 length, a 4-byte checksum of the lengths, then
  the bytes (the checkpoint's object graph is one).

Why not TensorFlow's ``CheckpointReader``: it returns copies (every weight read into memory), and
a conversion must hold no more than the weight being written.

TensorFlow's own proto classes decode the two entry messages (TensorFlow is needed to read the
SavedModel's graph anyway).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from convert._wire import read_varint as _varint
from convert.ir import ModelFormatError

__all__ = ["Bundle", "BundleEntry", "read_table"]

_MAGIC = 0xDB4775248B80FB57
_FOOTER = 48
_TRAILER = 5
_NO_COMPRESSION = 0


def _block(data: bytes, offset: int, size: int) -> list[tuple[bytes, bytes]]:
    """Return the (key, value) entries of the block at ``offset``."""
    if offset + size + _TRAILER > len(data) or size < 4:
        raise ValueError(f"block at {offset} (+{size}) runs past the end of the file")
    if data[offset + size] != _NO_COMPRESSION:
        raise ValueError(f"block at {offset} is compressed (type {data[offset + size]}); only uncompressed "
                         "tables are read")
    block = memoryview(data)[offset:offset + size]
    (restarts,) = struct.unpack_from("<I", block, size - 4)
    end = size - 4 - 4 * restarts
    if end < 0:
        raise ValueError(f"block at {offset} has {restarts} restart points for {size} bytes")
    entries: list[tuple[bytes, bytes]] = []
    key = b""
    pos = 0
    while pos < end:
        shared, pos = _varint(block, pos)
        fresh, pos = _varint(block, pos)
        length, pos = _varint(block, pos)
        if shared > len(key) or pos + fresh + length > end:
            raise ValueError(f"block at {offset}: an entry runs past the block")
        key = key[:shared] + bytes(block[pos:pos + fresh])
        pos += fresh
        entries.append((key, bytes(block[pos:pos + length])))
        pos += length
    return entries


def read_table(data: bytes) -> list[tuple[bytes, bytes]]:
    """Return every (key, value) of an uncompressed LevelDB-format table, in key order.

    Raises:
        ValueError: not such a table, or a damaged one (the message says where).
    """
    if len(data) < _FOOTER:
        raise ValueError(f"{len(data)} bytes is shorter than a table footer")
    (magic,) = struct.unpack_from("<Q", data, len(data) - 8)
    if magic != _MAGIC:
        raise ValueError("no table magic number at the end")
    pos = len(data) - _FOOTER
    _, pos = _varint(data, pos)  # the metaindex block (unused: bundles write no filters)
    _, pos = _varint(data, pos)
    index_offset, pos = _varint(data, pos)
    index_size, pos = _varint(data, pos)
    entries: list[tuple[bytes, bytes]] = []
    for _, handle in _block(data, index_offset, index_size):
        offset, at = _varint(handle, 0)
        size, _ = _varint(handle, at)
        entries.extend(_block(data, offset, size))
    return entries


@dataclass(frozen=True, slots=True)
class BundleEntry:
    """Where one tensor of a bundle lies: its shard file, byte offset and size, dtype and shape."""

    key: str
    dtype: np.dtype
    shape: tuple[int, ...]
    shard: int
    offset: int
    size: int
    sliced: bool


class Bundle:
    """The tensors of one bundle (``<prefix>.index``), each readable as a view of its mapped shard."""

    def __init__(self, prefix: Path) -> None:
        from .graph import tf_module

        tf_module()  # imported quietly (any TensorFlow import prints its start-up lines)
        from tensorflow.core.protobuf import tensor_bundle_pb2

        self.prefix = prefix
        index = prefix.with_name(prefix.name + ".index")
        try:
            raw = index.read_bytes()
        except OSError as exc:
            raise ModelFormatError(f"{index}: cannot read the variables index ({exc.strerror})") from exc
        try:
            table = read_table(raw)
        except ValueError as exc:
            raise ModelFormatError(f"{index}: not a readable variables index ({exc})") from exc
        header = tensor_bundle_pb2.BundleHeaderProto()
        self.entries: dict[str, BundleEntry] = {}
        for key, value in table:
            name = key.decode("utf-8", "replace")
            if not key:
                _parse(header, value, f"{index}: the header")
                continue
            entry = tensor_bundle_pb2.BundleEntryProto()
            _parse(entry, value, f"{index}: the entry of '{name}'")
            self.entries[name] = BundleEntry(
                key=name, dtype=_numpy_dtype(entry.dtype, f"{index}: variable '{name}'"),
                shape=tuple(int(d.size) for d in entry.shape.dim), shard=int(entry.shard_id),
                offset=int(entry.offset), size=int(entry.size), sliced=bool(entry.slices))
        if header.endianness != tensor_bundle_pb2.BundleHeaderProto.LITTLE:
            raise ModelFormatError(f"{index}: big-endian variables are not supported")
        self.shards = max(int(header.num_shards), 1)
        self._maps: dict[int, mmap.mmap] = {}

    def shard_path(self, shard: int) -> Path:
        """Return the data file of ``shard``."""
        return self.prefix.with_name(f"{self.prefix.name}.data-{shard:05d}-of-{self.shards:05d}")

    def _map(self, shard: int) -> mmap.mmap:
        mapped = self._maps.get(shard)
        if mapped is None:
            path = self.shard_path(shard)
            try:
                with path.open("rb") as fh:
                    mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError) as exc:  # ValueError: an empty file cannot be mapped
                raise ModelFormatError(f"{path}: cannot map the variables data ({exc})") from exc
            self._maps[shard] = mapped
        return mapped

    def array(self, key: str) -> np.ndarray:
        """Return tensor ``key`` as a read-only view of its mapped shard (no bytes are read here).

        Raises:
            ModelFormatError: no such key, a partitioned variable, or bytes past the shard's end.
        """
        entry = self.entries.get(key)
        if entry is None:
            raise ModelFormatError(f"{self.prefix.name}.index: no variable '{key}'")
        if entry.sliced:
            raise ModelFormatError(f"{self.prefix.name}.index: variable '{key}' is partitioned (not supported)")
        count = int(np.prod(entry.shape, dtype=np.int64))
        if entry.dtype == np.dtype(object) or count * entry.dtype.itemsize != entry.size:
            raise ModelFormatError(f"{self.prefix.name}.index: variable '{key}' has {entry.size} bytes for "
                                   f"{entry.dtype} {list(entry.shape)}")
        return np.frombuffer(self._bytes(entry), entry.dtype, count).reshape(entry.shape)

    def _bytes(self, entry: BundleEntry) -> memoryview:
        """Return the mapped bytes of ``entry``, checked to lie inside its shard."""
        mapped = self._map(entry.shard)
        if entry.offset + entry.size > len(mapped):
            path = self.shard_path(entry.shard)
            raise ModelFormatError(f"{path.parent.name}/{path.name}: '{entry.key}' lies at bytes {entry.offset}.."
                                   f"{entry.offset + entry.size}, past the file's end ({len(mapped)} bytes)")
        return memoryview(mapped)[entry.offset:entry.offset + entry.size]

    def string(self, key: str) -> bytes:
        """Return the ``DT_STRING`` scalar ``key`` (the checkpoint's object graph)."""
        entry = self.entries.get(key)
        if entry is None:
            raise ModelFormatError(f"{self.prefix.name}.index: no entry '{key}'")
        raw = self._bytes(entry)
        try:
            length, pos = _varint(raw, 0)
        except ValueError as exc:
            raise ModelFormatError(f"{self.prefix.name}: entry '{key}' is not a string ({exc})") from exc
        pos += 4  # the checksum of the lengths
        if pos + length > len(raw):
            raise ModelFormatError(f"{self.prefix.name}: entry '{key}' is truncated")
        return bytes(raw[pos:pos + length])


def _parse(message: object, data: bytes, what: str) -> None:
    """Decode ``data`` into the protobuf ``message``; a damaged one is the file's fault (``what`` names it)."""
    from google.protobuf.message import DecodeError

    try:
        message.ParseFromString(data)  # type: ignore[attr-defined]
    except DecodeError as exc:
        raise ModelFormatError(f"{what} is damaged ({exc})") from exc


def _numpy_dtype(enum: int, what: str) -> np.dtype:
    """TensorFlow's ``DataType`` enum -> NumPy dtype (object for the types NumPy lacks).

    Raises:
        ModelFormatError: ``enum`` is no data type (DT_INVALID or outside the enum; ``what`` names the entry).
    """
    from tensorflow.core.framework import types_pb2
    from tensorflow.python.framework import dtypes

    if enum == types_pb2.DT_INVALID or enum not in types_pb2.DataType.values():
        raise ModelFormatError(f"{what} has data type {enum}, which is no TensorFlow data type")
    tf_dtype = dtypes.as_dtype(enum)
    if not tf_dtype.is_numpy_compatible or tf_dtype == dtypes.string:
        return np.dtype(object)
    return np.dtype(tf_dtype.as_numpy_dtype)
