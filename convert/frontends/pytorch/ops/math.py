"""Arithmetic, reductions and matrix products: add/sub/mul/div/pow, comparisons, mean/sum/amax,
linear -> Gemm (2-D input) or MatMul+Add, mm/bmm/matmul -> MatMul, addmm -> Gemm.
"""

from __future__ import annotations

import numpy as np

from convert.ir import DataType, Value, transposed

from ._base import LowerContext, OpCall, TensorMeta, lowers, norm_axis

__all__ = ["addmm", "div", "linear", "matmul", "mean", "remainder"]


def _operand(call: OpCall, ctx: LowerContext, name: str, like: TensorMeta) -> Value:
    value = call.args.get(name)
    if isinstance(value, Value):
        if not isinstance(call.metas.get(name), TensorMeta) and value.dtype != like.dtype:
            # a number computed at run time (x * int(t), its dtype unknown or another): the tensor's dtype
            return ctx.emit("Cast", [value], {"to": like.dtype})
        return value
    if isinstance(value, (bool, int, float)):
        return ctx.scalar_like(value, like)
    raise call.unsupported(f"operand '{name}' of type {type(value).__name__}")


def _cast(ctx: LowerContext, value: Value, meta: object, target: TensorMeta) -> Value:
    """Convert ``value`` to ``target``'s dtype, as torch's type promotion does implicitly."""
    if not isinstance(meta, TensorMeta) or meta.dtype == target.dtype:
        return value
    tensor = value.const_value
    if tensor is not None and tensor.size <= 16:
        return ctx.const(tensor.numpy().astype(target.dtype.numpy()))
    return ctx.emit("Cast", [value], {"to": target.dtype})


def _like(call: OpCall) -> TensorMeta:
    """Return the meta of the operand that fixes the computation's dtype (the higher-rank one)."""
    metas = [m for m in (call.metas.get("self"), call.metas.get("other")) if isinstance(m, TensorMeta)]
    if not metas:
        return call.out_meta
    return max(metas, key=lambda m: m.rank)


def _binary(op_type: str, *, reverse: bool = False) -> object:
    def convert(call: OpCall, ctx: LowerContext) -> Value:
        like = _like(call)
        out = call.out_meta
        target = out if out.dtype.name != "BOOL" else like
        if not target.dtype.is_floating_point() and any(
                isinstance(call.args.get(k), float) for k in ("self", "other")):
            target = TensorMeta(target.shape, DataType.FLOAT)  # int tensor vs a float: torch computes in float
        if out.dtype.name != "BOOL" or target is not like:
            like = target  # a Python scalar takes the computation's dtype (1.5 stays 1.5)
        a = _cast(ctx, _operand(call, ctx, "self", like), call.metas.get("self"), target)
        b = _cast(ctx, _operand(call, ctx, "other", like), call.metas.get("other"), target)
        alpha = call.args.get("alpha")
        if alpha is not None and alpha != 1:
            b = ctx.emit("Mul", [b, ctx.scalar_like(alpha, like)])  # type: ignore[arg-type]
        return ctx.emit(op_type, [b, a] if reverse else [a, b])

    convert.__doc__ = f"Lower to {op_type} (Python scalars become constants of the tensor's dtype)."
    return convert


for _keys, _op in {
    ("aten.add",): "Add", ("aten.sub",): "Sub", ("aten.mul",): "Mul",
    ("aten.maximum",): "Max", ("aten.minimum",): "Min", ("aten.eq",): "Equal", ("aten.lt",): "Less",
    ("aten.gt",): "Greater", ("aten.le",): "LessOrEqual", ("aten.ge",): "GreaterOrEqual",
    ("aten.logical_and", "aten.__and__", "aten.bitwise_and"): "And",
    ("aten.logical_or", "aten.__or__", "aten.bitwise_or"): "Or",
    ("aten.logical_xor", "aten.__xor__", "aten.bitwise_xor"): "Xor",
}.items():
    lowers(*_keys, to=_op)(_binary(_op))  # type: ignore[arg-type]
