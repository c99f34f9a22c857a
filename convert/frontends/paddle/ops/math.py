"""Arithmetic ops: elementwise ops with Paddle's axis broadcasting, matmul, scale, reductions, clip."""

from __future__ import annotations

import numpy as np

from convert.frontends.paddle.context import PaddleContext
from convert.frontends.paddle.ops import Converter, register
from convert.frontends.paddle.program import Op
from convert.ir import RefusedError, Value

__all__: list[str] = []


def _broadcast_y(op: Op, ctx: PaddleContext) -> tuple[Value, Value]:
    """Return X and Y, with Y unsqueezed at the trailing dims when ``axis`` aligns it mid-way.

    Paddle aligns Y's dims with X's starting at ``axis``; ``axis == -1`` is numpy broadcasting.
    """
    x = ctx.input(op, "X")
    y = ctx.input(op, "Y")
    axis = op.int_("axis", default=-1)
    if axis == -1:
        return x, y
    rx, ry = ctx.rank(op, "X"), ctx.rank(op, "Y")
    if rx is None or ry is None:
        raise RefusedError(f"axis={axis} broadcasting needs the ranks of X and Y")
    if not -rx <= axis < rx:
        raise RefusedError(f"axis={axis} is out of range for X of rank {rx}")
    if axis < 0:
        axis += rx
    trailing = rx - axis - ry
    if ry >= rx or trailing <= 0:
        return x, y
    axes = np.arange(ry, ry + trailing, dtype=np.int64)
    return x, ctx.emit("Unsqueeze", [y, ctx.const(axes)])


def _binary(onnx_op: str) -> Converter:
    def convert(op: Op, ctx: PaddleContext) -> None:
        x, y = _broadcast_y(op, ctx)
        ctx.bind(op, "Out", ctx.emit(onnx_op, [x, y]))

    convert.__doc__ = f"-> {onnx_op} (Paddle axis broadcasting)"
    return convert


for _names, _onnx in [
    (("elementwise_add", "add", "add_"), "Add"),
    (("elementwise_sub", "subtract", "subtract_"), "Sub"),
    (("elementwise_mul", "multiply", "multiply_"), "Mul"),
    (("elementwise_div", "divide", "divide_"), "Div"),
    (("elementwise_max", "maximum"), "Max"),
    (("elementwise_min", "minimum"), "Min"),
    (("elementwise_pow",), "Pow"),
    (("equal",), "Equal"), (("less_than",), "Less"), (("greater_than",), "Greater"),
]:
    register(*_names, maps_to=_onnx, notes="axis broadcasting")(_binary(_onnx))


def _swap_last(ctx: PaddleContext, v: Value, rank: int | None) -> Value:
    if rank is None:
        raise RefusedError("a transposed matmul operand needs a known rank")
    if rank < 2:
        return v
    perm = [*list(range(rank - 2)), rank - 1, rank - 2]
    return ctx.emit("Transpose", [v], {"perm": perm})


@register("matmul_v2", "matmul", maps_to="MatMul", notes="trans_x/trans_y -> Transpose; matmul v1 alpha")
def matmul(op: Op, ctx: PaddleContext) -> None:
    """matmul_v2 (PIR: matmul) -> MatMul, transposing the last two dims where asked."""
    x = ctx.input(op, "X")
    y = ctx.input(op, "Y")
    if op.bool_("trans_x", "transpose_x", "transpose_X"):
        x = _swap_last(ctx, x, ctx.rank(op, "X"))
    if op.bool_("trans_y", "transpose_y", "transpose_Y"):
        y = _swap_last(ctx, y, ctx.rank(op, "Y"))
    out = ctx.emit("MatMul", [x, y])
    alpha = op.float_("alpha", default=1.0)
    if alpha != 1.0:
        out = ctx.emit("Mul", [out, ctx.const(np.float32(alpha))])
    ctx.bind(op, "Out", out)


@register("mul", maps_to="Flatten+MatMul", notes="x_num_col_dims/y_num_col_dims")
def mul(op: Op, ctx: PaddleContext) -> None:
    """mul (legacy fc): flatten X at x_num_col_dims and Y at y_num_col_dims, then MatMul."""
    xn = op.int_("x_num_col_dims", default=1)
    yn = op.int_("y_num_col_dims", default=1)
    x = ctx.emit("Flatten", [ctx.input(op, "X")], {"axis": xn})
    y = ctx.emit("Flatten", [ctx.input(op, "Y")], {"axis": yn})
    out = ctx.emit("MatMul", [x, y])
    shape = ctx.out_shape(op)
    if shape is not None and len(shape) != 2:
        out = ctx.emit("Reshape", [out, ctx.const(np.array([0 if d < 0 else d for d in shape], np.int64))])
    ctx.bind(op, "Out", out)


