"""Read a ``.safetensors`` file's header: every tensor's dtype, shape and byte range, no values.

The format (the safetensors specification): 8 bytes, a little-endian unsigned 64-bit ``N``; then
``N`` bytes of UTF-8 JSON, ``{"name": {"dtype": "BF16", "shape": [4096, 11008], "data_offsets":
[begin, end]}, ..., "__metadata__": {str: str}}``; then the data, each tensor's bytes at
``[8 + N + begin, 8 + N + end)``, row-major and little-endian. Offsets are 64-bit. Nothing here
reads a tensor's values: the frontend hands out slices of the file (``weights.py``).
"""

from __future__ import annotations

import itertools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from convert.ir import DataType, ModelFormatError, shown

__all__ = ["DTYPES", "HEADER_MAX", "TensorEntry", "read_header"]

#: The dtypes the safetensors specification defines, as IR data types (None: defined, but not a
#: type a weight of a language model is converted from here).
DTYPES: dict[str, DataType | None] = {
    "F64": DataType.DOUBLE, "F32": DataType.FLOAT, "F16": DataType.FLOAT16, "BF16": DataType.BFLOAT16,
    "I64": DataType.INT64, "I32": DataType.INT32, "I16": DataType.INT16, "I8": DataType.INT8,
    "U64": DataType.UINT64, "U32": DataType.UINT32, "U16": DataType.UINT16, "U8": DataType.UINT8,
    "BOOL": DataType.BOOL, "F8_E4M3": DataType.FLOAT8E4M3FN, "F8_E5M2": DataType.FLOAT8E5M2,
    "F8_E8M0": None, "F6_E2M3": None, "F6_E3M2": None, "F4": None, "C64": None,
}
_ITEMSIZE_BITS = {"F8_E8M0": 8, "F6_E2M3": 6, "F6_E3M2": 6, "F4": 4, "C64": 64}
#: The reference implementation refuses headers over 100 MB; so do we (a forged length).
HEADER_MAX = 100_000_000


@dataclass(frozen=True, slots=True)
class TensorEntry:
    """One tensor of a safetensors file: where its bytes are, and what they hold."""

    name: str
    path: Path
    dtype_name: str  # as the file spells it: "BF16"
    shape: tuple[int, ...]
    offset: int  # absolute, in the file
    nbytes: int

    @property
    def dtype(self) -> DataType | None:
        """The IR data type (None for a dtype the specification defines that is not converted here)."""
        return DTYPES[self.dtype_name]

    @property
    def numel(self) -> int:
        """Return the number of elements."""
        return math.prod(self.shape)


def _bits(dtype_name: str) -> int:
    dt = DTYPES[dtype_name]
    return int(dt.bitwidth) if dt is not None else _ITEMSIZE_BITS[dtype_name]


def read_header(path: Path) -> tuple[dict[str, TensorEntry], dict[str, str]]:
    """Return ``({name: TensorEntry}, metadata)`` of safetensors file ``path``, checked against its size.

    Raises:
        ModelFormatError: the file is shorter than its header says, the header is not the JSON the
            specification describes, a dtype is one it does not define, a tensor's byte range
            disagrees with its shape or lies outside the file, or two tensors overlap.
    """
    where = path.name
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise ModelFormatError(f"{where}: {size} bytes, too short for a safetensors file (8-byte header "
                                       "length first)")
            n = int.from_bytes(head, "little")
            if n > size - 8:
                raise ModelFormatError(f"{where}: the header is {n:,} bytes long, longer than the file "
                                       f"({size:,} bytes): the file is cut short or is not safetensors")
            if n > HEADER_MAX:
                raise ModelFormatError(f"{where}: the header is {n:,} bytes long, over the {HEADER_MAX:,} the "
                                       "safetensors specification allows")
            raw = fh.read(n)
    except OSError as exc:
        raise ModelFormatError(f"{where}: cannot read it ({exc.strerror or exc})") from exc
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFormatError(f"{where}: the header is not JSON ({exc}); not a safetensors file?") from exc
    if not isinstance(header, dict):
        raise ModelFormatError(f"{where}: the header is a JSON {type(header).__name__}, not an object")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict):
        raise ModelFormatError(f"{where}: '__metadata__' is not an object")
    data_start = 8 + n
    entries: dict[str, TensorEntry] = {}
    ranges: list[tuple[int, int, str]] = []
    for name, info in header.items():
        if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
            raise ModelFormatError(f"{where}: tensor {shown(name)} lacks dtype, shape or data_offsets")
        dtype_name, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if not isinstance(dtype_name, str) or dtype_name not in DTYPES:
            known = ", ".join(DTYPES)
            raise ModelFormatError(f"{where}: tensor {shown(name)} has dtype {shown(str(dtype_name))}, which "
                                   f"safetensors does not define (it defines {known})")
        if (not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                    for d in shape)):
            raise ModelFormatError(f"{where}: tensor {shown(name)} has shape {shown(str(shape))}, not a list of "
                                   "sizes")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
                or offsets[0] > offsets[1]):
            raise ModelFormatError(f"{where}: tensor {shown(name)} has data_offsets {shown(str(offsets))}, not "
                                   "[begin, end]")
        begin, end = offsets
        numel = math.prod(shape)
        want = (numel * _bits(dtype_name) + 7) // 8
        if end - begin != want:
            dims = "x".join(map(str, shape)) or "scalar"
            raise ModelFormatError(f"{where}: tensor {shown(name)} ({dtype_name} {dims}) needs {want:,} bytes, its "
                                   f"data_offsets give {end - begin:,}")
        if data_start + end > size:
            raise ModelFormatError(f"{where}: tensor {shown(name)} ends at byte {data_start + end:,}, past the end of "
                                   f"the file ({size:,} bytes): the file is cut short")
        entries[name] = TensorEntry(name, path, dtype_name, tuple(shape), data_start + begin, end - begin)
        ranges.append((begin, end, name))
    ranges.sort()
    for (_, e0, n0), (b1, _, n1) in itertools.pairwise(ranges):
        if b1 < e0:
            raise ModelFormatError(f"{where}: tensors {shown(n0)} and {shown(n1)} overlap in the file")
    return entries, {str(k): str(v) for k, v in meta.items()}


def numpy_dtype(entry: TensorEntry) -> np.dtype:
    """Return the little-endian numpy dtype of ``entry``'s elements (bfloat16 as ml_dtypes'; see onnx-ir)."""
    dt = entry.dtype
    if dt is None:
        raise ModelFormatError(f"{entry.path.name}: tensor {shown(entry.name)} is {entry.dtype_name}, which this "
                               "route does not convert")
    return np.dtype(dt.numpy()).newbyteorder("<")
