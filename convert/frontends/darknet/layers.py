"""Darknet ``[section]`` converters: one function per section type, registered in ``LAYERS``.

Each converter reads its options from the ``Section``, takes its parameters from the weights in
Darknet's file order, appends ONNX-semantics nodes and returns the layer's output with its
C/H/W as Darknet computes them. The heads (``[yolo]``, ``[region]``) live in ``heads.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from convert.ir import Registry, Value

from .cfg import Section
from .context import DarknetContext, LayerOut

__all__ = ["LAYERS", "LayerFn"]

LayerFn = Callable[[Section, DarknetContext], LayerOut]
LAYERS: Registry[LayerFn] = Registry("darknet layers")

# Random weights: the mean square of a batch-normalized layer's raw output (see weights.RandomWeights).
_BN_MS = 100.0


def _out_dim(sec: Section, ctx: DarknetContext, what: str, value: int) -> int:
    if value <= 0:
        raise ctx.error(sec, f"the output {what} would be {value} (input {ctx.prev.c}x{ctx.prev.h}x{ctx.prev.w})",
                        "Use a larger input size or fewer downsampling layers.")
    return value


@LAYERS.register("convolutional", "conv",
                 maps_to="Conv (+ BatchNormalization) (+ activation)", notes="not binary/xnor/deform/antialiasing")
def convolutional(sec: Section, ctx: DarknetContext) -> LayerOut:
    """[convolutional] -> Conv (+ BatchNormalization) (+ activation).

    Supports stride, stride_x/stride_y, pad/padding, groups, dilation, batch_normalize. Output size
    ``(in + 2*pad - size) / stride + 1`` with C integer division; a dilated kernel is padded by
    ``pad*dilation`` (AlexeyAB).
    """
    prev = ctx.prev
    filters = sec.int("filters", 1)
    size = sec.int("size", 1)
    stride = sec.int("stride", 1)
    sy, sx = sec.int("stride_y", stride), sec.int("stride_x", stride)
    pad = sec.int("padding", 0)
    if sec.int("pad", 0):
        pad = size // 2
    groups = sec.int("groups", 1)
    dilation = sec.int("dilation", 1)
    bn = sec.int("batch_normalize", 0)
    act = sec.get("activation", "logistic") or "logistic"
    if filters <= 0:
        raise ctx.error(sec, f"filters={filters}: the filter count must be positive")
    if size <= 0 or sx <= 0 or sy <= 0 or dilation <= 0:
        raise ctx.error(sec, "size, stride and dilation must be positive")
    if groups <= 0 or prev.c % groups or filters % groups:
        raise ctx.error(sec, f"groups={groups} does not divide the {prev.c} input channels and {filters} filters")
    # AlexeyAB pads a dilated kernel by pad*dilation but keeps the undilated output-size formula.
    out_h = _out_dim(sec, ctx, "height", (prev.h + 2 * pad - size) // sy + 1)
    out_w = _out_dim(sec, ctx, "width", (prev.w + 2 * pad - size) // sx + 1)
    if dilation > 1:
        k_eff = dilation * (size - 1) + 1
        real = ((prev.h + 2 * pad * dilation - k_eff) // sy + 1, (prev.w + 2 * pad * dilation - k_eff) // sx + 1)
        if real != (out_h, out_w):
            raise ctx.error(sec, f"dilation={dilation} with size={size}, padding={pad}: Darknet's output size "
                            f"{out_h}x{out_w} differs from the dilated convolution's {real[0]}x{real[1]}",
                            "Use pad=1 with an odd size.")
        pad *= dilation
    fan_in = prev.c // groups * size * size
    raw_ms = _BN_MS if bn else 1.0
    bias = ctx.param(sec, "bias", "bias", (filters,))
    # Random weights: keep residual branches small so sums over many blocks stay near unit scale.
    gain_ms = 0.05 if ctx.next_kind == "shortcut" else 1.0
    bn_params = ctx.batch_norm(sec, prev.value, filters, raw_ms, gain_ms) if bn else None
    weight = ctx.param(sec, "weight", "weight", (filters, prev.c // groups, size, size),
                       fan_in=fan_in, in_ms=prev.ms, out_ms=raw_ms)
    attrs: dict[str, object] = {
        "kernel_shape": [size, size], "strides": [sy, sx], "pads": [pad, pad, pad, pad],
        "dilations": [dilation, dilation], "group": groups,
    }
    if bn_params is None:
        y = ctx.emit("Conv", [prev.value, weight, bias], attrs)
        ms = 1.0
    else:
        scale, mean, _var, var_adj = bn_params
        y = ctx.emit("Conv", [prev.value, weight], attrs)
        y = ctx.emit_bn(sec, y, scale, bias, mean, var_adj)
        ms = gain_ms
    y, ms = ctx.activate(sec, y, act, ms)
    return LayerOut(y, filters, out_h, out_w, ms, sec.type)


@LAYERS.register("connected", "conn", maps_to="Flatten + Gemm (+ BatchNormalization) (+ activation)")
def connected(sec: Section, ctx: DarknetContext) -> LayerOut:
    """[connected] -> Flatten + Gemm (+ BatchNormalization) (+ activation), output N x out x 1 x 1.

    File order: biases, weights (outputs x inputs, or transposed when the header says so), then
    BN scales / rolling mean / rolling variance.
    """
    prev = ctx.prev
    outputs = sec.int("output", 1)
    bn = sec.int("batch_normalize", 0)
    act = sec.get("activation", "logistic") or "logistic"
    if outputs <= 0:
        raise ctx.error(sec, f"output={outputs}: the output count must be positive")
    inputs = prev.size
    raw_ms = _BN_MS if bn else 1.0
    transpose = bool(getattr(getattr(ctx.weights, "header", None), "transpose", False))
    bias = ctx.param(sec, "bias", "bias", (outputs,))
    wshape = (inputs, outputs) if transpose else (outputs, inputs)
    weight = ctx.param(sec, "weight", "weight", wshape, fan_in=inputs, in_ms=prev.ms, out_ms=raw_ms)
    x = ctx.emit("Flatten", [prev.value], {"axis": 1}, suffix="flatten")
    if bn:
        scale = ctx.param(sec, "bn_scale", "scale", (outputs,))
        mean = ctx.param(sec, "bn_mean", "mean", (outputs,), out_ms=raw_ms)
        var = ctx.param(sec, "bn_var", "variance", (outputs,), out_ms=raw_ms)
        var_adj = ctx.adjusted_var(sec, var, outputs)
        y = ctx.emit("Gemm", [x, weight], {"transB": 0 if transpose else 1})
        y = ctx.reshape(sec, y, [outputs, 1, 1])
        y = ctx.emit_bn(sec, y, scale, bias, mean, var_adj)
    else:
        y = ctx.emit("Gemm", [x, weight, bias], {"transB": 0 if transpose else 1})
        y = ctx.reshape(sec, y, [outputs, 1, 1])
    y, ms = ctx.activate(sec, y, act, 1.0)
    return LayerOut(y, outputs, 1, 1, ms, sec.type)


def _pool_geometry(sec: Section, ctx: DarknetContext) -> tuple[int, int, int, int, int, int, int]:
    prev = ctx.prev
    stride = sec.int("stride", 1)
    sy, sx = sec.int("stride_y", stride), sec.int("stride_x", stride)
    size = sec.int("size", stride)
    padding = sec.int("padding", size - 1)
    if size <= 0 or sx <= 0 or sy <= 0 or padding < 0:
        raise ctx.error(sec, "size and stride must be positive and padding not negative")
    out_h = _out_dim(sec, ctx, "height", (prev.h + padding - size) // sy + 1)
    out_w = _out_dim(sec, ctx, "width", (prev.w + padding - size) // sx + 1)
    before = padding // 2
    return size, sy, sx, padding, before, out_h, out_w


@LAYERS.register("maxpool", "max", maps_to="MaxPool (Darknet padding)", notes="not maxpool_depth/antialiasing")
def maxpool(sec: Section, ctx: DarknetContext) -> LayerOut:
    """[maxpool] -> MaxPool with Darknet's padding: ``padding`` (default size-1), padding/2 before.

    Output size ``(in + padding - size) / stride + 1``, so 2x2/2 on odd sizes pads bottom/right and
    2x2/1 keeps the size. Padded cells never win (they count as -inf).
    """
    prev = ctx.prev
    size, sy, sx, padding, before, out_h, out_w = _pool_geometry(sec, ctx)
    after = padding - before
    y = ctx.emit("MaxPool", [prev.value], {"kernel_shape": [size, size], "strides": [sy, sx],
                                           "pads": [before, before, after, after]})
    grow = 1.0 if size == 1 else 1.5
    return LayerOut(y, prev.c, out_h, out_w, prev.ms * grow, sec.type)


@LAYERS.register("local_avgpool", maps_to="AveragePool (count_include_pad=0)")
def local_avgpool(sec: Section, ctx: DarknetContext) -> LayerOut:
    """[local_avgpool] -> AveragePool (count_include_pad=0), with [maxpool]'s geometry."""
    prev = ctx.prev
    size, sy, sx, padding, before, out_h, out_w = _pool_geometry(sec, ctx)
    after = padding - before
    y = ctx.emit("AveragePool", [prev.value], {"kernel_shape": [size, size], "strides": [sy, sx],
                                               "pads": [before, before, after, after], "count_include_pad": 0})
    return LayerOut(y, prev.c, out_h, out_w, prev.ms, sec.type)


