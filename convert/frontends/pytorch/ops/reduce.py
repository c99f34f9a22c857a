"""Reductions and ordering: any/all, argmax/argmin, max/min (full or over a dim, with indices),
prod, var/std, cumsum, sort, topk.

ONNX's reductions at opset 17 do not take bool tensors, so any/all reduce a 0/1 cast. sort is a
TopK over the whole axis.
"""

from __future__ import annotations

from convert.ir import DataType, Value

from ._base import LowerContext, OpCall, TensorMeta, lowers, norm_axis

__all__ = ["any_", "argmax", "cumsum", "max_", "prod", "sort", "topk", "var"]


def _dims(call: OpCall, rank: int) -> list[int]:
    dims = call.args.get("dim")
    if dims is None or dims == []:
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return sorted(norm_axis(int(d), rank) for d in dims)  # type: ignore[attr-defined]


def _keep(call: OpCall) -> int:
    return int(bool(call.get("keepdim", False)))


@lowers("aten.any", "aten.all", to="Cast+ReduceMax / ReduceMin+Cast", notes="non-bool inputs test x != 0")
def any_(call: OpCall, ctx: LowerContext) -> Value:
    """Lower any / all to ReduceMax / ReduceMin over ``x != 0`` cast to int32, then back to bool."""
    meta = call.meta("self")
    x = call.tensor("self")
    if meta.dtype != DataType.BOOL:
        x = ctx.emit("Not", [ctx.emit("Equal", [x, ctx.scalar_like(0, meta)])])
    x = ctx.emit("Cast", [x], {"to": DataType.INT32})
    if meta.rank == 0:
        return ctx.emit("Cast", [x], {"to": DataType.BOOL})
    op_type = "ReduceMax" if call.op == "aten.any" else "ReduceMin"
    y = ctx.emit(op_type, [x], {"axes": _dims(call, meta.rank), "keepdims": _keep(call)})
    return ctx.emit("Cast", [y], {"to": DataType.BOOL})


@lowers("aten.argmax", "aten.argmin", to="ArgMax / ArgMin", notes="dim=None flattens first")
def argmax(call: OpCall, ctx: LowerContext) -> Value:
    """Lower argmax / argmin to ArgMax / ArgMin (first occurrence, as torch on CPU)."""
    meta = call.meta("self")
    x = call.tensor("self")
    op_type = "ArgMax" if call.op == "aten.argmax" else "ArgMin"
    dim = call.args.get("dim")
    if dim is None:
        y = ctx.emit(op_type, [ctx.emit("Reshape", [x, ctx.ints([-1])])], {"axis": 0, "keepdims": 0})
        if _keep(call):
            y = ctx.emit("Reshape", [y, ctx.ints([1] * meta.rank)])
        return y
    axis = norm_axis(int(dim), meta.rank)  # type: ignore[call-overload]
    return ctx.emit(op_type, [x], {"axis": axis, "keepdims": _keep(call), "select_last_index": 0})


@lowers("aten.max", "aten.min", to="ReduceMax+ArgMax / ReduceMin+ArgMin / Max / Min",
        notes="max(x), max(x, dim) with indices, max(x, y) elementwise")
def max_(call: OpCall, ctx: LowerContext) -> object:
    """Lower max / min: full reduction, (values, indices) over a dim, or elementwise with ``other``."""
    is_max = call.op == "aten.max"
    x = call.tensor("self")
    meta = call.meta("self")
    other = call.args.get("other")
    if isinstance(other, Value):
        return ctx.emit("Max" if is_max else "Min", [x, other])
    reduce = "ReduceMax" if is_max else "ReduceMin"
    dim = call.args.get("dim")
    if dim is None:
        return ctx.emit(reduce, [x], {"axes": list(range(meta.rank)), "keepdims": 0})
    axis = norm_axis(int(dim), meta.rank)  # type: ignore[call-overload]
    keep = _keep(call)
    values = ctx.emit(reduce, [x], {"axes": [axis], "keepdims": keep})
    indices = ctx.emit("ArgMax" if is_max else "ArgMin", [x], {"axis": axis, "keepdims": keep})
    return values, indices


@lowers("aten.prod", to="ReduceProd")
def prod(call: OpCall, ctx: LowerContext) -> Value:
    """Lower prod (all elements or one dim) to ReduceProd."""
    meta = call.meta("self")
    x = call.tensor("self")
    if call.out_meta.dtype != meta.dtype:
        x = ctx.emit("Cast", [x], {"to": call.out_meta.dtype})
    return ctx.emit("ReduceProd", [x], {"axes": _dims(call, meta.rank), "keepdims": _keep(call)})


