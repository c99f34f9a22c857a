"""Caffe layer types -> IR (ONNX opset 17) nodes, one converter per ``layer { type: ... }``.

Each converter reads its parameters from the prototxt message, its blobs from the caffemodel
(``ctx.blob`` checks their size and names the layer when they do not match) and binds its tops.
Shapes are static and computed with Caffe's own rules (e.g. ceil-rounded pooling), so the IR
reproduces Caffe exactly where ONNX's defaults differ.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from convert._proto.rules import caffe_pool_size
from convert.ir import DataType, RefusedError, Registry, TensorType, Value

from .context import CaffeContext
from .reader import LayerDef

__all__ = ["LAYERS", "Converter"]

Converter = Callable[[LayerDef, CaffeContext], None]
LAYERS: Registry[Converter] = Registry("caffe layers")


def _note(layer_type: str, maps_to: str, limits: str = "") -> None:
    """Describe ``layer_type``'s support-table row (what it maps to, its limits)."""
    LAYERS.describe(layer_type, maps_to, limits)


def _p(layer: LayerDef, field: str) -> Any:
    """Return ``layer``'s ``field`` (``flatten_param`` ...); its defaults where a V1 layer lacks it.

    A V1 ``layers { type: FLATTEN }`` (``V1LayerParameter``) declares no ``flatten_param``: such a
    layer takes the defaults, as Caffe's V1-to-V2 upgrade gives it.
    """
    param = layer.param
    if field not in type(param).DESCRIPTOR.fields_by_name:
        from convert._proto import caffe_pb2

        return getattr(caffe_pb2.LayerParameter(), field)
    return getattr(param, field)


def _has(msg: Any, field: str) -> bool:
    try:
        return bool(msg.HasField(field))
    except ValueError:
        return False


def _axis(axis: int, rank: int) -> int:
    """Return ``axis`` counted from 0, as Caffe's CanonicalAxisIndex reads it (-rank..rank-1).

    Raises:
        RefusedError: outside that range (real Caffe aborts on the net: 'axis out of range').
    """
    if not -rank <= axis < rank:
        raise RefusedError(f"axis {axis} is outside the {rank}-D input's axes ({-rank}..{rank - 1}); real Caffe "
                           "refuses the net too ('axis out of range')")
    return axis + rank if axis < 0 else axis


def _hw(msg: Any, name: str, default: int) -> tuple[int, int]:
    """Read a conv/pool size given as ``name_h``/``name_w``, repeated ``name`` or scalar ``name``."""
    if _has(msg, f"{name}_h") or _has(msg, f"{name}_w"):
        return int(getattr(msg, f"{name}_h")), int(getattr(msg, f"{name}_w"))
    field = "kernel_size" if name == "kernel" else name
    value = getattr(msg, field)
    if isinstance(value, int):  # pooling declares scalars
        return (int(value), int(value)) if (_has(msg, field) or default < 0) else (default, default)
    vals = [int(v) for v in value]
    if not vals:
        return default, default
    return (vals[0], vals[0]) if len(vals) == 1 else (vals[0], vals[1])


# ---- inputs -------------------------------------------------------------------------------------
@LAYERS.register("Input")
def input_(layer: LayerDef, ctx: CaffeContext) -> None:
    """Input -> graph inputs (handled before conversion; shapes from input_param)."""


_note("Input", "graph input")


@LAYERS.register("Silence")
def silence(layer: LayerDef, ctx: CaffeContext) -> None:
    """Silence -> nothing (consumes blobs)."""


_note("Silence", "(dropped)")


# ---- convolution ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Conv:
    """convolution_param, normalised to (h, w) pairs."""

    k: tuple[int, int]
    p: tuple[int, int]
    s: tuple[int, int]
    d: tuple[int, int]
    group: int
    num_output: int
    bias: bool
    axis: int


