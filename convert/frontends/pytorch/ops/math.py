"""Arithmetic, reductions and matrix products: add/sub/mul/div/pow, comparisons, mean/sum/amax,
linear -> Gemm (2-D input) or MatMul+Add, mm/bmm/matmul -> MatMul, addmm -> Gemm.
"""

from __future__ import annotations

import numpy as np

from convert.ir import DataType, Value, transposed

from ._base import LowerContext, OpCall, TensorMeta, lowers, norm_axis

__all__ = ["addmm", "div", "floor_divide", "floored_quotient", "linear", "matmul", "mean", "remainder"]


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


def _logical(op_type: str) -> object:
    binary = _binary(op_type)

    def convert(call: OpCall, ctx: LowerContext) -> Value:
        if not call.op.startswith("aten.logical_"):
            _booleans_only(call)
            return binary(call, ctx)  # type: ignore[operator,no-any-return]
        # logical_*: any dtype, read as x != 0 (ONNX's And/Or/Xor take booleans)
        operands = []
        for name in ("self", "other"):
            value, meta = call.args.get(name), call.metas.get(name)
            if isinstance(value, Value):
                is_bool = isinstance(meta, TensorMeta) and meta.dtype == DataType.BOOL
                operands.append(value if is_bool else ctx.emit("Cast", [value], {"to": DataType.BOOL}))
            else:
                operands.append(ctx.const(np.asarray(bool(value))))
        return ctx.emit(op_type, operands)

    convert.__doc__ = f"Lower to {op_type} (logical_*: operands read as x != 0; bitwise forms: booleans only)."
    return convert


def _booleans_only(call: OpCall) -> None:
    """Refuse a bitwise op on integer tensors: ONNX's And/Or/Xor/Not take booleans only, and its
    BitwiseAnd... need opset 18 (the IR is opset 17); the file would not load."""
    for name in ("self", "other"):
        meta = call.metas.get(name)
        if isinstance(meta, TensorMeta) and meta.dtype != DataType.BOOL:
            raise call.unsupported(f"{call.op} on {meta.dtype.name.lower()} tensors (bitwise: ONNX's And, Or, Xor and "
                                   "Not take booleans; its Bitwise* ops need opset 18)")


for _keys, _op in {
    ("aten.add",): "Add", ("aten.sub",): "Sub", ("aten.mul",): "Mul",
    ("aten.maximum",): "Max", ("aten.minimum",): "Min", ("aten.eq",): "Equal", ("aten.lt",): "Less",
    ("aten.gt",): "Greater", ("aten.le",): "LessOrEqual", ("aten.ge",): "GreaterOrEqual",
}.items():
    lowers(*_keys, to=_op)(_binary(_op))  # type: ignore[arg-type]
for _keys, _op in {
    ("aten.logical_and", "aten.__and__", "aten.bitwise_and"): "And",
    ("aten.logical_or", "aten.__or__", "aten.bitwise_or"): "Or",
    ("aten.logical_xor", "aten.__xor__", "aten.bitwise_xor"): "Xor",
}.items():
    lowers(*_keys, to=_op, notes="logical_*: any dtype (x != 0); bitwise forms: booleans (integers are "
           "refused: ONNX's Bitwise* ops need opset 18)")(_logical(_op))  # type: ignore[arg-type]
lowers("aten.rsub", to="Sub")(_binary("Sub", reverse=True))  # type: ignore[arg-type]



@lowers("aten.remainder", to="Mod(fmod=1)+Where / Mod", notes="Python semantics (sign of the divisor)")
def remainder(call: OpCall, ctx: LowerContext) -> Value:
    """Lower remainder as torch computes it: ``r = fmod(a, b)``, plus ``b`` where ``r`` is non-zero and
    its sign differs from ``b``'s (floats; ``fmod`` is exact where ``a - floor(a / b) * b`` rounds the
    quotient: remainder(-3.9, 0.1) is 0.09999996, the formula 0); Mod(fmod=0) for integers."""
    like = call.out_meta
    a = _cast(ctx, _operand(call, ctx, "self", like), call.metas.get("self"), like)
    b = _cast(ctx, _operand(call, ctx, "other", like), call.metas.get("other"), like)
    if like.dtype.is_floating_point():
        r = ctx.emit("Mod", [a, b], {"fmod": 1})
        return ctx.emit("Where", [_wraps(ctx, r, b, like), ctx.emit("Add", [r, b]), r])
    return ctx.emit("Mod", [a, b], {"fmod": 0})


def _wraps(ctx: LowerContext, r: Value, b: Value, like: TensorMeta) -> Value:
    """Where a truncated remainder ``r`` of a division by ``b`` is non-zero and of the other sign than
    ``b``: there the floored quotient is one less than the truncated one (and the remainder ``r + b``)."""
    zero = ctx.scalar_like(0, like)
    signs_differ = ctx.emit("Xor", [ctx.emit("Less", [r, zero]), ctx.emit("Less", [b, zero])])
    return ctx.emit("And", [signs_differ, ctx.emit("Not", [ctx.emit("Equal", [r, zero])])])


