"""Activations and softmax: relu, relu6/hardtanh, silu, sigmoid, tanh, gelu, leaky_relu,
hardswish, hardsigmoid, elu, mish, softplus, prelu, clamp, softmax, log_softmax.

GELU is emitted as its Erf form (the Gelu op is opset 20; the IR's canonical opset is 17);
the tanh approximation as its formula.
"""

from __future__ import annotations

import math

from convert.ir import DataType, Value

from ._base import LowerContext, OpCall, TensorMeta, lowers, norm_axis

__all__ = ["clamp", "gelu", "hardtanh", "silu", "softmax"]


def _unary(op_type: str) -> object:
    def convert(call: OpCall, ctx: LowerContext) -> Value:
        return ctx.emit(op_type, [call.tensor("self")])

    convert.__doc__ = f"Lower to one {op_type}."
    return convert


for _key, _op in {
    "aten.relu": "Relu", "aten.sigmoid": "Sigmoid", "aten.tanh": "Tanh",
    "aten.hardswish": "HardSwish", "aten.exp": "Exp", "aten.log": "Log", "aten.sqrt": "Sqrt",
    "aten.abs": "Abs", "aten.neg": "Neg", "aten.erf": "Erf", "aten.reciprocal": "Reciprocal",
    "aten.sin": "Sin", "aten.cos": "Cos", "aten.floor": "Floor", "aten.ceil": "Ceil",
    "aten.logical_not": "Not",
    "aten.tan": "Tan", "aten.asin": "Asin", "aten.acos": "Acos", "aten.atan": "Atan", "aten.sinh": "Sinh",
    "aten.cosh": "Cosh", "aten.asinh": "Asinh", "aten.acosh": "Acosh", "aten.atanh": "Atanh",
    "aten.isnan": "IsNaN",
}.items():
    lowers(_key, to=_op)(_unary(_op))  # type: ignore[arg-type]


@lowers("aten.bitwise_not", to="Not", notes="booleans (integers are refused: ONNX's BitwiseNot needs opset 18)")
def bitwise_not(call: OpCall, ctx: LowerContext) -> Value:
    """Lower ~x of booleans to Not; on integers refused (ONNX's Not takes booleans only)."""
    meta = call.meta("self")
    if meta.dtype != DataType.BOOL:
        raise call.unsupported(f"aten.bitwise_not on {meta.dtype.name.lower()} tensors (ONNX's Not takes booleans; "
                               "its BitwiseNot needs opset 18)")
    return ctx.emit("Not", [call.tensor("self")])


@lowers("aten.rsqrt", to="Sqrt+Reciprocal")
def rsqrt(call: OpCall, ctx: LowerContext) -> Value:
    """Lower rsqrt to Reciprocal(Sqrt(x))."""
    return ctx.emit("Reciprocal", [ctx.emit("Sqrt", [call.tensor("self")])])


@lowers("aten.silu", to="Sigmoid+Mul")
def silu(call: OpCall, ctx: LowerContext) -> Value:
    """Lower silu to x * Sigmoid(x)."""
    x = call.tensor("self")
    return ctx.emit("Mul", [x, ctx.emit("Sigmoid", [x])])


@lowers("aten.hardtanh", "aten.relu6", to="Clip")
def hardtanh(call: OpCall, ctx: LowerContext) -> Value:
    """Lower hardtanh / relu6 to Clip(min, max)."""
    meta = call.meta("self")
    lo = float(call.get("min_val", 0.0))  # type: ignore[arg-type]
    hi = float(call.get("max_val", 6.0))  # type: ignore[arg-type]
    return ctx.emit("Clip", [call.tensor("self"), ctx.scalar_like(lo, meta), ctx.scalar_like(hi, meta)])


