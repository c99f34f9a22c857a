"""Graph plumbing and shape ops: inputs, constants, identities, padding, concatenation, reshapes."""

from __future__ import annotations

import numpy as np

from convert.frontends.tensorflow.context import NCHW, NCL, TF, TFContext, nchw_axis
from convert.frontends.tensorflow.graph import TFNode
from convert.frontends.tensorflow.ops import register
from convert.ir import DataType, RefusedError

__all__: list[str] = []


@register("Placeholder", maps_to="graph input", notes="rank-4 inputs become NCHW unless --keep-nhwc")
def placeholder(node: TFNode, ctx: TFContext) -> None:
    """Placeholder: bound by the loader as a graph input; nothing to emit."""
    if f"{node.name}:0" not in ctx.values:
        raise RefusedError("a Placeholder that is not an input of the signature (feed it or freeze it)")


@register("Const", maps_to="(constant)", notes="kept as an array until an op reads it")
def const(node: TFNode, ctx: TFContext) -> None:
    """Const: recorded as an array; becomes an initializer where an op reads it."""
    value = node.attrs.get("value")
    if not isinstance(value, np.ndarray):
        raise RefusedError("a Const without a tensor value")
    ctx.bind_const(value)


@register("Identity", "StopGradient", maps_to="(nothing)", notes="aliases its input")
def identity(node: TFNode, ctx: TFContext) -> None:
    """Identity-like ops alias their input (no node)."""
    ctx.alias(node.inputs[0])


@register("Pad", "PadV2", "MirrorPad", maps_to="Pad", notes="constant paddings; MirrorPad REFLECT only")
def pad(node: TFNode, ctx: TFContext) -> None:
    """Pad / PadV2 (constant value) / MirrorPad (REFLECT) -> Pad, in NCHW for rank-4 inputs held so."""
    paddings = ctx.need_const(node.inputs[1], "the paddings").astype(np.int64).reshape(-1, 2)
    x_name = node.inputs[0]
    layout = NCHW if len(paddings) == 4 and ctx.is_nchw(x_name) else TF
    if layout == NCHW:
        paddings = paddings[[0, 3, 1, 2]]  # rows N, H, W, C -> N, C, H, W
    elif len(paddings) == 3 and ctx.layouts(x_name) == {NCL}:
        layout, paddings = NCL, paddings[[0, 2, 1]]  # rows N, L, C -> N, C, L
    pads = np.concatenate([paddings[:, 0], paddings[:, 1]]).astype(np.int64)
    inputs = [ctx.get(x_name, layout), ctx.builder.const(pads)]
    attrs: dict[str, object] = {}
    zero = node.op == "Pad"
    if node.op == "PadV2":
        value = ctx.need_const(node.inputs[2], "the pad value")
        inputs.append(ctx.builder.const(np.asarray(value).reshape(())))
        zero = np.asarray(value).size == 1 and float(np.asarray(value).reshape(())) == 0.0
    if zero and layout == NCHW and not paddings[:2].any() and (paddings >= 0).all():
        ctx.zero_pads[f"{node.name}:0"] = (x_name, [int(v) for v in (*paddings[2:, 0], *paddings[2:, 1])])
    elif node.op == "MirrorPad":
        mode = str(node.attrs.get("mode", "REFLECT"))
        if mode != "REFLECT":
            raise RefusedError(f"MirrorPad mode '{mode}' is not supported (only REFLECT)")
        attrs["mode"] = "reflect"
    ctx.bind(ctx.emit("Pad", inputs, attrs), layout)


@register("ConcatV2", maps_to="Concat", notes="constant axis")
def concat_v2(node: TFNode, ctx: TFContext) -> None:
    """ConcatV2 -> Concat; in NCHW when every input is rank 4 and one is held in NCHW."""
    names = list(node.inputs[:-1])
    axis = int(ctx.need_const(node.inputs[-1], "the axis"))
    nchw = all(ctx.rank(n) == 4 for n in names) and any(ctx.is_nchw(n) for n in names)
    layout = NCHW if nchw else TF
    ctx.bind(ctx.emit("Concat", [ctx.get(n, layout) for n in names],
                      {"axis": nchw_axis(axis) if nchw else axis}), layout)