@LAYERS.register("avgpool", "avg", maps_to="GlobalAveragePool")
def avgpool(sec: Section, ctx: DarknetContext) -> LayerOut:
    """[avgpool] -> GlobalAveragePool (Darknet's avgpool is always global): N x C x 1 x 1."""
    prev = ctx.prev
    y = ctx.emit("GlobalAveragePool", [prev.value])
    return LayerOut(y, prev.c, 1, 1, prev.ms * 0.5, sec.type)


@LAYERS.register("route", maps_to="Concat / Slice (groups)")
def route(sec: Section, ctx: DarknetContext) -> LayerOut:
    """[route] -> Concat over channels (a single layer passes through).

    ``groups``/``group_id`` (AlexeyAB) take channel group ``group_id`` of ``groups`` from each input
    (a Slice). Every input must have the same height and width.
    """
    srcs = ctx.refs(sec, "layers")
    groups = sec.int("groups", 1)
    gid = sec.int("group_id", 0)
    if groups <= 0 or not 0 <= gid < groups:
        raise ctx.error(sec, f"groups={groups}, group_id={gid}: need groups > 0 and 0 <= group_id < groups")
    first = srcs[0]
    for s in srcs[1:]:
        if (s.h, s.w) != (first.h, first.w):
            shapes = ", ".join(f"{o.c}x{o.h}x{o.w}" for o in srcs)
            raise ctx.error(sec, f"joins maps of different spatial sizes ({shapes})",
                            "Route only layers with the same height and width.")
    parts = []
    channels = 0
    for i, s in enumerate(srcs):
        if groups == 1:
            parts.append(s.value)
            channels += s.c
            continue
        if s.c % groups:
            raise ctx.error(sec, f"groups={groups} does not divide the {s.c} channels of input {i}")
        part = s.c // groups
        parts.append(ctx.slice(sec, s.value, [1], [gid * part], [(gid + 1) * part], suffix=f"group{i}"))
        channels += part
    ms = sum(s.ms * s.c for s in srcs) / max(sum(s.c for s in srcs), 1)
    y = parts[0] if len(parts) == 1 else ctx.emit("Concat", parts, {"axis": 1})
    return LayerOut(y, channels, first.h, first.w, ms, sec.type)


