"""Tensor backings used by frontends: file slices, wrapped arrays, lazy tensors.

All three expose ``dtype``, ``shape`` and ``nbytes`` without I/O. A file slice maps its file on
first access only, so loading a model reads no weights; exporters stream them one at a time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx_ir as _ir

__all__ = [
    "DataType",
    "ExternalTensor",
    "LazyTensor",
    "Tensor",
    "TensorProtocol",
    "file_slice",
    "from_array",
    "is_file_slice",
    "lazy",
    "source_files",
    "to_numpy",
]

DataType = _ir.DataType
Tensor = _ir.Tensor
ExternalTensor = _ir.ExternalTensor
LazyTensor = _ir.LazyTensor
TensorProtocol = _ir.TensorProtocol


def _dtype(dtype: DataType | np.dtype | type | str) -> DataType:
    if isinstance(dtype, DataType):
        return dtype
    return DataType.from_numpy(np.dtype(dtype))


def file_slice(
    path: str | os.PathLike[str],
    offset: int,
    dtype: DataType | np.dtype | type | str,
    shape: Sequence[int],
    *,
    name: str,
) -> ExternalTensor:
    """Return a tensor backed by ``length`` bytes of ``path`` at ``offset`` (little-endian).

    The location is stored as an absolute path, so the tensor stays valid whatever the
    current folder; exporters rewrite it as a relative location when they write data files.
    """
    dt = _dtype(dtype)
    shape_t = tuple(int(d) for d in shape)
    count = int(np.prod(shape_t, dtype=np.int64)) if shape_t else 1
    length = (count * int(dt.bitwidth) + 7) // 8  # itemsize is a float in onnx_ir (0.5 for 4-bit types)
    return _ir.ExternalTensor(
        os.path.abspath(os.fspath(path)), int(offset), length, dt, shape=_ir.Shape(shape_t), name=name
    )


def from_array(array: np.ndarray, *, name: str) -> Tensor:
    """Wrap ``array`` without copying (np.memmap too)."""
    return _ir.Tensor(array, name=name)


def lazy(
    func: Callable[[], np.ndarray],
    dtype: DataType | np.dtype | type | str,
    shape: Sequence[int],
    *,
    name: str,
) -> LazyTensor:
    """Return a tensor computed by ``func`` each time its data is needed (not cached)."""
    dt = _dtype(dtype)

    def compute() -> _ir.TensorProtocol:
        return _ir.Tensor(np.ascontiguousarray(func(), dtype=dt.numpy()), name=name)

    return _ir.LazyTensor(compute, dt, _ir.Shape(tuple(int(d) for d in shape)), name=name)


def source_files(model: _ir.Model) -> set[Path]:
    """Return every file the model's file-slice tensors read (resolved paths)."""
    found: set[Path] = set()
    for graph in model.graphs():
        for value in graph.initializers.values():
            tensor = value.const_value
            if isinstance(tensor, _ir.ExternalTensor):
                found.add(Path(tensor.path).resolve())
    return found


def is_file_slice(tensor: object) -> bool:
    """Return True when ``tensor`` is backed by a region of a file."""
    return isinstance(tensor, _ir.ExternalTensor)


def to_numpy(tensor: TensorProtocol) -> np.ndarray:
    """Return the tensor's values (this does I/O for file slices and lazy tensors)."""
    return tensor.numpy()