lowers("aten.rsub", to="Sub")(_binary("Sub", reverse=True))  # type: ignore[arg-type]



@lowers("aten.remainder", to="Div+Floor+Mul+Sub / Mod", notes="Python semantics (sign of the divisor)")
def remainder(call: OpCall, ctx: LowerContext) -> Value:
    """Lower remainder: x - floor(x / y) * y for floats (ONNX Mod needs fmod=1 there), Mod for ints."""
    like = call.out_meta
    a = _cast(ctx, _operand(call, ctx, "self", like), call.metas.get("self"), like)
    b = _cast(ctx, _operand(call, ctx, "other", like), call.metas.get("other"), like)
    if like.dtype.is_floating_point():
        q = ctx.emit("Floor", [ctx.emit("Div", [a, b])])
        return ctx.emit("Sub", [a, ctx.emit("Mul", [q, b])])
    return ctx.emit("Mod", [a, b], {"fmod": 0})


@lowers("aten.div", to="Div", notes="rounding_mode 'floor'/'trunc' add Floor/Cast")
def div(call: OpCall, ctx: LowerContext) -> Value:
    """Lower div to Div; rounding_mode='floor' adds Floor (float) ."""
    like = call.out_meta
    a = _cast(ctx, _operand(call, ctx, "self", like), call.metas.get("self"), like)
    b = _cast(ctx, _operand(call, ctx, "other", like), call.metas.get("other"), like)
    mode = call.args.get("rounding_mode")
    if not like.dtype.is_floating_point():  # integer Div truncates; floor needs the remainder's sign
        if mode == "floor":
            return ctx.emit("Div", [ctx.emit("Sub", [a, ctx.emit("Mod", [a, b], {"fmod": 0})]), b])
        return ctx.emit("Div", [a, b])
    y = ctx.emit("Div", [a, b])
    if mode == "floor":
        y = ctx.emit("Floor", [y])
    elif mode == "trunc":
        y = ctx.emit("Mul", [ctx.emit("Floor", [ctx.emit("Abs", [y])]), ctx.emit("Sign", [y])])
    return y


@lowers("aten.pow", to="Pow / Mul", notes="x**2 becomes Mul(x, x)")
def pow_(call: OpCall, ctx: LowerContext) -> Value:
    """Lower pow to Pow; a square becomes Mul(x, x), which every backend has."""
    like = _like(call)
    base = _operand(call, ctx, "self", like)
    exponent = call.args.get("exponent")
    if exponent == 2:
        return ctx.emit("Mul", [base, base])
    if exponent == 0.5:
        return ctx.emit("Sqrt", [base])
    if isinstance(exponent, Value):
        return ctx.emit("Pow", [base, exponent])
    return ctx.emit("Pow", [base, ctx.scalar_like(exponent, like)])  # type: ignore[arg-type]


@lowers("aten.where", to="Where / NonZero+Gather", notes="one argument: the result's length depends on the data")
def where(call: OpCall, ctx: LowerContext) -> Value:
    """Lower where(condition, self, other) to Where; where(condition) to NonZero's rows."""
    if "self" not in call.args:  # torch.where(mask): one index tensor per dimension, like nonzero(as_tuple)
        found = ctx.emit("NonZero", [call.tensor("condition")])
        return tuple(ctx.emit("Gather", [found, ctx.ints(i)], {"axis": 0})
                     for i in range(call.meta("condition").rank))  # type: ignore[return-value]
    like = call.out_meta
    return ctx.emit("Where", [call.tensor("condition"), _operand(call, ctx, "self", like),
                            _operand(call, ctx, "other", like)])


def _axes(call: OpCall, rank: int) -> list[int]:
    dims = call.args.get("dim")
    if dims is None or dims == []:
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return sorted(norm_axis(int(d), rank) for d in dims)  # type: ignore[attr-defined]


