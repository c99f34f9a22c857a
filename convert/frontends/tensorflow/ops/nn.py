"""Layout-sensitive ops: convolutions (plain, dilated, transposed), batch norm, pooling, resizing,
depth-to-space and back, softmax. They run in NCHW.

Only ``data_format`` NHWC (TensorFlow's default on CPU) is converted; weights are transposed from
TensorFlow's HWIO (depthwise: HW,Cin,M) to ONNX's OIHW in NumPy.
"""

from __future__ import annotations

import numpy as np

from convert.frontends.tensorflow.context import NCHW, TF, ConvWeight, TFContext
from convert.frontends.tensorflow.graph import TFNode
from convert.frontends.tensorflow.ops import register
from convert.ir import Attr, AttributeType, DataType, RefusedError, Value

__all__ = ["CONV_OPS", "EXPAND_OPS", "conv_pads", "conv_transpose_pads", "dilated_source", "resize_attrs"]


def _nhwc(node: TFNode) -> None:
    fmt = str(node.attrs.get("data_format", "NHWC"))
    if fmt != "NHWC":
        raise RefusedError(f"data_format '{fmt}' is not supported (only NHWC)")


def _hw(values: object, name: str) -> list[int]:
    """Return the H and W entries of a 4-entry NHWC attribute (strides, dilations, ksize)."""
    v = [int(x) for x in values] if isinstance(values, list) else []  # type: ignore[union-attr]
    if len(v) != 4 or v[0] != 1 or v[3] != 1:
        raise RefusedError(f"{name} {v} is not of the form [1, h, w, 1]")
    return v[1:3]


