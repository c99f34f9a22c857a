"""The ops ``FoldConstants`` meets most, evaluated with numpy, each bounded before it computes.

Converted graphs fold a few dozen small nodes (a transposed small weight, a slice, size arithmetic,
an unsqueeze, a concat of sizes). onnx's reference evaluator does each in 2-5 ms (a model built and
shape-inferred per node) and costs 0.04 s to import, most of a 0.15 s conversion of a small model.
Here each op is a few lines of numpy with ONNX's semantics (opset 13 and later, the IR's), and
returns None for anything outside them, so the caller falls back to the reference evaluator. Every
op is checked against that evaluator in ``tests/ir/test_fold_numpy.py``.

Each function returns the outputs, or None: an input or attribute this table does not handle, or
an output above ``max_bytes`` (measured from shapes before anything is computed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx_ir as _ir

__all__ = ["FAST_FOLD", "fold_fast"]

_Arrays = Sequence["np.ndarray | None"]
_Fold = Callable[[_ir.Node, _Arrays, int], "list[np.ndarray] | None"]

#: op type -> numpy evaluation (see the module docstring)
FAST_FOLD: dict[str, _Fold] = {}


def _folds(*op_types: str) -> Callable[[_Fold], _Fold]:
    def register(fn: _Fold) -> _Fold:
        for op_type in op_types:
            FAST_FOLD[op_type] = fn
        return fn

    return register


def fold_fast(node: _ir.Node, arrays: _Arrays, max_bytes: int) -> list[np.ndarray] | None:
    """Evaluate ``node`` on ``arrays`` with numpy; None where the reference evaluator must."""
    fn = FAST_FOLD.get(node.op_type)
    if fn is None or node.domain not in ("", "ai.onnx"):
        return None
    try:
        return fn(node, arrays, max_bytes)
    except (ValueError, IndexError, TypeError, OverflowError):  # numpy refused the inputs: the reference decides
        return None


def _fits(shape: Sequence[int], dtype: np.dtype, max_bytes: int) -> bool:
    return int(np.prod(shape, dtype=np.int64)) * dtype.itemsize <= max_bytes


def _axes(axes: Sequence[int], rank: int) -> list[int] | None:
    """``axes`` of a rank-``rank`` tensor counted from 0, or None where one repeats or is out of range."""
    counted = [axis + rank if axis < 0 else axis for axis in axes]
    if len(set(counted)) != len(counted) or any(not 0 <= axis < rank for axis in counted):
        return None
    return counted


def _ints(array: np.ndarray | None) -> list[int] | None:
    if array is None or array.dtype.kind not in "iu" or array.ndim > 1:
        return None
    return [int(v) for v in array.reshape(-1)]


@_folds("Identity")
def _identity(node: _ir.Node, arrays: _Arrays, max_bytes: int) -> list[np.ndarray] | None:
    return [arrays[0]] if len(arrays) == 1 and arrays[0] is not None else None


@_folds("Add", "Sub", "Mul", "Div")
def _arithmetic(node: _ir.Node, arrays: _Arrays, max_bytes: int) -> list[np.ndarray] | None:
    if len(arrays) != 2 or arrays[0] is None or arrays[1] is None:
        return None
    a, b = arrays
    if a.dtype != b.dtype or a.dtype.kind not in "iuf":
        return None
    if node.op_type == "Div" and a.dtype.kind != "f":
        return None  # integer Div truncates in ONNX, floors in numpy: left to the reference
    if not _fits(np.broadcast_shapes(a.shape, b.shape), a.dtype, max_bytes):
        return None
    fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[node.op_type]
    with np.errstate(all="ignore"):  # integer wrap-around and inf/nan are ONNX's results too
        return [np.asarray(fn(a, b)).astype(a.dtype, copy=False)]


@_folds("Transpose")
def _transpose(node: _ir.Node, arrays: _Arrays, max_bytes: int) -> list[np.ndarray] | None:
    (a,) = arrays
    if a is None:
        return None
    perm = node.attributes.get_ints("perm", None)
    perm = list(range(a.ndim))[::-1] if perm is None else list(perm)
    if sorted(perm) != list(range(a.ndim)):
        return None
    return [np.ascontiguousarray(np.transpose(a, perm))]


@_folds("Slice")
def _slice(node: _ir.Node, arrays: _Arrays, max_bytes: int) -> list[np.ndarray] | None:
    if not 3 <= len(arrays) <= 5 or arrays[0] is None:
        return None
    data = arrays[0]
    starts, ends = _ints(arrays[1]), _ints(arrays[2])
    axes = _ints(arrays[3]) if len(arrays) > 3 and arrays[3] is not None else list(range(len(starts or [])))
    steps = _ints(arrays[4]) if len(arrays) > 4 and arrays[4] is not None else [1] * len(starts or [])
    if starts is None or ends is None or axes is None or steps is None:
        return None
    if not len(starts) == len(ends) == len(axes) == len(steps):
        return None
    axes = [axis + data.ndim if axis < 0 else axis for axis in axes]
    if len(set(axes)) != len(axes) or any(not 0 <= axis < data.ndim for axis in axes) or 0 in steps:
        return None
    index: list[slice] = [slice(None)] * data.ndim
    for axis, start, end, step in zip(axes, starts, ends, steps, strict=True):
        dim = data.shape[axis]
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
            index[axis] = slice(start, end, step)
        else:  # ONNX clamps to [0, dim-1] and [-1, dim-1]; an end of -1 means "past index 0"
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
            index[axis] = slice(start, None if end == -1 else end, step)
    return [np.ascontiguousarray(data[tuple(index)])]


@_folds("Unsqueeze")
def _unsqueeze(node: _ir.Node, arrays: _Arrays, max_bytes: int) -> list[np.ndarray] | None:
    if len(arrays) != 2 or arrays[0] is None:
        return None
    axes = _ints(arrays[1])
    if not axes:
        return None
    axes = _axes(axes, arrays[0].ndim + len(axes))
    if axes is None:
        return None
    return [np.expand_dims(arrays[0], tuple(sorted(axes))).copy()]


@_folds("Squeeze")
def _squeeze(node: _ir.Node, arrays: _Arrays, max_bytes: int) -> list[np.ndarray] | None:
    if not 1 <= len(arrays) <= 2 or arrays[0] is None:
        return None
    data = arrays[0]
    if len(arrays) == 1 or arrays[1] is None:
        return [np.squeeze(data).copy()]
    axes = _ints(arrays[1])
    axes = _axes(axes, data.ndim) if axes is not None else None
    if axes is None or any(data.shape[axis] != 1 for axis in axes):
        return None
    return [np.squeeze(data, axis=tuple(axes)).copy()]


@_folds("Concat")
def _concat(node: _ir.Node, arrays: _Arrays, max_bytes: int) -> list[np.ndarray] | None:
    if not arrays or any(a is None for a in arrays) or len({a.dtype for a in arrays}) != 1:  # type: ignore[union-attr]
        return None
    axis = node.attributes.get_int("axis", None)
    if axis is None or sum(a.nbytes for a in arrays) > max_bytes:  # type: ignore[union-attr]
        return None
    return [np.concatenate(arrays, axis=axis)]  # type: ignore[arg-type]


@_folds("Expand")
def _expand(node: _ir.Node, arrays: _Arrays, max_bytes: int) -> list[np.ndarray] | None:
    if len(arrays) != 2 or arrays[0] is None:
        return None
    shape = _ints(arrays[1])
    if shape is None or any(d < 0 for d in shape):
        return None
    out = np.broadcast_shapes(arrays[0].shape, tuple(shape))  # ONNX's Expand broadcasts both ways
    if not _fits(out, arrays[0].dtype, max_bytes):
        return None
    return [np.broadcast_to(arrays[0], out).copy()]


@_folds("Gather")
def _gather(node: _ir.Node, arrays: _Arrays, max_bytes: int) -> list[np.ndarray] | None:
    if len(arrays) != 2 or arrays[0] is None or arrays[1] is None or arrays[1].dtype.kind not in "iu":
        return None
    data, indices = arrays
    axis = node.attributes.get_int("axis", 0)
    axis = axis + data.ndim if axis < 0 else axis
    if not 0 <= axis < data.ndim:
        return None
    dim = data.shape[axis]
    if indices.size and (indices.min() < -dim or indices.max() >= dim):
        return None
    out = (*data.shape[:axis], *indices.shape, *data.shape[axis + 1:])
    if not _fits(out, data.dtype, max_bytes):
        return None
    return [np.take(data, indices.astype(np.int64), axis=axis)]


@_folds("Reshape")
def _reshape(node: _ir.Node, arrays: _Arrays, max_bytes: int) -> list[np.ndarray] | None:
    if len(arrays) != 2 or arrays[0] is None:
        return None
    data, shape = arrays[0], _ints(arrays[1])
    if shape is None:
        return None
    if not node.attributes.get_int("allowzero", 0):
        if any(d == 0 and i >= data.ndim for i, d in enumerate(shape)):
            return None
        shape = [data.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        return None
    return [data.reshape(shape).copy()]


# The cast targets numpy holds itself (bfloat16, float8 and the 4-bit types are left to the reference).
_CAST_TO = {_ir.DataType.FLOAT: np.float32, _ir.DataType.DOUBLE: np.float64, _ir.DataType.FLOAT16: np.float16,
            _ir.DataType.INT64: np.int64, _ir.DataType.INT32: np.int32, _ir.DataType.INT16: np.int16,
            _ir.DataType.INT8: np.int8, _ir.DataType.UINT8: np.uint8, _ir.DataType.UINT16: np.uint16,
            _ir.DataType.UINT32: np.uint32, _ir.DataType.UINT64: np.uint64, _ir.DataType.BOOL: np.bool_}


@_folds("Cast")
def _cast(node: _ir.Node, arrays: _Arrays, max_bytes: int) -> list[np.ndarray] | None:
    if len(arrays) != 1 or arrays[0] is None or arrays[0].dtype.kind not in "biuf":
        return None
    to = _CAST_TO.get(_ir.DataType(node.attributes.get_int("to", 0)))
    if to is None or node.attributes.get_int("saturate", 1) != 1:
        return None
    data = arrays[0]
    if data.dtype.kind == "f" and np.dtype(to).kind in "iu":
        if not np.all(np.isfinite(data)):
            return None  # undefined in ONNX: the reference decides
        info = np.iinfo(to)
        if data.size and (data.min() < info.min or data.max() > info.max):
            return None
    return [data.astype(to)]


@_folds("ReduceMax", "ReduceMin")
def _reduce_extreme(node: _ir.Node, arrays: _Arrays, max_bytes: int) -> list[np.ndarray] | None:
    if not 1 <= len(arrays) <= 2 or arrays[0] is None:
        return None
    data = arrays[0]
    if data.size == 0 or data.dtype.kind not in "iuf":
        return None  # an empty reduction, a bool: the reference decides
    attr = node.attributes.get_ints("axes", None)  # opset 17 and earlier: an attribute; 18 on: an input
    axes = list(attr) if attr is not None else (_ints(arrays[1]) if len(arrays) == 2 and arrays[1] is not None
                                                else [])
    if axes is None:
        return None
    if not axes:
        if node.attributes.get_int("noop_with_empty_axes", 0):
            return [data.copy()]
        axes = list(range(data.ndim))
    axes = _axes(axes, data.ndim)
    if axes is None:
        return None
    fn = np.max if node.op_type == "ReduceMax" else np.min
    kept = fn(data, axis=tuple(axes), keepdims=bool(node.attributes.get_int("keepdims", 1)))
    return [np.asarray(kept).astype(data.dtype, copy=False)]


@_folds("Where")
def _where(node: _ir.Node, arrays: _Arrays, max_bytes: int) -> list[np.ndarray] | None:
    if len(arrays) != 3 or any(a is None for a in arrays):
        return None
    cond, x, y = arrays
    if cond.dtype != np.bool_ or x.dtype != y.dtype:  # type: ignore[union-attr]
        return None
    shape = np.broadcast_shapes(cond.shape, x.shape, y.shape)  # type: ignore[union-attr]
    if not _fits(shape, x.dtype, max_bytes):  # type: ignore[union-attr]
        return None
    return [np.where(cond, x, y).astype(x.dtype, copy=False)]  # type: ignore[union-attr, arg-type]