@lowers("aten.mean", to="GlobalAveragePool / ReduceMean", notes="mean over H,W of NCHW is GlobalAveragePool")
def mean(call: OpCall, ctx: LowerContext) -> Value:
    """Lower mean; over the spatial axes of a 4-D tensor it is GlobalAveragePool (+Flatten)."""
    meta = call.meta("self")
    axes = _axes(call, meta.rank)
    keep = bool(call.get("keepdim", False))
    x = _cast(ctx, call.tensor("self"), meta, call.out_meta)  # mean(dtype=...)
    if meta.rank == 4 and axes == [2, 3]:
        y = ctx.emit("GlobalAveragePool", [x])
        return y if keep else ctx.emit("Flatten", [y], {"axis": 1})
    return ctx.emit("ReduceMean", [x], {"axes": axes, "keepdims": int(keep)})


@lowers("aten.sum", to="ReduceSum")
def sum_(call: OpCall, ctx: LowerContext) -> Value:
    """Lower sum over dims to ReduceSum (axes as an input since opset 13), in the output's dtype:
    torch sums bool and integer tensors as int64 (``mask.sum()``) and honours ``dtype=``."""
    meta = call.meta("self")
    axes = _axes(call, meta.rank)
    x = _cast(ctx, call.tensor("self"), meta, call.out_meta)
    return ctx.emit("ReduceSum", [x, ctx.ints(axes)], {"keepdims": int(bool(call.get("keepdim")))})


@lowers("aten.amax", to="ReduceMax")
def amax(call: OpCall, ctx: LowerContext) -> Value:
    """Lower amax to ReduceMax (axes attribute at opset 17)."""
    meta = call.meta("self")
    return ctx.emit("ReduceMax", [call.tensor("self")],
                  {"axes": _axes(call, meta.rank), "keepdims": int(bool(call.get("keepdim")))})


@lowers("aten.amin", to="ReduceMin")
def amin(call: OpCall, ctx: LowerContext) -> Value:
    """Lower amin to ReduceMin (axes attribute at opset 17)."""
    meta = call.meta("self")
    return ctx.emit("ReduceMin", [call.tensor("self")],
                  {"axes": _axes(call, meta.rank), "keepdims": int(bool(call.get("keepdim")))})


def _transposed(ctx: LowerContext, w: Value) -> Value:
    """Return W^T: a lazily transposed initializer when W is constant, else a Transpose node."""
    tensor = w.const_value
    if tensor is None or len(tensor.shape) != 2:
        return ctx.emit("Transpose", [w], {"perm": [1, 0]})
    # Streamed: the exporter writes W^T stripe by stripe, never a whole transposed copy.
    return ctx.builder.initializer(transposed(tensor, name=f"{w.name}_T"), f"{w.name}_T")


@lowers("aten.linear", to="Gemm / MatMul+Add", notes="Gemm(transB=1) for 2-D inputs; MatMul with W^T otherwise")
def linear(call: OpCall, ctx: LowerContext) -> Value:
    """Lower linear to Gemm(transB=1) on 2-D inputs, else MatMul by a lazily transposed W (+ Add bias)."""
    x = call.tensor("input")
    w = call.tensor("weight")
    bias = call.get("bias")
    if call.meta("input").rank == 2:
        inputs: list[Value | None] = [x, w]
        if isinstance(bias, Value):
            inputs.append(bias)
        return ctx.emit("Gemm", inputs, {"transB": 1})
    y = ctx.emit("MatMul", [x, _transposed(ctx, w)])
    return ctx.emit("Add", [y, bias]) if isinstance(bias, Value) else y


@lowers("aten.addmm", to="Gemm")
def addmm(call: OpCall, ctx: LowerContext) -> Value:
    """Lower addmm(bias, a, b) to Gemm; b = Transpose(W) of a constant becomes Gemm(transB=1) on W."""
    a = call.tensor("mat1")
    b = call.tensor("mat2")
    attrs: dict[str, object] = {"alpha": float(call.get("alpha", 1)), "beta": float(call.get("beta", 1))}  # type: ignore[arg-type]
    producer = b.producer()
    if (producer is not None and producer.op_type == "Transpose" and producer.inputs[0] is not None
            and producer.inputs[0].const_value is not None):
        b = producer.inputs[0]
        attrs["transB"] = 1
    return ctx.emit("Gemm", [a, b, call.tensor("self")], attrs)


