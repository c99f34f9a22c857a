"""Caffe normalisation, arithmetic and tensor-shuffling layers -> IR nodes.

Registered into ``layers.LAYERS``; see that module for the conventions.
"""

from __future__ import annotations

import itertools
import json

import numpy as np

from convert.ir import DataType, RefusedError, Shape, TensorType, Value

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
    factor = float(ctx.blob(layer, 2, (1,), "moving-average factor")[0])
    inv = 0.0 if factor == 0.0 else 1.0 / factor
    inputs = [
        x,
        ctx.weight(layer, np.ones(c), "scale"),
        ctx.weight(layer, np.zeros(c), "bias"),
        ctx.weight(layer, mean * inv, "mean"),
        ctx.weight(layer, var * inv, "var"),
    ]
    ctx.set_top(layer, ctx.emit("BatchNormalization", inputs, {"epsilon": eps}, shape))


_note("BatchNorm", "BatchNormalization", "moving-average factor blob applied")


@LAYERS.register("BN")
def bn(layer: LayerDef, ctx: CaffeContext) -> None:
    """PSPNet's BN -> BatchNormalization: blobs slope, bias, mean, variance (each 1xCx1x1), ``bn_param.eps``.

    Unlike BVLC's BatchNorm, the statistics are stored as they are (no moving-average factor) and
    the affine part is in the layer itself.
    """
    x = ctx.input(layer)
    shape = ctx.shape(x)
    c = shape[1]
    names = ("slope", "bias", "mean", "variance")
    blobs = [ctx.blob(layer, i, (1, c, 1, 1), what).reshape(c) for i, what in enumerate(names)]
    inputs = [x, *(ctx.weight(layer, b, what) for b, what in zip(blobs, names, strict=True))]
    eps = float(_p(layer, "bn_param").eps)
    ctx.set_top(layer, ctx.emit("BatchNormalization", inputs, {"epsilon": eps}, shape))


_note("BN", "BatchNormalization", "PSPNet's layer: slope, bias, mean, variance blobs")


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
            y = ctx.emit("Reshape", [y, ctx.const(target, np.int64)], None, target, suffix="_factor")
        pshape = yshape
        factor: Value = y
    else:
        pshape = _param_shape(shape, axis, int(sp.num_axes))
        arr = ctx.blob(layer, 0, pshape, "scale")
        factor = ctx.weight(layer, arr.reshape(_broadcast(pshape, len(shape), axis)), "scale")
        blob_i = 1
    out = ctx.emit("Mul", [x, factor], None, shape, suffix="_mul" if sp.bias_term else "")
    if sp.bias_term:
        bias = ctx.blob(layer, blob_i, pshape, "bias").reshape(_broadcast(pshape, len(shape), axis))
        out = ctx.emit("Add", [out, ctx.weight(layer, bias, "bias")], None, shape)
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
            y = ctx.emit("Reshape", [y, ctx.const(target, np.int64)], None, target, suffix="_bias")
        b: Value = y
    else:
        pshape = _param_shape(shape, axis, int(bp.num_axes))
        b = ctx.weight(layer, ctx.blob(layer, 0, pshape, "bias").reshape(_broadcast(pshape, len(shape), axis)), "bias")
    ctx.set_top(layer, ctx.emit("Add", [x, b], None, shape))


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
    ctx.set_top(layer, ctx.emit("LRN", [x], attrs, ctx.shape(x)))


_note("LRN", "LRN", "ACROSS_CHANNELS only")