def floored_quotient(ctx: LowerContext, a: Value, b: Value, like: TensorMeta) -> Value:
    """``a`` divided by ``b`` rounded towards -inf, as torch computes it.

    Integers: the truncated quotient ``q``, less one where ``a - q * b`` wraps (no intermediate that
    can overflow: ``(a - Mod(a, b)) / b`` did, -2147483647 // 7 came out positive). Floats: torch's
    (and Python's) rule, which divides the exact ``a - fmod(a, b)`` rather than flooring the rounded
    ``a / b``: -3.9 // 0.1 is -40 there, floor(-3.9 / 0.1) = floor(-39.0) is -39. ``div = (a -
    fmod(a, b)) / b``, less one where the remainder wraps; its floor, plus one where ``div`` is more
    than half above it; a zero takes the sign of ``a / b``; a zero divisor gives ``a / b``.
    """
    if not like.dtype.is_floating_point():
        q = ctx.emit("Div", [a, b])
        r = ctx.emit("Sub", [a, ctx.emit("Mul", [q, b])])
        return ctx.emit("Sub", [q, ctx.emit("Cast", [_wraps(ctx, r, b, like)], {"to": like.dtype})])
    zero = ctx.scalar_like(0.0, like)
    mod = ctx.emit("Mod", [a, b], {"fmod": 1})
    div = ctx.emit("Div", [ctx.emit("Sub", [a, mod]), b])
    div = ctx.emit("Sub", [div, ctx.emit("Cast", [_wraps(ctx, mod, b, like)], {"to": like.dtype})])
    floor = ctx.emit("Floor", [div])
    above_half = ctx.emit("Greater", [ctx.emit("Sub", [div, floor]), ctx.scalar_like(0.5, like)])
    floor = ctx.emit("Add", [floor, ctx.emit("Cast", [above_half], {"to": like.dtype})])
    quotient = ctx.emit("Div", [a, b])
    signed_zero = ctx.emit("Mul", [quotient, zero])  # |a / b| < 1 where div is 0: finite
    y = ctx.emit("Where", [ctx.emit("Equal", [div, zero]), signed_zero, floor])
    return ctx.emit("Where", [ctx.emit("Equal", [b, zero]), quotient, y])


@lowers("aten.div", to="Div", notes="rounding_mode 'floor' as floor_divide; 'trunc' adds Floor/Abs/Sign (floats)")
def div(call: OpCall, ctx: LowerContext) -> Value:
    """Lower div to Div; rounding_mode='floor' as floor_divide (``floored_quotient``), 'trunc' to
    Sign(q) * Floor(|q|) on floats (integer Div truncates already)."""
    like = call.out_meta
    a = _cast(ctx, _operand(call, ctx, "self", like), call.metas.get("self"), like)
    b = _cast(ctx, _operand(call, ctx, "other", like), call.metas.get("other"), like)
    mode = call.args.get("rounding_mode")
    if mode == "floor":
        return floored_quotient(ctx, a, b, like)
    if not like.dtype.is_floating_point():  # integer Div truncates
        return ctx.emit("Div", [a, b])
    y = ctx.emit("Div", [a, b])
    if mode == "trunc":
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


@lowers("aten.floor_divide", to="Mod(fmod=1)+Div+Floor / Div+Mul+Sub", notes="rounds towards -inf, as torch does")
def floor_divide(call: OpCall, ctx: LowerContext) -> Value:
    """Lower floor_divide as torch computes it (``floored_quotient``)."""
    like = call.out_meta
    a = _cast(ctx, _operand(call, ctx, "self", like), call.metas.get("self"), like)
    b = _cast(ctx, _operand(call, ctx, "other", like), call.metas.get("other"), like)
    return floored_quotient(ctx, a, b, like)


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


@lowers("aten.atan2", to="Atan+Div+Where", notes="quadrant from the signs, signed zeros and infinities as torch")
def atan2(call: OpCall, ctx: LowerContext) -> Value:
    """Lower atan2(y, x) to atan(y / x), plus pi with y's sign where x's sign bit is set.

    The sign bits are read as C's ``signbit`` does (``v < 0 or 1 / v < 0``: -0 counts), so that
    atan2(-0, -1) is -pi and atan2(0, -0) is pi, as in torch (the ``x == 0`` and ``y < 0`` tests of a
    plain formula give pi and 0). Where both are zero, x becomes +-1 (the quotient then is y's signed
    zero); where both are infinite, both become +-1 (the quotient +-1: +-pi/4, +-3pi/4).
    """
    like = call.out_meta
    y = _cast(ctx, call.tensor("self"), call.metas.get("self"), like)
    x = _cast(ctx, call.tensor("other"), call.metas.get("other"), like)
    zero, one = ctx.scalar_like(0.0, like), ctx.scalar_like(1.0, like)

    def signbit(v: Value) -> Value:
        return ctx.emit("Or", [ctx.emit("Less", [v, zero]), ctx.emit("Less", [ctx.emit("Div", [one, v]), zero])])

    def unit(negative: Value) -> Value:
        return ctx.emit("Where", [negative, ctx.scalar_like(-1.0, like), one])

    neg_x, neg_y = signbit(x), signbit(y)
    both_zero = ctx.emit("And", [ctx.emit("Equal", [x, zero]), ctx.emit("Equal", [y, zero])])
    both_inf = ctx.emit("And", [ctx.emit("IsInf", [x]), ctx.emit("IsInf", [y])])
    x = ctx.emit("Where", [ctx.emit("Or", [both_zero, both_inf]), unit(neg_x), x])
    y = ctx.emit("Where", [both_inf, unit(neg_y), y])
    base = ctx.emit("Atan", [ctx.emit("Div", [y, x])])
    pi = ctx.emit("Where", [neg_y, ctx.scalar_like(-np.pi, like), ctx.scalar_like(np.pi, like)])
    return ctx.emit("Add", [base, ctx.emit("Where", [neg_x, pi, zero])])


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
