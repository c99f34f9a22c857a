"""Read Paddle parameter files as regions of the file, without copying payloads.

A combined ``.pdiparams`` holds one record per persistable tensor, in sorted-name order
(the order ``Program.params`` lists them); a folder of separate files holds one record per
file, named after the parameter. A record is, little-endian::

    u32 version (0) | u64 lod_level | lod_level x (u64 nbytes, nbytes of offsets)
    u32 version (0) | i32 desc_size | TensorDesc proto (desc_size bytes) | raw data

Records carry no names, so a params file from another model shows as a count, dtype or shape
mismatch: every such error names the parameter the program expected at that place.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from convert.ir import DataType, ModelFormatError, TensorProtocol, file_slice

from .legacy import VARTYPE_DTYPES
from .program import Var

__all__ = ["ParamRecord", "read_combined", "read_separate", "slices"]


@dataclass(frozen=True, slots=True)
class ParamRecord:
    """Where one tensor's data lies: file, byte offset, dtype name and shape."""

    name: str
    path: Path
    offset: int
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        """Size of the raw data in bytes."""
        count = int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1
        return count * _itemsize(self.dtype)


def _itemsize(dtype: str) -> int:
    return 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize


def _fmt_bytes(n: int) -> str:
    return f"{n:,}"


class _Cursor:
    def __init__(self, path: Path, f: BinaryIO, size: int) -> None:
        self.path = path
        self.f = f
        self.size = size
        self.pos = 0

    def read(self, n: int, what: str, pname: str, index: int) -> bytes:
        if n < 0 or self.pos + n > self.size:
            raise ModelFormatError(
                f"{self.path.name}: truncated at byte {_fmt_bytes(self.size)} while reading the {what} of "
                f"parameter '{pname}' (record {index}, starts before byte {_fmt_bytes(self.pos)}): expected "
                f"{_fmt_bytes(self.pos + n - self.size)} more bytes. Are the program and params file "
                "from the same model?")
        self.f.seek(self.pos)
        data = self.f.read(n)
        self.pos += n
        return data


def _read_record(cur: _Cursor, pname: str, index: int) -> ParamRecord:
    from google.protobuf.message import DecodeError

    from . import framework_pb2 as fw

    start = cur.pos
    (version,) = struct.unpack("<I", cur.read(4, "header", pname, index))
    if version != 0:
        raise ModelFormatError(f"{cur.path.name}: parameter '{pname}' (record {index}, byte "
                               f"{_fmt_bytes(start)}) has tensor version {version}, expected 0. "
                               "Is this a Paddle .pdiparams file?")
    (lod_level,) = struct.unpack("<Q", cur.read(8, "header", pname, index))
    if lod_level > 64:
        raise ModelFormatError(f"{cur.path.name}: parameter '{pname}' (record {index}, byte "
                               f"{_fmt_bytes(start)}) has implausible lod_level {lod_level}. "
                               "Is this a Paddle .pdiparams file from the same model?")
    for _ in range(lod_level):
        (nbytes,) = struct.unpack("<Q", cur.read(8, "LoD", pname, index))
        cur.read(nbytes, "LoD", pname, index)
    version, desc_size = struct.unpack("<Ii", cur.read(8, "header", pname, index))
    if version != 0 or desc_size <= 0 or desc_size > (1 << 20):
        raise ModelFormatError(f"{cur.path.name}: parameter '{pname}' (record {index}, byte "
                               f"{_fmt_bytes(start)}) has a corrupt header (version {version}, desc size "
                               f"{desc_size}). Are the program and params file from the same model?")
    desc = fw.VarType.TensorDesc()
    try:
        desc.ParseFromString(cur.read(desc_size, "TensorDesc", pname, index))
    except DecodeError as exc:
        raise ModelFormatError(f"{cur.path.name}: parameter '{pname}' (record {index}, byte "
                               f"{_fmt_bytes(start)}): TensorDesc does not decode") from exc
    dtype = VARTYPE_DTYPES.get(desc.data_type)
    if dtype is None:
        raise ModelFormatError(f"{cur.path.name}: parameter '{pname}' (record {index}) has unsupported "
                               f"data type {desc.data_type}")
    shape = tuple(int(d) for d in desc.dims)
    if any(d < 0 for d in shape):
        raise ModelFormatError(f"{cur.path.name}: parameter '{pname}' (record {index}) has negative "
                               f"dims {list(shape)}")
    record = ParamRecord(pname, cur.path, cur.pos, dtype, shape)
    if cur.pos + record.nbytes > cur.size:
        cur.read(record.nbytes, "data", pname, index)  # raises with the truncation message
    cur.pos += record.nbytes
    return record


