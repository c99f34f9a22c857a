"""Weights as slices of the safetensors files, cast chunk by chunk only when they are written.

``SourceWeight`` is an IR tensor whose values are a tensor of the model folder (a byte range of a
shard) or of an in-memory model, in another dtype when the graph wants one (a bf16 checkpoint's
weights in a float32 graph). Nothing is read until the exporter writes it; ``tofile`` then copies
in chunks of ``CHUNK_BYTES``, in the kernel (``copy_file_range``) when the dtypes agree, else
through one chunk of memory at a time. ``cast_to`` gives the same weight in fp16/bf16 for the
exporter's ``--precision``, so a bf16 checkpoint written as bf16 is copied, never converted twice.

``untranspose`` takes back the transpose the PyTorch lowering gives a ``linear`` weight (``MatMul``
by ``W^T``): a transposed copy of every projection costs a pass over the weights at a fraction of
disk speed (0.2-0.3 GB/s on two cores, measured). ``Gemm(transB=1)`` reads ``W`` as stored, so the
3-D ``x @ W^T`` becomes ``Reshape(x, [-1, in]) -> Gemm(transB=1) -> Reshape(.., [*x.shape[:-1], out])``.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from convert import ir

from .safetensors import TensorEntry, numpy_dtype

__all__ = ["CHUNK_BYTES", "SourceWeight", "array_weight", "file_weight", "untranspose"]

#: Bytes of source data read, cast and written at a time.
CHUNK_BYTES = 64 << 20
FP16_MAX = 65504.0

Reader = Callable[[int, int], np.ndarray]  # (first element, count) -> flat source elements


def _cast(src: np.ndarray, target: ir.DataType) -> np.ndarray:
    """Return ``src`` in ``target``: fp16 clamped to its finite range (the exporter's --precision rule),
    bf16 rounded to nearest even (ml_dtypes)."""
    want = np.dtype(target.numpy())
    if src.dtype == want:
        return src
    if target == ir.DataType.FLOAT16:
        wide = src.astype(np.float32)
        np.clip(wide, -FP16_MAX, FP16_MAX, out=wide)
        return wide.astype(np.float16)
    if target == ir.DataType.BFLOAT16 and src.dtype != np.float32:
        return src.astype(np.float32).astype(want)
    return src.astype(want)


class SourceWeight(ir.LazyTensor):
    """A weight of the source model in ``dtype``, read (and cast) when it is written or its values asked."""

    __slots__ = ("_count", "_file", "_read", "_src_dtype", "source_name")

    def __init__(self, read: Reader, src_dtype: np.dtype, dtype: ir.DataType, shape: tuple[int, ...], *,
                 name: str, source_name: str, file: tuple[Path, int] | None = None) -> None:
        self._read = read
        self._src_dtype = np.dtype(src_dtype)
        self._count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        self._file = file  # (path, byte offset) of the raw bytes, for a copy in the kernel
        self.source_name = source_name
        super().__init__(lambda: ir.Tensor(self.numpy(), name=name), dtype, ir.Shape(shape), name=name)

    @property
    def copies_raw(self) -> bool:
        """Whether the bytes written are the source's own (no cast)."""
        return self._src_dtype == np.dtype(self.dtype.numpy())

    def numpy(self) -> np.ndarray:
        """Return the values (reads the whole tensor)."""
        return _cast(self._read(0, self._count), self.dtype).reshape(tuple(self.shape.numpy()))

    def tobytes(self) -> bytes:
        """Return the bytes of the values (little-endian)."""
        return self.numpy().tobytes()

    def cast_to(self, dtype: ir.DataType) -> SourceWeight:
        """Return this weight in ``dtype``, read from the same source (the exporter's --precision)."""
        return SourceWeight(self._read, self._src_dtype, dtype, tuple(self.shape.numpy()), name=self.name or "",
                            source_name=self.source_name, file=self._file)

    def tofile(self, file: object) -> None:
        """Write the values at ``file``'s position, one chunk at a time."""
        itemsize = self._src_dtype.itemsize
        if self.copies_raw and self._file is not None and self._kernel_copy(file, self._count * itemsize):
            return
        step = max(1, CHUNK_BYTES // itemsize)
        for start in range(0, self._count, step):
            chunk = _cast(self._read(start, min(step, self._count - start)), self.dtype)
            file.write(memoryview(np.ascontiguousarray(chunk).reshape(-1).view(np.uint8)))  # type: ignore[attr-defined]

    def _kernel_copy(self, file: object, length: int) -> bool:
        """Copy the raw bytes with ``copy_file_range`` (False where the kernel or ``file`` cannot)."""
        copy = getattr(os, "copy_file_range", None)
        fileno = getattr(file, "fileno", None)
        if copy is None or not callable(fileno) or self._file is None:
            return False
        try:
            dst = fileno()
        except (OSError, ValueError):
            return False
        path, offset = self._file
        file.flush()  # type: ignore[attr-defined]
        start = file.tell()  # type: ignore[attr-defined]
        done = 0
        with open(path, "rb") as src:
            try:
                while done < length:
                    n = copy(src.fileno(), dst, min(1 << 30, length - done), offset + done, start + done)
                    if n == 0:
                        raise OSError(errno.EIO, f"'{path.name}' ends early")
                    done += n
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP) or done:
                    raise
                return False
        file.seek(start + length)  # type: ignore[attr-defined]
        return True


def file_weight(entry: TensorEntry, dtype: ir.DataType, *, name: str) -> SourceWeight:
    """Return the tensor ``entry`` of a shard as a weight of dtype ``dtype`` named ``name``."""
    src = numpy_dtype(entry)
    itemsize = src.itemsize

    def read(start: int, count: int) -> np.ndarray:
        with open(entry.path, "rb") as fh:
            fh.seek(entry.offset + start * itemsize)
            data = np.fromfile(fh, dtype=src, count=count)
        if data.size != count:
            raise OSError(errno.EIO, f"'{entry.path.name}' ended while reading tensor '{entry.name}'")
        return data

    return SourceWeight(read, src, dtype, entry.shape, name=name, source_name=entry.name,
                        file=(entry.path, entry.offset))


def array_weight(array: np.ndarray, dtype: ir.DataType, *, name: str, source_name: str) -> SourceWeight:
    """Return an in-memory model's weight (``array`` shares its memory) as a weight of dtype ``dtype``."""
    flat = array.reshape(-1)

    def read(start: int, count: int) -> np.ndarray:
        return flat[start:start + count]

    return SourceWeight(read, array.dtype, dtype, tuple(array.shape), name=name, source_name=source_name)


def untranspose(model: ir.Model) -> int:
    """Rewrite each ``MatMul(x, W^T)`` whose ``W^T`` is the lowering's transposed copy of a source
    weight into ``Gemm(transB=1)`` on ``W`` itself (see the module docstring). Returns the count."""
    graph = model.graph
    editor = ir.GraphEditor(graph)
    inits = graph.initializers
    count = 0
    shape_cache: dict[int, ir.Value] = {}
    for node in list(graph):
        if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
            continue
        x, wt = node.inputs
        if x is None or wt is None or not wt.name or not wt.name.endswith("_T") or not wt.is_initializer():
            continue
        w = inits.get(wt.name[:-2])
        if w is None or not isinstance(w.const_value, SourceWeight) or wt.const_value is None:
            continue
        rows, cols = (int(d) for d in w.const_value.shape)
        if tuple(int(d) for d in wt.const_value.shape) != (cols, rows):
            continue
        if x.shape is not None and len(x.shape) == 2:
            flat = x
        else:
            flat = editor.node_before(node, "Reshape", [x, editor.const(np.array([-1, cols], np.int64), "in_cols")],
                                      base=f"{node.name}_2d")
        y = editor.node_before(node, "Gemm", [flat, w], {"transB": 1}, base=f"{node.name}_gemm")
        if flat is x:
            out = y
        else:
            key = id(x)
            if key not in shape_cache:
                dims = editor.node_before(node, "Shape", [x], {"end": -1}, base=f"{node.name}_lead")
                shape_cache[key] = dims
            target = editor.node_before(node, "Concat", [shape_cache[key],
                                                         editor.const(np.array([rows], np.int64), "out_rows")],
                                        {"axis": 0}, base=f"{node.name}_shape")
            out = editor.node_before(node, "Reshape", [y, target], base=f"{node.name}_nd")
        out.type, out.shape = node.outputs[0].type, node.outputs[0].shape
        if flat is not x:
            flat.type = x.type
        y.type = node.outputs[0].type
        editor.replace(node, out)
        count += 1
    for name in [n for n, v in inits.items() if not v.uses() and not v.is_graph_output() and n.endswith("_T")]:
        del inits[name]
    return count
