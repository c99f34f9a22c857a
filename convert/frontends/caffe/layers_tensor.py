"""Caffe normalisation, arithmetic and tensor-shuffling layers -> IR nodes.

Registered into ``layers.LAYERS``; see that module for the conventions.
"""

from __future__ import annotations

import itertools

import numpy as np

from convert.ir import Value

from .context import CaffeContext
from .layers import LAYERS, _axis, _has, _note, _p, _rank4
from .reader import LayerDef

__all__: list[str] = []


# ---- normalisation ----------------------------------------------------------------------------------
@LAYERS.register("BatchNorm")
def batch_norm(layer: LayerDef, ctx: CaffeContext) -> None:
    """BatchNorm -> BatchNormalization(scale=1, bias=0) with mean/var divided by the factor blob.

    Caffe stores running sums: the statistics are ``blob0 / blob2`` and ``blob1 / blob2`` (0 when
    the factor is 0), ``eps`` from batch_norm_param. The affine part is the following Scale layer.
    """
    x = ctx.input(layer)
    shape = ctx.shape(x)
    c = shape[1]
    eps = float(_p(layer, "batch_norm_param").eps)
    mean = ctx.blob(layer, 0, (c,), "mean").astype(np.float64)
    var = ctx.blob(layer, 1, (c,), "variance").astype(np.float64)
    factor = float(ctx.blob(layer, 2, (1,), "moving-average factor")[0]) if len(layer.blobs) > 2 else 1.0
    inv = 0.0 if factor == 0.0 else 1.0 / factor
    inputs = [
        x,
        ctx.weight(layer, np.ones(c), "scale"),
        ctx.weight(layer, np.zeros(c), "bias"),
        ctx.weight(layer, mean * inv, "mean"),
        ctx.weight(layer, var * inv, "var"),
    ]
    ctx.set_top(layer, ctx.op(layer, "BatchNormalization", inputs, {"epsilon": eps}, shape))


_note("BatchNorm", "BatchNormalization", "moving-average factor blob applied")


def _param_shape(shape: tuple[int, ...], axis: int, num_axes: int) -> tuple[int, ...]:
    end = len(shape) if num_axes < 0 else axis + num_axes
    return shape[axis:end]


def _broadcast(arr_shape: tuple[int, ...], rank: int, axis: int) -> tuple[int, ...]:
    return arr_shape + (1,) * (rank - axis - len(arr_shape))


@LAYERS.register("Scale")
def scale(layer: LayerDef, ctx: CaffeContext) -> None:
    """Scale -> Mul [+ Add]; the factor is a blob (axis, num_axes) or a second bottom."""
    sp = _p(layer, "scale_param")
    x = ctx.input(layer)
    shape = ctx.shape(x)
    axis = _axis(int(sp.axis), len(shape))
    blob_i = 0
    if len(layer.bottoms) > 1:
        y = ctx.input(layer, 1)
        yshape = ctx.shape(y)
        target = _broadcast(yshape, len(shape), axis)
        if target != yshape:
            y = ctx.op(layer, "Reshape", [y, ctx.const(target, np.int64)], None, target, suffix="_factor")
        pshape = yshape
        factor: Value = y
    else:
        pshape = _param_shape(shape, axis, int(sp.num_axes))
        arr = ctx.blob(layer, 0, pshape, "scale")
        factor = ctx.weight(layer, arr.reshape(_broadcast(pshape, len(shape), axis)), "scale")
        blob_i = 1
    out = ctx.op(layer, "Mul", [x, factor], None, shape, suffix="_mul" if sp.bias_term else "")
    if sp.bias_term:
        bias = ctx.blob(layer, blob_i, pshape, "bias").reshape(_broadcast(pshape, len(shape), axis))
        out = ctx.op(layer, "Add", [out, ctx.weight(layer, bias, "bias")], None, shape)
    ctx.set_top(layer, out)


_note("Scale", "Mul [+ Add]", "axis, num_axes, bias_term, second bottom")