def _conv_params(layer: LayerDef) -> _Conv:
    cp = _p(layer, "convolution_param")
    dil = [int(d) for d in cp.dilation] or [1]
    return _Conv(
        k=_hw(cp, "kernel", -1),
        p=_hw(cp, "pad", 0),
        s=_hw(cp, "stride", 1),
        d=(dil[0], dil[0]) if len(dil) == 1 else (dil[0], dil[1]),
        group=int(cp.group),
        num_output=int(cp.num_output),
        bias=bool(cp.bias_term),
        axis=int(cp.axis),
    )


@LAYERS.register("Convolution")
def convolution(layer: LayerDef, ctx: CaffeContext) -> None:
    """Convolution -> Conv (group, dilation, pad/stride/kernel scalar or h/w); 2-D only."""
    if _conv_params(layer).axis != 1:
        raise ctx.error(layer, "convolution_param.axis other than 1 is not supported")
    _convolution(layer, ctx, transposed=False)


_note("Convolution", "Conv", "2-D; axis 1")


@LAYERS.register("Deconvolution")
def deconvolution(layer: LayerDef, ctx: CaffeContext) -> None:
    """Deconvolution -> ConvTranspose (same weight layout: C_in x C_out/g x kh x kw)."""
    _convolution(layer, ctx, transposed=True)


def _check_window(layer: LayerDef, ctx: CaffeContext, size: tuple[int, int], out: tuple[int, int],
                  **fields: tuple[int, ...]) -> None:
    """Refuse strides, dilations or groups of 0 and a window that leaves no output (a corrupt file)."""
    for name, values in fields.items():
        if any(v < 1 for v in values):
            raise ctx.error(layer, f"{name} {list(values)} must be at least 1. Is the file corrupt?")
    if out[0] < 1 or out[1] < 1:
        raise ctx.error(layer, f"the window leaves no output for its {size[0]}x{size[1]} input "
                               f"(output {out[0]}x{out[1]}): kernel_size, pad or stride is wrong")


