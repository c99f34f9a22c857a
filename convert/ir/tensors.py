"""Tensor backings used by frontends: file slices, wrapped arrays, lazy tensors.

All three expose ``dtype``, ``shape`` and ``nbytes`` without I/O. A file slice maps its file on
first access only, so loading a model reads no weights; exporters stream them one at a time.

The slices of one file share one read-only map of it (``_FileMap``): onnx-ir's ``ExternalTensor``
maps the whole file for each tensor it reads, so a model's address space grew as tensors x file
size (yolov3's 366 slices of a 236 MiB file: 85 GiB, refused under any ``ulimit -v``).
"""

from __future__ import annotations

import mmap
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx_ir as _ir

__all__ = [
    "DataType",
    "ExternalTensor",
    "LazyTensor",
    "MappedSlice",
    "Tensor",
    "TensorProtocol",
    "file_slice",
    "from_array",
    "is_file_slice",
    "lazy",
    "source_files",
    "to_numpy",
    "transposed",
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


class _FileMap:
    """One read-only map of a whole file, shared by every slice of it that has been read."""

    __slots__ = ("__weakref__", "mm")

    def __init__(self, mm: mmap.mmap) -> None:
        self.mm = mm


# Maps in use, by the file's identity (device, inode, size, modification time): a slice holds its
# map, so a map lives while any slice of it has been read and is not released.
_MAPS: weakref.WeakValueDictionary[tuple[int, int, int, int], _FileMap] = weakref.WeakValueDictionary()
_MAPS_LOCK = threading.Lock()


def _shared_map(path: str) -> _FileMap:
    with open(path, "rb") as fh:
        st = os.fstat(fh.fileno())
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        with _MAPS_LOCK:
            found = _MAPS.get(key)
            if found is None:
                found = _MAPS[key] = _FileMap(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ))
    return found


class MappedSlice(_ir.ExternalTensor):
    """A file slice read through the one map of its file that all its slices share (see above)."""

    __slots__ = ("_map",)

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._map: _FileMap | None = None

    def _load(self) -> None:
        if self.size == 0 or self.dtype.bitwidth % 8:  # nothing to map, or sub-byte types unpacked
            super()._load()  # type: ignore[misc]
            return
        self._check_validity()  # type: ignore[attr-defined]
        self._check_path_containment()  # type: ignore[attr-defined]
        fmap = _shared_map(self.path)
        dt = np.dtype(self.dtype.numpy()).newbyteorder("<")
        array = np.frombuffer(fmap.mm, dtype=dt, offset=self.offset or 0, count=self.size)
        self._map, self.raw = fmap, fmap.mm
        self._array = array.reshape(self.shape.numpy())

    def release(self) -> None:
        """Drop this slice's hold on the shared map (closed when no slice or array holds it)."""
        self._array = None
        self.raw = None
        self._map = None


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
    return MappedSlice(
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


# A transposed weight is computed and written one stripe of output rows at a time (see
# ``transposed``): a stripe is at most _STRIPE_BYTES (and _STRIPE_COLS source columns), copied from
# the source in tiles of _TILE_ROWS source rows.
_STRIPE_BYTES = 16 * 1024 * 1024
_STRIPE_COLS = 512
_TILE_ROWS = 16


def _stripe_cols(rows: int, itemsize: int) -> int:
    return max(_TILE_ROWS, min(_STRIPE_COLS, _STRIPE_BYTES // max(1, rows * itemsize)))


def _transpose_into(src: np.ndarray, out: np.ndarray, j0: int, j1: int) -> None:
    """Write ``src[:, j0:j1].T`` into ``out`` (shape ``(j1 - j0, rows)``), tile by tile.

    Hot path, hand-written on purpose: numpy copies ``src.T`` element by element in the
    destination's order, so each element read misses the cache (0.13 GB/s on a 5632 x 2048 fp32
    weight). Copying tiles of 16 source rows keeps the rows being read and the stripe being
    written in cache: 1-5 GB/s, and memory stays at one stripe.
    """
    rows = src.shape[0]
    for i in range(0, rows, _TILE_ROWS):
        out[:, i:i + _TILE_ROWS] = src[i:i + _TILE_ROWS, j0:j1].T


class _Transposed(_ir.LazyTensor):
    """The transpose of a 2-D tensor: computed on access, written to a file stripe by stripe."""

    def __init__(self, source: TensorProtocol, name: str) -> None:
        rows, cols = (int(d) for d in source.shape)
        self._source = source

        def compute() -> _ir.TensorProtocol:
            src = source.numpy()
            out = np.empty((cols, rows), dtype=src.dtype)
            step = _stripe_cols(rows, src.dtype.itemsize)
            for j0 in range(0, cols, step):
                _transpose_into(src, out[j0:j0 + step], j0, min(j0 + step, cols))
            return _ir.Tensor(out, name=name)

        super().__init__(compute, source.dtype, _ir.Shape((cols, rows)), name=name)

    def tofile(self, file: object) -> None:
        """Write the transposed bytes to ``file`` one stripe at a time (little-endian, as ONNX stores them)."""
        src = self._source.numpy()
        rows, cols = src.shape
        step = _stripe_cols(rows, src.dtype.itemsize)
        buffer = np.empty((step, rows), dtype=src.dtype)
        for j0 in range(0, cols, step):
            j1 = min(j0 + step, cols)
            stripe = buffer[: j1 - j0]
            _transpose_into(src, stripe, j0, j1)
            if stripe.dtype.byteorder == ">":  # ONNX raw data is little-endian
                stripe = stripe.byteswap().view(stripe.dtype.newbyteorder("<"))
            file.write(memoryview(stripe.reshape(-1).view(np.uint8)))  # type: ignore[attr-defined]


def transposed(tensor: TensorProtocol, *, name: str) -> LazyTensor:
    """Return the transpose of 2-D ``tensor`` as a lazy tensor that never holds more than a stripe.

    Values are computed on access (``numpy()``); exporters call ``tofile``, which streams stripes of
    at most 16 MiB, so transposing every weight of a large model adds no whole copy of any.

    Raises:
        ValueError: ``tensor`` is not 2-D.
    """
    if len(tensor.shape) != 2:
        raise ValueError(f"transposed: '{name}' has rank {len(tensor.shape)}, expected 2")
    return _Transposed(tensor, name)


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