@LAYERS.register("Normalize")
def normalize(layer: LayerDef, ctx: CaffeContext) -> None:
    """Normalize (SSD) -> x / sqrt(sum(x^2) + eps) * scale (over C, or C/H/W if across_spatial)."""
    np_ = _p(layer, "norm_param")
    x = ctx.input(layer)
    n, c, h, w = _rank4(layer, ctx, x)
    axes = [1, 2, 3] if np_.across_spatial else [1]
    rshape = (n, 1, 1, 1) if np_.across_spatial else (n, 1, h, w)
    ss = ctx.emit("ReduceSumSquare", [x], {"axes": axes, "keepdims": 1}, rshape, suffix="_sumsq")
    ss = ctx.emit("Add", [ss, ctx.const(float(np_.eps))], None, rshape, suffix="_eps")
    norm = ctx.emit("Sqrt", [ss], None, rshape, suffix="_norm")
    y = ctx.emit("Div", [x, norm], None, (n, c, h, w), suffix="_div")
    shared = bool(np_.channel_shared)
    s = ctx.blob(layer, 0, () if shared else (c,), "scale")  # the SSD fork's shared scale is a 0-axis blob
    s = s.reshape(1) if shared else s.reshape(c, 1, 1)
    ctx.set_top(layer, ctx.emit("Mul", [y, ctx.weight(layer, s, "scale")], None, (n, c, h, w)))


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
            ctx.set_top(layer, ctx.emit("Sub", xs, None, shape))
            return
        terms = []
        for i, (x, c) in enumerate(zip(xs, coeffs or [1.0] * len(xs), strict=True)):
            terms.append(x if c == 1.0 else ctx.emit("Mul", [x, ctx.const(c)], None, shape, suffix=f"_c{i}"))
        if len(terms) == 2:
            ctx.set_top(layer, ctx.emit("Add", terms, None, shape))
        else:
            ctx.set_top(layer, ctx.emit("Sum", terms, None, shape))
    elif op == 0:  # PROD
        y = xs[0]
        for i, x in enumerate(xs[1:]):
            last = i == len(xs) - 2
            y = ctx.emit("Mul", [y, x], None, shape, suffix="" if last else f"_{i}")
        ctx.set_top(layer, y)
    else:
        ctx.set_top(layer, ctx.emit("Max", xs, None, shape))


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
    ctx.set_top(layer, ctx.emit("Concat", xs, {"axis": axis}, shape))


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
        outs: tuple[Value, ...] = (ctx.emit("Identity", [x], None, shape),)
    else:
        outs = ctx.emit_multi("Split", [x, ctx.const(sizes, np.int64)], {"axis": axis}, shapes)
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
        y = ctx.emit("Flatten", [x], {"axis": 1}, out)
    else:
        y = ctx.emit("Reshape", [x, ctx.const(out, np.int64)], None, out)
    ctx.set_top(layer, y)


_note("Flatten", "Flatten / Reshape", "axis, end_axis")


def caffe_reshape(shape: tuple[int, ...], dims: list[int], axis: int, num_axes: int) -> tuple[int, ...]:
    """Return the output shape of Caffe's Reshape (0 copies, -1 infers, axis/num_axes window).

    Raises:
        RefusedError: for the windows and dims real Caffe's Reshape refuses (its checks, in words).
    """
    rank = len(shape)
    start = axis + rank + 1 if axis < 0 else axis
    if not 0 <= start <= rank:
        raise RefusedError(f"reshape_param.axis {axis} is outside the {rank}-D input ({-rank - 1}..{rank}); "
                           "real Caffe refuses the net too")
    end = rank if num_axes == -1 else start + num_axes
    if num_axes < -1 or end > rank:
        raise RefusedError(f"reshape_param.axis {axis} with num_axes {num_axes} reaches past the {rank}-D input; "
                           "real Caffe refuses the net too")
    if any(d < -1 for d in dims) or dims.count(-1) > 1:
        raise RefusedError(f"reshape_param.shape {dims}: dims are at least -1, and -1 at most once")
    if any(d == 0 and start + i >= rank for i, d in enumerate(dims)):
        raise RefusedError(f"reshape_param.shape {dims} copies (0) an axis past the {rank}-D input's last")
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
    ctx.set_top(layer, ctx.emit("Reshape", [x, ctx.const(out, np.int64)], None, out))


_note("Reshape", "Reshape", "axis, num_axes")