def _convolution(layer: LayerDef, ctx: CaffeContext, *, transposed: bool) -> None:
    x = ctx.input(layer)
    n, c, h, w = _rank4(layer, ctx, x)
    cp = _conv_params(layer)
    (kh, kw), (ph, pw), (sh, sw), (dh, dw) = cp.k, cp.p, cp.s, cp.d
    g, m = cp.group, cp.num_output
    if kh <= 0 or kw <= 0:
        raise ctx.error(layer, "kernel_size is missing")
    _check_window(layer, ctx, (h, w), (1, 1), stride=(sh, sw), dilation=(dh, dw), group=(g,), num_output=(m,))
    if c % g or m % g:
        raise ctx.error(layer, f"group {g} does not divide channels {c} / num_output {m}")
    weight_shape = (c, m // g, kh, kw) if transposed else (m, c // g, kh, kw)
    wt = ctx.weight(layer, ctx.blob(layer, 0, weight_shape, "weight"), "weight")
    inputs = [x, wt]
    if cp.bias:
        inputs.append(ctx.weight(layer, ctx.blob(layer, 1, (m,), "bias"), "bias"))
    if transposed:
        oh = sh * (h - 1) + dh * (kh - 1) + 1 - 2 * ph
        ow = sw * (w - 1) + dw * (kw - 1) + 1 - 2 * pw
    else:
        oh = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
        ow = (w + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    _check_window(layer, ctx, (h, w), (oh, ow))
    attrs = {
        "kernel_shape": [kh, kw],
        "pads": [ph, pw, ph, pw],
        "strides": [sh, sw],
        "dilations": [dh, dw],
        "group": g,
    }
    op = "ConvTranspose" if transposed else "Conv"
    ctx.set_top(layer, ctx.emit(op, inputs, attrs, (n, m, oh, ow)))


_note("Deconvolution", "ConvTranspose", "2-D")


def _rank4(layer: LayerDef, ctx: CaffeContext, x: Value) -> tuple[int, int, int, int]:
    shape = ctx.shape(x)
    if len(shape) != 4:
        raise ctx.error(layer, f"expects a 4-D (N, C, H, W) input, got shape {list(shape)}")
    return shape[0], shape[1], shape[2], shape[3]


# ---- pooling ----------------------------------------------------------------------------------------


@LAYERS.register("Pooling")
def pooling(layer: LayerDef, ctx: CaffeContext) -> None:
    """Pooling -> MaxPool / AveragePool / Global*Pool with Caffe's output size.

    Caffe rounds the output size up by default (``round_mode: CEIL`` in BVLC, ``ceil_mode: true``
    in the SSD fork); ONNX floors. The ceil size is reproduced with extra end padding, which
    MaxPool ignores. For AVE, Caffe's divisor counts the symmetric padding but not the extra end
    padding: with no pad it is AveragePool(count_include_pad=0); with pad and an overhanging last
    window the pad is made explicit (Pad) so count_include_pad=0 counts it. STOCHASTIC is refused.
    """
    pp = _p(layer, "pooling_param")
    x = ctx.input(layer)
    n, c, h, w = _rank4(layer, ctx, x)
    method = int(pp.pool)
    if method not in (0, 1):
        raise ctx.error(layer, "STOCHASTIC pooling has no inference equivalent")
    if pp.global_pooling:
        op = "GlobalMaxPool" if method == 0 else "GlobalAveragePool"
        ctx.set_top(layer, ctx.emit(op, [x], None, (n, c, 1, 1)))
        return
    kh, kw = _hw(pp, "kernel", -1)
    if kh <= 0 or kw <= 0:
        raise ctx.error(layer, "kernel_size is missing (and global_pooling is false)")
    ph, pw = _hw(pp, "pad", 0)
    sh, sw = _hw(pp, "stride", 1)
    _check_window(layer, ctx, (h, w), (1, 1), stride=(sh, sw))
    ceil = True
    if _has(pp, "round_mode"):
        ceil = int(pp.round_mode) == 0
    if _has(pp, "ceil_mode"):
        ceil = bool(pp.ceil_mode)
    any_pad = bool(ph or pw)
    oh = caffe_pool_size(h, kh, sh, ph, ceil, any_pad)
    ow = caffe_pool_size(w, kw, sw, pw, ceil, any_pad)
    _check_window(layer, ctx, (h, w), (oh, ow))
    eh = max(0, (oh - 1) * sh + kh - (h + 2 * ph))
    ew = max(0, (ow - 1) * sw + kw - (w + 2 * pw))
    base = {"kernel_shape": [kh, kw], "strides": [sh, sw]}
    if method == 0:
        y = ctx.emit("MaxPool", [x], {**base, "pads": [ph, pw, ph + eh, pw + ew]}, (n, c, oh, ow))
    elif not (eh or ew):
        attrs = {**base, "pads": [ph, pw, ph, pw], "count_include_pad": 1 if any_pad else 0}
        y = ctx.emit("AveragePool", [x], attrs, (n, c, oh, ow))
    elif not any_pad:
        attrs = {**base, "pads": [0, 0, eh, ew], "count_include_pad": 0}
        y = ctx.emit("AveragePool", [x], attrs, (n, c, oh, ow))
    else:
        pads = ctx.const([0, 0, ph, pw, 0, 0, ph, pw], np.int64)
        xp = ctx.emit("Pad", [x, pads], {"mode": "constant"}, (n, c, h + 2 * ph, w + 2 * pw), suffix="_pad")
        attrs = {**base, "pads": [0, 0, eh, ew], "count_include_pad": 0}
        y = ctx.emit("AveragePool", [xp], attrs, (n, c, oh, ow))
    ctx.set_top(layer, y)


_note(
    "Pooling",
    "MaxPool / AveragePool / GlobalMaxPool / GlobalAveragePool",
    "MAX and AVE; ceil or floor rounding (round_mode or ceil_mode) reproduced exactly",
)


# ---- fully connected -------------------------------------------------------------------------------
@LAYERS.register("InnerProduct")
def inner_product(layer: LayerDef, ctx: CaffeContext) -> None:
    """InnerProduct -> [Flatten] -> Gemm [-> Reshape]; honours axis and transpose."""
    ip = _p(layer, "inner_product_param")
    x = ctx.input(layer)
    shape = ctx.shape(x)
    axis = _axis(int(ip.axis), len(shape))
    k = int(np.prod(shape[axis:], dtype=np.int64))
    lead = int(np.prod(shape[:axis], dtype=np.int64))
    m = int(ip.num_output)
    transpose = bool(ip.transpose)
    wshape = (k, m) if transpose else (m, k)
    wt = ctx.weight(layer, ctx.blob(layer, 0, wshape, "weight"), "weight")
    inputs = [x, wt]
    if ip.bias_term:
        inputs.append(ctx.weight(layer, ctx.blob(layer, 1, (m,), "bias"), "bias"))
    if len(shape) != 2 or axis != 1:
        inputs[0] = ctx.emit("Flatten", [x], {"axis": axis}, (lead, k), suffix="_flatten")
    y = ctx.emit("Gemm", inputs, {"transB": 0 if transpose else 1}, (lead, m))
    if axis != 1:
        out_shape = (*shape[:axis], m)
        y = ctx.emit("Reshape", [y, ctx.const(out_shape, np.int64)], None, out_shape, suffix="_reshape")
    ctx.set_top(layer, y)


_note("InnerProduct", "Gemm", "axis and transpose honoured")


# ---- activations -------------------------------------------------------------------------------------
def _unary(op: str, attrs: Callable[[LayerDef], dict[str, object]] | None = None) -> Converter:
    def convert(layer: LayerDef, ctx: CaffeContext) -> None:
        x = ctx.input(layer)
        ctx.set_top(layer, ctx.emit(op, [x], attrs(layer) if attrs else None, ctx.shape(x)))

    convert.__doc__ = f"-> {op}"
    return convert


@LAYERS.register("ReLU")
def relu(layer: LayerDef, ctx: CaffeContext) -> None:
    """ReLU -> Relu, or LeakyRelu when negative_slope is not 0."""
    x = ctx.input(layer)
    slope = float(_p(layer, "relu_param").negative_slope)
    if slope:
        y = ctx.emit("LeakyRelu", [x], {"alpha": slope}, ctx.shape(x))
    else:
        y = ctx.emit("Relu", [x], None, ctx.shape(x))
    ctx.set_top(layer, y)


_note("ReLU", "Relu / LeakyRelu", "negative_slope")

LAYERS.register("Sigmoid")(_unary("Sigmoid"))
LAYERS.register("TanH")(_unary("Tanh"))
LAYERS.register("AbsVal")(_unary("Abs"))
LAYERS.register("BNLL")(_unary("Softplus"))
LAYERS.register("ELU")(_unary("Elu", lambda ly: {"alpha": float(_p(ly, "elu_param").alpha)}))
for _t, _m in (
    ("Sigmoid", "Sigmoid"),
    ("TanH", "Tanh"),
    ("AbsVal", "Abs"),
    ("BNLL", "Softplus"),
    ("ELU", "Elu"),
):
    _note(_t, _m)


@LAYERS.register("ReLU6")
def relu6(layer: LayerDef, ctx: CaffeContext) -> None:
    """ReLU6 (fork) -> Clip(0, 6)."""
    x = ctx.input(layer)
    ctx.set_top(layer, ctx.emit("Clip", [x, ctx.const(0.0), ctx.const(6.0)], None, ctx.shape(x)))


_note("ReLU6", "Clip(0, 6)")


@LAYERS.register("Clip")
def clip(layer: LayerDef, ctx: CaffeContext) -> None:
    """Clip (BVLC) -> Clip(min, max)."""
    x = ctx.input(layer)
    cp = _p(layer, "clip_param")
    lo, hi = ctx.const(float(cp.min)), ctx.const(float(cp.max))
    ctx.set_top(layer, ctx.emit("Clip", [x, lo, hi], None, ctx.shape(x)))


_note("Clip", "Clip")


@LAYERS.register("Swish")
def swish(layer: LayerDef, ctx: CaffeContext) -> None:
    """Swish (BVLC) -> x * Sigmoid(beta * x)."""
    x = ctx.input(layer)
    shape = ctx.shape(x)
    beta = float(_p(layer, "swish_param").beta)
    xb = x if beta == 1.0 else ctx.emit("Mul", [x, ctx.const(beta)], None, shape, suffix="_beta")
    s = ctx.emit("Sigmoid", [xb], None, shape, suffix="_sigmoid")
    ctx.set_top(layer, ctx.emit("Mul", [x, s], None, shape))


_note("Swish", "Mul(x, Sigmoid(beta x))")


@LAYERS.register("PReLU")
def prelu(layer: LayerDef, ctx: CaffeContext) -> None:
    """PReLU -> PRelu with the slope shaped (C, 1, ...), or (1,) when channel_shared (Caffe's 0-axis blob)."""
    x = ctx.input(layer)
    shape = ctx.shape(x)
    shared = bool(_p(layer, "prelu_param").channel_shared)
    if shared:
        slope = ctx.blob(layer, 0, (), "slope").reshape(1)
    else:
        slope = ctx.blob(layer, 0, (shape[1],), "slope").reshape((shape[1],) + (1,) * (len(shape) - 2))
    ctx.set_top(layer, ctx.emit("PRelu", [x, ctx.weight(layer, slope, "slope")], None, shape))


_note("PReLU", "PRelu", "channel_shared")


def _affine(layer: LayerDef, ctx: CaffeContext, x: Value, scale: float, shift: float, tag: str) -> Value:
    shape = ctx.shape(x)
    if scale != 1.0:
        x = ctx.emit("Mul", [x, ctx.const(scale)], None, shape, suffix=f"_{tag}scale")
    if shift != 0.0:
        x = ctx.emit("Add", [x, ctx.const(shift)], None, shape, suffix=f"_{tag}shift")
    return x


@LAYERS.register("Power")
def power(layer: LayerDef, ctx: CaffeContext) -> None:
    """Power -> (shift + scale * x) ^ power as Mul / Add / Pow (each only when needed)."""
    pp = _p(layer, "power_param")
    x = ctx.input(layer)
    shape = ctx.shape(x)
    y = _affine(layer, ctx, x, float(pp.scale), float(pp.shift), "")
    if float(pp.power) != 1.0:
        y = ctx.emit("Pow", [y, ctx.const(float(pp.power))], None, shape)
    elif y is x:
        y = ctx.emit("Identity", [x], None, shape)
    ctx.set_top(layer, y)


_note("Power", "Mul / Add / Pow")


@LAYERS.register("Exp")
def exp(layer: LayerDef, ctx: CaffeContext) -> None:
    """Exp -> Exp(ln(base) * (shift + scale * x)); base -1 means e."""
    ep = _p(layer, "exp_param")
    x = ctx.input(layer)
    base = float(ep.base)
    k = 1.0 if base == -1.0 else math.log(base)
    y = _affine(layer, ctx, x, float(ep.scale) * k, float(ep.shift) * k, "")
    ctx.set_top(layer, ctx.emit("Exp", [y], None, ctx.shape(x)))


_note("Exp", "Exp")


@LAYERS.register("Log")
def log(layer: LayerDef, ctx: CaffeContext) -> None:
    """Log -> Log(shift + scale * x) / ln(base); base -1 means e."""
    lp = _p(layer, "log_param")
    x = ctx.input(layer)
    shape = ctx.shape(x)
    y = _affine(layer, ctx, x, float(lp.scale), float(lp.shift), "")
    y = ctx.emit("Log", [y], None, shape)
    if float(lp.base) != -1.0:
        y = ctx.emit("Mul", [y, ctx.const(1.0 / math.log(float(lp.base)))], None, shape, suffix="_base")
    ctx.set_top(layer, y)


_note("Log", "Log")


@LAYERS.register("Threshold")
def threshold(layer: LayerDef, ctx: CaffeContext) -> None:
    """Threshold -> Cast(Greater(x, t), float)."""
    x = ctx.input(layer)
    shape = ctx.shape(x)
    t = float(_p(layer, "threshold_param").threshold)
    g = ctx.emit("Greater", [x, ctx.const(t)], None, shape, suffix="_gt")
    g.type = TensorType(DataType.BOOL)
    ctx.set_top(layer, ctx.emit("Cast", [g], {"to": 1}, shape))


_note("Threshold", "Greater + Cast")