def _shortcut_add(sec: Section, ctx: DarknetContext, y: Value, src: LayerOut, out: LayerOut, i: int) -> Value:
    """Return ``y + src`` the way Darknet's ``shortcut_cpu`` adds maps of other shapes.

    Darknet adds ``src[k, j*stride, i*stride]`` to ``y[k, j*sample, i*sample]`` for k < min(C),
    j < min(H), i < min(W). Lowered with Caffe-expressible ops where possible: channel Slice +
    Add + Concat for fewer channels, a 1x1 stride-s MaxPool for the strided sampling of a larger map;
    a smaller map is spread over zeros (Reshape + Pad).
    """
    b = ctx.b
    if (src.c, src.h, src.w) == (out.c, out.h, out.w):
        return ctx.emit("Add", [y, src.value])
    w1, h1, c1 = src.w, src.h, src.c
    w2, h2, c2 = out.w, out.h, out.c
    stride = max(w1 // w2, 1)
    sample = max(w2 // w1, 1)
    if stride != max(h1 // h2, 1) or sample != max(h2 // h1, 1):
        raise ctx.error(sec, f"cannot add a {c1}x{h1}x{w1} map to a {c2}x{h2}x{w2} one (uneven strides)")
    minw, minh, minc = min(w1, w2), min(h1, h2), min(c1, c2)
    x = src.value
    if c1 > minc:
        x = ctx.slice(sec, x, [1], [0], [minc], suffix=f"from{i}_channels")
    if stride > 1:
        x = ctx.emit("MaxPool", [x], {"kernel_shape": [1, 1], "strides": [stride, stride]}, suffix=f"from{i}_sample")
        rows, cols = (h1 - 1) // stride + 1, (w1 - 1) // stride + 1
    else:
        rows, cols = h1, w1
    if (rows, cols) != (minh, minw):
        x = ctx.slice(sec, x, [2, 3], [0, 0], [minh, minw], suffix=f"from{i}_crop")
    if sample > 1:
        x = ctx.reshape(sec, x, [minc, minh, 1, minw, 1], suffix=f"from{i}_spread")
        pads = np.array([0, 0, 0, 0, 0, 0, 0, 0, 0, sample - 1, 0, sample - 1], dtype=np.int64)
        x = ctx.emit("Pad", [x, b.const(pads)], suffix=f"from{i}_zeros")
        x = ctx.reshape(sec, x, [minc, minh * sample, minw * sample], suffix=f"from{i}_interleave")
    cur_h, cur_w = minh * sample, minw * sample
    if (cur_h, cur_w) != (h2, w2):
        pads = np.array([0, 0, 0, 0, 0, 0, h2 - cur_h, w2 - cur_w], dtype=np.int64)
        x = ctx.emit("Pad", [x, b.const(pads)], suffix=f"from{i}_pad")
    if minc == c2:
        return ctx.emit("Add", [y, x])
    head = ctx.slice(sec, y, [1], [0], [minc], suffix=f"from{i}_head")
    tail = ctx.slice(sec, y, [1], [minc], [c2], suffix=f"from{i}_tail")
    head = ctx.emit("Add", [head, x], suffix=f"from{i}_add")
    return ctx.emit("Concat", [head, tail], {"axis": 1})


@LAYERS.register("shortcut",
                 maps_to="Add (+ Slice/Concat/MaxPool 1x1 for other shapes) (+ activation)",
                 notes="weights_type=none, alpha=beta=1 only")
def shortcut(sec: Section, ctx: DarknetContext) -> LayerOut:
    """[shortcut] -> Add (+ activation); the output has the previous layer's shape.

    Maps of other shapes are added as Darknet's ``shortcut_cpu`` does: the first min(C) channels,
    strided sampling when the source is larger, every ``sample``-th cell when it is smaller (the
    original lineage's resnets). Only ``weights_type=none`` and alpha = beta = 1 are supported.
    """
    prev = ctx.prev
    if (sec.get("weights_type", "none") or "none") != "none":
        raise ctx.error(sec, f"weights_type={sec.options['weights_type']} is not supported",
                        "Only unweighted shortcuts convert.")
    if sec.float("alpha", 1.0) != 1.0 or sec.float("beta", 1.0) != 1.0:
        raise ctx.error(sec, "alpha/beta other than 1 are not supported", "Remove them from the cfg.")
    sec.get("weights_normalization")
    srcs = ctx.refs(sec, "from")
    y = prev.value
    ms = prev.ms
    for i, src in enumerate(srcs):
        y = _shortcut_add(sec, ctx, y, src, prev, i)
        ms += src.ms
    act = sec.get("activation", "linear") or "linear"
    # The residual stream is far from zero-mean: an activation keeps most of its mean square.
    y, _ = ctx.activate(sec, y, act, ms)
    return LayerOut(y, prev.c, prev.h, prev.w, ms, sec.type)


@LAYERS.register("upsample", maps_to="Resize nearest (x scale)")
def upsample(sec: Section, ctx: DarknetContext) -> LayerOut:
    """[upsample] -> Resize(nearest, asymmetric, floor) (x ``scale``); a negative stride sums blocks."""
    prev = ctx.prev
    stride = sec.int("stride", 2)
    scale = sec.float("scale", 1.0)
    b = ctx.b
    if stride == 0:
        raise ctx.error(sec, "stride=0")
    if stride > 0:
        scales = b.const(np.array([1, 1, stride, stride], dtype=np.float32), name=f"{ctx.name(sec)}_scales")
        y = ctx.emit("Resize", [prev.value, None, scales],
                 {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"})
        h, w = prev.h * stride, prev.w * stride
        factor = scale
    else:
        s = -stride
        if prev.h % s or prev.w % s:
            raise ctx.error(sec, f"stride={stride} does not divide the {prev.h}x{prev.w} input")
        y = ctx.emit("AveragePool", [prev.value], {"kernel_shape": [s, s], "strides": [s, s]})
        h, w = prev.h // s, prev.w // s
        factor = scale * s * s
    if factor != 1.0:
        y = ctx.emit("Mul", [y, b.const(np.array(factor, np.float32))], suffix="scale")
    return LayerOut(y, prev.c, h, w, prev.ms * factor * factor, sec.type)


@LAYERS.register("reorg", maps_to="Reshape + Transpose (Darknet's reorg)", notes="not reverse/flatten/extra")
def reorg(sec: Section, ctx: DarknetContext) -> LayerOut:
    """[reorg] -> Reshape/Transpose reproducing Darknet's ``reorg_cpu`` index shuffle (not SpaceToDepth).

    Darknet reads its C x H x W input as if it were (C/s^2) x (H s) x (W s) and writes channel
    ``k = (dy*s + dx) * C/s^2 + c`` of an output laid out as C x H x W, then labels that buffer
    (C s^2) x (H/s) x (W/s). ``reverse``, ``flatten`` and ``extra`` are not supported.
    """
    prev = ctx.prev
    s = sec.int("stride", 1)
    for key in ("reverse", "flatten", "extra"):
        if sec.int(key, 0):
            raise ctx.error(sec, f"{key}={sec.options[key]} is not supported", "Remove the option.")
    if s <= 0 or prev.c % (s * s) or prev.h % s or prev.w % s:
        raise ctx.error(sec, f"stride={s} does not fit the {prev.c}x{prev.h}x{prev.w} input")
    oc = prev.c // (s * s)
    x = ctx.reshape(sec, prev.value, [oc, prev.h, s, prev.w, s], suffix="view")
    x = ctx.emit("Transpose", [x], {"perm": [0, 3, 5, 1, 2, 4]}, suffix="shuffle")
    y = ctx.reshape(sec, x, [prev.c * s * s, prev.h // s, prev.w // s], suffix="out")
    return LayerOut(y, prev.c * s * s, prev.h // s, prev.w // s, prev.ms, sec.type)


@LAYERS.register("crop", maps_to="Slice + Mul/Sub (inference centre crop)")
def crop(sec: Section, ctx: DarknetContext) -> LayerOut:
    """[crop] at inference -> centre Slice, then ``2x - 1`` (``x`` with ``noadjust=1``)."""
    prev = ctx.prev
    ch = sec.int("crop_height", 1)
    cw = sec.int("crop_width", 1)
    noadjust = sec.int("noadjust", 0)
    if not (0 < ch <= prev.h and 0 < cw <= prev.w):
        raise ctx.error(sec, f"crop {ch}x{cw} does not fit the {prev.h}x{prev.w} input")
    dh, dw = (prev.h - ch) // 2, (prev.w - cw) // 2
    y = prev.value
    # One axis per Slice: Caffe can express single-axis slices without a reference blob.
    if ch != prev.h:
        y = ctx.slice(sec, y, [2], [dh], [dh + ch], suffix="rows")
    if cw != prev.w:
        y = ctx.slice(sec, y, [3], [dw], [dw + cw], suffix="cols")
    ms = prev.ms
    if not noadjust:
        b = ctx.b
        y = ctx.emit("Mul", [y, b.const(np.array(2, np.float32))], suffix="scale")
        y = ctx.emit("Sub", [y, b.const(np.array(1, np.float32))], suffix="shift")
        ms = 4 * ms + 1
    return LayerOut(y, prev.c, ch, cw, ms, sec.type)


@LAYERS.register("dropout", maps_to="nothing (identity)")
def dropout(sec: Section, ctx: DarknetContext) -> LayerOut:
    """[dropout] -> nothing: Darknet's dropout passes its input through at inference."""
    prev = ctx.prev
    return LayerOut(prev.value, prev.c, prev.h, prev.w, prev.ms, sec.type)


@LAYERS.register("cost", maps_to="nothing (training only)")
def cost(sec: Section, ctx: DarknetContext) -> LayerOut:
    """[cost] -> nothing: training only; the network's output is the layer before it."""
    prev = ctx.prev
    return LayerOut(prev.value, prev.c, prev.h, prev.w, prev.ms, sec.type)


@LAYERS.register("softmax", "soft", maps_to="Softmax per group", notes="no tree")
def softmax(sec: Section, ctx: DarknetContext) -> LayerOut:
    """[softmax] -> Softmax over each of ``groups`` contiguous groups (with ``temperature``)."""
    prev = ctx.prev
    if sec.get("tree") is not None:
        raise ctx.error(sec, "softmax trees ('tree=') are not supported", "Use a flat softmax.")
    groups = sec.int("groups", 1)
    temp = sec.float("temperature", 1.0)
    if groups <= 0 or prev.size % groups:
        raise ctx.error(sec, f"groups={groups} does not divide the {prev.size} inputs")
    b = ctx.b
    x = ctx.reshape(sec, prev.value, [groups, prev.size // groups], suffix="groups")
    if temp != 1.0:
        inv = b.const(np.array(1.0 / temp, np.float32))
        x = ctx.emit("Mul", [x, inv], suffix="temp")
    x = ctx.emit("Softmax", [x], {"axis": -1})
    y = ctx.reshape(sec, x, [prev.c, prev.h, prev.w], suffix="out")
    return LayerOut(y, prev.c, prev.h, prev.w, 1.0 / max(prev.size // groups, 1), sec.type)


@LAYERS.register("scale_channels", maps_to="Mul", notes="not scale_wh")
def scale_channels(sec: Section, ctx: DarknetContext) -> LayerOut:
    """[scale_channels] -> Mul(from-layer, previous N x C x 1 x 1) (+ activation)."""
    prev = ctx.prev
    if sec.int("scale_wh", 0):
        raise ctx.error(sec, "scale_wh=1 is not supported", "Remove the option.")
    (src,) = ctx.refs(sec, "from")[:1]
    if prev.c != src.c or (prev.h, prev.w) != (1, 1):
        raise ctx.error(sec, f"the previous layer is {prev.c}x{prev.h}x{prev.w}, expected {src.c}x1x1")
    y = ctx.emit("Mul", [src.value, prev.value])
    y, ms = ctx.activate(sec, y, sec.get("activation", "linear") or "linear", src.ms * prev.ms)
    return LayerOut(y, src.c, src.h, src.w, ms, sec.type)


@LAYERS.register("sam", maps_to="Mul")
def sam(sec: Section, ctx: DarknetContext) -> LayerOut:
    """[sam] -> Mul(previous, from-layer) elementwise (+ activation)."""
    prev = ctx.prev
    (src,) = ctx.refs(sec, "from")[:1]
    if (prev.c, prev.h, prev.w) != (src.c, src.h, src.w):
        raise ctx.error(sec, f"shapes differ: {prev.c}x{prev.h}x{prev.w} and {src.c}x{src.h}x{src.w}")
    y = ctx.emit("Mul", [prev.value, src.value])
    y, ms = ctx.activate(sec, y, sec.get("activation", "linear") or "linear", src.ms * prev.ms)
    return LayerOut(y, prev.c, prev.h, prev.w, ms, sec.type)


@LAYERS.register("activation", maps_to="activation ops")
def activation(sec: Section, ctx: DarknetContext) -> LayerOut:
    """[activation] -> the activation alone."""
    prev = ctx.prev
    y, ms = ctx.activate(sec, prev.value, sec.get("activation", "linear") or "linear", prev.ms)
    if y is prev.value:
        y = ctx.emit("Identity", [y])
    return LayerOut(y, prev.c, prev.h, prev.w, ms, sec.type)


@LAYERS.register("local", maps_to="one-hot grouped Conv (im2col) + batched MatMul + Add")
def local(sec: Section, ctx: DarknetContext) -> LayerOut:
    """[local] (locally connected) -> im2col as a one-hot grouped Conv, then a batched MatMul.

    Darknet's ``forward_local_layer``: for each output location ``l``, ``out[:, l] = W_l @ col[:, l]``
    with ``W_l`` of shape filters x (C*size*size), plus a per-location bias. File order: biases
    (filters x H' x W'), then weights (locations x filters x C*size*size). Darknet pads by ``pad``
    pixels but computes the output size as ``(H - (pad ? 1 : size)) / stride + 1``.
    """
    prev = ctx.prev
    n = sec.int("filters", 1)
    size = sec.int("size", 1)
    stride = sec.int("stride", 1)
    pad = sec.int("pad", 0)
    act = sec.get("activation", "logistic") or "logistic"
    if n <= 0 or size <= 0 or stride <= 0:
        raise ctx.error(sec, "filters, size and stride must be positive")
    out_h = _out_dim(sec, ctx, "height", (prev.h - (1 if pad else size)) // stride + 1)
    out_w = _out_dim(sec, ctx, "width", (prev.w - (1 if pad else size)) // stride + 1)
    if (prev.h + 2 * pad - size) // stride + 1 != out_h or (prev.w + 2 * pad - size) // stride + 1 != out_w:
        raise ctx.error(sec, f"size={size} with pad={pad}: Darknet's im2col and output size disagree",
                        "Use pad=0, or pad=1 with size=3.")
    k = prev.c * size * size
    locations = out_h * out_w
    b = ctx.b
    name = ctx.name(sec)
    bias = ctx.param(sec, "bias", "bias", (n, out_h, out_w))
    weight = ctx.param(sec, "weight", "weight", (locations, n, k), fan_in=k, in_ms=prev.ms)
    onehot = np.zeros((k, 1, size, size), np.float32)
    for c in range(prev.c):
        for ky in range(size):
            for kx in range(size):
                onehot[(c * size + ky) * size + kx, 0, ky, kx] = 1.0
    onehot_v = b.const(onehot, name=f"{name}.im2col")
    cols = ctx.emit("Conv", [prev.value, onehot_v], {"kernel_shape": [size, size], "strides": [stride, stride],
                                                 "pads": [pad] * 4, "group": prev.c}, suffix="im2col")
    cols = ctx.reshape(sec, cols, [k, locations], suffix="cols")
    cols = ctx.emit("Transpose", [cols], {"perm": [2, 0, 1]}, suffix="by_location")  # L x N x k
    wt = ctx.emit("Transpose", [weight], {"perm": [0, 2, 1]}, suffix="weight_t")  # L x k x n
    y = ctx.emit("MatMul", [cols, wt], suffix="matmul")  # L x N x n
    y = ctx.emit("Transpose", [y], {"perm": [1, 2, 0]}, suffix="nchw")  # N x n x L
    y = ctx.reshape(sec, y, [n, out_h, out_w], suffix="out")
    y = ctx.emit("Add", [y, bias])
    y, ms = ctx.activate(sec, y, act, 1.0)
    return LayerOut(y, n, out_h, out_w, ms, sec.type)


@LAYERS.register("detection",
                 maps_to="Softmax over each cell's classes (YOLOv1); output left flat as Darknet's")
def detection(sec: Section, ctx: DarknetContext) -> LayerOut:
    """[detection] (YOLOv1) -> softmax over each cell's classes when ``softmax=1``; the rest unchanged.

    The input is flat: side*side*classes class scores, then side*side*num confidences, then boxes.
    """
    prev = ctx.prev
    classes = sec.int("classes", 20)
    coords = sec.int("coords", 1)
    sec.get("rescore")
    side = sec.int("side", 7)
    num = sec.int("num", 1)
    softmax = sec.int("softmax", 0)
    sec.get("sqrt")
    locations = side * side
    expected = locations * ((1 + coords) * num + classes)
    if prev.size != expected:
        raise ctx.error(sec, f"the input has {prev.size} values, expected side^2 x ((1 + coords) x num + classes) = "
                        f"{expected}")
    x = ctx.emit("Flatten", [prev.value], {"axis": 1}, suffix="flat")
    if softmax:
        cls = ctx.slice(sec, x, [1], [0], [locations * classes], suffix="classes")
        rest = ctx.slice(sec, x, [1], [locations * classes], [prev.size], suffix="boxes")
        cls = ctx.reshape(sec, cls, [locations, classes], suffix="cells")
        cls = ctx.emit("Softmax", [cls], {"axis": -1}, suffix="softmax")
        cls = ctx.reshape(sec, cls, [locations * classes], suffix="cells_flat")
        x = ctx.emit("Concat", [cls, rest], {"axis": 1}, suffix="join")
    y = ctx.reshape(sec, x, [prev.c, prev.h, prev.w], suffix="out")
    return LayerOut(y, prev.c, prev.h, prev.w, 0.3, sec.type)
