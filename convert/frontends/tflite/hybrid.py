"""Dynamic-range quantized operators (int8 weights, float activations) as TFLite computes them.

``TFLiteConverter`` with ``Optimize.DEFAULT`` and no representative dataset stores the weights of
CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED in int8 and leaves every activation in float.
TFLite runs such an operator with a *hybrid* kernel: it quantizes the float input to int8 on the fly,
once per batch row, multiplies int8 by int8 into int32, and scales the sums back to float. The
result is not the float operator on dequantized weights (that reading was 1.2e-3 of the output's
scale from TFLite on a small CNN, and the check failed it). Here the kernel's arithmetic is written
in ONNX:

* **the input's quantization** (per batch item: the whole image for a convolution, one row of
  features for FULLY_CONNECTED), computed as TFLite's ``tensor_utils`` do: *asymmetric* (convolutions
  with per-channel weights, FULLY_CONNECTED with ``asymmetric_quantize_inputs``): the range
  [min(x, 0), max(x, 0)] in double, scale = range / 255, the zero point of the smaller error among
  those fitted to either end, rounded half away from zero and clamped to [-128, 127]; each value
  ``round(offset + x * (1 / scale))`` in float, half away from zero, clamped; or *symmetric*
  (the others): scale = max|x| / 127, ``round(x * (127 / max|x|))`` clamped to [-127, 127]. An
  all-zero row has scale 1 and quantizes to 0.
* **the products** in integers (``ConvInteger`` / ``MatMulInteger``, exact), less the zero point
  times the weights each output actually reads (a convolution's border taps read padding, which
  counts as 0 in TFLite: the same convolution of ones gives that count);
* **the rescaling** in float, in each kernel's own order: a convolution
  ``(acc * channel_scale) * input_scale + bias``, a depthwise one ``acc * (channel_scale *
  input_scale) + bias``, FULLY_CONNECTED ``bias + acc * (input_scale * channel_scale)``.

Rounding half away from zero is ``Round`` (half to even) corrected at exact halves.
"""

from __future__ import annotations

import numpy as np

from convert.frontends.tensorflow.context import TFContext
from convert.ir import DataType, RefusedError, Value, from_array

__all__ = ["HYBRID_OPS", "quantize_rows", "rescale", "round_half_away"]

#: The operators converted with their hybrid kernel; any other operator that reads int8 weights with
#: float activations is refused (``lower.py``).
HYBRID_OPS = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"})


def _f32(ctx: TFContext, v: float) -> Value:
    return ctx.builder.const(np.array(v, np.float32))


def _f64(ctx: TFContext, v: float) -> Value:
    """A float64 scalar (``builder.const`` keeps small constants float32), one per value and graph."""
    cache = ctx.__dict__.setdefault("_hybrid_f64", {})
    key = (id(ctx.builder.graph), v)
    if key not in cache:
        cache[key] = ctx.builder.initializer(from_array(np.array(v, np.float64), name="f64"), "f64")
    return cache[key]


def round_half_away(ctx: TFContext, v: Value) -> Value:
    """``round`` (C's: halves away from zero) of a float tensor: ``Round`` (halves to even), with the
    exact halves moved away from zero."""
    floor = ctx.emit("Floor", [v])
    half = ctx.emit("Equal", [ctx.emit("Sub", [v, floor]), _f32(ctx, 0.5)])
    away = ctx.emit("Where", [ctx.emit("Less", [v, _f32(ctx, 0.0)]), floor,
                              ctx.emit("Add", [floor, _f32(ctx, 1.0)])])
    return ctx.emit("Where", [half, away, ctx.emit("Round", [v])])


def _round_half_away64(ctx: TFContext, v: Value) -> Value:
    floor = ctx.emit("Floor", [v])
    half = ctx.emit("Equal", [ctx.emit("Sub", [v, floor]), _f64(ctx, 0.5)])
    away = ctx.emit("Where", [ctx.emit("Less", [v, _f64(ctx, 0.0)]), floor,
                              ctx.emit("Add", [floor, _f64(ctx, 1.0)])])
    return ctx.emit("Where", [half, away, ctx.emit("Round", [v])])