@lowers("aten.clamp", "aten.clamp_min", "aten.clamp_max", to="Clip / Max+Min", notes="tensor bounds use Max/Min")
def clamp(call: OpCall, ctx: LowerContext) -> Value:
    """Lower clamp with scalar bounds to Clip; tensor bounds (broadcast) to Max then Min."""
    meta = call.meta("self")
    lo = call.args.get("min")
    hi = call.args.get("max")
    if isinstance(lo, Value) or isinstance(hi, Value):
        y = call.tensor("self")
        for bound, op_type, name in ((lo, "Max", "min"), (hi, "Min", "max")):
            if bound is None:
                continue
            if isinstance(bound, Value):
                if call.meta(name).dtype != meta.dtype:
                    bound = ctx.emit("Cast", [bound], {"to": meta.dtype})
            else:
                bound = ctx.scalar_like(bound, meta)  # type: ignore[arg-type]
            y = ctx.emit(op_type, [y, bound])
        return y
    lo_v = ctx.scalar_like(lo, meta) if lo is not None else None  # type: ignore[arg-type]
    hi_v = ctx.scalar_like(hi, meta) if hi is not None else None  # type: ignore[arg-type]
    inputs: list[Value | None] = [call.tensor("self"), lo_v]
    if hi_v is not None:
        inputs.append(hi_v)
    return ctx.emit("Clip", inputs)


@lowers("aten.gelu", to="Div+Erf+Add+Mul+Mul",
        notes="approximate='tanh' lowers to its tanh formula")
def gelu(call: OpCall, ctx: LowerContext) -> Value:
    """Lower gelu to 0.5 * x * (1 + erf(x / sqrt(2))) (or the tanh formula)."""
    x = call.tensor("self")
    meta = call.meta("self")
    if call.get("approximate", "none") == "tanh":
        cube = ctx.emit("Mul", [ctx.emit("Mul", [x, x]), x])
        inner = ctx.emit("Add", [x, ctx.emit("Mul", [cube, ctx.scalar_like(0.044715, meta)])])
        t = ctx.emit("Tanh", [ctx.emit("Mul", [inner, ctx.scalar_like(math.sqrt(2.0 / math.pi), meta)])])
        half = ctx.emit("Mul", [x, ctx.scalar_like(0.5, meta)])
        return ctx.emit("Mul", [half, ctx.emit("Add", [t, ctx.scalar_like(1.0, meta)])])
    e = ctx.emit("Erf", [ctx.emit("Div", [x, ctx.scalar_like(math.sqrt(2.0), meta)])])
    return ctx.emit("Mul", [ctx.emit("Mul", [x, ctx.emit("Add", [e, ctx.scalar_like(1.0, meta)])]),
                          ctx.scalar_like(0.5, meta)])


@lowers("aten.leaky_relu", to="LeakyRelu")
def leaky_relu(call: OpCall, ctx: LowerContext) -> Value:
    """Lower leaky_relu to LeakyRelu(alpha=negative_slope)."""
    return ctx.emit("LeakyRelu", [call.tensor("self")], {"alpha": float(call.get("negative_slope", 0.01))})  # type: ignore[arg-type]


@lowers("aten.hardsigmoid", to="HardSigmoid")
def hardsigmoid(call: OpCall, ctx: LowerContext) -> Value:
    """Lower hardsigmoid to HardSigmoid(alpha=1/6, beta=0.5)."""
    return ctx.emit("HardSigmoid", [call.tensor("self")], {"alpha": 1.0 / 6.0, "beta": 0.5})


@lowers("aten.elu", to="Elu / Where+Exp+Mul", notes="scale / input_scale (selu, celu) as their formula")
def elu(call: OpCall, ctx: LowerContext) -> Value:
    """Lower elu to Elu(alpha); with scale or input_scale (selu, celu) to
    scale * where(x > 0, x, alpha * (exp(x * input_scale) - 1)).
    """
    alpha = float(call.get("alpha", 1.0))  # type: ignore[arg-type]
    scale = float(call.get("scale", 1))  # type: ignore[arg-type]
    input_scale = float(call.get("input_scale", 1))  # type: ignore[arg-type]
    x = call.tensor("self")
    if scale == 1.0 and input_scale == 1.0:
        return ctx.emit("Elu", [x], {"alpha": alpha})
    meta = call.meta("self")
    e = _expm1(ctx, ctx.emit("Mul", [x, ctx.scalar_like(input_scale, meta)]), meta)
    y = ctx.emit("Where", [ctx.emit("Greater", [x, ctx.scalar_like(0.0, meta)]), x,
                         ctx.emit("Mul", [e, ctx.scalar_like(alpha, meta)])])
    return ctx.emit("Mul", [y, ctx.scalar_like(scale, meta)])