@lowers("aten.mm", "aten.bmm", "aten.matmul", to="MatMul")
def matmul(call: OpCall, ctx: LowerContext) -> Value:
    """Lower mm / bmm / matmul to MatMul."""
    return ctx.emit("MatMul", [call.tensor("self"), call.tensor("mat2" if "mat2" in call.args else "other")])


@lowers("aten.baddbmm", to="MatMul+Mul+Add")
def baddbmm(call: OpCall, ctx: LowerContext) -> Value:
    """Lower baddbmm to beta * self + alpha * (batch1 @ batch2)."""
    like = call.out_meta
    y = ctx.emit("MatMul", [call.tensor("batch1"), call.tensor("batch2")])
    alpha = float(call.get("alpha", 1))  # type: ignore[arg-type]
    beta = float(call.get("beta", 1))  # type: ignore[arg-type]
    if alpha != 1:
        y = ctx.emit("Mul", [y, ctx.scalar_like(alpha, like)])
    s = call.tensor("self")
    if beta != 1:
        s = ctx.emit("Mul", [s, ctx.scalar_like(beta, like)])
    return ctx.emit("Add", [y, s])


@lowers("aten.ne", to="Equal+Not")
def ne(call: OpCall, ctx: LowerContext) -> Value:
    """Lower ne to Not(Equal(self, other)), operands promoted as for eq."""
    like = _like(call)
    a = _cast(ctx, _operand(call, ctx, "self", like), call.metas.get("self"), like)
    b = _cast(ctx, _operand(call, ctx, "other", like), call.metas.get("other"), like)
    return ctx.emit("Not", [ctx.emit("Equal", [a, b])])


@lowers("aten.floor_divide", to="Div+Floor / Mod+Sub+Div", notes="rounds towards -inf, as torch does")
def floor_divide(call: OpCall, ctx: LowerContext) -> Value:
    """Lower floor_divide: Floor(a / b) for floats; (a - Mod(a, b)) / b (exact) for integers."""
    like = call.out_meta
    a = _cast(ctx, _operand(call, ctx, "self", like), call.metas.get("self"), like)
    b = _cast(ctx, _operand(call, ctx, "other", like), call.metas.get("other"), like)
    if like.dtype.is_floating_point():
        return ctx.emit("Floor", [ctx.emit("Div", [a, b])])
    r = ctx.emit("Mod", [a, b], {"fmod": 0})
    return ctx.emit("Div", [ctx.emit("Sub", [a, r]), b])


@lowers("aten._local_scalar_dense", "aten.item", to="Reshape (0-d)",
        notes="folded when its input is constant; otherwise a 0-d tensor, usable as an arithmetic operand")
def local_scalar_dense(call: OpCall, ctx: LowerContext) -> Value:
    """Lower ``t.item()`` of a computed one-element tensor to that tensor reshaped to 0-d."""
    return ctx.emit("Reshape", [call.tensor("self"), ctx.ints([])])


@lowers("aten.fmod", to="Mod(fmod=1)", notes="the sign of the dividend, as C's fmod")
def fmod(call: OpCall, ctx: LowerContext) -> Value:
    """Lower fmod to Mod(fmod=1)."""
    like = call.out_meta
    a = _cast(ctx, _operand(call, ctx, "self", like), call.metas.get("self"), like)
    b = _cast(ctx, _operand(call, ctx, "other", like), call.metas.get("other"), like)
    return ctx.emit("Mod", [a, b], {"fmod": 1})


