"""torchvision's detection operators: torchvision::nms -> NonMaxSuppression, roi_align -> RoiAlign;
and ours, Keypoint R-CNN's keypoint decoding (``convert_tv::decode_heatmaps``) -> a Loop.

A detector's graph reaches these only when torchvision (or another library defining the same
``torchvision::`` schemas) is loaded; the frontend imports torchvision when a file needs its ops.
"""

from __future__ import annotations

import numpy as np

from convert.ir import DataType, Graph, Shape, TensorType, Value

from ._base import LowerContext, OpCall, lowers

__all__ = ["decode_heatmaps", "nms", "roi_align"]

# NonMaxSuppression keeps at most this many boxes per class; torchvision's nms has no cap.
_NO_CAP = 2**31 - 1


@lowers("torchvision.nms", to="NonMaxSuppression",
        notes="kept indices in descending score order, as torchvision; IoU > threshold suppresses")
def nms(call: OpCall, ctx: LowerContext) -> Value:
    """Lower nms(dets [N, 4] x1y1x2y2, scores [N], iou) to NonMaxSuppression on one batch and one class.

    ONNX returns [K, 3] (batch, class, box) triples sorted by score; the box column is torch's result.
    IoU is symmetric in the corner order, so x1y1x2y2 boxes need no reordering (center_point_box=0).
    """
    boxes = ctx.emit("Unsqueeze", [call.tensor("dets"), ctx.ints([0])])
    scores = ctx.emit("Unsqueeze", [call.tensor("scores"), ctx.ints([0, 1])])
    iou = ctx.const(np.asarray(float(call["iou_threshold"]), dtype=np.float32))  # type: ignore[arg-type]
    selected = ctx.emit("NonMaxSuppression", [boxes, scores, ctx.ints(_NO_CAP), iou])
    return ctx.emit("Gather", [selected, ctx.ints(2)], {"axis": 1})


@lowers("torchvision.roi_align", to="RoiAlign",
        notes="average mode; aligned=True -> half_pixel, False -> output_half_pixel; sampling_ratio <= 0 adaptive")
def roi_align(call: OpCall, ctx: LowerContext) -> Value:
    """Lower roi_align(input, rois [K, 5] = (batch, x1, y1, x2, y2), ...) to RoiAlign (opset 16).

    torchvision's ``aligned`` shifts sample points by half a pixel (ONNX ``half_pixel``); without it
    RoIs are at least one pixel wide (ONNX ``output_half_pixel``, the opset-10 behaviour).
    """
    if call.meta("input").rank != 4:
        raise call.unsupported("roi_align of an input that is not 4-D")
    rois = call.tensor("rois")
    boxes = ctx.emit("Slice", [rois, ctx.ints([1]), ctx.ints([5]), ctx.ints([1])])
    batch = ctx.emit("Cast", [ctx.emit("Gather", [rois, ctx.ints(0)], {"axis": 1})], {"to": DataType.INT64})
    ratio = int(call["sampling_ratio"])  # type: ignore[call-overload]
    attrs = {
        "mode": "avg",
        "output_height": int(call["pooled_height"]),  # type: ignore[call-overload]
        "output_width": int(call["pooled_width"]),  # type: ignore[call-overload]
        "sampling_ratio": max(ratio, 0),
        "spatial_scale": float(call["spatial_scale"]),  # type: ignore[arg-type]
        "coordinate_transformation_mode": "half_pixel" if call["aligned"] else "output_half_pixel",
    }
    return ctx.emit("RoiAlign", [call.tensor("input"), boxes, batch], attrs)


@lowers("convert_tv.decode_heatmaps", to="Loop(Resize(cubic), ReduceMax, ArgMax)",
        notes="Keypoint R-CNN's keypoint decoding (torchvision's heatmaps_to_keypoints), one box a step; float32 "
              "(float64 heatmaps are decoded by the capture's loop of matrix products)")