@register("Reshape", maps_to="Reshape", notes="TF's axes (NCHW when H = W = 1); target constant or static")
def reshape(node: TFNode, ctx: TFContext) -> None:
    """Reshape -> Reshape on TF's layout (the target from a constant, else TF's inferred output shape)."""
    target = ctx.const(node.inputs[1])
    if target is None:
        out = ctx.shape(f"{node.name}:0")
        if out is None or sum(d is None for d in out) > 1:
            # A target computed at run time (Shape -> Gather -> Pack): use it as it is.
            computed = ctx.emit("Cast", [ctx.get(node.inputs[1], TF)], {"to": DataType.INT64})
            ctx.bind(ctx.emit("Reshape", [ctx.get(node.inputs[0], TF), computed]))
            return
        target = np.array([-1 if d is None else d for d in out], np.int64)
    target = np.asarray(target, np.int64).reshape(-1)
    x_name = node.inputs[0]
    x_shape = ctx.shape(x_name)
    # A rank-4 tensor with H = W = 1 has the same element order in NHWC and NCHW: read and write
    # such tensors (squeeze-excite blocks, Flatten after global pooling) in NCHW without a Transpose.
    x_flat = ctx.is_nchw(x_name) and x_shape is not None and len(x_shape) == 4 and x_shape[1:3] == (1, 1)
    if not x_flat and _conv1d_reshape(node, ctx, x_name, x_shape, target):
        return
    x = ctx.get(x_name, NCHW if x_flat else TF)
    if len(target) == 4 and target[1] == 1 and target[2] == 1:
        shape = ctx.builder.const(target[[0, 3, 1, 2]])
        ctx.bind(ctx.emit("Reshape", [x, shape]), NCHW)
        return
    if x_name in ctx.dilated and x_shape is not None and len(x_shape) == 4 and len(target) == 3:
        # TFLite writes the Squeeze of a dilated Conv1D as a RESHAPE: [N*b, 1, L, C] -> [N*b, L, C] in
        # SpaceToBatchND's shapes, which the dilated Conv does not have: a Squeeze of that axis.
        for axis in (1, 2):
            rest = [d for i, d in enumerate(x_shape) if i != axis]
            if x_shape[axis] == 1 and all(t == -1 or d is None or t == d for t, d in zip(target, rest, strict=True)):
                ctx.bind(ctx.emit("Squeeze", [x, ctx.builder.const(np.array([axis], np.int64))]))
                squeezed_dilated(node, ctx, [axis])
                return
    ctx.bind(ctx.emit("Reshape", [x, ctx.builder.const(target)]))


def _fits(target: np.ndarray, dims: list[int | None]) -> bool:
    return len(target) == len(dims) and all(t == -1 or d is None or t == d for t, d in zip(target, dims, strict=True))


def _conv1d_reshape(node: TFNode, ctx: TFContext, x_name: str, x_shape: tuple[int | None, ...] | None,
                    target: np.ndarray) -> bool:
    """TFLite writes a Conv1D's ExpandDims and Squeeze as RESHAPEs: [N, C, L] <-> NCHW [N, C, 1, L]
    without a Transpose, as the Squeeze/ExpandDims converters do (see ``NCL``). False: not that."""
    if x_shape is None:
        return False
    if len(x_shape) == 4 and len(target) == 3 and ctx.is_nchw(x_name):
        for axis in (1, 2):
            if x_shape[axis] == 1 and _fits(target, [d for i, d in enumerate(x_shape) if i != axis]):
                squeeze = ctx.builder.const(np.array([nchw_axis(axis)], np.int64))
                ctx.bind(ctx.emit("Squeeze", [ctx.get(x_name, NCHW), squeeze]), NCL)
                if x_name in ctx.dilated:
                    squeezed_dilated(node, ctx, [axis])
                return True
    if len(x_shape) == 3 and len(target) == 4 and ctx.layouts(x_name) == {NCL}:
        for axis in (1, 2):
            if target[axis] == 1 and _fits(np.delete(target, axis), list(x_shape)):
                unsqueeze = ctx.builder.const(np.array([nchw_axis(axis)], np.int64))
                ctx.bind(ctx.emit("Unsqueeze", [ctx.get(x_name, NCL), unsqueeze]), NCHW)
                return True
    return False


