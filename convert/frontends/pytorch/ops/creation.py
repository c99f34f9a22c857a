"""Tensors made from a shape and a value: full/zeros/ones/empty and their ``_like`` and ``new_``
forms, fill, scalar_tensor, meshgrid, copy (broadcast into a tensor's shape).

When every input is a constant these are evaluated by torch at conversion (``lowering.py`` folds
them); the converters here serve the calls whose shape or value comes from a computed tensor
(``x.new_zeros(...)``, ``torch.zeros_like(x)``, ``y.fill_(v)``). The result is an ``Expand`` of
a one-element constant, so a large filled tensor costs no bytes in the file. ``empty`` gives
zeros.
"""

from __future__ import annotations

import numpy as np

from convert.ir import Value

from ._base import LowerContext, OpCall, TensorMeta, lowers, norm_axis

__all__ = ["copy", "fill", "full", "meshgrid", "scalar_tensor"]


def _shape_of(call: OpCall, ctx: LowerContext, like: str | None) -> Value:
    """Return the output shape as an int64 value: static, the ``like`` tensor's, or from ``size``."""
    meta = call.out_meta
    if meta.is_static:
        return ctx.ints(list(meta.dims()))
    if like is not None and isinstance(call.args.get(like), Value) and call.meta(like).shape == meta.shape:
        return ctx.emit("Shape", [call.tensor(like)])
    return ctx.shape_value(meta.shape, sizes=call.args.get("size"), expand=True)


def _filled(call: OpCall, ctx: LowerContext, value: object, like: str | None) -> Value:
    meta = call.out_meta
    if isinstance(value, Value):
        scalar = ctx.emit("Cast", [value], {"to": meta.dtype})
        if call.metas.get("value") is not None and call.meta("value").rank:
            scalar = ctx.emit("Reshape", [scalar, ctx.ints([])])
    else:
        scalar = ctx.const(np.asarray(value, dtype=meta.dtype.numpy()))
    if meta.rank == 0:
        return scalar
    return ctx.emit("Expand", [scalar, _shape_of(call, ctx, like)])


@lowers("aten.full", "aten.new_full", "aten.full_like", to="Expand (of a constant)")
def full(call: OpCall, ctx: LowerContext) -> Value:
    """Lower full / new_full / full_like to an Expand of the fill value to the output shape."""
    return _filled(call, ctx, call.args.get("fill_value"), "self" if "self" in call.args else None)


@lowers("aten.zeros", "aten.new_zeros", "aten.zeros_like", "aten.empty", "aten.new_empty", "aten.empty_like",
        "aten.empty_permuted", "aten.empty_strided", "aten.new_empty_strided", to="Expand (of a constant)",
        notes="empty tensors are zeros")
def zeros(call: OpCall, ctx: LowerContext) -> Value:
    """Lower zeros (and empty, whose contents are unspecified) to an Expand of 0."""
    return _filled(call, ctx, 0, "self" if "self" in call.args else None)


@lowers("aten.ones", "aten.new_ones", "aten.ones_like", to="Expand (of a constant)")
def ones(call: OpCall, ctx: LowerContext) -> Value:
    """Lower ones / new_ones / ones_like to an Expand of 1."""
    return _filled(call, ctx, 1, "self" if "self" in call.args else None)


@lowers("aten.fill", to="Expand (of the value)", notes="in-place fill_ on a view is functionalized first")
def fill(call: OpCall, ctx: LowerContext) -> Value:
    """Lower fill(self, value) (a scalar or a 0-d tensor) to the value expanded to self's shape."""
    return _filled(call, ctx, call.args.get("value"), "self")


@lowers("aten.scalar_tensor", to="(a constant) / Cast")
def scalar_tensor(call: OpCall, ctx: LowerContext) -> Value:
    """Lower scalar_tensor(s) to a 0-d constant, or a computed size cast to the output dtype."""
    s = call.args.get("s")
    meta = call.out_meta
    if isinstance(s, Value):
        return ctx.emit("Reshape", [ctx.emit("Cast", [s], {"to": meta.dtype}), ctx.ints([])])
    return ctx.const(np.asarray(s, dtype=meta.dtype.numpy()))


@lowers("aten.copy", to="Expand+Cast", notes="copy_ into a view is functionalized first")
def copy(call: OpCall, ctx: LowerContext) -> Value:
    """Lower copy(self, src) to src cast to self's dtype and broadcast to self's shape."""
    meta = call.out_meta
    src = call.tensor("src")
    if call.meta("src").dtype != meta.dtype:
        src = ctx.emit("Cast", [src], {"to": meta.dtype})
    if call.meta("src").shape == meta.shape:
        return src
    return ctx.emit("Expand", [src, _shape_of(call, ctx, "self")])


@lowers("aten.meshgrid", to="Reshape+Expand", notes="indexing 'ij' (default) and 'xy'")
def meshgrid(call: OpCall, ctx: LowerContext) -> tuple[Value, ...]:
    """Lower meshgrid: each 1-D input reshaped onto its own axis, then expanded to the grid."""
    tensors = call.args.get("tensors")
    metas = call.metas.get("tensors")
    if not isinstance(tensors, (list, tuple)) or not isinstance(metas, list):
        raise call.unsupported("meshgrid needs a list of tensors")
    indexing = str(call.get("indexing", "ij"))
    if indexing not in ("ij", "xy"):
        raise call.unsupported(f"meshgrid indexing '{indexing}'")
    n = len(tensors)
    axes = list(range(n))
    if indexing == "xy" and n >= 2:
        axes[0], axes[1] = 1, 0
    outs = call.out if isinstance(call.out, (list, tuple)) else [call.out]
    grid = outs[0]
    if not isinstance(grid, TensorMeta):
        raise call.unsupported("meshgrid output shape unknown")
    target = ctx.shape_value(grid.shape, expand=True)
    results = []
    for t, m, axis in zip(tensors, metas, axes, strict=True):
        if not isinstance(t, Value) or not isinstance(m, TensorMeta):
            raise call.unsupported("meshgrid of a non-tensor")
        shape = [1] * n
        shape[norm_axis(axis, n)] = -1
        flat = t if m.rank == 1 else ctx.emit("Reshape", [t, ctx.ints([-1])])
        results.append(ctx.emit("Expand", [ctx.emit("Reshape", [flat, ctx.ints(shape)]), target]))
    return tuple(results)