def _check(record: ParamRecord, var: Var | None, index: int) -> None:
    if var is None:
        return
    want_shape = var.shape
    if want_shape is not None and all(d >= 0 for d in want_shape) and tuple(want_shape) != record.shape:
        raise ModelFormatError(
            f"{record.path.name}: parameter '{record.name}' (record {index}, "
            f"byte {_fmt_bytes(record.offset)}) "
            f"has shape {list(record.shape)} but the program expects {list(want_shape)}. "
            "Are the program and params file from the same model?")
    if var.dtype is not None and np.dtype(var.dtype).name != record.dtype:
        raise ModelFormatError(
            f"{record.path.name}: parameter '{record.name}' (record {index}) is {record.dtype} but the "
            f"program expects {np.dtype(var.dtype).name}. "
            "Are the program and params file from the same model?")


def read_combined(path: Path, names: Sequence[str], vars_: Mapping[str, Var]) -> dict[str, ParamRecord]:
    """Walk the combined params file ``path``, matching records to ``names`` in order.

    Raises:
        ModelFormatError: truncated file, corrupt header, shape/dtype mismatch, or bytes left over.
    """
    size = os.path.getsize(path)
    records: dict[str, ParamRecord] = {}
    with path.open("rb") as f:
        cur = _Cursor(path, f, size)
        for index, pname in enumerate(names):
            if cur.pos == size:
                rest = ", ".join(f"'{n}'" for n in names[index:index + 3])
                raise ModelFormatError(
                    f"{path.name}: ends after {index} of {len(names)} parameters; missing {rest}"
                    f"{' ...' if len(names) - index > 3 else ''}. Are the program and params file from the "
                    "same model?")
            record = _read_record(cur, pname, index)
            _check(record, vars_.get(pname), index)
            records[pname] = record
        if cur.pos != size:
            last = f" after the last parameter '{names[-1]}'" if names else ""
            raise ModelFormatError(
                f"{path.name}: {_fmt_bytes(size - cur.pos)} bytes left over at byte "
                f"{_fmt_bytes(cur.pos)}{last}: "
                f"the file holds more tensors than the program's {len(names)} parameters. Are the program "
                "and params file from the same model?")
    return records


def read_separate(folder: Path, names: Sequence[str], vars_: Mapping[str, Var]) -> dict[str, ParamRecord]:
    """Read one file per parameter (``folder/<name>``), as older ``save_inference_model`` wrote them.

    Raises:
        ModelFormatError: a file is missing, truncated, or does not match the program.
    """
    records: dict[str, ParamRecord] = {}
    base = folder.resolve()
    for index, pname in enumerate(names):
        path = folder / pname
        # A parameter name is a file name inside the model's folder: '..', an absolute path or a
        # symbolic link leading out would read (and copy into the output) a file from elsewhere.
        if os.path.isabs(pname) or base not in path.resolve().parents:
            raise ModelFormatError(
                f"{folder}: parameter '{pname}' names a file outside the model's folder. Refused for safety: "
                "per-parameter files must be plain names beside the program"
            )
        if not path.is_file():
            raise ModelFormatError(f"{folder}: no params file for parameter '{pname}' (expected a combined "
                                   f".pdiparams or a file named '{pname}')")
        size = os.path.getsize(path)
        with path.open("rb") as f:
            cur = _Cursor(path, f, size)
            record = _read_record(cur, pname, index)
            if cur.pos != size:
                raise ModelFormatError(f"{path.name}: {_fmt_bytes(size - cur.pos)} bytes left over after "
                                       f"parameter '{pname}'")
        _check(record, vars_.get(pname), index)
        records[pname] = record
    return records


def slices(record: ParamRecord) -> TensorProtocol:
    """Return a tensor backed by the record's region of its file (no I/O now)."""
    dtype = DataType.BFLOAT16 if record.dtype == "bfloat16" else record.dtype
    return file_slice(record.path, record.offset, dtype, record.shape, name=record.name)