@register("Squeeze", maps_to="Squeeze", notes="TF's axes")
def squeeze(node: TFNode, ctx: TFContext) -> None:
    """Squeeze -> Squeeze on TF's layout (axes from squeeze_dims, or every size-1 axis)."""
    dims = [int(d) for d in node.attrs.get("squeeze_dims", []) or []]  # type: ignore[union-attr]
    if not dims:
        shape = ctx.shape(node.inputs[0])
        if shape is None or any(d is None for d in shape):
            raise RefusedError("squeeze of every size-1 axis needs a static input shape")
        dims = [i for i, d in enumerate(shape) if d == 1]
    x = node.inputs[0]
    if ctx.rank(x) == 4 and ctx.is_nchw(x) and [d % 4 for d in dims] in ([1], [2]):
        # a Conv2D's output back to rank 3 (Keras' Conv1D): [N, C, 1, L] -> [N, C, L], no Transpose
        axis = nchw_axis(dims[0] % 4)
        ctx.bind(ctx.emit("Squeeze", [ctx.get(x, NCHW), ctx.builder.const(np.array([axis], np.int64))]), NCL)
        squeezed_dilated(node, ctx, dims)
        return
    ctx.bind(ctx.emit("Squeeze", [ctx.get(x, TF), ctx.builder.const(np.array(dims, np.int64))]))
    squeezed_dilated(node, ctx, dims)


def squeezed_dilated(node: TFNode, ctx: TFContext, dims: list[int]) -> None:
    """Carry a dilated Conv's record (``ctx.dilated``) through a squeeze of its H or W axis.

    Keras' dilated Conv1D: SpaceToBatchND -> ExpandDims -> Conv2D -> Squeeze -> BatchToSpaceND;
    the BatchToSpaceND's 1-D crops then apply to the Conv's remaining spatial axis.
    """
    found = ctx.dilated.get(node.inputs[0])
    if found is None or ctx.rank(node.inputs[0]) != 4:
        return
    conv, block, axes = found
    dropped = sorted({d % 4 for d in dims})
    if len(block) != 2 or dropped not in ([1], [2]):
        return  # not the Conv1D pattern: a BatchToSpaceND after it refuses
    keep = 1 if dropped == [1] else 0  # the Conv's spatial axis left: W when H is squeezed
    ctx.dilated[f"{node.name}:0"] = (conv, [block[keep]], [axes[keep]])


@register("ExpandDims", maps_to="Unsqueeze", notes="constant axis")
def expand_dims(node: TFNode, ctx: TFContext) -> None:
    """ExpandDims -> Unsqueeze on TF's layout.

    Of a rank-3 SpaceToBatchND's output (a dilated Conv1D): no node; the SpaceToBatchND's input is
    expanded instead and recorded with the 2-D block for the convolution that reads this output.
    """
    axis = int(ctx.need_const(node.inputs[1], "the axis"))
    axes = ctx.builder.const(np.array([axis], np.int64))
    record = ctx.space_to_batch.get(node.inputs[0])
    if record is None and ctx.rank(node.inputs[0]) == 3 and ctx.layouts(node.inputs[0]) == {NCL} \
            and axis % 4 in (1, 2):
        # [N, C, L] -> [N, C, 1, L] (or [N, C, L, 1]): the rank-4 tensor in NCHW, for the Conv after it
        nchw = ctx.builder.const(np.array([nchw_axis(axis % 4)], np.int64))
        ctx.bind(ctx.emit("Unsqueeze", [ctx.get(node.inputs[0], NCL), nchw]), NCHW)
        return
    if record is None:
        ctx.bind(ctx.emit("Unsqueeze", [ctx.get(node.inputs[0], TF), axes]))
        return
    source, block, paddings = record
    spatial = axis % 4
    if spatial not in (1, 2):
        raise RefusedError(f"ExpandDims at axis {axis} of a SpaceToBatchND's output is not a Conv1D's "
                           "(expected axis 1 or 2)")
    from convert.frontends.tensorflow.ops.nn import CONV_OPS

    users = ctx.consumers.get(f"{node.name}:0", [])
    if not users or any(u.op not in CONV_OPS for u in users):
        raise RefusedError("an ExpandDims of a SpaceToBatchND's output is converted only when it feeds convolutions")
    key = f"{node.name}:expanded_source"
    shape = ctx.shape(source)
    if ctx.rank(source) == 3 and ctx.layouts(source) == {NCL}:  # [N, C, L] -> NCHW [N, C, 1, L]: no Transpose
        nchw = ctx.builder.const(np.array([nchw_axis(spatial)], np.int64))
        ctx.values[key] = {NCHW: ctx.emit("Unsqueeze", [ctx.get(source, NCL), nchw])}
    else:
        ctx.values[key] = {TF: ctx.emit("Unsqueeze", [ctx.get(source, TF), axes])}
    ctx.shapes[key] = None if shape is None else (*shape[:spatial], 1, *shape[spatial:])
    unit = [[0, 0]]
    ctx.space_to_batch[f"{node.name}:0"] = (key, [1, *block] if spatial == 1 else [*block, 1],
                                            unit + paddings if spatial == 1 else paddings + unit)