@LAYERS.register("Bias")
def bias(layer: LayerDef, ctx: CaffeContext) -> None:
    """Bias -> Add; the bias is a blob (axis, num_axes) or a second bottom."""
    bp = _p(layer, "bias_param")
    x = ctx.input(layer)
    shape = ctx.shape(x)
    axis = _axis(int(bp.axis), len(shape))
    if len(layer.bottoms) > 1:
        y = ctx.input(layer, 1)
        yshape = ctx.shape(y)
        target = _broadcast(yshape, len(shape), axis)
        if target != yshape:
            y = ctx.op(layer, "Reshape", [y, ctx.const(target, np.int64)], None, target, suffix="_bias")
        b: Value = y
    else:
        pshape = _param_shape(shape, axis, int(bp.num_axes))
        b = ctx.weight(layer, ctx.blob(layer, 0, pshape, "bias").reshape(_broadcast(pshape, len(shape), axis)), "bias")
    ctx.set_top(layer, ctx.op(layer, "Add", [x, b], None, shape))


_note("Bias", "Add", "axis, num_axes, second bottom")


@LAYERS.register("LRN")
def lrn(layer: LayerDef, ctx: CaffeContext) -> None:
    """LRN (ACROSS_CHANNELS) -> LRN(size, alpha, beta, bias=k); WITHIN_CHANNEL is refused."""
    lp = _p(layer, "lrn_param")
    if int(lp.norm_region) != 0:
        raise ctx.error(layer, "LRN norm_region WITHIN_CHANNEL is not supported")
    x = ctx.input(layer)
    attrs = {
        "size": int(lp.local_size),
        "alpha": float(lp.alpha),
        "beta": float(lp.beta),
        "bias": float(lp.k),
    }
    ctx.set_top(layer, ctx.op(layer, "LRN", [x], attrs, ctx.shape(x)))


_note("LRN", "LRN", "ACROSS_CHANNELS only")


@LAYERS.register("Normalize")
def normalize(layer: LayerDef, ctx: CaffeContext) -> None:
    """Normalize (SSD) -> x / sqrt(sum(x^2) + eps) * scale (over C, or C/H/W if across_spatial)."""
    np_ = _p(layer, "norm_param")
    x = ctx.input(layer)
    n, c, h, w = _rank4(layer, ctx, x)
    axes = [1, 2, 3] if np_.across_spatial else [1]
    rshape = (n, 1, 1, 1) if np_.across_spatial else (n, 1, h, w)
    ss = ctx.op(layer, "ReduceSumSquare", [x], {"axes": axes, "keepdims": 1}, rshape, suffix="_sumsq")
    ss = ctx.op(layer, "Add", [ss, ctx.const(float(np_.eps))], None, rshape, suffix="_eps")
    norm = ctx.op(layer, "Sqrt", [ss], None, rshape, suffix="_norm")
    y = ctx.op(layer, "Div", [x, norm], None, (n, c, h, w), suffix="_div")
    shared = bool(np_.channel_shared)
    s = ctx.blob(layer, 0, (1,) if shared else (c,), "scale")
    s = s if shared else s.reshape(c, 1, 1)
    ctx.set_top(layer, ctx.op(layer, "Mul", [y, ctx.weight(layer, s, "scale")], None, (n, c, h, w)))


_note("Normalize", "ReduceSumSquare, Add, Sqrt, Div, Mul", "across_spatial, channel_shared")


# ---- element-wise -------------------------------------------------------------------------------------
@LAYERS.register("Eltwise")
def eltwise(layer: LayerDef, ctx: CaffeContext) -> None:
    """Eltwise -> Add/Sub/Sum (SUM, with coeffs as Mul), Mul (PROD) or Max (MAX)."""
    ep = _p(layer, "eltwise_param")
    xs = ctx.inputs(layer)
    shape = ctx.shape(xs[0])
    op = int(ep.operation)
    coeffs = [float(c) for c in ep.coeff]
    if coeffs and len(coeffs) != len(xs):
        raise ctx.error(layer, f"{len(coeffs)} coeffs for {len(xs)} bottoms")
    if op == 1:  # SUM
        if len(xs) == 2 and coeffs == [1.0, -1.0]:
            ctx.set_top(layer, ctx.op(layer, "Sub", xs, None, shape))
            return
        terms = []
        for i, (x, c) in enumerate(zip(xs, coeffs or [1.0] * len(xs), strict=True)):
            terms.append(x if c == 1.0 else ctx.op(layer, "Mul", [x, ctx.const(c)], None, shape, suffix=f"_c{i}"))
        if len(terms) == 2:
            ctx.set_top(layer, ctx.op(layer, "Add", terms, None, shape))
        else:
            ctx.set_top(layer, ctx.op(layer, "Sum", terms, None, shape))
    elif op == 0:  # PROD
        y = xs[0]
        for i, x in enumerate(xs[1:]):
            last = i == len(xs) - 2
            y = ctx.op(layer, "Mul", [y, x], None, shape, suffix="" if last else f"_{i}")
        ctx.set_top(layer, y)
    else:
        ctx.set_top(layer, ctx.op(layer, "Max", xs, None, shape))