@lowers("aten.softplus", to="Softplus", notes="beta must be 1")
def softplus(call: OpCall, ctx: LowerContext) -> Value:
    """Lower softplus (beta=1; the threshold only matters for overflow) to Softplus."""
    if float(call.get("beta", 1)) != 1.0:  # type: ignore[arg-type]
        raise call.unsupported("softplus with beta other than 1")
    return ctx.emit("Softplus", [call.tensor("self")])


@lowers("aten.mish", to="Softplus+Tanh+Mul")
def mish(call: OpCall, ctx: LowerContext) -> Value:
    """Lower mish to x * tanh(softplus(x))."""
    x = call.tensor("self")
    return ctx.emit("Mul", [x, ctx.emit("Tanh", [ctx.emit("Softplus", [x])])])


@lowers("aten.prelu", "aten._prelu_kernel", to="PRelu")
def prelu(call: OpCall, ctx: LowerContext) -> Value:
    """Lower prelu to PRelu, reshaping the per-channel slope to broadcast over axis 1."""
    x = call.tensor("self")
    rank = call.meta("self").rank
    w = call.tensor("weight")
    wshape = call.meta("weight").dims()
    if rank > 2 and len(wshape) == 1 and wshape[0] > 1:
        w = ctx.emit("Reshape", [w, ctx.ints([wshape[0]] + [1] * (rank - 2))])
    return ctx.emit("PRelu", [x, w])


@lowers("aten.softmax", "aten._softmax", to="Softmax")
def softmax(call: OpCall, ctx: LowerContext) -> Value:
    """Lower softmax to Softmax(axis)."""
    axis = norm_axis(int(call["dim"]), call.meta("self").rank)  # type: ignore[call-overload]
    return ctx.emit("Softmax", [call.tensor("self")], {"axis": axis})


@lowers("aten.log_softmax", "aten._log_softmax", to="LogSoftmax")
def log_softmax(call: OpCall, ctx: LowerContext) -> Value:
    """Lower log_softmax to LogSoftmax(axis)."""
    axis = norm_axis(int(call["dim"]), call.meta("self").rank)  # type: ignore[call-overload]
    return ctx.emit("LogSoftmax", [call.tensor("self")], {"axis": axis})




@lowers("aten.log1p", to="Add+Log+Div+Mul+Where", notes="accurate near 0 (log(1 + x) * x / ((1 + x) - 1))")
def log1p(call: OpCall, ctx: LowerContext) -> Value:
    """Lower log1p to ``log(u) * x / (u - 1)`` with ``u = 1 + x`` (``x`` where ``u`` rounds to 1).

    ``Log(1 + x)`` loses what ``1 + x`` rounds off: log1p(1e-10) came out 0, log1p(1e-7) 19 %
    high. Dividing by the ``u - 1`` that was actually added cancels that rounding (Goldberg, "What
    every computer scientist should know about floating-point arithmetic", 1991, theorem 4).
    """
    x = call.tensor("self")
    meta = call.meta("self")
    one = ctx.scalar_like(1.0, meta)
    u = ctx.emit("Add", [x, one])
    scaled = ctx.emit("Mul", [ctx.emit("Log", [u]), ctx.emit("Div", [x, ctx.emit("Sub", [u, one])])])
    y = ctx.emit("Where", [ctx.emit("Equal", [u, one]), x, scaled])
    return ctx.emit("Where", [ctx.emit("IsInf", [x], {"detect_negative": 0}), x, y])  # inf / inf