@register("Transpose", maps_to="Transpose", notes="constant permutation")
def transpose(node: TFNode, ctx: TFContext) -> None:
    """Transpose -> Transpose on TF's layout."""
    perm = [int(p) for p in ctx.need_const(node.inputs[1], "the permutation")]
    ctx.bind(ctx.emit("Transpose", [ctx.get(node.inputs[0], TF)], {"perm": perm}))


@register("Cast", maps_to="Cast")
def cast(node: TFNode, ctx: TFContext) -> None:
    """Cast -> Cast, in the input's layout."""
    dtype = node.attrs.get("DstT")
    if not isinstance(dtype, np.dtype):
        raise RefusedError("Cast without a destination type")
    x, layout = ctx.get_any(node.inputs[0])
    ctx.bind(ctx.emit("Cast", [x], {"to": DataType.from_numpy(dtype)}), layout)


@register("StridedSlice", maps_to="Slice (+ Squeeze)",
          notes="constant begin/end/strides; begin/end/shrink masks; no ellipsis or new-axis masks")
def strided_slice(node: TFNode, ctx: TFContext) -> None:
    """StridedSlice -> Slice over every sliced axis, then Squeeze for shrink_axis_mask (NCHW when no shrink)."""
    begin = [int(b) for b in ctx.need_const(node.inputs[1], "begin").reshape(-1)]
    end = [int(e) for e in ctx.need_const(node.inputs[2], "end").reshape(-1)]
    strides = [int(s) for s in ctx.need_const(node.inputs[3], "strides").reshape(-1)]
    masks = {k: int(node.attrs.get(k, 0)) for k in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                                                       "shrink_axis_mask")}  # type: ignore[call-overload]
    if masks["ellipsis_mask"] or masks["new_axis_mask"]:
        raise RefusedError("ellipsis_mask and new_axis_mask are not supported")
    big = np.iinfo(np.int64).max
    starts, ends, axes, steps, squeeze = [], [], [], [], []
    for axis, (b, e, s) in enumerate(zip(begin, end, strides, strict=True)):
        if masks["shrink_axis_mask"] >> axis & 1:
            starts.append(b)
            ends.append(b + 1 if b != -1 else big)
            steps.append(1)
            squeeze.append(axis)
        else:
            if s == 0:
                raise RefusedError("a stride of 0")
            starts.append((0 if s > 0 else -1) if masks["begin_mask"] >> axis & 1 else b)
            ends.append((big if s > 0 else -big) if masks["end_mask"] >> axis & 1 else e)
            steps.append(s)
        axes.append(axis)
    x_name = node.inputs[0]
    layout = NCHW if not squeeze and ctx.rank(x_name) == 4 and ctx.is_nchw(x_name) else TF
    if layout == NCHW:
        axes = [nchw_axis(a) for a in axes]
    inputs = [ctx.get(x_name, layout), *(ctx.builder.const(np.array(v, np.int64)) for v in (starts, ends, axes, steps))]
    y = ctx.emit("Slice", inputs)
    if squeeze:
        y = ctx.emit("Squeeze", [y, ctx.builder.const(np.array(squeeze, np.int64))])
    ctx.bind(y, layout)


@register("Shape", maps_to="Shape (+ Cast)", notes="TF's axes; out_type int32 or int64")
def shape(node: TFNode, ctx: TFContext) -> None:
    """Shape -> Shape of the tensor in TF's layout, cast to out_type."""
    out_type = node.attrs.get("out_type", np.dtype(np.int32))
    y = ctx.emit("Shape", [ctx.get(node.inputs[0], TF)])
    if isinstance(out_type, np.dtype) and out_type != np.int64:
        y = ctx.emit("Cast", [y], {"to": DataType.from_numpy(out_type)})
    ctx.bind(y)


@register("GatherV2", maps_to="Gather", notes="constant axis; batch_dims 0")
def gather_v2(node: TFNode, ctx: TFContext) -> None:
    """GatherV2 -> Gather on TF's layout."""
    if int(node.attrs.get("batch_dims", 0)):  # type: ignore[call-overload]
        raise RefusedError("batch_dims other than 0")
    axis = int(ctx.need_const(node.inputs[2], "the axis"))
    ctx.bind(ctx.emit("Gather", [ctx.get(node.inputs[0], TF), ctx.get(node.inputs[1], TF)], {"axis": axis}))