def decode_heatmaps(call: OpCall, ctx: LowerContext) -> tuple[Value, Value]:
    """Lower our keypoint decoding (maps [N, K, H, W], rois [N, 4] x1y1x2y2) -> (keypoints [N, K, 3],
    scores [N, K]), as torchvision's ``heatmaps_to_keypoints`` computes them.

    torchvision resizes each box's heatmaps (bicubic, a = -0.75, ``align_corners=False``: ONNX
    Resize's cubic ``half_pixel``) to the box's size in whole pixels, width and height clamped to 1
    and rounded up, then takes each keypoint's first maximum (ArgMax's) and its value. A Loop does
    one box a step (one box's resized maps in memory, as torchvision's loop), writing its row of
    the scores and positions (ScatterND); the positions become coordinates after it.
    """
    meta = call.meta("maps")
    if meta.rank != 4 or meta.dtype != DataType.FLOAT:
        raise call.unsupported(f"keypoint heatmaps of {meta.dtype.name} {list(meta.shape)}, not float32 [N, K, H, W]",
                               "ONNX Runtime's Resize takes no float64")
    maps, rois = call.tensor("maps"), call.tensor("rois")
    x1, y1, x2, y2 = (ctx.emit("Gather", [rois, ctx.ints(i)], {"axis": 1}) for i in range(4))
    one, half = ctx.scalar_like(1.0, meta), ctx.scalar_like(0.5, meta)
    widths = ctx.emit("Max", [ctx.emit("Sub", [x2, x1]), one])
    heights = ctx.emit("Max", [ctx.emit("Sub", [y2, y1]), one])
    widths_ceil, heights_ceil = ctx.emit("Ceil", [widths]), ctx.emit("Ceil", [heights])
    column = ctx.ints([1])
    sizes = ctx.emit("Cast", [ctx.emit("Concat", [ctx.emit("Unsqueeze", [heights_ceil, column]),
                                                  ctx.emit("Unsqueeze", [widths_ceil, column])], {"axis": 1})],
                     {"to": DataType.INT64})  # [N, 2]: each box's (height, width) in whole pixels
    lead = ctx.emit("Concat", [ctx.ints([1]), ctx.emit("Shape", [maps], {"start": 1, "end": 2})], {"axis": 0})
    count_kinds = ctx.emit("Shape", [maps], {"start": 0, "end": 2})
    trips = ctx.emit("Reshape", [ctx.emit("Shape", [maps], {"start": 0, "end": 1}), ctx.ints([])])
    start_scores = ctx.emit("Expand", [ctx.scalar_like(0.0, meta), count_kinds])
    start_pos = ctx.emit("Expand", [ctx.ints(0), count_kinds])
    scores, pos = ctx.emit_multi("Loop", [trips, None, start_scores, start_pos],
                                 {"body": _decode_step(ctx, maps, sizes, lead, meta.dtype)}, outputs=2)
    # torchvision's coordinates: ((x_int + 0.5) * width / ceil(width) + x1, likewise y, 1)
    width_int = ctx.emit("Cast", [ctx.emit("Unsqueeze", [widths_ceil, column])], {"to": DataType.INT64})
    x_int = ctx.emit("Mod", [pos, width_int])
    y_int = ctx.emit("Div", [pos, width_int])  # positions are non-negative: Div's truncation is floor

    def coordinate(index: Value, extent: Value, extent_ceil: Value, offset: Value) -> Value:
        cell = ctx.emit("Unsqueeze", [ctx.emit("Div", [extent, extent_ceil]), column])
        at = ctx.emit("Mul", [ctx.emit("Add", [ctx.emit("Cast", [index], {"to": meta.dtype}), half]), cell])
        return ctx.emit("Unsqueeze", [ctx.emit("Add", [at, ctx.emit("Unsqueeze", [offset, column])]), ctx.ints([2])])

    x = coordinate(x_int, widths, widths_ceil, x1)
    y = coordinate(y_int, heights, heights_ceil, y1)
    return ctx.emit("Concat", [x, y, ctx.emit("Expand", [one, ctx.emit("Shape", [x])])], {"axis": 2}), scores


def _decode_step(ctx: LowerContext, maps: Value, sizes: Value, lead: Value, dtype: DataType) -> Graph:
    """The Loop body of ``decode_heatmaps``: box i's heatmaps resized to its size, each keypoint's
    maximum and its first row-major position written into row i of the carried scores and
    positions. Its constants are made before it, in the enclosing graph, which the body reads."""
    axis0, flat = ctx.ints([0]), ctx.ints([0, -1])
    name = ctx.builder.names.fresh(f"{ctx.call.module if ctx.call else ''}_decode_step".lstrip("_"))
    step = Value(name=f"{name}_i", type=TensorType(DataType.INT64), shape=Shape([]))
    go = Value(name=f"{name}_cond", type=TensorType(DataType.BOOL), shape=Shape([]))
    scores = Value(name=f"{name}_scores", type=TensorType(dtype))
    pos = Value(name=f"{name}_pos", type=TensorType(DataType.INT64))
    body = Graph([step, go, scores, pos], [], nodes=[], name=name)
    enclosing = ctx.builder.graph
    ctx.builder.graph = body
    try:
        at = ctx.emit("Unsqueeze", [step, axis0])  # [1]
        size = ctx.emit("Concat", [lead, ctx.emit("Gather", [sizes, step], {"axis": 0})], {"axis": 0})
        resized = ctx.emit("Resize", [ctx.emit("Gather", [maps, at], {"axis": 0}), None, None, size],
                           {"mode": "cubic", "cubic_coeff_a": -0.75, "coordinate_transformation_mode": "half_pixel"})
        pixels = ctx.emit("Reshape", [ctx.emit("Squeeze", [resized, axis0]), flat])  # [K, h * w]
        row = ctx.emit("Unsqueeze", [at, axis0])  # [[i]]
        best = ctx.emit("ReduceMax", [pixels], {"axes": [1], "keepdims": 0})
        first = ctx.emit("ArgMax", [pixels], {"axis": 1, "keepdims": 0})
        outputs = [ctx.emit("Identity", [go]),
                   ctx.emit("ScatterND", [scores, row, ctx.emit("Unsqueeze", [best, axis0])]),
                   ctx.emit("ScatterND", [pos, row, ctx.emit("Unsqueeze", [first, axis0])])]
    finally:
        ctx.builder.graph = enclosing
    body.outputs.extend(outputs)
    return body
