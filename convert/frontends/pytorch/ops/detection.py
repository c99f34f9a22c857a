"""torchvision's detection operators: torchvision::nms -> NonMaxSuppression, roi_align -> RoiAlign.

A detector's graph reaches these only when torchvision (or another library defining the same
``torchvision::`` schemas) is loaded; the frontend imports torchvision when a file needs its ops.
"""

from __future__ import annotations

import numpy as np

from convert.ir import DataType, Value

from ._base import LowerContext, OpCall, lowers

__all__ = ["nms", "roi_align"]

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