@LAYERS.register("Softmax")
def softmax(layer: LayerDef, ctx: CaffeContext) -> None:
    """Softmax -> Softmax(axis)."""
    x = ctx.input(layer)
    shape = ctx.shape(x)
    axis = _axis(int(_p(layer, "softmax_param").axis), len(shape))
    ctx.set_top(layer, ctx.emit("Softmax", [x], {"axis": axis}, shape))


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
    y = ctx.emit(
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
    ctx.set_top(layer, ctx.emit("Transpose", [x], {"perm": order}, out))


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
    y = ctx.emit("Reshape", [x, ctx.const(s5, np.int64)], None, s5, suffix="_split")
    t5 = (n, c // g, g, h, w)
    y = ctx.emit("Transpose", [y], {"perm": [0, 2, 1, 3, 4]}, t5, suffix="_shuffle")
    ctx.set_top(layer, ctx.emit("Reshape", [y, ctx.const((n, c, h, w), np.int64)], None, (n, c, h, w)))


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
    ctx.set_top(layer, ctx.emit("Resize", [x, None, None, sizes], attrs, (n, c, oh, ow)))


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
    ctx.set_top(layer, ctx.emit("Resize", [x, None, None, sizes], attrs, (n, c, oh, ow)))


_note("Interp", "Resize(linear, align_corners)", "no pad_beg/pad_end")


@LAYERS.register("Resize")
def resize(layer: LayerDef, ctx: CaffeContext) -> None:
    """Resize (the SSD fork's, ``resize_param``) -> Resize(linear, asymmetric) [Pad before, Slice after].

    The fork samples output pixel ``o`` at ``o * in / out`` (per axis) and blends the two input
    pixels around it linearly, taking the pixel past the last one as 0 (it does not clamp): the
    last outputs of an enlarged axis fade towards zero. ONNX's asymmetric linear Resize clamps
    instead, so when an axis grows the input gets one zero row/column at its end first, the
    Resize runs on that by the same scales (the same sample points), and a Slice keeps
    ``out`` outputs. Shrinking never reads past the last pixel ((out - 1) * in / out <= in - 1).
    The size is ``height`` x ``width``, or with ``is_pyramid_test`` the input's size times
    ``out_height_scale`` / ``out_width_scale`` rounded down (computed in float, as the fork does).
    """
    rp = _p(layer, "resize_param")
    x = ctx.input(layer)
    n, c, h, w = _rank4(layer, ctx, x)
    if rp.is_pyramid_test:
        oh = int(np.floor(np.float32(h) * np.float32(rp.out_height_scale)))
        ow = int(np.floor(np.float32(w) * np.float32(rp.out_width_scale)))
    else:
        if not (_has(rp, "height") and _has(rp, "width")):
            raise ctx.error(layer, "resize_param needs height and width (or is_pyramid_test with scales)")
        oh, ow = int(rp.height), int(rp.width)
    if oh < 1 or ow < 1:
        raise ctx.error(layer, f"resize_param gives an empty output ({oh} x {ow})")
    attrs = {"mode": "linear", "coordinate_transformation_mode": "asymmetric"}
    out = (n, c, oh, ow)
    if oh <= h and ow <= w:
        sizes = ctx.const(out, np.int64)
        ctx.set_top(layer, ctx.emit("Resize", [x, None, None, sizes], attrs, out))
        return
    padded = (n, c, h + 1, w + 1)
    pads = ctx.const((0, 0, 0, 0, 0, 0, 1, 1), np.int64)
    xp = ctx.emit("Pad", [x, pads], {"mode": "constant"}, padded, suffix="_zero_edge")
    scales = np.array([1.0, 1.0, oh / h, ow / w], np.float32)
    big = tuple(int(np.floor(np.float32(d + 1) * s)) for d, s in zip((h, w), scales[2:], strict=True))
    y = ctx.emit("Resize", [xp, None, ctx.const(scales, np.float32)], attrs, (n, c, *big), suffix="_resized")
    starts, ends = ctx.const((0, 0), np.int64), ctx.const((oh, ow), np.int64)
    ctx.set_top(layer, ctx.emit("Slice", [y, starts, ends, ctx.const((2, 3), np.int64)], None, out))


_note("Resize", "Resize(linear, asymmetric) [Pad + Slice]", "the SSD fork's layer: height/width or is_pyramid_test "
      "scales; the pixel past the edge counts as 0, as in the fork")


# ---- tiling, reductions, arg-max, mean-variance normalisation ----------------------------------------
@LAYERS.register("Tile")
def tile(layer: LayerDef, ctx: CaffeContext) -> None:
    """Tile -> Tile: ``tiles`` copies along ``axis`` (default 1)."""
    tp = _p(layer, "tile_param")
    x = ctx.input(layer)
    shape = ctx.shape(x)
    axis = _axis(int(tp.axis), len(shape))
    tiles = int(tp.tiles)
    if not 0 <= axis < len(shape) or tiles < 1:
        raise ctx.error(layer, f"tile_param axis {tp.axis} / tiles {tp.tiles} do not fit a {len(shape)}-d bottom")
    repeats = [tiles if i == axis else 1 for i in range(len(shape))]
    out = tuple(d * r for d, r in zip(shape, repeats, strict=True))
    ctx.set_top(layer, ctx.emit("Tile", [x, ctx.const(repeats, np.int64)], None, out))


_note("Tile", "Tile")

def _reduce(ctx: CaffeContext, layer: LayerDef, op: str, x: Value, axes: list[int], keepdims: int,
            out: tuple[int, ...], suffix: str = "") -> Value:
    """A Reduce* node in the IR's opset 17: ReduceSum takes its axes as an input, the others as an attribute."""
    if op == "ReduceSum":
        return ctx.emit(op, [x, ctx.const(axes, np.int64)], {"keepdims": keepdims}, out, suffix=suffix)
    return ctx.emit(op, [x], {"axes": axes, "keepdims": keepdims}, out, suffix=suffix)


# Caffe's ReductionParameter.ReductionOp: SUM = 1, ASUM = 2, SUMSQ = 3, MEAN = 4.
_REDUCTIONS = {1: "ReduceSum", 2: "ReduceL1", 3: "ReduceSumSquare", 4: "ReduceMean"}


@LAYERS.register("Reduction")
def reduction(layer: LayerDef, ctx: CaffeContext) -> None:
    """Reduction -> Reshape to (dims before axis, -1), a Reduce* over the last axis, times coeff.

    Caffe reduces every axis from ``axis`` (default 0) to the end; the top keeps the leading axes
    (a scalar when axis is 0).
    """
    rp = _p(layer, "reduction_param")
    op = _REDUCTIONS.get(int(rp.operation))
    if op is None:
        raise ctx.error(layer, f"reduction_param operation {rp.operation} is not SUM, ASUM, SUMSQ or MEAN")
    x = ctx.input(layer)
    shape = ctx.shape(x)
    axis = _axis(int(rp.axis), len(shape))
    lead = tuple(shape[:axis])
    flat = (*lead, int(np.prod(shape[axis:], dtype=np.int64)))
    y = ctx.emit("Reshape", [x, ctx.const(flat, np.int64)], None, flat, suffix="_flat")
    y = _reduce(ctx, layer, op, y, [len(flat) - 1], 0, lead, "_reduce" if float(rp.coeff) != 1.0 else "")
    if float(rp.coeff) != 1.0:
        y = ctx.emit("Mul", [y, ctx.const(float(rp.coeff))], None, lead)
    ctx.set_top(layer, y)


_note("Reduction", "ReduceSum / ReduceL1 / ReduceSumSquare / ReduceMean", "over every axis from axis")


@LAYERS.register("ArgMax")
def argmax(layer: LayerDef, ctx: CaffeContext) -> None:
    """ArgMax (top_k 1) -> ArgMax + Cast to float; ``out_max_val`` gives the maximum (with ``axis``)
    or [index, maximum] along dim 1 (without ``axis``, over each item's flattened values).

    Caffe sorts (value, index) pairs largest first, so on ties it returns the last index:
    ``select_last_index=1``.
    """
    ap = _p(layer, "argmax_param")
    if int(ap.top_k) != 1:
        raise ctx.error(layer, f"argmax_param top_k {ap.top_k}: only top_k 1 is supported")
    x = ctx.input(layer)
    shape = ctx.shape(x)
    if _has(ap, "axis"):
        axis = _axis(int(ap.axis), len(shape))
        out = tuple(1 if i == axis else d for i, d in enumerate(shape))
        if ap.out_max_val:
            ctx.set_top(layer, _reduce(ctx, layer, "ReduceMax", x, [axis], 1, out))
            return
        idx = ctx.emit("ArgMax", [x], {"axis": axis, "keepdims": 1, "select_last_index": 1}, out, suffix="_index")
        idx.type = TensorType(DataType.INT64)
        ctx.set_top(layer, ctx.emit("Cast", [idx], {"to": 1}, out))
        return
    n = shape[0]
    flat = (n, int(np.prod(shape[1:], dtype=np.int64)))
    y = ctx.emit("Reshape", [x, ctx.const(flat, np.int64)], None, flat, suffix="_flat")
    index = ctx.emit("ArgMax", [y], {"axis": 1, "keepdims": 1, "select_last_index": 1}, (n, 1), suffix="_index")
    index.type = TensorType(DataType.INT64)
    index = ctx.emit("Cast", [index], {"to": 1}, (n, 1), suffix="_float" if ap.out_max_val else "_cast")
    pieces = [index]
    if ap.out_max_val:
        pieces.append(_reduce(ctx, layer, "ReduceMax", y, [1], 1, (n, 1), "_max"))
    k = len(pieces)
    both = ctx.emit("Concat", pieces, {"axis": 1}, (n, k), suffix="_both") if k > 1 else index
    out = (n, k, 1, *([1] * (len(shape) - 3)))  # Caffe: (N, 1 or 2, top_k, 1...) with the bottom's rank
    ctx.set_top(layer, ctx.emit("Reshape", [both, ctx.const(out, np.int64)], None, out))


_note("ArgMax", "ArgMax + Cast (ReduceMax for out_max_val)", "top_k 1; ties: the last index, as Caffe")


@LAYERS.register("MVN")
def mvn(layer: LayerDef, ctx: CaffeContext) -> None:
    """MVN -> x - mean, divided by sqrt(variance) + eps when normalize_variance.

    Statistics over H, W per channel, or over C, H, W with ``across_channels``. Caffe adds eps to
    the standard deviation, not to the variance.
    """
    mp = _p(layer, "mvn_param")
    x = ctx.input(layer)
    shape = ctx.shape(x)
    if len(shape) < 2:
        raise ctx.error(layer, f"MVN needs a bottom of rank 2 or more, got {list(shape)}")
    axes = list(range(1 if mp.across_channels else 2, len(shape)))
    kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
    mean = _reduce(ctx, layer, "ReduceMean", x, axes, 1, kept, "_mean")
    centred = ctx.emit("Sub", [x, mean], None, shape, suffix="_centred" if mp.normalize_variance else "")
    if not mp.normalize_variance:
        ctx.set_top(layer, centred)
        return
    sq = ctx.emit("Mul", [centred, centred], None, shape, suffix="_sq")
    var = _reduce(ctx, layer, "ReduceMean", sq, axes, 1, kept, "_var")
    std = ctx.emit("Sqrt", [var], None, kept, suffix="_std")
    den = ctx.emit("Add", [std, ctx.const(float(mp.eps))], None, kept, suffix="_den")
    ctx.set_top(layer, ctx.emit("Div", [centred, den], None, shape))


_note("MVN", "ReduceMean, Sub, Sqrt, Add(eps), Div", "eps added to the standard deviation, as Caffe does")


# ---- SSD -----------------------------------------------------------------------------------------------
def prior_boxes(pp: object, fmap_hw: tuple[int, int], img_hw: tuple[int, int], clip: bool) -> np.ndarray:
    """Return the SSD fork's PriorBox top, (1, 2, H*W*priors*4): corner boxes, then their variances.

    Per cell (row-major), per ``min_size``: the min_size square, then sqrt(min*max) square when
    ``max_size`` is given, then one box per extra aspect ratio (1 is implied first; ``flip`` adds
    1/ar; ratios within 1e-6 of one already listed are skipped). Centres at (cell + offset) * step,
    step defaulting to image size / map size; coordinates normalised by the image size. Sizes are
    truncated to integers, as the SSD fork's layer does.
    """
    h, w = fmap_hw
    img_h, img_w = img_hw
    ratios = [1.0]
    for ar in pp.aspect_ratio:  # type: ignore[attr-defined]
        if any(abs(ar - r) < 1e-6 for r in ratios):
            continue
        ratios.append(float(ar))
        if pp.flip:  # type: ignore[attr-defined]
            ratios.append(1.0 / float(ar))
    step_h = float(pp.step_h or pp.step or img_h / h)  # type: ignore[attr-defined]
    step_w = float(pp.step_w or pp.step or img_w / w)  # type: ignore[attr-defined]
    offset = float(pp.offset)  # type: ignore[attr-defined]
    # The SSD fork's layer holds each size in an int (``int min_size_ = min_sizes_[s]``): 4.5 acts as 4.
    mins = [float(int(v)) for v in pp.min_size]  # type: ignore[attr-defined]
    maxs = [float(int(v)) for v in pp.max_size]  # type: ignore[attr-defined]
    sizes: list[tuple[float, float]] = []  # (box width, box height) per prior, in cell order
    for i, mn in enumerate(mins):
        sizes.append((mn, mn))
        if maxs:
            side = float(np.sqrt(mn * maxs[i]))
            sizes.append((side, side))
        sizes += [(mn * float(np.sqrt(r)), mn / float(np.sqrt(r))) for r in ratios if abs(r - 1.0) >= 1e-6]
    cy, cx = np.meshgrid((np.arange(h) + offset) * step_h, (np.arange(w) + offset) * step_w, indexing="ij")
    bw = np.array([s[0] for s in sizes])
    bh = np.array([s[1] for s in sizes])
    cx, cy = cx[..., None], cy[..., None]
    boxes = np.stack([(cx - bw / 2) / img_w, (cy - bh / 2) / img_h, (cx + bw / 2) / img_w, (cy + bh / 2) / img_h],
                     axis=-1).reshape(-1)
    if clip:
        boxes = np.clip(boxes, 0.0, 1.0)
    var = list(pp.variance) or [0.1]  # type: ignore[attr-defined]
    variances = np.tile(np.asarray(var if len(var) == 4 else var[:1] * 4, np.float64), boxes.size // 4)
    return np.stack([boxes, variances]).reshape(1, 2, -1).astype(np.float32)


@LAYERS.register("PriorBox")
def prior_box(layer: LayerDef, ctx: CaffeContext) -> None:
    """PriorBox -> a constant (the boxes depend only on the shapes of its two bottoms)."""
    pp = _p(layer, "prior_box_param")
    if not pp.min_size:
        raise ctx.error(layer, "prior_box_param has no min_size")
    if len(pp.max_size) not in (0, len(pp.min_size)):
        raise ctx.error(layer, "prior_box_param needs one max_size per min_size (or none)")
    if len(pp.variance) not in (0, 1, 4):
        raise ctx.error(layer, f"prior_box_param variance has {len(pp.variance)} values; 1 or 4 expected")
    fmap = ctx.shape(ctx.input(layer, 0))
    img = ctx.shape(ctx.input(layer, 1)) if len(layer.bottoms) > 1 else None
    img_h = int(pp.img_h or pp.img_size or (img[2] if img else 0))
    img_w = int(pp.img_w or pp.img_size or (img[3] if img else 0))
    if not img_h or not img_w:
        raise ctx.error(layer, "the image size is unknown: give the image as bottom 1 or img_size/img_h/img_w")
    if _has(pp, "clip"):
        clip = bool(pp.clip)
    else:  # the dialects disagree: the original SSD fork defaults to false, OpenCV and brocolli-caffe to true
        clip = True
        ctx.diagnostics.warn(f"PriorBox '{layer.name}' ({ctx.where(layer)}) does not set clip: read as true, as "
                             "OpenCV and brocolli-caffe do (the original SSD fork defaults to false); set it "
                             "explicitly")
    boxes = prior_boxes(pp, (fmap[2], fmap[3]), (img_h, img_w), clip)
    priors = ctx.weight(layer, boxes, "priors")
    # what the Caffe exporter needs to write this layer back (ssd flavor): see DetectionOutput
    priors.metadata_props[PRIOR_BOX_KEY] = json.dumps({
        "layer": layer.name, "param": _one_line(pp), "shape": list(boxes.shape),
        "bottoms": [v.name for v in ctx.inputs(layer)]})
    ctx.set_top(layer, priors)


PRIOR_BOX_KEY = "convert:caffe_prior_box"
DETECTION_OUTPUT_KEY = "convert:caffe_detection_output"


def _one_line(message: object) -> str:
    from google.protobuf import text_format

    return str(text_format.MessageToString(message, as_one_line=True))  # type: ignore[arg-type]


def _prior_records(priors: Value) -> list[object] | None:
    """Return the PriorBox layers behind ``priors`` (one, or a Concat over axis 2 of several)."""
    own = priors.metadata_props.get(PRIOR_BOX_KEY)
    if own:
        return [json.loads(own)]
    node = priors.producer()
    if node is None or node.op_type != "Concat" or node.attributes.get_int("axis", 0) != 2:
        return None
    found = [v.metadata_props.get(PRIOR_BOX_KEY) if v is not None else None for v in node.inputs]
    return None if not all(found) else [json.loads(str(f)) for f in found]


_note("PriorBox", "constant (computed from the static shapes)",
      "min/max sizes, aspect ratios, flip, clip, step, offset")


def _dyn(ctx: CaffeContext, layer: LayerDef, op_type: str, inputs: list[Value | None],
         attrs: dict[str, object] | None, shape: list[int | str], suffix: str,
         dtype: DataType = DataType.FLOAT) -> Value:
    """A node whose output has a data-dependent dimension (named by a string in ``shape``)."""
    out = ctx.emit(op_type, inputs, attrs, [1], suffix=suffix)
    out.type = TensorType(dtype)
    out.shape = Shape(list(shape))
    return out


@LAYERS.register("DetectionOutput")
def detection_output(layer: LayerDef, ctx: CaffeContext) -> None:
    """SSD's DetectionOutput -> box decoding, per-class TopK + NonMaxSuppression, keep_top_k, sorting.

    Bottoms: location (N, P*4), confidence (N, P*C, after the net's softmax), priors (1, 2, P*4).
    As the SSD fork computes it (batch 1, ``share_location``): boxes decoded from the priors and
    their variances (CENTER_SIZE or CORNER); for each class but the background, the ``top_k``
    highest scores, then greedy NMS (IoU > nms_threshold suppresses) among those above
    ``confidence_threshold``; of all kept, the ``keep_top_k`` best; rows ordered by label, then by
    score. The top is (1, 1, detections, 7): image id, label, score, xmin, ymin, xmax, ymax. With
    no detection it holds Caffe's one row ``[0, -1, -1, -1, -1, -1, -1]``.
    """
    dp = _p(layer, "detection_output_param")
    loc, conf, priors = ctx.input(layer, 0), ctx.input(layer, 1), ctx.input(layer, 2)
    n = ctx.shape(loc)[0]
    classes = int(dp.num_classes)
    p = int(np.prod(ctx.shape(priors), dtype=np.int64)) // 8
    if n != 1:
        raise ctx.error(layer, f"batch {n}: only batch 1 is supported")
    if not dp.share_location:
        raise ctx.error(layer, "share_location: false is not supported")
    code = int(dp.code_type)
    if code not in (1, 2):
        raise ctx.error(layer, f"code_type {code}: only CORNER (1) and CENTER_SIZE (2) are supported")
    if classes < 2 or int(np.prod(ctx.shape(conf), dtype=np.int64)) != p * classes:
        raise ctx.error(layer, f"confidence has {list(ctx.shape(conf))} values for {p} priors and {classes} classes")
    i64 = np.int64

    def op(kind: str, ins: list[Value | None], attrs: dict[str, object] | None, shape: tuple[int, ...],
           suffix: str) -> Value:
        return ctx.emit(kind, ins, attrs, shape, suffix=suffix)

    # decode (all static shapes)
    pr = op("Reshape", [priors, ctx.const((2, p, 4), i64)], None, (2, p, 4), "_priors")
    box = op("Gather", [pr, ctx.const(0, i64)], {"axis": 0}, (p, 4), "_prior_box")
    var = op("Gather", [pr, ctx.const(1, i64)], {"axis": 0}, (p, 4), "_prior_var")
    delta = op("Reshape", [loc, ctx.const((p, 4), i64)], None, (p, 4), "_loc")
    if not dp.variance_encoded_in_target:
        delta = op("Mul", [delta, var], None, (p, 4), "_scaled")
    if code == 1:  # CORNER: the offsets move each corner
        boxes = op("Add", [box, delta], None, (p, 4), "_boxes")
    else:
        lo = op("Slice", [box, ctx.const([0], i64), ctx.const([2], i64), ctx.const([1], i64)], None, (p, 2), "_lo")
        hi = op("Slice", [box, ctx.const([2], i64), ctx.const([4], i64), ctx.const([1], i64)], None, (p, 2), "_hi")
        size = op("Sub", [hi, lo], None, (p, 2), "_size")
        centre = op("Add", [lo, op("Mul", [size, ctx.const(0.5)], None, (p, 2), "_half")], None, (p, 2), "_centre")
        d_c = op("Slice", [delta, ctx.const([0], i64), ctx.const([2], i64), ctx.const([1], i64)], None, (p, 2), "_dc")
        d_s = op("Slice", [delta, ctx.const([2], i64), ctx.const([4], i64), ctx.const([1], i64)], None, (p, 2), "_ds")
        c = op("Add", [op("Mul", [d_c, size], None, (p, 2), "_dcs"), centre], None, (p, 2), "_c")
        half = op("Mul", [op("Mul", [op("Exp", [d_s], None, (p, 2), "_exp"), size], None, (p, 2), "_wh"),
                          ctx.const(0.5)], None, (p, 2), "_halfwh")
        boxes = op("Concat", [op("Sub", [c, half], None, (p, 2), "_min"), op("Add", [c, half], None, (p, 2), "_max")],
                   {"axis": 1}, (p, 4), "_boxes")
    # per class: top_k candidates, then NMS among them (each class a batch of its own)
    bg = int(dp.background_label_id)
    labels = [k for k in range(classes) if k != bg]
    cls = len(labels)
    top_k = int(dp.nms_param.top_k) if _has(dp.nms_param, "top_k") and dp.nms_param.top_k > 0 else p
    k = min(top_k, p)
    scores = op("Reshape", [conf, ctx.const((p, classes), i64)], None, (p, classes), "_conf")
    scores = op("Transpose", [scores], {"perm": [1, 0]}, (classes, p), "_by_class")
    scores = op("Gather", [scores, ctx.const(labels, i64)], {"axis": 0}, (cls, p), "_objects")
    best, idx = ctx.emit_multi("TopK", [scores, ctx.const([k], i64)], {"axis": 1}, [(cls, k), (cls, k)])
    idx.type = TensorType(DataType.INT64)
    cand = op("Gather", [boxes, idx], {"axis": 0}, (cls, k, 4), "_candidates")
    nms_scores = op("Unsqueeze", [best, ctx.const([1], i64)], None, (cls, 1, k), "_nms_scores")
    sel = _dyn(ctx, layer, "NonMaxSuppression",
               [cand, nms_scores, ctx.const([k], i64), ctx.const([float(dp.nms_param.nms_threshold)]),
                ctx.const([float(dp.confidence_threshold)])], None, ["kept", 3], "_nms", DataType.INT64)
    which = _dyn(ctx, layer, "Gather", [sel, ctx.const(0, i64)], {"axis": 1}, ["kept"], "_class", DataType.INT64)
    slot = _dyn(ctx, layer, "Gather", [sel, ctx.const(2, i64)], {"axis": 1}, ["kept"], "_slot", DataType.INT64)
    flat = _dyn(ctx, layer, "Add", [_dyn(ctx, layer, "Mul", [which, ctx.const(k, i64)], None, ["kept"], "_row",
                                         DataType.INT64), slot], None, ["kept"], "_flat", DataType.INT64)
    score = _dyn(ctx, layer, "Gather", [op("Reshape", [best, ctx.const([-1], i64)], None, (cls * k,), "_best_flat"),
                                        flat], {"axis": 0}, ["kept"], "_score")
    kbox = _dyn(ctx, layer, "Gather", [op("Reshape", [cand, ctx.const((-1, 4), i64)], None, (cls * k, 4), "_cand4"),
                                       flat], {"axis": 0}, ["kept", 4], "_box")
    label = _dyn(ctx, layer, "Cast", [_dyn(ctx, layer, "Gather", [ctx.const(labels, i64), which], {"axis": 0},
                                           ["kept"], "_label_i", DataType.INT64)], {"to": 1}, ["kept"], "_label")
    count = _dyn(ctx, layer, "Shape", [score], None, [1], "_count", DataType.INT64)
    if int(dp.keep_top_k) > 0:  # the keep_top_k best scores of all classes
        keep = _dyn(ctx, layer, "Min", [count, ctx.const([int(dp.keep_top_k)], i64)], None, [1], "_keep",
                    DataType.INT64)
        best_rows = ctx.emit_multi("TopK", [score, keep], {"axis": 0}, [(1,), (1,)])
        order = best_rows[1]
        order.type = TensorType(DataType.INT64)
        for v in best_rows:
            v.shape = Shape(["detections"])
        score, kbox, label = (_dyn(ctx, layer, "Gather", [v, order], {"axis": 0}, shp, f"_top_{name}")
                              for v, shp, name in ((score, ["detections"], "score"), (kbox, ["detections", 4], "box"),
                                                   (label, ["detections"], "label")))
        count = keep
    # Caffe's order: by label, then by score (label - score/2 sorts both, scores being in (0, 1])
    key = _dyn(ctx, layer, "Sub", [label, _dyn(ctx, layer, "Mul", [score, ctx.const(0.5)], None, ["detections"],
                                               "_half_score")], None, ["detections"], "_key")
    ordered = ctx.emit_multi("TopK", [key, count], {"axis": 0, "largest": 0}, [(1,), (1,)])
    ordered[1].type = TensorType(DataType.INT64)
    for v in ordered:
        v.shape = Shape(["detections"])
    rows = [_dyn(ctx, layer, "Gather", [v, ordered[1]], {"axis": 0}, shp, f"_sorted_{name}")
            for v, shp, name in ((label, ["detections"], "label"), (score, ["detections"], "score"),
                                 (kbox, ["detections", 4], "box"))]
    cols = [_dyn(ctx, layer, "Unsqueeze", [v, ctx.const([1], i64)], None, ["detections", 1], f"_col{i}")
            for i, v in enumerate(rows[:2])]
    image = _dyn(ctx, layer, "Mul", [cols[0], ctx.const(0.0)], None, ["detections", 1], "_image")
    table = _dyn(ctx, layer, "Concat", [image, *cols, rows[2]], {"axis": 1}, ["detections", 7], "_table")
    # No detection: Caffe writes one row [0, -1, -1, -1, -1, -1, -1] (image 0, label -1), which
    # deployed post-processing reads as "nothing": the table with that row appended, cut to
    # max(detections, 1) rows.
    none = ctx.const(np.array([[0, -1, -1, -1, -1, -1, -1]], np.float32))
    padded = _dyn(ctx, layer, "Concat", [table, none], {"axis": 0}, ["detections_or_none", 7], "_or_none")
    at_least_one = _dyn(ctx, layer, "Max", [count, ctx.const([1], i64)], None, [1], "_rows", DataType.INT64)
    table = _dyn(ctx, layer, "Slice", [padded, ctx.const([0], i64), at_least_one, ctx.const([0], i64)], None,
                 ["detection_rows", 7], "_table_rows")
    top = _dyn(ctx, layer, "Reshape", [table, ctx.const((1, 1, -1, 7), i64)], None, [1, 1, "detection_rows", 7], "")
    records = _prior_records(priors)
    if records is not None:  # the Caffe exporter (ssd flavor) writes the layer back from this
        producer = top.producer()
        if producer is not None:
            producer.metadata_props[DETECTION_OUTPUT_KEY] = json.dumps({
                "param": _one_line(dp), "loc": loc.name, "conf": conf.name, "priors": records})
    ctx.set_top(layer, top)


_note("DetectionOutput", "decode + TopK + NonMaxSuppression + TopK (keep_top_k) + sort",
      "batch 1, share_location, CORNER/CENTER_SIZE; no detection gives Caffe's one row [0, -1, -1, -1, -1, -1, -1]")
