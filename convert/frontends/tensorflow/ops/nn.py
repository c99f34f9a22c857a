"""Layout-sensitive ops: convolutions, batch norm, pooling, softmax. They run in NCHW.

Only ``data_format`` NHWC (TensorFlow's default on CPU) is converted; weights are transposed from
TensorFlow's HWIO (depthwise: HW,Cin,M) to ONNX's OIHW in NumPy.
"""

from __future__ import annotations

import numpy as np

from convert.frontends.tensorflow.context import NCHW, TF, ConvWeight, TFContext
from convert.frontends.tensorflow.graph import TFNode
from convert.frontends.tensorflow.ops import register
from convert.ir import Attr, AttributeType, RefusedError

__all__ = ["conv_pads"]


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


def _emit_conv(node: TFNode, ctx: TFContext, oihw: ConvWeight, kernel: list[int], strides: list[int],
               dilations: list[int], group: int, channels: int) -> None:
    """Emit the Conv; a SpaceToBatchND input makes it a dilated Conv (see ``space_to_batch_nd``).

    A zero Pad of H and W that only this convolution reads (Keras' ZeroPadding2D before a VALID
    convolution) becomes the Conv's own pads.
    """
    weight = ctx.weight(oihw, f"{node.name}/weight")
    x_name = node.inputs[0]
    if x_name in ctx.space_to_batch:
        source, block, paddings = ctx.space_to_batch[x_name]
        if dilations != [1, 1] or strides != [1, 1] or str(node.attrs.get("padding")) != "VALID":
            raise RefusedError("a convolution after SpaceToBatchND must have stride 1, dilation 1 and VALID padding")
        attrs = {"kernel_shape": kernel, "strides": strides, "dilations": block, "group": group,
                 "pads": [paddings[0][0], paddings[1][0], paddings[0][1], paddings[1][1]]}
        x = ctx.get(source, NCHW)
        y = ctx.emit("Conv", [x, weight], attrs)
        ctx.dilated[f"{node.name}:0"] = (y, block)
        ctx.convs[f"{node.name}:0"] = (x, weight, attrs, channels, oihw, None)  # its crop makes it whole
        ctx.bind(y, NCHW)
        return
    attrs: dict[str, object] = {"kernel_shape": kernel, "strides": strides, "dilations": dilations, "group": group,
                                **conv_pads(node, ctx, kernel, strides, dilations)}
    padded = ctx.zero_pads.get(x_name)
    if padded is not None and "pads" in attrs and len(ctx.consumers.get(x_name, [])) == 1:
        x_name, extra = padded
        attrs["pads"] = [int(a) + b for a, b in zip(attrs["pads"], extra, strict=True)]  # type: ignore[call-overload]
    x = ctx.get(x_name, NCHW)
    ctx.bind(ctx.emit("Conv", [x, weight], attrs), NCHW)
    ctx.convs[f"{node.name}:0"] = (x, weight, attrs, channels, oihw, None)


@register("SpaceToBatchND", maps_to="(dilation of the next Conv)",
          notes="only as TF's dilated-convolution pattern: SpaceToBatchND -> Conv2D/DepthwiseConv2dNative -> "
                "BatchToSpaceND, constant block shape and paddings")
def space_to_batch_nd(node: TFNode, ctx: TFContext) -> None:
    """SpaceToBatchND feeding a convolution: recorded; the convolution becomes dilated (no node here)."""
    users = ctx.consumers.get(f"{node.name}:0", [])
    if not users or any(u.op not in ("Conv2D", "DepthwiseConv2dNative") for u in users):
        raise RefusedError("SpaceToBatchND is converted only when it feeds convolutions (dilated convolution)")
    block = [int(b) for b in ctx.need_const(node.inputs[1], "the block shape").reshape(-1)]
    paddings = ctx.need_const(node.inputs[2], "the paddings").astype(np.int64).reshape(-1, 2).tolist()
    if len(block) != 2 or ctx.rank(node.inputs[0]) != 4:
        raise RefusedError("only 2-D spatial blocks of rank-4 NHWC tensors are supported")
    ctx.space_to_batch[f"{node.name}:0"] = (node.inputs[0], block, paddings)


@register("BatchToSpaceND", maps_to="(crop of the dilated Conv)",
          notes="only after a convolution made dilated from SpaceToBatchND; crops reduce its end pads")
def batch_to_space_nd(node: TFNode, ctx: TFContext) -> None:
    """BatchToSpaceND after a dilated convolution: its crops are taken off that Conv's pads (no node)."""
    found = ctx.dilated.get(node.inputs[0])
    if found is None:
        raise RefusedError("BatchToSpaceND is converted only after a convolution fed by SpaceToBatchND")
    y, block = found
    if [int(b) for b in ctx.need_const(node.inputs[1], "the block shape").reshape(-1)] != block:
        raise RefusedError("BatchToSpaceND's block shape differs from its SpaceToBatchND's")
    crops = ctx.need_const(node.inputs[2], "the crops").astype(np.int64).reshape(-1, 2)
    conv = y.producer()
    assert conv is not None
    pads = list(conv.attributes["pads"].as_ints())
    pads = [pads[0] - int(crops[0][0]), pads[1] - int(crops[1][0]), pads[2] - int(crops[0][1]),
            pads[3] - int(crops[1][1])]
    if min(pads) < 0:
        raise RefusedError(f"crops {crops.tolist()} exceed the paddings")
    conv.attributes["pads"] = Attr("pads", AttributeType.INTS, pads)
    ctx.bind(y, NCHW)
    entry = ctx.convs.get(node.inputs[0])
    if entry is not None:  # a bias or batch norm after the crop can join the dilated Conv
        x, weight, attrs, channels, oihw, bias = entry
        ctx.convs[f"{node.name}:0"] = (x, weight, {**attrs, "pads": pads}, channels, oihw, bias)


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