@lowers("aten.atan2", to="Atan+Div+Where", notes="quadrant fixed with Where; atan2(0, 0) = 0")
def atan2(call: OpCall, ctx: LowerContext) -> Value:
    """Lower atan2(y, x) to atan(y / x) corrected by pi for x < 0 (sign of y), pi/2 for x = 0."""
    like = call.out_meta
    y = _cast(ctx, call.tensor("self"), call.metas.get("self"), like)
    x = _cast(ctx, call.tensor("other"), call.metas.get("other"), like)
    zero = ctx.scalar_like(0.0, like)
    pi = ctx.scalar_like(np.pi, like)
    base = ctx.emit("Atan", [ctx.emit("Div", [y, ctx.emit("Where", [ctx.emit("Equal", [x, zero]),
                                                               ctx.scalar_like(1.0, like), x])])])
    negative_y = ctx.emit("Less", [y, zero])
    shift = ctx.emit("Where", [negative_y, ctx.emit("Neg", [pi]), pi])
    result = ctx.emit("Where", [ctx.emit("Less", [x, zero]), ctx.emit("Add", [base, shift]), base])
    half = ctx.emit("Mul", [ctx.emit("Sign", [y]), ctx.scalar_like(np.pi / 2, like)])
    return ctx.emit("Where", [ctx.emit("Equal", [x, zero]), half, result])


def _pnorm(ctx: LowerContext, diff: Value, p: float, like: TensorMeta) -> Value:
    """Return the p-norm of ``diff`` over its last axis."""
    if p == 2.0:
        squares = ctx.emit("Mul", [diff, diff])
        return ctx.emit("Sqrt", [ctx.emit("ReduceSum", [squares, ctx.ints([-1])], {"keepdims": 0})])
    a = ctx.emit("Abs", [diff])
    if p == 1.0:
        return ctx.emit("ReduceSum", [a, ctx.ints([-1])], {"keepdims": 0})
    if np.isinf(p):
        return ctx.emit("ReduceMax", [a], {"axes": [-1], "keepdims": 0})
    if p == 0.0:
        nonzero = ctx.emit("Cast", [ctx.emit("Not", [ctx.emit("Equal", [a, ctx.scalar_like(0.0, like)])])],
                         {"to": like.dtype})
        return ctx.emit("ReduceSum", [nonzero, ctx.ints([-1])], {"keepdims": 0})
    total = ctx.emit("ReduceSum", [ctx.emit("Pow", [a, ctx.scalar_like(p, like)]), ctx.ints([-1])], {"keepdims": 0})
    return ctx.emit("Pow", [total, ctx.scalar_like(1.0 / p, like)])


@lowers("aten._cdist_forward", to="Unsqueeze+Sub+(p-norm)", notes="computed directly (torch may use a matmul form)")
def cdist(call: OpCall, ctx: LowerContext) -> Value:
    """Lower cdist(x1 [.., P, M], x2 [.., R, M], p) to the p-norm of every pairwise difference."""
    like = call.out_meta
    x1, x2 = call.tensor("x1"), call.tensor("x2")
    diff = ctx.emit("Sub", [ctx.emit("Unsqueeze", [x1, ctx.ints([-2])]), ctx.emit("Unsqueeze", [x2, ctx.ints([-3])])])
    return _pnorm(ctx, diff, float(call["p"]), like)  # type: ignore[arg-type]


@lowers("aten._pdist_forward", to="Unsqueeze+Sub+(p-norm)+Gather", notes="static row count")
def pdist(call: OpCall, ctx: LowerContext) -> Value:
    """Lower pdist(x [N, M], p): all pairwise p-norms, then the upper triangle (i < j) row by row."""
    like = call.out_meta
    x = call.tensor("self")
    n = call.meta("self").dim(0)
    diff = ctx.emit("Sub", [ctx.emit("Unsqueeze", [x, ctx.ints([1])]), ctx.emit("Unsqueeze", [x, ctx.ints([0])])])
    full = ctx.emit("Reshape", [_pnorm(ctx, diff, float(call.get("p", 2.0)), like), ctx.ints([-1])])  # type: ignore[arg-type]
    rows, cols = np.triu_indices(n, k=1)
    return ctx.emit("Gather", [full, ctx.const((rows * n + cols).astype(np.int64))], {"axis": 0})