@register("scale", "scale_", maps_to="Mul+Add", notes="scale attribute or ScaleTensor; bias_after_scale")
def scale(op: Op, ctx: PaddleContext) -> None:
    """scale: x * s + b (bias_after_scale) or (x + b) * s."""
    x = ctx.input(op, "X")
    static = ctx.static(op, "ScaleTensor")
    s: Value | None = None
    if static is not None:
        sval = float(static.reshape(-1)[0])
    elif ctx.has(op, "ScaleTensor"):
        s, sval = ctx.input(op, "ScaleTensor"), float("nan")
    else:
        sval = op.float_("scale", default=1.0)
    bias = op.float_("bias")
    dtype = ctx.program.var(op.inputs["X"][0]).dtype or np.dtype(np.float32)
    if s is None and sval != 1.0:
        s = ctx.const(np.asarray(sval, dtype=dtype))
    b = ctx.const(np.asarray(bias, dtype=dtype)) if bias != 0.0 else None
    y = x
    if op.bool_("bias_after_scale", default=True):
        if s is not None:
            y = ctx.emit("Mul", [y, s])
        if b is not None:
            y = ctx.emit("Add", [y, b])
    else:
        if b is not None:
            y = ctx.emit("Add", [y, b])
        if s is not None:
            y = ctx.emit("Mul", [y, s])
    if y is x:
        y = ctx.emit("Identity", [x])
    ctx.bind(op, "Out", y)


def _reduce(onnx_op: str, axes_as_input: bool) -> Converter:
    def convert(op: Op, ctx: PaddleContext) -> None:
        x = ctx.input(op, "X")
        keep = int(op.bool_("keep_dim", "keepdim"))
        axes = op.ints("dim", "axis")
        static = ctx.static(op, "axis")
        if static is not None:
            axes = [int(a) for a in static.reshape(-1)]
        if op.bool_("reduce_all"):
            axes = []
        if not axes:
            y = ctx.emit(onnx_op, [x], {"keepdims": keep})
        elif axes_as_input:
            y = ctx.emit(onnx_op, [x, ctx.const(np.array(axes, np.int64))], {"keepdims": keep})
        else:
            y = ctx.emit(onnx_op, [x], {"axes": axes, "keepdims": keep})
        ctx.bind(op, "Out", y)

    convert.__doc__ = f"-> {onnx_op}"
    return convert


register("reduce_mean", "mean", maps_to="ReduceMean", notes="dim/axis, keep_dim, reduce_all")(
    _reduce("ReduceMean", False))
register("reduce_max", "max", maps_to="ReduceMax", notes="dim/axis, keep_dim, reduce_all")(
    _reduce("ReduceMax", False))
register("reduce_sum", "sum", maps_to="ReduceSum", notes="dim/axis, keep_dim, reduce_all")(
    _reduce("ReduceSum", True))


@register("clip", "clip_", maps_to="Clip", notes="min/max attributes or Min/Max inputs")
def clip(op: Op, ctx: PaddleContext) -> None:
    """clip(min, max) -> Clip."""
    x = ctx.input(op, "X")
    dtype = ctx.program.var(op.inputs["X"][0]).dtype or np.dtype(np.float32)
    bounds = []
    for slot, attr in (("Min", "min"), ("Max", "max")):
        static = ctx.static(op, slot)
        if ctx.has(op, slot) and static is None:
            bounds.append(ctx.emit("Reshape", [ctx.input(op, slot), ctx.const(np.array([], np.int64))]))
        else:
            val = float(static.reshape(-1)[0]) if static is not None else op.float_(attr)
            bounds.append(ctx.const(np.asarray(val, dtype=dtype)))
    ctx.bind(op, "Out", ctx.emit("Clip", [x, *bounds]))


@register("pow", "pow_", maps_to="Pow", notes="factor attribute")
def pow_(op: Op, ctx: PaddleContext) -> None:
    """pow(factor) -> Pow(x, factor)."""
    factor = op.float_("factor", "y", default=1.0)
    ctx.bind(op, "Out", ctx.emit("Pow", [ctx.input(op, "X"), ctx.const(np.float32(factor))]))