@lowers("aten.var", "aten.std", to="ReduceMean+Sub+Mul+ReduceSum+Div (+Sqrt)",
        notes="correction (default 1, Bessel) or unbiased; the corrected two-pass sum")
def var(call: OpCall, ctx: LowerContext) -> Value:
    """Lower var / std: (sum(d^2) - sum(d)^2 / n) / (n - correction), d = x - mean, over the dims
    (Sqrt for std): the corrected two-pass form. The second term takes out the rounding of the mean
    itself, which the plain ``sum(d^2)`` keeps: on [1e8, 1e8, 1e8 + 8] float32's mean is 1e8 and
    that sum gave a variance of 32 where torch's is 21.33."""
    meta = call.meta("self")
    x = call.tensor("self")
    axes = _dims(call, meta.rank)
    correction = call.args.get("correction")
    if correction is None:
        correction = 1 if call.get("unbiased", True) else 0
    n = 1
    for a in axes:
        n *= meta.dim(a)
    mean = ctx.emit("ReduceMean", [x], {"axes": axes, "keepdims": 1})
    centred = ctx.emit("Sub", [x, mean])
    keep = _keep(call)
    squares = ctx.emit("ReduceSum", [ctx.emit("Mul", [centred, centred]), ctx.ints(axes)], {"keepdims": keep})
    drift = ctx.emit("ReduceSum", [centred, ctx.ints(axes)], {"keepdims": keep})
    drift = ctx.emit("Div", [ctx.emit("Mul", [drift, drift]), ctx.scalar_like(float(max(n, 1)), meta)])
    total = ctx.emit("Max", [ctx.emit("Sub", [squares, drift]), ctx.scalar_like(0.0, meta)])  # >= 0, as its terms
    y = ctx.emit("Div", [total, ctx.scalar_like(max(n - float(correction), 0.0), meta)])  # type: ignore[arg-type]
    return ctx.emit("Sqrt", [y]) if call.op == "aten.std" else y


@lowers("aten.cumsum", to="CumSum")
def cumsum(call: OpCall, ctx: LowerContext) -> Value:
    """Lower cumsum(dim) to CumSum (the output dtype cast first)."""
    meta = call.meta("self")
    x = call.tensor("self")
    if call.out_meta.dtype != meta.dtype:
        x = ctx.emit("Cast", [x], {"to": call.out_meta.dtype})
    axis = norm_axis(int(call["dim"]), meta.rank)  # type: ignore[call-overload]
    return ctx.emit("CumSum", [x, ctx.ints(axis)])


def _topk(ctx: LowerContext, x: Value, k: int | Value, axis: int, largest: bool) -> tuple[Value, Value]:
    if isinstance(k, Value):  # a computed k (min(1000, count); a traced int32 .item()): TopK takes int64 [1]
        kk = ctx.emit("Reshape", [ctx.emit("Cast", [k], {"to": DataType.INT64}), ctx.ints([1])])
    else:
        kk = ctx.ints([k])
    values, indices = ctx.emit_multi("TopK", [x, kk], {"axis": axis, "largest": int(largest),
                                                              "sorted": 1}, outputs=2)
    return values, indices


@lowers("aten.topk", to="TopK", notes="ties may come in another order than torch's; k may be computed")
def topk(call: OpCall, ctx: LowerContext) -> tuple[Value, Value]:
    """Lower topk(k, dim, largest) to TopK (always sorted)."""
    meta = call.meta("self")
    axis = norm_axis(int(call.get("dim", -1)), meta.rank)  # type: ignore[call-overload]
    k = call["k"]
    return _topk(ctx, call.tensor("self"), k if isinstance(k, Value) else int(k), axis,  # type: ignore[call-overload]
                 bool(call.get("largest", True)))


@lowers("aten.sort", to="TopK", notes="a TopK over the whole axis; ties may come in another order")
def sort(call: OpCall, ctx: LowerContext) -> tuple[Value, Value]:
    """Lower sort(dim, descending) to TopK with k = the axis' size."""
    meta: TensorMeta = call.meta("self")
    axis = norm_axis(int(call.get("dim", -1)), meta.rank)  # type: ignore[call-overload]
    return _topk(ctx, call.tensor("self"), meta.dim(axis), axis, bool(call.get("descending", False)))