_note("Eltwise", "Add / Sub / Sum / Mul / Max", "SUM with coeff, PROD, MAX")


# ---- tensor layout --------------------------------------------------------------------------------------
@LAYERS.register("Concat")
def concat(layer: LayerDef, ctx: CaffeContext) -> None:
    """Concat -> Concat(axis); legacy concat_dim honoured."""
    cp = _p(layer, "concat_param")
    xs = ctx.inputs(layer)
    shape = list(ctx.shape(xs[0]))
    axis = int(cp.axis) if (_has(cp, "axis") or not _has(cp, "concat_dim")) else int(cp.concat_dim)
    axis = _axis(axis, len(shape))
    shape[axis] = sum(ctx.shape(x)[axis] for x in xs)
    ctx.set_top(layer, ctx.op(layer, "Concat", xs, {"axis": axis}, shape))


_note("Concat", "Concat", "axis / concat_dim")


@LAYERS.register("Slice")
def slice_(layer: LayerDef, ctx: CaffeContext) -> None:
    """Slice -> Split(axis, sizes from slice_point, or equal parts)."""
    sp = _p(layer, "slice_param")
    x = ctx.input(layer)
    shape = ctx.shape(x)
    axis = int(sp.axis) if (_has(sp, "axis") or not _has(sp, "slice_dim")) else int(sp.slice_dim)
    axis = _axis(axis, len(shape))
    points = [int(p) for p in sp.slice_point]
    n = len(layer.tops)
    if points:
        if len(points) != n - 1:
            raise ctx.error(layer, f"{len(points)} slice_point values for {n} tops")
        bounds = [0, *points, shape[axis]]
    else:
        if shape[axis] % n:
            raise ctx.error(layer, f"axis size {shape[axis]} does not split evenly into {n} tops")
        bounds = [shape[axis] // n * i for i in range(n + 1)]
    sizes = [b - a for a, b in itertools.pairwise(bounds)]
    if any(s <= 0 for s in sizes):
        raise ctx.error(layer, f"slice points {points} do not increase within axis size {shape[axis]}")
    shapes = [tuple(s if i == axis else d for i, d in enumerate(shape)) for s in sizes]
    if n == 1:
        outs: tuple[Value, ...] = (ctx.op(layer, "Identity", [x], None, shape),)
    else:
        outs = ctx.ops(layer, "Split", [x, ctx.const(sizes, np.int64)], {"axis": axis}, shapes)
    for i, out in enumerate(outs):
        ctx.set_top(layer, out, i)


_note("Slice", "Split", "slice_point or equal parts; slice_dim")


@LAYERS.register("Split")
def split(layer: LayerDef, ctx: CaffeContext) -> None:
    """Split -> nothing: every top is the bottom."""
    x = ctx.input(layer)
    for i in range(len(layer.tops)):
        ctx.set_top(layer, x, i)


_note("Split", "(aliases)")


@LAYERS.register("Dropout")
def dropout(layer: LayerDef, ctx: CaffeContext) -> None:
    """Dropout -> nothing at inference (the top is the bottom)."""
    ctx.set_top(layer, ctx.input(layer))
    ctx.diagnostics.note("Dropout layers dropped (inference)")


_note("Dropout", "(dropped)")


@LAYERS.register("Flatten")
def flatten(layer: LayerDef, ctx: CaffeContext) -> None:
    """Flatten -> Flatten(axis) when it flattens to the end from axis 1, else Reshape."""
    fp = _p(layer, "flatten_param")
    x = ctx.input(layer)
    shape = ctx.shape(x)
    axis = _axis(int(fp.axis), len(shape))
    end = _axis(int(fp.end_axis), len(shape))
    out = (*shape[:axis], int(np.prod(shape[axis : end + 1], dtype=np.int64)), *shape[end + 1 :])
    if axis == 1 and end == len(shape) - 1:
        y = ctx.op(layer, "Flatten", [x], {"axis": 1}, out)
    else:
        y = ctx.op(layer, "Reshape", [x, ctx.const(out, np.int64)], None, out)
    ctx.set_top(layer, y)


_note("Flatten", "Flatten / Reshape", "axis, end_axis")


def caffe_reshape(shape: tuple[int, ...], dims: list[int], axis: int, num_axes: int) -> tuple[int, ...]:
    """Return the output shape of Caffe's Reshape (0 copies, -1 infers, axis/num_axes window)."""
    rank = len(shape)
    start = axis + rank + 1 if axis < 0 else axis
    end = rank if num_axes == -1 else start + num_axes
    mid = [shape[start + i] if d == 0 else d for i, d in enumerate(dims)]
    out = [*shape[:start], *mid, *shape[end:]]
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        out[out.index(-1)] = int(np.prod(shape, dtype=np.int64)) // max(known, 1)
    return tuple(out)


@LAYERS.register("Reshape")
def reshape(layer: LayerDef, ctx: CaffeContext) -> None:
    """Reshape -> Reshape with the static shape (0 copies a dim, -1 infers; axis, num_axes)."""
    rp = _p(layer, "reshape_param")
    x = ctx.input(layer)
    shape = ctx.shape(x)
    out = caffe_reshape(shape, [int(d) for d in rp.shape.dim], int(rp.axis), int(rp.num_axes))
    if int(np.prod(out, dtype=np.int64)) != int(np.prod(shape, dtype=np.int64)):
        raise ctx.error(layer, f"cannot reshape {list(shape)} to {list(out)}")
    ctx.set_top(layer, ctx.op(layer, "Reshape", [x, ctx.const(out, np.int64)], None, out))


_note("Reshape", "Reshape", "axis, num_axes")


@LAYERS.register("Softmax")
def softmax(layer: LayerDef, ctx: CaffeContext) -> None:
    """Softmax -> Softmax(axis)."""
    x = ctx.input(layer)
    shape = ctx.shape(x)
    axis = _axis(int(_p(layer, "softmax_param").axis), len(shape))
    ctx.set_top(layer, ctx.op(layer, "Softmax", [x], {"axis": axis}, shape))


_note("Softmax", "Softmax", "axis")


@LAYERS.register("Crop")
def crop(layer: LayerDef, ctx: CaffeContext) -> None:
    """Crop -> Slice with static starts/ends: bottom 0 cut to bottom 1's dims from ``axis``."""
    cp = _p(layer, "crop_param")
    x = ctx.input(layer)
    shape = ctx.shape(x)
    ref = ctx.shape(ctx.input(layer, 1))
    axis = _axis(int(cp.axis), len(shape))
    axes = list(range(axis, len(shape)))
    offs = [int(o) for o in cp.offset]
    if len(offs) == 1:
        offs = offs * len(axes)
    elif not offs:
        offs = [0] * len(axes)
    if len(offs) != len(axes):
        raise ctx.error(layer, f"{len(offs)} offsets for {len(axes)} cropped axes")
    ends = [o + ref[a] for o, a in zip(offs, axes, strict=True)]
    if any(e > shape[a] for e, a in zip(ends, axes, strict=True)):
        raise ctx.error(layer, f"crop of {list(shape)} to {list(ref)} at offsets {offs} runs past the input")
    out = (*shape[:axis], *ref[axis:])
    y = ctx.op(
        layer,
        "Slice",
        [x, ctx.const(offs, np.int64), ctx.const(ends, np.int64), ctx.const(axes, np.int64)],
        None,
        out,
    )
    ctx.set_top(layer, y)


_note("Crop", "Slice", "axis, offset")


@LAYERS.register("Permute")
def permute(layer: LayerDef, ctx: CaffeContext) -> None:
    """Permute (SSD) -> Transpose; a short order is completed with the remaining axes."""
    x = ctx.input(layer)
    shape = ctx.shape(x)
    order = [int(o) for o in _p(layer, "permute_param").order]
    order += [a for a in range(len(shape)) if a not in order]
    if sorted(order) != list(range(len(shape))):
        raise ctx.error(layer, f"order {order} is not a permutation of {len(shape)} axes")
    out = tuple(shape[a] for a in order)
    ctx.set_top(layer, ctx.op(layer, "Transpose", [x], {"perm": order}, out))


_note("Permute", "Transpose")


@LAYERS.register("ShuffleChannel")
def shuffle_channel(layer: LayerDef, ctx: CaffeContext) -> None:
    """ShuffleChannel -> Reshape(N, g, C/g, H, W), Transpose(0, 2, 1, 3, 4), Reshape back."""
    x = ctx.input(layer)
    n, c, h, w = _rank4(layer, ctx, x)
    g = int(_p(layer, "shuffle_channel_param").group)
    if g <= 0 or c % g:
        raise ctx.error(layer, f"group {g} does not divide {c} channels")
    s5 = (n, g, c // g, h, w)
    y = ctx.op(layer, "Reshape", [x, ctx.const(s5, np.int64)], None, s5, suffix="_split")
    t5 = (n, c // g, g, h, w)
    y = ctx.op(layer, "Transpose", [y], {"perm": [0, 2, 1, 3, 4]}, t5, suffix="_shuffle")
    ctx.set_top(layer, ctx.op(layer, "Reshape", [y, ctx.const((n, c, h, w), np.int64)], None, (n, c, h, w)))


_note("ShuffleChannel", "Reshape, Transpose, Reshape")


@LAYERS.register("Upsample")
def upsample(layer: LayerDef, ctx: CaffeContext) -> None:
    """Upsample (one bottom) -> Resize(nearest) by an integer scale or to upsample_h/w."""
    up = _p(layer, "upsample_param")
    if len(layer.bottoms) > 1:
        raise ctx.error(layer, "the two-bottom (max-unpooling) Upsample is not supported")
    x = ctx.input(layer)
    n, c, h, w = _rank4(layer, ctx, x)
    if up.upsample_h and up.upsample_w:
        oh, ow = int(up.upsample_h), int(up.upsample_w)
    else:
        sh = int(up.scale_h) if up.scale_h else int(up.scale)
        sw = int(up.scale_w) if up.scale_w else int(up.scale)
        oh, ow = h * sh, w * sw
    attrs = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    sizes = ctx.const((n, c, oh, ow), np.int64)
    ctx.set_top(layer, ctx.op(layer, "Resize", [x, None, None, sizes], attrs, (n, c, oh, ow)))


_note("Upsample", "Resize(nearest)", "one bottom")


@LAYERS.register("Interp")
def interp(layer: LayerDef, ctx: CaffeContext) -> None:
    """Interp (PSPNet) -> Resize(linear, align_corners); size from height/width, zoom/shrink or bottom 1."""
    ip = _p(layer, "interp_param")
    x = ctx.input(layer)
    n, c, h, w = _rank4(layer, ctx, x)
    if ip.pad_beg or ip.pad_end:
        raise ctx.error(layer, "Interp pad_beg/pad_end are not supported")
    if len(layer.bottoms) > 1:
        ref = ctx.shape(ctx.input(layer, 1))
        oh, ow = ref[2], ref[3]
    elif ip.height and ip.width:
        oh, ow = int(ip.height), int(ip.width)
    else:
        oh, ow = h, w
        if ip.shrink_factor != 1:
            oh, ow = (oh - 1) // int(ip.shrink_factor) + 1, (ow - 1) // int(ip.shrink_factor) + 1
        if ip.zoom_factor != 1:
            oh, ow = oh + (oh - 1) * (int(ip.zoom_factor) - 1), ow + (ow - 1) * (int(ip.zoom_factor) - 1)
    attrs = {"mode": "linear", "coordinate_transformation_mode": "align_corners"}
    sizes = ctx.const((n, c, oh, ow), np.int64)
    ctx.set_top(layer, ctx.op(layer, "Resize", [x, None, None, sizes], attrs, (n, c, oh, ow)))


_note("Interp", "Resize(linear, align_corners)", "no pad_beg/pad_end")