def conv_pads(node: TFNode, ctx: TFContext, kernel: list[int], strides: list[int],
          dilations: list[int]) -> dict[str, object]:
    """Return ONNX padding attributes for TF's SAME / VALID / EXPLICIT."""
    padding = str(node.attrs.get("padding", "VALID"))
    if padding == "VALID":
        return {"pads": [0, 0, 0, 0]}
    if padding == "EXPLICIT":
        ex = [int(x) for x in node.attrs.get("explicit_paddings", [])]  # type: ignore[union-attr]
        if len(ex) != 8:
            raise RefusedError(f"explicit_paddings {ex} has {len(ex)} values; expected 8")
        return {"pads": [ex[2], ex[4], ex[3], ex[5]]}
    if padding != "SAME":
        raise RefusedError(f"padding '{padding}' is not supported")
    shape = ctx.shape(node.inputs[0])
    if shape is None or len(shape) != 4 or shape[1] is None or shape[2] is None:
        return {"auto_pad": "SAME_UPPER"}  # TF's SAME puts the odd pixel at the end, as SAME_UPPER
    begins, ends = [], []
    for size, k, s, d in zip(shape[1:3], kernel, strides, dilations, strict=True):
        out = -(-int(size) // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - int(size), 0)
        begins.append(total // 2)
        ends.append(total - total // 2)
    return {"pads": begins + ends}


@register("Conv2D", maps_to="Conv", notes="NHWC; SAME/VALID/EXPLICIT padding; constant filter")
def conv2d(node: TFNode, ctx: TFContext) -> None:
    """Conv2D -> Conv; HWIO filter -> OIHW; groups when the filter has fewer input channels."""
    _nhwc(node)
    w = ctx.need_const(node.inputs[1], "the filter")
    strides = _hw(node.attrs.get("strides"), "strides")
    dilations = _hw(node.attrs.get("dilations", [1, 1, 1, 1]), "dilations")
    kernel = [int(w.shape[0]), int(w.shape[1])]
    in_shape = ctx.shape(node.inputs[0])
    group = 1
    if in_shape is not None and len(in_shape) == 4 and in_shape[3] is not None and in_shape[3] != w.shape[2]:
        group = int(in_shape[3]) // int(w.shape[2])
    oihw = ConvWeight(w, _hwio_to_oihw, (int(w.shape[3]), int(w.shape[2]), *kernel))
    _emit_conv(node, ctx, oihw, kernel, strides, dilations, group, int(w.shape[3]))


def _hwio_to_oihw(w: np.ndarray) -> np.ndarray:
    return w.transpose(3, 2, 0, 1)


def dilated_source(ctx: TFContext, x_name: str, strides: list[int], dilations: list[int],
                   padding: str) -> tuple[Value, dict[str, object]] | None:
    """Return a dilated convolution's NCHW input and its ``dilations`` and ``pads`` when ``x_name``
    is a SpaceToBatchND output recorded by ``space_to_batch_nd`` (else None).

    TensorFlow writes a dilated convolution as SpaceToBatchND (block = the dilation, paddings) ->
    a stride-1 VALID convolution -> BatchToSpaceND (crops): the same as a convolution of the
    SpaceToBatchND's input with that dilation and those paddings, less the crops (taken off the
    pads by ``batch_to_space_nd``).
    """
    record = ctx.space_to_batch.get(x_name)
    if record is None:
        return None
    source, block, paddings = record
    if dilations != [1, 1] or strides != [1, 1] or padding != "VALID":
        raise RefusedError("a convolution after SpaceToBatchND must have stride 1, dilation 1 and VALID padding")
    pads = [paddings[0][0], paddings[1][0], paddings[0][1], paddings[1][1]]
    return ctx.get(source, NCHW), {"dilations": list(block), "pads": pads}


def _emit_conv(node: TFNode, ctx: TFContext, oihw: ConvWeight, kernel: list[int], strides: list[int],
               dilations: list[int], group: int, channels: int) -> None:
    """Emit the Conv; a SpaceToBatchND input makes it a dilated Conv (see ``dilated_source``).

    A zero Pad of H and W that only this convolution reads (Keras' ZeroPadding2D before a VALID
    convolution) becomes the Conv's own pads.
    """
    weight = ctx.weight(oihw, f"{node.name}/weight")
    x_name = node.inputs[0]
    found = dilated_source(ctx, x_name, strides, dilations, str(node.attrs.get("padding")))
    if found is not None:
        x, extra = found
        attrs = {"kernel_shape": kernel, "strides": strides, "group": group, **extra}
        y = ctx.emit("Conv", [x, weight], attrs)
        ctx.dilated[f"{node.name}:0"] = (y, list(extra["dilations"]), [0, 1])  # type: ignore[call-overload]
        ctx.convs[f"{node.name}:0"] = (x, weight, attrs, channels, oihw, None, "Conv")  # its crop makes it whole
        ctx.bind(y, NCHW)
        return
    attrs: dict[str, object] = {"kernel_shape": kernel, "strides": strides, "dilations": dilations, "group": group,
                                **conv_pads(node, ctx, kernel, strides, dilations)}
    padded = ctx.zero_pads.get(x_name)
    if padded is not None and "pads" in attrs and len(ctx.consumers.get(x_name, [])) == 1:
        x_name, extra_pads = padded
        attrs["pads"] = [int(a) + b for a, b in zip(attrs["pads"], extra_pads, strict=True)]  # type: ignore[call-overload]
    x = ctx.get(x_name, NCHW)
    ctx.bind(ctx.emit("Conv", [x, weight], attrs), NCHW)
    ctx.convs[f"{node.name}:0"] = (x, weight, attrs, channels, oihw, None, "Conv")


# Ops that read a SpaceToBatchND output as a dilated convolution (TFLite's names too): directly, or
# through an ExpandDims of a rank-3 one (Keras' dilated Conv1D).
CONV_OPS = ("Conv2D", "DepthwiseConv2dNative", "CONV_2D", "DEPTHWISE_CONV_2D")
EXPAND_OPS = ("ExpandDims", "EXPAND_DIMS")


@register("SpaceToBatchND", maps_to="(dilation of the next Conv)",
          notes="only as TF's dilated-convolution pattern: SpaceToBatchND -> Conv2D/DepthwiseConv2dNative -> "
                "BatchToSpaceND, or (a dilated Conv1D) SpaceToBatchND -> ExpandDims -> Conv2D -> Squeeze -> "
                "BatchToSpaceND; constant block shape and paddings")
def space_to_batch_nd(node: TFNode, ctx: TFContext) -> None:
    """SpaceToBatchND feeding a convolution: recorded; the convolution becomes dilated (no node here)."""
    users = ctx.consumers.get(f"{node.name}:0", [])
    block = [int(b) for b in ctx.need_const(node.inputs[1], "the block shape").reshape(-1)]
    paddings = ctx.need_const(node.inputs[2], "the paddings").astype(np.int64).reshape(-1, 2).tolist()
    rank = ctx.rank(node.inputs[0])
    if rank == 4 and len(block) == 2:
        allowed = CONV_OPS
    elif rank == 3 and len(block) == 1:
        allowed = EXPAND_OPS
    else:
        raise RefusedError("only 2-D spatial blocks of rank-4 NHWC tensors, or 1-D blocks of rank-3 [N, L, C] "
                           "tensors (a dilated Conv1D) are supported")
    if not users or any(u.op not in allowed for u in users):
        raise RefusedError("SpaceToBatchND is converted only when it feeds convolutions (dilated convolution)")
    ctx.space_to_batch[f"{node.name}:0"] = (node.inputs[0], block, paddings)


@register("BatchToSpaceND", maps_to="(crop of the dilated Conv)",
          notes="only after a convolution made dilated from SpaceToBatchND (or its Squeeze to rank 3); crops "
                "reduce its end pads")
def batch_to_space_nd(node: TFNode, ctx: TFContext) -> None:
    """BatchToSpaceND after a dilated convolution: its crops are taken off that Conv's pads (no node)."""
    found = ctx.dilated.get(node.inputs[0])
    if found is None:
        raise RefusedError("BatchToSpaceND is converted only after a convolution fed by SpaceToBatchND")
    y, block, axes = found
    if [int(b) for b in ctx.need_const(node.inputs[1], "the block shape").reshape(-1)] != block:
        raise RefusedError("BatchToSpaceND's block shape differs from its SpaceToBatchND's")
    crops = ctx.need_const(node.inputs[2], "the crops").astype(np.int64).reshape(-1, 2)
    if len(crops) != len(axes):
        raise RefusedError(f"crops {crops.tolist()} do not match the {len(axes)}-D block")
    conv = y.producer()
    assert conv is not None
    pads = list(conv.attributes["pads"].as_ints())
    for (begin, end), axis in zip(crops.tolist(), axes, strict=True):
        pads[axis] -= int(begin)
        pads[axis + 2] -= int(end)
    if min(pads) < 0:
        raise RefusedError(f"crops {crops.tolist()} exceed the paddings")
    conv.attributes["pads"] = Attr("pads", AttributeType.INTS, pads)
    value, layout = ctx.get_any_ncl(node.inputs[0])  # as held: after a fused activation (TFLite) or a Squeeze
    ctx.bind(value, layout)
    entry = ctx.convs.get(node.inputs[0])
    if entry is not None:  # a bias or batch norm after the crop can join the dilated Conv
        x, weight, attrs, channels, oihw, bias, op_type = entry
        ctx.convs[f"{node.name}:0"] = (x, weight, {**attrs, "pads": pads}, channels, oihw, bias, op_type)


@register("DepthwiseConv2dNative", maps_to="Conv (group = in channels)",
          notes="NHWC; SAME/VALID/EXPLICIT padding; constant filter; channel multiplier")
def depthwise_conv2d(node: TFNode, ctx: TFContext) -> None:
    """DepthwiseConv2dNative -> Conv with group=Cin; filter [H, W, Cin, M] -> [Cin*M, 1, H, W]."""
    _nhwc(node)
    w = ctx.need_const(node.inputs[1], "the filter")
    h, k, cin, mult = (int(d) for d in w.shape)
    strides = _hw(node.attrs.get("strides"), "strides")
    dilations = _hw(node.attrs.get("dilations", [1, 1, 1, 1]), "dilations")
    oihw = ConvWeight(w, _depthwise_to_oihw, (cin * mult, 1, h, k))
    _emit_conv(node, ctx, oihw, [h, k], strides, dilations, cin, cin * mult)


def _depthwise_to_oihw(w: np.ndarray) -> np.ndarray:
    h, k, cin, mult = w.shape
    return w.transpose(2, 3, 0, 1).reshape(cin * mult, 1, h, k)


@register("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3", maps_to="BatchNormalization",
          notes="NHWC; inference only (is_training false); output 0 only")
def fused_batch_norm(node: TFNode, ctx: TFContext) -> None:
    """FusedBatchNorm* (inference) -> BatchNormalization on the NCHW tensor."""
    _nhwc(node)
    if node.attrs.get("is_training", False):
        raise RefusedError("is_training is true; freeze the model for inference")
    params = [ctx.get(n) for n in node.inputs[1:5]]
    y = ctx.emit("BatchNormalization", [ctx.get(node.inputs[0], NCHW), *params],
                 {"epsilon": float(node.attrs.get("epsilon", 1e-3))})  # type: ignore[arg-type]
    ctx.bind(y, NCHW)


def _pool(node: TFNode, ctx: TFContext, op_type: str) -> None:
    _nhwc(node)
    kernel = _hw(node.attrs.get("ksize"), "ksize")
    strides = _hw(node.attrs.get("strides"), "strides")
    attrs: dict[str, object] = {"kernel_shape": kernel, "strides": strides,
                                **conv_pads(node, ctx, kernel, strides, [1, 1])}
    if op_type == "AveragePool":
        attrs["count_include_pad"] = 0  # TF's SAME average ignores the padding
    ctx.bind(ctx.emit(op_type, [ctx.get(node.inputs[0], NCHW)], attrs), NCHW)


@register("MaxPool", maps_to="MaxPool", notes="NHWC; SAME/VALID")
def max_pool(node: TFNode, ctx: TFContext) -> None:
    """MaxPool -> MaxPool (NCHW)."""
    _pool(node, ctx, "MaxPool")


@register("AvgPool", maps_to="AveragePool", notes="NHWC; SAME/VALID; padding excluded from the count")
def avg_pool(node: TFNode, ctx: TFContext) -> None:
    """AvgPool -> AveragePool (NCHW, count_include_pad=0 as TF's SAME)."""
    _pool(node, ctx, "AveragePool")


@register("Softmax", maps_to="Softmax", notes="last axis")
def softmax(node: TFNode, ctx: TFContext) -> None:
    """Softmax over the last axis (TF's axes)."""
    ctx.bind(ctx.emit("Softmax", [ctx.get(node.inputs[0], TF)], {"axis": -1}))


@register("LogSoftmax", maps_to="LogSoftmax", notes="last axis")
def log_softmax(node: TFNode, ctx: TFContext) -> None:
    """LogSoftmax over the last axis (TF's axes)."""
    ctx.bind(ctx.emit("LogSoftmax", [ctx.get(node.inputs[0], TF)], {"axis": -1}))


def conv_transpose_pads(padding: str, explicit: list[list[int]] | None, in_hw: list[int], out_hw: list[int],
                        kernel: list[int], strides: list[int], dilations: list[int]) -> dict[str, object]:
    """Return ConvTranspose's ``pads`` and ``output_padding`` for TensorFlow's transposed convolution.

    TensorFlow defines it as the gradient of the convolution that maps its output (``out_hw``) to
    its input (``in_hw``) with ``padding``: output pixel ``o`` is pixel ``o + begin`` of the full
    transposed convolution (length ``(in - 1) * stride + (k - 1) * dilation + 1``), where ``begin``
    is that forward convolution's padding before (SAME: half the total, the odd pixel at the end).
    ONNX's ConvTranspose crops ``pads`` from the full result and extends it at the end by
    ``output_padding``: ``pads`` = the forward convolution's padding and ``output_padding`` = what
    is left to reach ``out`` (SAME with ``out = in * stride`` and kernel <= stride, VALID with
    ``out`` not a whole number of strides).
    """
    begins, ends, extra = [], [], []
    for axis, (i, o, k, s, d) in enumerate(zip(in_hw, out_hw, kernel, strides, dilations, strict=True)):
        full = (i - 1) * s + (k - 1) * d + 1
        if padding == "VALID":
            begin = end = 0
        elif padding == "SAME":
            total = max(full - o, 0)
            begin, end = total // 2, total - total // 2
        elif padding == "EXPLICIT" and explicit is not None:
            begin, end = explicit[axis]
        else:
            raise RefusedError(f"padding '{padding}' is not supported")
        out_pad = o - (full - begin - end)
        if out_pad < 0 or (out_pad and out_pad >= max(s, d)):
            raise RefusedError(f"output size {o} does not match input size {i} with kernel {k}, stride {s}, "
                               f"{padding} padding")
        begins.append(begin)
        ends.append(end)
        extra.append(out_pad)
    return {"pads": begins + ends, "output_padding": extra}


def _static_hw(shape: tuple[int | None, ...] | None) -> list[int] | None:
    if shape is None or len(shape) != 4 or shape[1] is None or shape[2] is None:
        return None
    return [int(shape[1]), int(shape[2])]


@register("Conv2DBackpropInput", maps_to="ConvTranspose",
          notes="NHWC (Keras' Conv2DTranspose); SAME/VALID/EXPLICIT padding; constant filter; static H and W")
def conv2d_backprop_input(node: TFNode, ctx: TFContext) -> None:
    """Conv2DBackpropInput(input_sizes, filter, x) -> ConvTranspose; filter [H, W, out, in] -> [in, out, H, W].

    The output size comes from TensorFlow's static output shape (or a constant ``input_sizes``),
    so ``input_sizes`` computed from ``Shape(x)`` (Keras with a free batch) is not converted.
    """
    _nhwc(node)
    w = ctx.need_const(node.inputs[1], "the filter")
    strides = _hw(node.attrs.get("strides"), "strides")
    dilations = _hw(node.attrs.get("dilations", [1, 1, 1, 1]), "dilations")
    x_name = node.inputs[2]
    in_shape = ctx.shape(x_name)
    sizes = ctx.const(node.inputs[0])
    out_hw = _static_hw(node.shapes[0] if node.shapes else None) or (
        [int(v) for v in sizes.reshape(-1)[1:3]] if sizes is not None and sizes.size == 4 else None)
    in_hw = _static_hw(in_shape)
    if out_hw is None or in_hw is None:
        raise RefusedError("a transposed convolution needs static input and output heights and widths")
    if in_shape is not None and in_shape[3] is not None and int(in_shape[3]) != int(w.shape[3]):
        raise RefusedError(f"the input has {in_shape[3]} channels but the filter {w.shape[3]} (grouped transposed "
                           "convolutions are not supported)")
    kernel = [int(w.shape[0]), int(w.shape[1])]
    ex = [int(v) for v in node.attrs.get("explicit_paddings", []) or []]  # type: ignore[union-attr]
    explicit = [[ex[2], ex[3]], [ex[4], ex[5]]] if len(ex) == 8 else None
    attrs: dict[str, object] = {"kernel_shape": kernel, "strides": strides, "dilations": dilations,
                                **conv_transpose_pads(str(node.attrs.get("padding", "VALID")), explicit, in_hw,
                                                      out_hw, kernel, strides, dilations)}
    # ConvTranspose's weight is [in, out, H, W]: TensorFlow's [H, W, out, in] transposed as HWIO -> OIHW.
    iohw = ConvWeight(w, _hwio_to_oihw, (int(w.shape[3]), int(w.shape[2]), *kernel), axis=1)
    weight = ctx.weight(iohw, f"{node.name}/weight")
    x = ctx.get(x_name, NCHW)
    ctx.bind(ctx.emit("ConvTranspose", [x, weight], attrs), NCHW)
    ctx.convs[f"{node.name}:0"] = (x, weight, attrs, int(w.shape[2]), iohw, None, "ConvTranspose")


def resize_attrs(node: TFNode, mode: str) -> dict[str, object]:
    """Return ONNX Resize's attributes for TensorFlow's (and TFLite's) ``align_corners`` / ``half_pixel_centers``.

    TensorFlow maps output pixel ``x`` to input coordinate ``x * scale`` (``scale = in / out``),
    ``(x + 0.5) * scale - 0.5`` with half_pixel_centers (bilinear), and ``x * (in - 1) / (out - 1)``
    with align_corners: ONNX's asymmetric, half_pixel and align_corners. Nearest takes
    ``floor(x * scale)``, ``floor((x + 0.5) * scale)`` with half_pixel_centers (ONNX half_pixel
    rounded half up: ``round((x + 0.5) * scale - 0.5)``), and ``round(...)`` with align_corners.
    """
    align = bool(node.attrs.get("align_corners", False))
    half = bool(node.attrs.get("half_pixel_centers", False))
    if align and half:
        raise RefusedError("align_corners and half_pixel_centers are both set (TensorFlow refuses it too)")
    attrs: dict[str, object] = {"mode": mode, "coordinate_transformation_mode":
                                "align_corners" if align else "half_pixel" if half else "asymmetric"}
    if mode == "nearest":
        attrs["nearest_mode"] = "round_prefer_ceil" if align or half else "floor"
    return attrs


def _resize(node: TFNode, ctx: TFContext, mode: str) -> None:
    attrs = resize_attrs(node, mode)
    x_name = node.inputs[0]
    x = ctx.get(x_name, NCHW)
    size = ctx.const(node.inputs[1])
    shape = ctx.shape(x_name)
    if size is not None and shape is not None and len(shape) == 4 and shape[0] is not None and shape[3] is not None:
        sizes = ctx.builder.const(np.array([shape[0], shape[3], *size.reshape(-1)], np.int64))
    else:  # a free batch (or a size computed at run time): N and C from the input's shape
        head = ctx.emit("Slice", [ctx.emit("Shape", [x]), ctx.builder.const(np.array([0], np.int64)),
                                  ctx.builder.const(np.array([2], np.int64))], suffix="batch_channels")
        tail = ctx.builder.const(size.reshape(-1).astype(np.int64)) if size is not None else ctx.emit(
            "Cast", [ctx.get(node.inputs[1], TF)], {"to": DataType.INT64})
        sizes = ctx.emit("Concat", [head, tail], {"axis": 0}, suffix="sizes")
    ctx.bind(ctx.emit("Resize", [x, None, None, sizes], attrs), NCHW)


@register("ResizeBilinear", maps_to="Resize (linear)",
          notes="NHWC; align_corners / half_pixel_centers / neither (align_corners, half_pixel, asymmetric)")
def resize_bilinear(node: TFNode, ctx: TFContext) -> None:
    """ResizeBilinear -> Resize(linear) on the NCHW tensor, sizes [N, C, height, width]."""
    _resize(node, ctx, "linear")


@register("ResizeNearestNeighbor", maps_to="Resize (nearest)",
          notes="NHWC; align_corners / half_pixel_centers / neither")
def resize_nearest_neighbor(node: TFNode, ctx: TFContext) -> None:
    """ResizeNearestNeighbor -> Resize(nearest) on the NCHW tensor (rounding as TensorFlow's, see ``resize_attrs``)."""
    _resize(node, ctx, "nearest")


def _block_size(node: TFNode) -> int:
    _nhwc(node)
    size = int(node.attrs.get("block_size", 0))  # type: ignore[call-overload]
    if size < 2:
        raise RefusedError(f"block_size {size} (TensorFlow needs 2 or more)")
    return size


@register("DepthToSpace", maps_to="DepthToSpace (DCR)", notes="NHWC; TF's channel order is ONNX's DCR in NCHW")
def depth_to_space(node: TFNode, ctx: TFContext) -> None:
    """DepthToSpace -> DepthToSpace(mode DCR) on the NCHW tensor.

    TensorFlow: ``out[n, h*b + i, w*b + j, c] = in[n, h, w, (i*b + j) * C + c]``; ONNX's DCR mode
    reads input channel ``(i*b + j) * C + c`` for the same output pixel.
    """
    size = _block_size(node)
    ctx.bind(ctx.emit("DepthToSpace", [ctx.get(node.inputs[0], NCHW)], {"blocksize": size, "mode": "DCR"}), NCHW)


@register("SpaceToDepth", maps_to="SpaceToDepth", notes="NHWC")
def space_to_depth(node: TFNode, ctx: TFContext) -> None:
    """SpaceToDepth -> SpaceToDepth on the NCHW tensor (output channel ``(i*b + j) * C + c`` in both)."""
    size = _block_size(node)
    ctx.bind(ctx.emit("SpaceToDepth", [ctx.get(node.inputs[0], NCHW)], {"blocksize": size}), NCHW)