@register("Pack", maps_to="Unsqueeze + Concat", notes="TF's axes")
def pack(node: TFNode, ctx: TFContext) -> None:
    """Pack -> Unsqueeze every input at ``axis`` and Concat them there."""
    axis = int(node.attrs.get("axis", 0))  # type: ignore[call-overload]
    rank = ctx.rank(node.inputs[0])
    if axis < 0:
        if rank is None:
            raise RefusedError("a negative axis on inputs of unknown rank")
        axis += rank + 1
    axes = ctx.builder.const(np.array([axis], np.int64))
    parts = [ctx.emit("Unsqueeze", [ctx.get(n, TF), axes]) for n in node.inputs]
    ctx.bind(parts[0] if len(parts) == 1 else ctx.emit("Concat", parts, {"axis": axis}))


@register("ReverseV2", maps_to="Slice (step -1)", notes="constant axes; in the input's layout")
def reverse_v2(node: TFNode, ctx: TFContext) -> None:
    """ReverseV2 -> Slice with step -1 along each reversed axis (Keras' ``go_backwards``, Bidirectional)."""
    axes = [int(a) for a in ctx.need_const(node.inputs[1], "the axes").reshape(-1)]
    x, layout = ctx.get_any(node.inputs[0])
    rank = ctx.rank(node.inputs[0])
    if rank is None:
        raise RefusedError("the input's rank is unknown")
    axes = [a % rank for a in axes]
    if layout == NCHW:
        axes = [nchw_axis(a) for a in axes]
    b = ctx.builder
    n = len(axes)
    lowest = np.iinfo(np.int64).min
    out = ctx.emit("Slice", [x, b.const(np.full(n, -1, np.int64)), b.const(np.full(n, lowest, np.int64)),
                             b.const(np.array(axes, np.int64)), b.const(np.full(n, -1, np.int64))])
    ctx.bind(out, layout)


@register("Tile", maps_to="Tile", notes="constant multiples; in the input's layout")
def tile(node: TFNode, ctx: TFContext) -> None:
    """Tile -> Tile (the multiples permuted to NCHW for a rank-4 input held so)."""
    reps = ctx.need_const(node.inputs[1], "the multiples").astype(np.int64).reshape(-1)
    x, layout = ctx.get_any(node.inputs[0])
    if layout == NCHW:
        reps = reps[[0, 3, 1, 2]]
    ctx.bind(ctx.emit("Tile", [x, ctx.builder.const(np.ascontiguousarray(reps))]), layout)


@register("Fill", maps_to="Expand", notes="the value broadcast to the computed dims")
def fill(node: TFNode, ctx: TFContext) -> None:
    """Fill(dims, value) -> Expand(value, dims as int64)."""
    dims = ctx.emit("Cast", [ctx.get(node.inputs[0], TF)], {"to": DataType.INT64})
    ctx.bind(ctx.emit("Expand", [ctx.get(node.inputs[1], TF), dims]))


@register("Split", "SplitV", maps_to="Split", notes="constant axis; Split needs the axis' static size")
def split(node: TFNode, ctx: TFContext) -> None:
    """Split(axis, x) into ``num_split`` equal parts / SplitV(x, sizes, axis) -> Split with sizes, TF's axes."""
    if node.op == "Split":
        axis_name, x_name = node.inputs[0], node.inputs[1]
    else:
        x_name, axis_name = node.inputs[0], node.inputs[2]
    axis = int(ctx.need_const(axis_name, "the axis"))
    shape = ctx.shape(x_name)
    if node.op == "Split":
        parts = int(node.attrs.get("num_split", 1))  # type: ignore[call-overload]
        size = None if shape is None else shape[axis]
        if size is None:
            raise RefusedError("the split axis has no static size")
        sizes = [size // parts] * parts
    else:
        sizes = [int(s) for s in ctx.need_const(node.inputs[1], "the sizes").reshape(-1)]
        if -1 in sizes:
            size = None if shape is None else shape[axis]
            if size is None:
                raise RefusedError("a size of -1 along an axis without a static size")
            sizes[sizes.index(-1)] = size - (sum(sizes) + 1)
    outs = ctx.emit_multi("Split", [ctx.get(x_name, TF), ctx.builder.const(np.array(sizes, np.int64))],
                          {"axis": axis}, outputs=len(sizes))
    for i, value in enumerate(outs):
        ctx.bind(value, TF, i)
