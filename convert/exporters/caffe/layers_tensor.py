"""IR arithmetic, normalisation and tensor-layout ops -> Caffe layers (registered in ``layers``)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from convert.ir import Node, Value

from .context import Blob, EmitContext, Emitted, NotExpressible
from .layers import (
    CAFFE_DOMAIN,
    EMITTERS,
    _Deferred,
    _dims,
    _float,
    _float_casts_only,
    _int,
    _ints,
    _note,
    _power,
    _weight,
)
from .legalize_tensor import reduce_axes, reduction_reason

__all__: list[str] = []


# ---- element-wise -----------------------------------------------------------------------------------
def _scalar(ctx: EmitContext, value: Value | None) -> float | None:
    t = ctx.const(value)
    if t is None or int(np.prod(_dims(t), dtype=np.int64)) != 1:
        return None
    return float(np.asarray(t.numpy()).reshape(-1)[0])


def _binary_emitter(op: str) -> Callable[[Node, EmitContext], Emitted]:
    def emit(node: Node, ctx: EmitContext) -> Emitted:
        return _binary(node, ctx, op)

    emit.__doc__ = f"{op} -> Eltwise, Power or Scale (see ``_binary``)."
    return emit


def _binary(node: Node, ctx: EmitContext, op: str) -> Emitted:
    a, b = node.inputs[0], node.inputs[1]
    ca, cb = ctx.const(a), ctx.const(b)
    if ca is not None and cb is not None:
        raise NotExpressible("both inputs are constants (fold them first)")
    # x (op) scalar constant -> Power
    sb, sa = _scalar(ctx, b), _scalar(ctx, a)
    if cb is not None and sb is not None:
        if op == "Add":
            return _power(node, ctx, shift=sb)
        if op == "Sub":
            return _power(node, ctx, shift=-sb)
        if op == "Mul":
            return _power(node, ctx, scale=sb)
        if op == "Div":
            return _power(node, ctx, scale=1.0 / sb)
    if ca is not None and sa is not None:
        if op == "Add":
            return _power(node, ctx, shift=sa, x=b)
        if op == "Sub":
            return _power(node, ctx, scale=-1.0, shift=sa, x=b)
        if op == "Mul":
            return _power(node, ctx, scale=sa, x=b)
    if ca is not None or cb is not None:
        raise NotExpressible("broadcast by a constant that is not per-channel (legalisation found no Scale)")
    sa_, sb_ = ctx.shape(a), ctx.shape(b)
    if sa_ != sb_:
        raise NotExpressible(f"broadcast between shapes {list(sa_)} and {list(sb_)} has no Caffe layer")
    if op == "Div":
        raise NotExpressible("element-wise division of two tensors has no Caffe layer")
    e = ctx.layer(node, "Eltwise", [a, b])
    ep = e.layer.eltwise_param
    if op == "Mul":
        ep.operation = ep.PROD
    elif op == "Max":
        ep.operation = ep.MAX
    elif op == "Sub":
        ep.coeff.extend([1.0, -1.0])
    return e


for _op in ("Add", "Sub", "Mul", "Div", "Max"):
    EMITTERS.register(_op)(_binary_emitter(_op))
_note("Add", "Eltwise SUM / Power shift / Scale bias", "equal shapes, scalar or per-channel constant")
_note("Sub", "Eltwise SUM coeff 1,-1 / Power / Scale")
_note("Mul", "Eltwise PROD / Power scale / Scale", "equal shapes, scalar or per-channel constant")
_note("Div", "Power scale 1/c / Scale", "by a constant only")
_note("Max", "Eltwise MAX", "equal shapes")


@EMITTERS.register("Sum")
def sum_(node: Node, ctx: EmitContext) -> Emitted:
    """Sum of equal-shaped tensors -> Eltwise SUM."""
    shapes = {ctx.shape(v) for v in node.inputs}
    if len(shapes) != 1 or any(ctx.const(v) is not None for v in node.inputs):
        raise NotExpressible("Sum needs equal-shaped, non-constant inputs")
    return ctx.layer(node, "Eltwise", list(node.inputs))


_note("Sum", "Eltwise SUM")


@EMITTERS.register(f"{CAFFE_DOMAIN}::Scale")
def scale(node: Node, ctx: EmitContext) -> Emitted:
    """convert.caffe::Scale(x, gamma[, beta]) (from legalisation) -> Scale (axis, num_axes, bias_term).

    A computed ``gamma`` (two-bottom form) is the layer's second bottom, applied from ``axis``.
    """
    if ctx.const(node.inputs[1]) is None:
        e = ctx.layer(node, "Scale", [node.inputs[0], node.inputs[1]])
        e.layer.scale_param.axis = _int(node, "axis", 1)
        return e
    gamma = _weight(ctx, node, 1, "scale")
    dims = _dims(gamma)
    blobs: list[Blob] = [_Deferred(lambda: np.asarray(gamma.numpy(), np.float32).reshape(dims), dims)]
    has_bias = len(node.inputs) > 2 and node.inputs[2] is not None
    if has_bias:
        beta = _weight(ctx, node, 2, "bias")
        blobs.append(_Deferred(lambda: np.asarray(beta.numpy(), np.float32).reshape(dims), dims))
    e = ctx.layer(node, "Scale", [node.inputs[0]], blobs=blobs)
    sp = e.layer.scale_param
    axis = _int(node, "axis", 1)
    if axis != 1:
        sp.axis = axis
    if len(dims) != 1:
        sp.num_axes = len(dims)
    if has_bias:
        sp.bias_term = True
    return e


_note(f"{CAFFE_DOMAIN}::Scale", "Scale", "produced by legalisation")


@EMITTERS.register(f"{CAFFE_DOMAIN}::Normalize")
def normalize(node: Node, ctx: EmitContext) -> Emitted:
    """convert.caffe::Normalize (from legalisation) -> Normalize (ssd flavor)."""
    if not ctx.flavor.normalize:
        raise NotExpressible(f"L2 normalisation needs Normalize, which {ctx.flavor.name} lacks; use --caffe-flavor ssd")
    scale = _weight(ctx, node, 1, "scale")
    c = int(np.prod(_dims(scale), dtype=np.int64))
    blob = _Deferred(lambda: np.asarray(scale.numpy(), np.float32).reshape(-1), (c,))
    e = ctx.layer(node, "Normalize", [node.inputs[0]], blobs=[blob])
    npar = e.layer.norm_param
    npar.across_spatial = bool(_int(node, "across_spatial", 0))
    npar.channel_shared = c == 1
    npar.eps = _float(node, "eps", 1e-10)
    return e


_note(f"{CAFFE_DOMAIN}::Normalize", "Normalize", "ssd flavor; from the L2-normalisation pattern")


@EMITTERS.register("BatchNormalization")
def batch_norm(node: Node, ctx: EmitContext) -> Emitted:
    """BatchNormalization (gamma=1, beta=0 after legalisation) -> BatchNorm (factor 1)."""
    if len(node.outputs) > 1 and any(o is not None and o.uses() for o in node.outputs[1:]):
        raise NotExpressible("training-mode BatchNormalization is not supported")
    mean = _weight(ctx, node, 3, "mean")
    var = _weight(ctx, node, 4, "variance")
    c = int(np.prod(_dims(mean), dtype=np.int64))
    blobs: list[Blob] = [
        _Deferred(lambda: np.asarray(mean.numpy(), np.float32).reshape(-1), (c,)),
        _Deferred(lambda: np.asarray(var.numpy(), np.float32).reshape(-1), (c,)),
        np.ones(1, np.float32),
    ]
    e = ctx.layer(node, "BatchNorm", [node.inputs[0]], blobs=blobs)
    eps = _float(node, "epsilon", 1e-5)
    if abs(eps - 1e-5) > 1e-12:
        e.layer.batch_norm_param.eps = eps
    return e


_note("BatchNormalization", "BatchNorm + Scale", "inference form")


@EMITTERS.register("LRN")
def lrn(node: Node, ctx: EmitContext) -> Emitted:
    """LRN -> LRN ACROSS_CHANNELS."""
    e = ctx.layer(node, "LRN", [node.inputs[0]])
    lp = e.layer.lrn_param
    lp.local_size = _int(node, "size", 5)
    lp.alpha = _float(node, "alpha", 1e-4)
    lp.beta = _float(node, "beta", 0.75)
    lp.k = _float(node, "bias", 1.0)
    return e


_note("LRN", "LRN")


@EMITTERS.register("Softmax")
def softmax(node: Node, ctx: EmitContext) -> Emitted:
    """Softmax(axis) -> Softmax axis.

    Before opset 13 ONNX's Softmax flattens the input to 2-D at ``axis`` (default 1) and normalises
    over everything from ``axis`` on; Caffe's normalises over ``axis`` alone. The two agree when the
    dimensions after ``axis`` are all 1 (a classifier's [N, C, 1, 1] scores), which needs the shape.
    """
    x = ctx.shape(node.inputs[0])
    rank = len(x)
    opset = node.version or ctx.graph.opset_imports.get("", ctx.graph.opset_imports.get("ai.onnx", 13))
    old = opset < 13
    axis = _int(node, "axis", 1 if old else -1)
    axis = axis + rank if axis < 0 else axis
    if old and any(d != 1 for d in x[axis + 1:]):
        raise NotExpressible(
            f"Softmax at opset {opset} normalises over dims {list(range(axis, rank))} of {list(x)} together; "
            "Caffe's Softmax normalises over one axis only"
        )
    e = ctx.layer(node, "Softmax", [node.inputs[0]])
    e.layer.softmax_param.axis = axis
    return e


_note("Softmax", "Softmax")


# ---- layout ---------------------------------------------------------------------------------------------
@EMITTERS.register("Identity", "Dropout")
def identity(node: Node, ctx: EmitContext) -> None:
    """Identity / Dropout -> no layer (the output is another name for the input)."""
    src = node.inputs[0]
    if src is None:
        raise NotExpressible("its input is missing")
    ctx.alias(node.outputs[0], src)


_note("Identity", "(no layer)")
_note("Dropout", "(no layer)")


@EMITTERS.register("Concat")
def concat(node: Node, ctx: EmitContext) -> Emitted:
    """Concat -> Concat axis."""
    if any(ctx.const(v) is not None for v in node.inputs):
        raise NotExpressible("a constant input has no Caffe blob")
    rank = len(ctx.shape(node.inputs[0]))
    axis = _int(node, "axis", 1)
    e = ctx.layer(node, "Concat", list(node.inputs))
    axis = axis + rank if axis < 0 else axis
    if axis != 1:
        e.layer.concat_param.axis = axis
    return e


_note("Concat", "Concat")


@EMITTERS.register("Split")
def split(node: Node, ctx: EmitContext) -> Emitted:
    """Split -> Slice with explicit slice_points."""
    x = ctx.shape(node.inputs[0])
    axis = _int(node, "axis", 0)
    axis = axis + len(x) if axis < 0 else axis
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        sizes = [int(s) for s in ctx.small(node.inputs[1], "split sizes")]
    else:
        sizes = [ctx.shape(o)[axis] for o in node.outputs]
    e = ctx.layer(node, "Slice", [node.inputs[0]])
    e.layer.slice_param.axis = axis
    e.layer.slice_param.slice_point.extend(int(p) for p in np.cumsum(sizes)[:-1])
    return e


_note("Split", "Slice", "explicit slice_point")


@EMITTERS.register("Slice")
def slice_(node: Node, ctx: EmitContext) -> Emitted:
    """Slice with constant bounds, step 1 -> Crop (reference blob of the target shape) or Slice."""
    x = ctx.shape(node.inputs[0])
    y = ctx.shape(node.outputs[0])
    starts = [int(v) for v in ctx.small(node.inputs[1], "starts")]
    axes = (
        [int(v) for v in ctx.small(node.inputs[3], "axes")]
        if len(node.inputs) > 3 and node.inputs[3] is not None
        else list(range(len(starts)))
    )
    if (
        len(node.inputs) > 4
        and node.inputs[4] is not None
        and any(int(s) != 1 for s in ctx.small(node.inputs[4], "steps"))
    ):
        raise NotExpressible("strided slicing has no Caffe layer")
    offs = [0] * len(x)
    for a, s in zip(axes, starts, strict=True):
        a = a + len(x) if a < 0 else a
        s = s + x[a] if s < 0 else s
        offs[a] = max(0, min(s, x[a]))
    changed = [a for a in range(len(x)) if x[a] != y[a] or offs[a]]
    if not changed:
        e = ctx.layer(node, "Split", [node.inputs[0]])
        return e
    first = min(changed)
    # Crop: a produced blob (or input) whose dims from `first` on equal the target's.
    for ref in [*ctx.graph.inputs, *ctx.produced]:
        try:
            rs = ctx.shape(ref)
        except NotExpressible:
            continue
        if ref.is_graph_output() and not ref.uses():
            continue  # Caffe's outputs are the tops nothing reads: a Crop reading it would hide it
        if len(rs) == len(y) and rs[first:] == y[first:] and ref is not node.inputs[0]:
            e = ctx.layer(node, "Crop", [node.inputs[0], ref])
            e.layer.crop_param.axis = first
            tail = offs[first:]
            if len(set(tail)) == 1:
                if tail[0]:
                    e.layer.crop_param.offset.append(tail[0])
            else:
                e.layer.crop_param.offset.extend(tail)
            return e
    if len(changed) != 1:
        raise NotExpressible("a multi-axis crop needs a blob of the target shape to crop against")
    a = changed[0]
    points = [p for p in (offs[a], offs[a] + y[a]) if 0 < p < x[a]]
    keep = 1 if offs[a] > 0 else 0
    tops: list[Value] = []
    for i in range(len(points) + 1):
        tops.append(node.outputs[0] if i == keep else Value(name=f"{node.outputs[0].name}_unused{i}"))
    e = ctx.layer(node, "Slice", [node.inputs[0]], tops=tops)
    e.layer.slice_param.axis = a
    e.layer.slice_param.slice_point.extend(points)
    return e


_note("Slice", "Crop / Slice", "step 1; Crop when a blob of the target shape exists, else one-axis Slice")


@EMITTERS.register("Flatten")
def flatten(node: Node, ctx: EmitContext) -> Emitted:
    """Flatten(axis=1) -> Flatten; other axes -> Reshape."""
    if _int(node, "axis", 1) == 1:
        return ctx.layer(node, "Flatten", [node.inputs[0]])
    return _reshape(node, ctx)


def _reshape(node: Node, ctx: EmitContext) -> Emitted | None:
    users = [use.node for use in node.outputs[0].uses()]
    if not ctx.flavor.permute and len(users) == 1 and _channel_shuffle(users[0], ctx) is not None:
        ctx.alias(node.outputs[0], node.inputs[0])  # the shuffle's convolution reads the 4-D input itself
        return None
    y = ctx.shape(node.outputs[0])
    e = ctx.layer(node, "Reshape", [node.inputs[0]])
    e.layer.reshape_param.shape.dim.extend(y)
    return e


for _op in ("Reshape", "Squeeze", "Unsqueeze"):
    EMITTERS.register(_op)(_reshape)
    _note(_op, "Reshape", "static shape")
_note("Flatten", "Flatten / Reshape")


def _channel_shuffle(node: Node, ctx: EmitContext) -> tuple[int, int] | None:
    """Return (groups, channels) when ``node`` is ShuffleNet's channel shuffle: the Transpose
    (0, 2, 1, 3, 4) of a Reshape (N, C, H, W) -> (N, g, C/g, H, W), reshaped back to (N, C, H, W)."""
    if node.op_type != "Transpose" or list(_ints(node, "perm", [])) != [0, 2, 1, 3, 4]:
        return None
    first = node.inputs[0].producer() if node.inputs[0] is not None else None
    if first is None or first.op_type != "Reshape" or first.inputs[0] is None:
        return None
    try:
        x, five = ctx.shape(first.inputs[0]), ctx.shape(node.inputs[0])
    except NotExpressible:
        return None
    if len(x) != 4 or len(five) != 5 or (five[0], five[1] * five[2], *five[3:]) != x:
        return None
    users = [use.node for use in node.outputs[0].uses()]
    if len(users) != 1 or users[0].op_type != "Reshape" or node.outputs[0].is_graph_output():
        return None
    try:
        back = ctx.shape(users[0].outputs[0])
    except NotExpressible:
        return None
    return (five[1], x[1]) if back == x else None


@EMITTERS.register("Transpose")
def transpose(node: Node, ctx: EmitContext) -> Emitted:
    """Transpose -> Permute (ssd); BVLC has no Permute, but a channel shuffle is a 1x1 Convolution
    whose weights permute the channels (one 1.0 per output channel: exact)."""
    shuffle = None if ctx.flavor.permute else _channel_shuffle(node, ctx)
    if shuffle is not None:
        g, c = shuffle
        k = np.arange(c)
        w = np.zeros((c, c, 1, 1), np.float32)
        w[k, (k % g) * (c // g) + k // g, 0, 0] = 1.0  # out b*g + a <- in a*(C/g) + b
        e = ctx.layer(node, "Convolution", [node.inputs[0]], blobs=[w])
        cp = e.layer.convolution_param
        cp.num_output = c
        cp.bias_term = False
        cp.kernel_size.append(1)
        return e
    if not ctx.flavor.permute:
        raise NotExpressible(f"Transpose needs Permute, which {ctx.flavor.name} lacks; use --caffe-flavor ssd")
    rank = len(ctx.shape(node.inputs[0]))
    e = ctx.layer(node, "Permute", [node.inputs[0]])
    e.layer.permute_param.order.extend(_ints(node, "perm", list(range(rank))[::-1]))
    return e


_note("Transpose", "Permute", "ssd flavor; a channel shuffle is a permuting 1x1 Convolution in any flavor")


@EMITTERS.register("Resize")
def resize(node: Node, ctx: EmitContext) -> Emitted:
    """Resize nearest (integer scale) -> Deconvolution or Upsample (ssd); bilinear align_corners -> Interp."""
    x = ctx.shape(node.inputs[0])
    y = ctx.shape(node.outputs[0])
    if len(x) != 4 or x[:2] != y[:2]:
        raise NotExpressible("only spatial resizing of N, C, H, W tensors is supported")
    mode = node.attributes.get_string("mode", "nearest")
    coord = node.attributes.get_string("coordinate_transformation_mode", "half_pixel")
    if mode == "linear":
        if coord == "align_corners" and ctx.flavor.interp:
            e = ctx.layer(node, "Interp", [node.inputs[0]])
            e.layer.interp_param.height = y[2]
            e.layer.interp_param.width = y[3]
            return e
        if coord in ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric") and not ctx.flavor.permute:
            mib = y[2] * y[3] * x[2] * y[3] * 4 / 2**20
            raise NotExpressible(
                f"bilinear resize ({coord}) from {list(x[2:])} to {list(y[2:])}: without Permute ({ctx.flavor.name}) "
                f"the height is resized by an InnerProduct over H*W' whose weight would take {mib:.0f} MiB (limit "
                "16 MiB); use --caffe-flavor ssd, or sizes that are integer multiples (align_corners=False)")
        raise NotExpressible(f"bilinear resize with coordinate_transformation_mode={coord} has no Caffe form")
    if mode != "nearest":
        raise NotExpressible(f"resize mode '{mode}' has no Caffe layer")
    if coord in ("align_corners", "tf_crop_and_resize"):
        raise NotExpressible(f"nearest resize with {coord} is not an integer upsampling")
    sh, sw = y[2] // x[2], y[3] // x[3]
    if y[2] != sh * x[2] or y[3] != sw * x[3] or sh < 1 or sw < 1:
        raise NotExpressible(f"scale {y[2] / x[2]:g}x{y[3] / x[3]:g} is not an integer upsampling")
    if (
        coord == "asymmetric"
        and node.attributes.get_string("nearest_mode", "round_prefer_floor") != "floor"
        and (sh > 1 or sw > 1)
    ):
        raise NotExpressible("asymmetric nearest resize must use nearest_mode=floor")
    if ctx.flavor.upsample:
        e = ctx.layer(node, "Upsample", [node.inputs[0]])
        if sh == sw:
            e.layer.upsample_param.scale = sh
        else:
            e.layer.upsample_param.scale_h, e.layer.upsample_param.scale_w = sh, sw
        return e
    c = x[1]
    e = ctx.layer(node, "Deconvolution", [node.inputs[0]], blobs=[np.ones((c, 1, sh, sw), np.float32)])
    cp = e.layer.convolution_param
    cp.num_output = c
    cp.group = c
    cp.bias_term = False
    if sh == sw:
        cp.kernel_size.append(sh)
        cp.stride.append(sh)
    else:
        cp.kernel_h, cp.kernel_w, cp.stride_h, cp.stride_w = sh, sw, sh, sw
    return e


_note(
    "Resize",
    "Deconvolution (fixed ones) / Upsample (ssd) / Interp (pspnet)",
    "nearest integer scales; bilinear align_corners with pspnet (Interp); bilinear half_pixel by integer "
    "factors as Slice/Concat + Deconvolution (any flavor); other bilinear ratios/modes as InnerProduct matrices",
)


@EMITTERS.register("Pad")
def pad(node: Node, ctx: EmitContext) -> Emitted:
    """Pad (constant 0, H/W only, pads >= 0) -> Deconvolution by a one-hot kernel per channel.

    A stride-1 transposed convolution with a (b + e + 1)-tap kernel that is 1 at tap b shifts
    its input by b and extends it by e: zero padding (b, e), exact (a sum of x*1 and zeros), in
    layers every Caffe and OpenCV run. (Keras' ZeroPadding2D before a MaxPool, as in ResNet50.)
    """
    x = ctx.shape(node.inputs[0])
    if node.attributes.get_string("mode", "constant") != "constant":
        raise NotExpressible(f"mode={node.attributes.get_string('mode', 'constant')} has no Caffe layer")
    if len(x) != 4:
        raise NotExpressible("only (N, C, H, W) padding is expressible (as a Deconvolution)")
    pads = [int(v) for v in ctx.small(node.inputs[1] if len(node.inputs) > 1 else None, "pads").reshape(-1)]
    if len(node.inputs) > 3 and node.inputs[3] is not None:
        axes = [int(a) % 4 for a in ctx.small(node.inputs[3], "axes").reshape(-1)]
        if len(pads) != 2 * len(axes):
            raise NotExpressible(f"{len(pads)} pads for {len(axes)} axes")
        full = [0] * 8
        for i, a in enumerate(axes):
            full[a], full[a + 4] = pads[i], pads[i + len(axes)]
        pads = full
    if len(pads) != 8:
        raise NotExpressible(f"{len(pads)} pads for a rank-4 input (8 expected)")
    value = ctx.small(node.inputs[2], "value") if len(node.inputs) > 2 and node.inputs[2] is not None else None
    if value is not None and np.any(value != 0):
        raise NotExpressible("only zero padding is expressible in Caffe (as a Deconvolution)")
    if pads[0] or pads[1] or pads[4] or pads[5] or min(pads) < 0:
        raise NotExpressible(f"pads {pads} touch the batch or channel axis or crop; only zero H/W padding maps")
    c, (hb, wb, he, we) = x[1], (pads[2], pads[3], pads[6], pads[7])
    kernel = np.zeros((c, 1, hb + he + 1, wb + we + 1), np.float32)
    kernel[:, :, hb, wb] = 1.0
    e = ctx.layer(node, "Deconvolution", [node.inputs[0]], blobs=[kernel])
    cp = e.layer.convolution_param
    cp.num_output, cp.group, cp.bias_term = c, c, False
    if kernel.shape[2] == kernel.shape[3]:
        cp.kernel_size.append(kernel.shape[2])
    else:
        cp.kernel_h, cp.kernel_w = kernel.shape[2], kernel.shape[3]
    return e


_note("Pad", "Deconvolution (one-hot kernel)", "constant 0 on H/W; pads >= 0")


# ---- tiling, reductions, arg-max, mean-variance normalisation ----------------------------------------
@EMITTERS.register("Tile")
def tile(node: Node, ctx: EmitContext) -> Emitted | None:
    """Tile repeating one axis -> Tile (axis, tiles); legalisation splits several repeated axes."""
    x = ctx.shape(node.inputs[0])
    repeats = [int(r) for r in ctx.small(node.inputs[1] if len(node.inputs) > 1 else None, "repeats").reshape(-1)]
    axes = [a for a, r in enumerate(repeats) if r != 1]
    if len(repeats) != len(x) or any(r < 1 for r in repeats) or len(axes) > 1:
        raise NotExpressible(f"repeats {repeats} for a rank-{len(x)} input: Caffe's Tile repeats one axis")
    if not axes:
        ctx.alias(node.outputs[0], node.inputs[0])
        return None
    e = ctx.layer(node, "Tile", [node.inputs[0]])
    e.layer.tile_param.axis = axes[0]
    e.layer.tile_param.tiles = repeats[axes[0]]
    return e


_note("Tile", "Tile", "one repeated axis per layer (several: one Tile each)")


def _reduce_emitter(op: str) -> Callable[[Node, EmitContext], Emitted]:
    def emit(node: Node, ctx: EmitContext) -> Emitted:
        raise NotExpressible(reduction_reason(node) or f"{op} was not rewritten to a Reduction")

    emit.__doc__ = f"{op} left after legalisation (not over trailing axes) -> refused with the reason."
    return emit


for _op, _caffe_op in (("ReduceSum", "SUM"), ("ReduceL1", "ASUM"), ("ReduceSumSquare", "SUMSQ"),
                       ("ReduceMean", "MEAN")):
    EMITTERS.register(_op)(_reduce_emitter(_op))
    _note(_op, f"Reduction {_caffe_op}", "over the trailing axes from one axis on (keepdims: + Reshape); "
          "a scalar Mul after it is its coeff" + ("; H and W of N, C, H, W: global pooling" if _op == "ReduceMean"
                                                  else ""))


@EMITTERS.register(f"{CAFFE_DOMAIN}::Reduction")
def caffe_reduction(node: Node, ctx: EmitContext) -> Emitted:
    """convert.caffe::Reduction (from legalisation) -> Reduction (operation, axis, coeff)."""
    e = ctx.layer(node, "Reduction", [node.inputs[0]])
    rp = e.layer.reduction_param
    rp.operation = _int(node, "operation", 1)  # type: ignore[assignment]
    if _int(node, "axis", 0):
        rp.axis = _int(node, "axis", 0)
    if _float(node, "coeff", 1.0) != 1.0:
        rp.coeff = _float(node, "coeff", 1.0)
    return e


_note(f"{CAFFE_DOMAIN}::Reduction", "Reduction", "produced by legalisation")


@EMITTERS.register("ArgMax")
def argmax(node: Node, ctx: EmitContext) -> Emitted:
    """ArgMax (keepdims) read only through Cast to float -> ArgMax axis (Caffe's indices are floats).

    On ties Caffe returns the last index (it sorts (value, index) pairs, largest first): ONNX's
    ``select_last_index=1``; with ``select_last_index=0`` the two differ only on exact ties.
    """
    rank = len(ctx.shape(node.inputs[0]))
    if not _int(node, "keepdims", 1):
        raise NotExpressible("keepdims=0: Caffe's ArgMax keeps the reduced axis (size 1)")
    if not _float_casts_only(node.outputs[0]):
        raise NotExpressible("Caffe's ArgMax gives its indices as floats: the result must feed only casts to float")
    casts = [use.node for use in node.outputs[0].uses()]
    if len(casts) == 1:  # the layer is the cast's (its name, its top): the cast adds no layer, nothing is copied
        e = ctx.layer(casts[0], "ArgMax", [node.inputs[0]], tops=[casts[0].outputs[0]])
        ctx.alias(node.outputs[0], casts[0].outputs[0])
    else:
        e = ctx.layer(node, "ArgMax", [node.inputs[0]])
    axis = _int(node, "axis", 0)
    e.layer.argmax_param.axis = axis + rank if axis < 0 else axis
    return e


@EMITTERS.register("ReduceMax")
def reduce_max(node: Node, ctx: EmitContext) -> Emitted:
    """ReduceMax over one axis, kept -> ArgMax axis with out_max_val (H and W: global pooling, legalised)."""
    rank = len(ctx.shape(node.inputs[0]))
    axes = reduce_axes(node, rank)
    if isinstance(axes, str) or len(axes) != 1 or not _int(node, "keepdims", 1):
        raise NotExpressible(f"Caffe takes a maximum over one axis (ArgMax out_max_val) or over H and W (global "
                             f"pooling), not over axes {axes} of a rank-{rank} input")
    e = ctx.layer(node, "ArgMax", [node.inputs[0]])
    e.layer.argmax_param.axis = axes[0]
    e.layer.argmax_param.out_max_val = True
    return e


@EMITTERS.register(f"{CAFFE_DOMAIN}::ArgMax")
def caffe_argmax(node: Node, ctx: EmitContext) -> Emitted:
    """convert.caffe::ArgMax (from legalisation: the arg-max of a flattened input) -> ArgMax without axis."""
    e = ctx.layer(node, "ArgMax", [node.inputs[0]])
    if _int(node, "out_max_val", 0):
        e.layer.argmax_param.out_max_val = True
    return e


_note("ArgMax", "ArgMax axis", "keepdims, read only through Cast to float; ties: Caffe takes the last index")
_note("ReduceMax", "ArgMax out_max_val / Pooling MAX global_pooling", "one axis (kept, or + Reshape), or H and W")
_note(f"{CAFFE_DOMAIN}::ArgMax", "ArgMax (no axis)", "Reshape (N, -1) + ArgMax + Cast [+ max] + Reshape, fused")


@EMITTERS.register(f"{CAFFE_DOMAIN}::MVN")
def mvn(node: Node, ctx: EmitContext) -> Emitted:
    """convert.caffe::MVN (from legalisation) -> MVN (normalize_variance, across_channels, eps)."""
    e = ctx.layer(node, "MVN", [node.inputs[0]])
    mp = e.layer.mvn_param
    mp.normalize_variance = bool(_int(node, "normalize_variance", 1))
    mp.across_channels = bool(_int(node, "across_channels", 0))
    if mp.normalize_variance:
        mp.eps = _float(node, "eps", 1e-9)
    return e


_note(f"{CAFFE_DOMAIN}::MVN", "MVN", "x - mean [/ (std + eps)] over H, W or C, H, W; from the pattern")


from . import detection  # noqa: E402, F401  (its emitters, always registered after these ones)