def quantize_rows(ctx: TFContext, x: Value, axes: list[int], *, asymmetric: bool) -> tuple[Value, Value, Value | None]:
    """Quantize float ``x`` to int8 per row (the values along ``axes`` form a row), as TFLite's
    hybrid kernels do. Returns (int8 values, the float scale of each row, its int32 zero point or
    None when symmetric), the last two with ``axes`` kept as size-1 dimensions."""
    lo = ctx.emit("ReduceMin", [x], {"axes": axes, "keepdims": 1})
    hi = ctx.emit("ReduceMax", [x], {"axes": axes, "keepdims": 1})
    zero = _f32(ctx, 0.0)
    if not asymmetric:
        span = ctx.emit("Max", [ctx.emit("Abs", [lo]), ctx.emit("Abs", [hi])])
        empty = ctx.emit("Equal", [span, zero])
        span = ctx.emit("Where", [empty, _f32(ctx, 127.0), span])  # an all-zero row: scale 1, values 0
        scale = ctx.emit("Div", [span, _f32(ctx, 127.0)])
        inverse = ctx.emit("Div", [_f32(ctx, 127.0), span])
        q = round_half_away(ctx, ctx.emit("Mul", [x, inverse]))
        q = ctx.emit("Clip", [q, _f32(ctx, -127.0), _f32(ctx, 127.0)])
        return ctx.emit("Cast", [q], {"to": DataType.INT8}), scale, None
    rmin = ctx.emit("Cast", [ctx.emit("Min", [lo, zero])], {"to": DataType.DOUBLE})
    rmax = ctx.emit("Cast", [ctx.emit("Max", [hi, zero])], {"to": DataType.DOUBLE})
    empty = ctx.emit("Equal", [rmin, rmax])
    width = ctx.emit("Where", [empty, _f64(ctx, 255.0), ctx.emit("Sub", [rmax, rmin])])
    scale64 = ctx.emit("Div", [width, _f64(ctx, 255.0)])
    a = ctx.emit("Div", [rmin, scale64])
    b = ctx.emit("Div", [rmax, scale64])
    from_min = ctx.emit("Sub", [_f64(ctx, -128.0), a])
    from_max = ctx.emit("Sub", [_f64(ctx, 127.0), b])
    min_error = ctx.emit("Add", [_f64(ctx, 128.0), ctx.emit("Abs", [a])])
    max_error = ctx.emit("Add", [_f64(ctx, 127.0), ctx.emit("Abs", [b])])
    point = ctx.emit("Where", [ctx.emit("Less", [min_error, max_error]), from_min, from_max])
    point = ctx.emit("Clip", [_round_half_away64(ctx, point), _f64(ctx, -128.0), _f64(ctx, 127.0)])
    point = ctx.emit("Where", [empty, _f64(ctx, 0.0), point])
    scale = ctx.emit("Cast", [scale64], {"to": DataType.FLOAT})  # stored as float, as TFLite's scaling factor
    inverse = ctx.emit("Cast", [ctx.emit("Div", [_f64(ctx, 1.0), ctx.emit("Cast", [scale], {"to": DataType.DOUBLE})])],
                       {"to": DataType.FLOAT})
    offset = ctx.emit("Cast", [point], {"to": DataType.FLOAT})
    q = round_half_away(ctx, ctx.emit("Add", [offset, ctx.emit("Mul", [x, inverse])]))
    q = ctx.emit("Clip", [q, _f32(ctx, -128.0), _f32(ctx, 127.0)])
    return (ctx.emit("Cast", [q], {"to": DataType.INT8}), scale,
            ctx.emit("Cast", [point], {"to": DataType.INT32}))


def rescale(ctx: TFContext, acc: Value, input_scale: Value, channel_scale: Value, bias: Value | None,
            order: str) -> Value:
    """The int32 sums ``acc`` back in float, in the order of TFLite's kernel ``order``: "conv"
    ``(acc * channel) * input``, "depthwise" ``acc * (channel * input)``, "dense" ``acc * (input *
    channel)``; then ``+ bias``."""
    y = ctx.emit("Cast", [acc], {"to": DataType.FLOAT})
    if order == "conv":
        y = ctx.emit("Mul", [ctx.emit("Mul", [y, channel_scale]), input_scale])
    elif order == "depthwise":
        y = ctx.emit("Mul", [y, ctx.emit("Mul", [channel_scale, input_scale])])
    elif order == "dense":
        y = ctx.emit("Mul", [y, ctx.emit("Mul", [input_scale, channel_scale])])
    else:
        raise ValueError(order)
    return ctx.emit("Add", [y, bias]) if bias is not None else y


def weight_scales(quant: object, channels: int, what: str) -> np.ndarray:
    """The per-output-channel float32 scales of a symmetric int8 weight (one scale: repeated)."""
    scale = np.asarray(quant.scale, np.float32).reshape(-1)  # type: ignore[attr-defined]
    zero = np.asarray(quant.zero_point).reshape(-1)  # type: ignore[attr-defined]
    if zero.size and np.any(zero != 0):
        raise RefusedError(f"the {what}'s int8 values have a non-zero zero point, which TFLite's hybrid kernels "
                           "do not take")
    if scale.size not in (1, channels):
        raise RefusedError(f"the {what} has {scale.size} scales for {channels} output channels")
    return np.broadcast_to(scale, (channels,)).astype(np.float32)