def _expm1(ctx: LowerContext, x: Value, meta: TensorMeta) -> Value:
    """``exp(x) - 1`` accurate near 0: ``(u - 1) * x / log(u)`` with ``u = exp(x)`` (``x`` where ``u``
    rounds to 1, -1 where ``u - 1`` does, ``u`` where it overflows), as Kahan computes it."""
    one = ctx.scalar_like(1.0, meta)
    u = ctx.emit("Exp", [x])
    um1 = ctx.emit("Sub", [u, one])
    scaled = ctx.emit("Mul", [um1, ctx.emit("Div", [x, ctx.emit("Log", [u])])])
    y = ctx.emit("Where", [ctx.emit("Equal", [um1, ctx.scalar_like(-1.0, meta)]), um1, scaled])
    y = ctx.emit("Where", [ctx.emit("Equal", [u, one]), x, y])
    return ctx.emit("Where", [ctx.emit("IsInf", [u], {"detect_negative": 0}), u, y])


@lowers("aten.expm1", to="Exp+Sub+Log+Div+Mul+Where", notes="accurate near 0 ((e^x - 1) * x / log(e^x))")
def expm1(call: OpCall, ctx: LowerContext) -> Value:
    """Lower expm1 accurately near 0 (``_expm1``; ``Exp(x) - 1`` gave expm1(1e-10) = 0)."""
    return _expm1(ctx, call.tensor("self"), call.meta("self"))


@lowers("aten.round", to="Round / Mul+Round+Div", notes="decimals as torch: round(x * 10^d) / 10^d (d < 0: "
        "round(x / 10^-d) * 10^-d); half to even")
def round_(call: OpCall, ctx: LowerContext) -> Value:
    """Lower round to Round (half to even, as torch); with ``decimals`` d, as torch's kernel computes
    it in the input's precision: ``round(x * 10^d) / 10^d``, or ``round(x / 10^-d) * 10^-d`` for d < 0."""
    x = call.tensor("self")
    decimals = int(call.get("decimals", 0))  # type: ignore[call-overload]
    if decimals == 0:
        return ctx.emit("Round", [x])
    meta = call.meta("self")
    ten = ctx.scalar_like(float(10.0 ** abs(decimals)), meta)
    if decimals > 0:
        return ctx.emit("Div", [ctx.emit("Round", [ctx.emit("Mul", [x, ten])]), ten])
    return ctx.emit("Mul", [ctx.emit("Round", [ctx.emit("Div", [x, ten])]), ten])


@lowers("aten.sign", to="Sign (+IsNaN+Where)", notes="sign(NaN) is 0, as in torch")
def sign(call: OpCall, ctx: LowerContext) -> Value:
    """Lower sign to Sign; on floats a NaN gives 0, as torch's ``(0 < x) - (x < 0)`` (ONNX: NaN)."""
    x = call.tensor("self")
    y = ctx.emit("Sign", [x])
    meta = call.meta("self")
    if not meta.dtype.is_floating_point():
        return y
    return ctx.emit("Where", [ctx.emit("IsNaN", [x]), ctx.scalar_like(0.0, meta), y])


@lowers("aten.log2", "aten.log10", to="Log+Div")
def log_base(call: OpCall, ctx: LowerContext) -> Value:
    """Lower log2 / log10 to Log(x) / Log(base)."""
    base = 2.0 if call.op == "aten.log2" else 10.0
    return ctx.emit("Div", [ctx.emit("Log", [call.tensor("self")]), ctx.scalar_like(math.log(base), call.meta("self"))])


@lowers("aten.trunc", "aten.fix", to="Abs+Floor+Sign+Mul")
def trunc(call: OpCall, ctx: LowerContext) -> Value:
    """Lower trunc to Sign(x) * Floor(Abs(x)) (no Trunc op at opset 17)."""
    x = call.tensor("self")
    return ctx.emit("Mul", [ctx.emit("Sign", [x]), ctx.emit("Floor", [ctx.emit("Abs", [x])])])


@lowers("aten.isinf", to="IsInf")
def isinf(call: OpCall, ctx: LowerContext) -> Value:
    """Lower isinf to IsInf (both signs)."""
    return ctx.emit("IsInf", [call.tensor("self")])
