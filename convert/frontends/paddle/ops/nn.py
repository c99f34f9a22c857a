"""Neural-network ops: convolutions, batch norm, pooling, activations, softmax, dropout, resize.

Only NCHW layouts are supported; an NHWC op raises (``data_format`` names the layout).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from convert.frontends.paddle.context import PaddleContext
from convert.frontends.paddle.ops import Converter, register
from convert.frontends.paddle.program import Op
from convert.ir import RefusedError, Value

__all__: list[str] = []


def _nchw(op: Op) -> None:
    layout = op.str_("data_format", "data_layout", default="NCHW")
    if layout not in ("NCHW", "AnyLayout", ""):
        raise RefusedError(f"data_format '{layout}' is not supported (only NCHW); re-export the model in NCHW")


def _pads(op: Op, spatial: int, name: str = "paddings") -> list[int]:
    """Paddle paddings ([h, w] or [h0, h1, w0, w1]) -> ONNX pads [h0, w0, h1, w1]."""
    p = op.ints(name, default=[0] * spatial)
    if len(p) == spatial:
        return p + p
    if len(p) == 2 * spatial:
        begins = p[0::2]
        ends = p[1::2]
        return begins + ends
    raise RefusedError(f"{name} {p} has {len(p)} values; expected {spatial} or {2 * spatial}")


def _auto_pad(op: Op) -> str | None:
    algo = op.str_("padding_algorithm", default="EXPLICIT").upper()
    return {"SAME": "SAME_UPPER", "VALID": "VALID"}.get(algo)


@register("conv2d", "depthwise_conv2d", maps_to="Conv",
          notes="NCHW; padding_algorithm EXPLICIT/SAME/VALID; asymmetric paddings")
def conv2d(op: Op, ctx: PaddleContext) -> None:
    """conv2d / depthwise_conv2d -> Conv (groups from the op)."""
    _nchw(op)
    x = ctx.input(op, "Input")
    w = ctx.input(op, "Filter")
    attrs: dict[str, object] = {
        "strides": op.ints("strides", default=[1, 1]),
        "dilations": op.ints("dilations", default=[1, 1]),
        "group": op.int_("groups", default=1),
    }
    auto = _auto_pad(op)
    if auto:
        attrs["auto_pad"] = auto
    else:
        attrs["pads"] = _pads(op, 2)
    inputs = [x, w]
    if ctx.has(op, "Bias"):
        inputs.append(ctx.input(op, "Bias"))
    ctx.bind(op, "Output", ctx.emit("Conv", inputs, attrs))


@register("conv2d_transpose", "depthwise_conv2d_transpose", maps_to="ConvTranspose",
          notes="NCHW; output_padding and output_size honoured")
def conv2d_transpose(op: Op, ctx: PaddleContext) -> None:
    """conv2d_transpose -> ConvTranspose (Filter is [Cin, Cout/groups, kh, kw], as in ONNX)."""
    _nchw(op)
    attrs: dict[str, object] = {
        "strides": op.ints("strides", default=[1, 1]),
        "dilations": op.ints("dilations", default=[1, 1]),
        "group": op.int_("groups", default=1),
    }
    auto = _auto_pad(op)
    if auto:
        attrs["auto_pad"] = auto
    else:
        attrs["pads"] = _pads(op, 2)
    out_pad = op.ints("output_padding")
    if out_pad:
        attrs["output_padding"] = out_pad
    size = op.ints("output_size")
    static = ctx.static(op, "output_size")
    if static is not None and static.size:
        size = [int(v) for v in static]
    if size:
        attrs["output_shape"] = [int(v) for v in size]
        attrs.pop("pads", None)
    inputs = [ctx.input(op, "Input"), ctx.input(op, "Filter")]
    ctx.bind(op, "Output", ctx.emit("ConvTranspose", inputs, attrs))


@register("batch_norm", "batch_norm_", maps_to="BatchNormalization",
          notes="inference form (running statistics)")
def batch_norm(op: Op, ctx: PaddleContext) -> None:
    """batch_norm -> BatchNormalization with the running mean/variance."""
    _nchw(op)
    ins = [ctx.input(op, s) for s in ("X", "Scale", "Bias", "Mean", "Variance")]
    y = ctx.emit("BatchNormalization", ins, {"epsilon": op.float_("epsilon", default=1e-5)})
    ctx.bind(op, "Y", y)


def _ksize(op: Op, ctx: PaddleContext) -> list[int]:
    """The kernel (or adaptive output) size: two integers of at least 1 (else a damaged file)."""
    static = ctx.static(op, "ksize")
    if static is not None:
        k = [int(v) for v in np.asarray(static).reshape(-1)]
    else:
        k = op.ints("ksize")
        if not k:
            raise RefusedError("kernel size is neither an attribute nor a constant input")
    if len(k) != 2 or min(k) < 1:
        raise RefusedError(f"kernel size {k} is not two sizes of at least 1. Is the model file damaged?")
    return k


@register("pool2d", maps_to="MaxPool|AveragePool|GlobalMaxPool|GlobalAveragePool",
          notes="max/avg; ceil_mode, exclusive, global_pooling; adaptive over a static HxW "
                "(uneven windows -> Slice + ReduceMax/ReduceMean)")
def pool2d(op: Op, ctx: PaddleContext) -> None:
    """pool2d -> (Global)MaxPool / (Global)AveragePool."""
    _nchw(op)
    kind = op.str_("pooling_type", default="max")
    if kind not in ("max", "avg"):
        raise RefusedError(f"pooling_type '{kind}' is not supported")
    x = ctx.input(op, "X")
    ksize = _ksize(op, ctx)
    glob = "GlobalMaxPool" if kind == "max" else "GlobalAveragePool"
    if op.bool_("global_pooling") or (op.bool_("adaptive") and ksize == [1, 1]):
        ctx.bind(op, "Out", ctx.emit(glob, [x]))
        return
    onnx_op = "MaxPool" if kind == "max" else "AveragePool"
    if op.bool_("adaptive"):
        ctx.bind(op, "Out", _adaptive(op, ctx, x, ksize, kind))
        return
    attrs: dict[str, object] = {
        "kernel_shape": ksize,
        "strides": op.ints("strides", default=[1, 1]),
        "ceil_mode": int(op.bool_("ceil_mode")),
    }
    auto = _auto_pad(op)
    if auto:
        attrs["auto_pad"] = auto
    else:
        attrs["pads"] = _pads(op, 2)
    if kind == "avg":
        attrs["count_include_pad"] = 0 if op.bool_("exclusive", default=True) else 1
    ctx.bind(op, "Out", ctx.emit(onnx_op, [x], attrs))


_MAX_ADAPTIVE = 1024  # adaptive output rows/columns beyond the input's size (each is a Slice + Reduce)


def _adaptive(op: Op, ctx: PaddleContext, x: Value, out: list[int], kind: str) -> Value:
    """Adaptive pooling over a static H x W: one pool when windows are equal, else per-window.

    Paddle's window ``i`` along a dim of size ``n`` pooled to ``m`` is ``[floor(i n / m),
    ceil((i + 1) n / m))``. Windows are products of intervals, so max and mean separate into a
    pass over H then a pass over W (Slice + Reduce per output row/column, then Concat).
    """
    shape = ctx.shape(op, "X")
    if shape is None or len(shape) != 4 or min(shape[2:]) <= 0:
        raise RefusedError("adaptive pooling needs a static input height and width")
    h, w = shape[2], shape[3]
    if out[0] > max(h, _MAX_ADAPTIVE) or out[1] > max(w, _MAX_ADAPTIVE):  # a window per output row: 2^31 hung
        raise RefusedError(f"adaptive output size {out} for a {h}x{w} input is beyond any model's "
                           f"(at most the input's size or {_MAX_ADAPTIVE}). Is the model file damaged?")
    if h % out[0] == 0 and w % out[1] == 0:
        k = [h // out[0], w // out[1]]
        onnx_op = "MaxPool" if kind == "max" else "AveragePool"
        return ctx.emit(onnx_op, [x], {"kernel_shape": k, "strides": k})
    reduce = "ReduceMax" if kind == "max" else "ReduceMean"
    y = x
    for axis, n, m in ((2, h, out[0]), (3, w, out[1])):
        if n == m:
            continue
        parts = []
        axes = ctx.const(np.array([axis], np.int64))
        for i in range(m):
            start, end = (i * n) // m, -((-(i + 1) * n) // m)
            piece = ctx.emit("Slice", [y, ctx.const(np.array([start], np.int64)),
                                       ctx.const(np.array([end], np.int64)), axes])
            parts.append(ctx.emit(reduce, [piece], {"axes": [axis], "keepdims": 1}))
        y = ctx.emit("Concat", parts, {"axis": axis})
    return y


@register("max_pool2d_with_index", maps_to="MaxPool|GlobalMaxPool",
          notes="adaptive or plain max pooling; the Mask (argmax) output is not produced")
def max_pool2d_with_index(op: Op, ctx: PaddleContext) -> None:
    """max_pool2d_with_index (adaptive_max_pool2d) -> max pooling; Mask is left unbound."""
    _nchw(op)
    x = ctx.input(op, "X")
    ksize = op.ints("kernel_size", "ksize")
    if op.bool_("global_pooling") or (op.bool_("adaptive") and ksize == [1, 1]):
        ctx.bind(op, "Out", ctx.emit("GlobalMaxPool", [x]))
    elif op.bool_("adaptive"):
        ctx.bind(op, "Out", _adaptive(op, ctx, x, ksize, "max"))
    else:
        attrs = {"kernel_shape": ksize, "strides": op.ints("strides", default=[1, 1]),
                 "pads": _pads(op, 2), "ceil_mode": int(op.bool_("ceil_mode"))}
        ctx.bind(op, "Out", ctx.emit("MaxPool", [x], attrs))


def _unary(onnx_op: str, attrs_fn: Callable[[Op], dict[str, object]] | None = None) -> Converter:
    def convert(op: Op, ctx: PaddleContext) -> None:
        attrs = attrs_fn(op) if attrs_fn else None
        ctx.bind(op, "Out", ctx.emit(onnx_op, [ctx.input(op, "X")], attrs))

    convert.__doc__ = f"-> {onnx_op}"
    return convert


for _names, _onnx in [
    (("relu", "relu_"), "Relu"), (("sigmoid", "sigmoid_"), "Sigmoid"), (("tanh", "tanh_"), "Tanh"),
    (("exp", "exp_"), "Exp"), (("sqrt", "sqrt_"), "Sqrt"), (("abs", "abs_"), "Abs"),
    (("floor", "floor_"), "Floor"), (("erf",), "Erf"), (("log", "log_"), "Log"),
    (("assign", "assign_", "share_data", "share_data_"), "Identity"),
]:
    register(*_names, maps_to=_onnx)(_unary(_onnx))
register("leaky_relu", "leaky_relu_", maps_to="LeakyRelu")(
    _unary("LeakyRelu", lambda op: {"alpha": op.float_("alpha", "negative_slope", default=0.02)}))


@register("relu6", "relu6_", maps_to="Clip", notes="threshold attribute honoured")
def relu6(op: Op, ctx: PaddleContext) -> None:
    """relu6 -> Clip(0, threshold)."""
    t = op.float_("threshold", default=6.0)
    y = ctx.emit("Clip", [ctx.input(op, "X"), ctx.const(np.float32(0)), ctx.const(np.float32(t))])
    ctx.bind(op, "Out", y)


@register("hard_swish", "hardswish", "hardswish_", maps_to="HardSwish",
          notes="non-default threshold/scale/offset -> Add/Clip/Mul/Div")
def hard_swish(op: Op, ctx: PaddleContext) -> None:
    """hard_swish: x * clip(x + offset, 0, threshold) / scale -> HardSwish when default (6, 6, 3)."""
    x = ctx.input(op, "X")
    t, s, o = (op.float_(k, default=d) for k, d in (("threshold", 6.0), ("scale", 6.0), ("offset", 3.0)))
    if (t, s, o) == (6.0, 6.0, 3.0):
        ctx.bind(op, "Out", ctx.emit("HardSwish", [x]))
        return
    shifted = ctx.emit("Add", [x, ctx.const(np.float32(o))])
    clipped = ctx.emit("Clip", [shifted, ctx.const(np.float32(0)), ctx.const(np.float32(t))])
    y = ctx.emit("Div", [ctx.emit("Mul", [x, clipped]), ctx.const(np.float32(s))])
    ctx.bind(op, "Out", y)


@register("hard_sigmoid", "hardsigmoid", "hardsigmoid_", maps_to="HardSigmoid")
def hard_sigmoid(op: Op, ctx: PaddleContext) -> None:
    """hard_sigmoid(slope, offset) -> HardSigmoid(alpha=slope, beta=offset)."""
    attrs = {"alpha": op.float_("slope", default=0.2), "beta": op.float_("offset", default=0.5)}
    ctx.bind(op, "Out", ctx.emit("HardSigmoid", [ctx.input(op, "X")], attrs))


@register("swish", "silu", "swish_", "silu_", maps_to="Sigmoid+Mul", notes="beta (swish) honoured")
def swish(op: Op, ctx: PaddleContext) -> None:
    """swish / silu: x * sigmoid(beta * x)."""
    x = ctx.input(op, "X")
    beta = op.float_("beta", default=1.0)
    z = x if beta == 1.0 else ctx.emit("Mul", [x, ctx.const(np.float32(beta))])
    ctx.bind(op, "Out", ctx.emit("Mul", [x, ctx.emit("Sigmoid", [z])]))


@register("gelu", "gelu_", maps_to="Erf|Tanh formula", notes="approximate=True uses the tanh form")
def gelu(op: Op, ctx: PaddleContext) -> None:
    """gelu: 0.5 x (1 + erf(x / sqrt 2)), or the tanh approximation (opset 17 has no Gelu)."""
    x = ctx.input(op, "X")
    if op.bool_("approximate"):
        cube = ctx.emit("Mul", [ctx.emit("Mul", [x, x]), x])
        inner = ctx.emit("Add", [x, ctx.emit("Mul", [cube, ctx.const(np.float32(0.044715))])])
        t = ctx.emit("Tanh", [ctx.emit("Mul", [inner, ctx.const(np.float32(math.sqrt(2 / math.pi)))])])
    else:
        t = ctx.emit("Erf", [ctx.emit("Mul", [x, ctx.const(np.float32(1 / math.sqrt(2)))])])
    half = ctx.emit("Mul", [x, ctx.const(np.float32(0.5))])
    ctx.bind(op, "Out", ctx.emit("Mul", [half, ctx.emit("Add", [t, ctx.const(np.float32(1))])]))


@register("softmax", "softmax_", maps_to="Softmax")
def softmax(op: Op, ctx: PaddleContext) -> None:
    """softmax(axis) -> Softmax(axis) (opset 13+ semantics: one axis, as in Paddle)."""
    ctx.bind(op, "Out", ctx.emit("Softmax", [ctx.input(op, "X")], {"axis": op.int_("axis", default=-1)}))


@register("log_softmax", maps_to="LogSoftmax")
def log_softmax(op: Op, ctx: PaddleContext) -> None:
    """log_softmax(axis) -> LogSoftmax(axis)."""
    ctx.bind(op, "Out", ctx.emit("LogSoftmax", [ctx.input(op, "X")], {"axis": op.int_("axis", default=-1)}))


@register("dropout", "dropout_", maps_to="Identity|Mul",
          notes="upscale_in_train -> identity; downgrade_in_infer -> x * (1 - p)")
def dropout(op: Op, ctx: PaddleContext) -> None:
    """dropout at inference: identity, or scaling by (1 - p) for downgrade_in_infer."""
    x = ctx.input(op, "X")
    mode = op.str_("dropout_implementation", "mode", default="downgrade_in_infer")
    if mode == "upscale_in_train":
        ctx.diagnostics.note("dropout (upscale_in_train) is the identity at inference: dropped")
        ctx.bind(op, "Out", x)
        return
    p = ctx.static(op, "P")
    prob = float(p.reshape(-1)[0]) if p is not None else op.float_("dropout_prob", "p", default=0.5)
    ctx.bind(op, "Out", ctx.emit("Mul", [x, ctx.const(np.float32(1.0 - prob))]))


def _interp_mode(op: Op) -> dict[str, object]:
    method = op.str_("interp_method", default="bilinear" if "bilinear" in op.type else "nearest")
    align = op.bool_("align_corners")
    if method == "nearest":
        if align:
            return {"mode": "nearest", "coordinate_transformation_mode": "align_corners",
                    "nearest_mode": "round_prefer_ceil"}
        return {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    if method == "bilinear":
        ctm = "half_pixel" if op.int_("align_mode", default=1) == 0 else "asymmetric"
        if align:
            ctm = "align_corners"
        return {"mode": "linear", "coordinate_transformation_mode": ctm}
    raise RefusedError(f"interp_method '{method}' is not supported (nearest, bilinear)")


@register("nearest_interp", "nearest_interp_v2", "bilinear_interp", "bilinear_interp_v2",
          maps_to="Resize", notes="NCHW; align_corners/align_mode; size from SizeTensor, OutSize, "
                                   "Scale or attributes")
def interpolate(op: Op, ctx: PaddleContext) -> None:
    """nearest/bilinear interpolation -> Resize (sizes or scales, as Paddle picks them)."""
    _nchw(op)
    x = ctx.input(op, "X")
    attrs = _interp_mode(op)
    sizes = None
    if ctx.has(op, "SizeTensor"):
        parts = [ctx.emit("Cast", [ctx.emit("Reshape", [v, ctx.const(np.array([1], np.int64))])],
                          {"to": 7}) for v in ctx.inputs(op, "SizeTensor")]
        sizes = parts[0] if len(parts) == 1 else ctx.emit("Concat", parts, {"axis": 0})
    elif ctx.has(op, "OutSize"):
        sizes = ctx.emit("Cast", [ctx.input(op, "OutSize")], {"to": 7})
    scales = None
    if sizes is None:
        scale = ctx.static(op, "Scale")
        if scale is None:
            scale = np.asarray(op.floats("scale"), dtype=np.float32)
        scale = np.asarray(scale, dtype=np.float32).reshape(-1)
        if scale.size and float(scale.min()) > 0:
            hw = scale if scale.size == 2 else np.repeat(scale[:1], 2)
            scales = ctx.const(np.concatenate([[1.0, 1.0], hw]).astype(np.float32))
        else:
            oh, ow = op.int_("out_h", default=-1), op.int_("out_w", default=-1)
            if oh <= 0 or ow <= 0:
                raise RefusedError("no output size: none of SizeTensor, OutSize, Scale, scale, "
                                 "out_h/out_w is set")
            sizes = ctx.const(np.array([oh, ow], np.int64))
    if scales is not None:
        y = ctx.emit("Resize", [x, None, scales], attrs)
    else:
        nc = ctx.emit("Slice", [ctx.emit("Shape", [x]), ctx.const(np.array([0], np.int64)),
                                ctx.const(np.array([2], np.int64))])
        full = ctx.emit("Concat", [nc, sizes], {"axis": 0})
        y = ctx.emit("Resize", [x, None, None, full], attrs)
    ctx.bind(op, "Out", y)


@register("layer_norm", maps_to="LayerNormalization", notes="begin_norm_axis honoured")
def layer_norm(op: Op, ctx: PaddleContext) -> None:
    """layer_norm -> LayerNormalization(axis=begin_norm_axis) (Scale/Bias are flattened in Paddle)."""
    x = ctx.input(op, "X")
    axis = op.int_("begin_norm_axis", default=1)
    shape = ctx.shape(op, "X")
    inputs: list[Value | None] = [x]
    norm_shape = None
    if shape is not None and all(d > 0 for d in shape[axis:]):
        norm_shape = np.array(shape[axis:], np.int64)
    for slot in ("Scale", "Bias"):
        if not ctx.has(op, slot):
            inputs.append(None)
            continue
        v = ctx.input(op, slot)
        if norm_shape is not None and len(norm_shape) > 1:
            v = ctx.emit("Reshape", [v, ctx.const(norm_shape)])
        inputs.append(v)
    if inputs[1] is None:
        raise RefusedError("layer_norm without Scale is not supported")
    if inputs[2] is None:
        inputs.pop()
    y = ctx.emit("LayerNormalization", inputs, {"axis": axis, "epsilon": op.float_("epsilon", default=1e-5)})
    ctx.bind(op, "Y", y)


@register("prelu", maps_to="PRelu", notes="mode all/channel/element; NCHW")
def prelu(op: Op, ctx: PaddleContext) -> None:
    """prelu(mode) -> PRelu, with the per-channel slope reshaped to [C, 1, ..., 1]."""
    _nchw(op)
    x = ctx.input(op, "X")
    alpha = ctx.input(op, "Alpha")
    mode = op.str_("mode", default="all")
    rank = ctx.rank(op, "X")
    if mode == "channel":
        if rank is None:
            raise RefusedError("channel-wise prelu needs the input rank")
        alpha = ctx.emit("Reshape", [alpha, ctx.const(np.array([-1] + [1] * (rank - 2), np.int64))])
    elif mode == "all":
        alpha = ctx.emit("Reshape", [alpha, ctx.const(np.array([1], np.int64))])
    elif mode != "element":
        raise RefusedError(f"prelu mode '{mode}' is not supported")
    ctx.bind(op, "Out", ctx.emit("PRelu", [x, alpha]))


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}


@register("pad3d", maps_to="Pad", notes="NCDHW/NCHW-as-5D; constant, reflect, replicate (circular needs opset 19)")
def pad3d(op: Op, ctx: PaddleContext) -> None:
    """pad3d(paddings=[left, right, top, bottom, front, back], mode, value) -> Pad on a 5-D input."""
    layout = op.str_("data_format", default="NCDHW")
    if layout != "NCDHW":
        raise RefusedError(f"data_format '{layout}' is not supported (only NCDHW)")
    mode = op.str_("mode", default="constant")
    if mode not in _PAD_MODES:
        raise RefusedError(f"pad mode '{mode}' is not supported at opset 17")
    static = ctx.static(op, "Paddings")
    pads = [int(v) for v in static] if static is not None else op.ints("paddings")
    if len(pads) != 6:
        raise RefusedError(f"paddings {pads} must have 6 values (or be a constant input)")
    left, right, top, bottom, front, back = pads
    onnx_pads = np.array([0, 0, front, top, left, 0, 0, back, bottom, right], np.int64)
    inputs = [ctx.input(op, "X"), ctx.const(onnx_pads)]
    if mode == "constant":
        inputs.append(ctx.const(np.asarray(op.float_("value", "pad_value"), dtype=np.float32)))
    ctx.bind(op, "Out", ctx.emit("Pad", inputs, {"mode": _PAD_MODES[mode]}))
