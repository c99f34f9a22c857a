"""Detection heads: ``[yolo]`` and ``[region]`` as plain ONNX ops, and optional box decoding.

By default each head's output is exactly what Darknet's forward leaves in the layer (N x C x H x W,
C = anchors * (coords + 1 + classes)). ``--decode`` appends ``decode_heads``: boxes in input
pixels, objectness and class scores per detection, concatenated over heads.
"""

from __future__ import annotations

import numpy as np

from convert.ir import Value

from .cfg import Section
from .context import DarknetContext, DecodeHead, LayerOut
from .layers import LAYERS

__all__ = ["decode_heads"]


def _anchors(sec: Section, ctx: DarknetContext, total: int) -> np.ndarray:
    values = sec.floats("anchors", [])
    if len(values) < 2 * total:
        raise ctx.error(sec, f"needs {2 * total} anchor values for num={total}, found {len(values)}")
    return np.array(values[: 2 * total], dtype=np.float32).reshape(total, 2)


@LAYERS.register("yolo", maps_to="Sigmoid on x, y, objectness, classes; scale_x_y as Mul/Add")
def yolo(sec: Section, ctx: DarknetContext) -> LayerOut:
    """[yolo] -> logistic on x, y, objectness and classes (not w, h), then ``scale_x_y``.

    ``x' = x * s - (s - 1) / 2`` for ``scale_x_y = s`` (AlexeyAB); with ``new_coords=1`` no logistic
    is applied (the convolution before it already did). Output has the input's shape.
    """
    prev = ctx.prev
    classes = sec.int("classes", 20)
    total = sec.int("num", 1)
    mask = sec.ints("mask", list(range(total)))
    n = len(mask)
    scale_xy = sec.float("scale_x_y", 1.0)
    new_coords = sec.int("new_coords", 0)
    if any(not 0 <= m < total for m in mask):
        raise ctx.error(sec, f"mask={sec.options.get('mask')} refers to anchors beyond num={total}")
    _anchors(sec, ctx, total)
    per = 5 + classes
    if prev.c != n * per:
        raise ctx.error(sec, f"the input has {prev.c} channels, expected {n} anchors x (5 + {classes} classes) = "
                        f"{n * per}", "Set filters of the layer before to (classes + 5) * len(mask).")
    b = ctx.b
    x = ctx.reshape(sec, prev.value, [n, per, prev.h, prev.w], suffix="split")
    xy = ctx.slice(sec, x, [2], [0], [2], suffix="xy")
    wh = ctx.slice(sec, x, [2], [2], [4], suffix="wh")
    rest = ctx.slice(sec, x, [2], [4], [per], suffix="scores")
    if not new_coords:
        xy = ctx.emit("Sigmoid", [xy], suffix="xy_logistic")
        rest = ctx.emit("Sigmoid", [rest], suffix="scores_logistic")
    if scale_xy != 1.0:
        xy = ctx.emit("Mul", [xy, b.const(np.array(scale_xy, np.float32))], suffix="xy_scale")
        xy = ctx.emit("Add", [xy, b.const(np.array(-0.5 * (scale_xy - 1), np.float32))], suffix="xy_shift")
    y = ctx.emit("Concat", [xy, wh, rest], {"axis": 2}, suffix="join")
    y = ctx.reshape(sec, y, [prev.c, prev.h, prev.w], suffix="out")
    out = LayerOut(y, prev.c, prev.h, prev.w, 0.3, sec.type)
    ctx.heads.append((ctx.index, sec, out))
    return out


@LAYERS.register("region", maps_to="Sigmoid on x, y, objectness; Softmax over classes", notes="no tree, no background")
def region(sec: Section, ctx: DarknetContext) -> LayerOut:
    """[region] -> logistic on x, y and objectness, softmax over each anchor's classes.

    ``tree`` (YOLO9000's softmax tree) and ``background`` are not supported.
    """
    prev = ctx.prev
    classes = sec.int("classes", 20)
    coords = sec.int("coords", 4)
    total = sec.int("num", 1)
    if sec.get("tree") is not None:
        raise ctx.error(sec, "softmax trees ('tree=') are not supported", "Convert a flat-softmax model.")
    if sec.int("background", 0):
        raise ctx.error(sec, "background=1 is not supported", "Remove the option.")
    softmax = sec.int("softmax", 0)
    _anchors(sec, ctx, total)
    per = coords + 1 + classes
    if prev.c != total * per:
        raise ctx.error(sec, f"the input has {prev.c} channels, expected {total} x ({coords} + 1 + {classes}) = "
                        f"{total * per}", "Set filters of the layer before to num * (coords + 1 + classes).")
    x = ctx.reshape(sec, prev.value, [total, per, prev.h, prev.w], suffix="split")
    xy = ctx.emit("Sigmoid", [ctx.slice(sec, x, [2], [0], [2], suffix="xy")], suffix="xy_logistic")
    parts = [xy]
    if coords > 2:
        parts.append(ctx.slice(sec, x, [2], [2], [coords], suffix="wh"))
    obj = ctx.slice(sec, x, [2], [coords], [coords + 1], suffix="obj")
    parts.append(ctx.emit("Sigmoid", [obj], suffix="obj_logistic"))
    if classes:
        cls = ctx.slice(sec, x, [2], [coords + 1], [per], suffix="classes")
        if softmax:
            cls = ctx.emit("Softmax", [cls], {"axis": 2}, suffix="softmax")
        parts.append(cls)
    y = ctx.emit("Concat", parts, {"axis": 2}, suffix="join")
    y = ctx.reshape(sec, y, [prev.c, prev.h, prev.w], suffix="out")
    out = LayerOut(y, prev.c, prev.h, prev.w, 0.3, sec.type)
    ctx.heads.append((ctx.index, sec, out))
    return out


def _decode_one(ctx: DarknetContext, index: int, sec: Section, head: LayerOut) -> tuple[Value, int]:
    b = ctx.b
    base = f"decode_{index}"
    total = sec.int("num", 1)
    anchors = _anchors(sec, ctx, total)
    if sec.type == "yolo":
        mask = sec.ints("mask", list(range(total)))
        anchors = anchors[mask]
        classes = sec.int("classes", 20)
        coords = 4
    else:
        classes = sec.int("classes", 20)
        coords = sec.int("coords", 4)
        if coords != 4:
            raise ctx.error(sec, f"--decode needs coords=4, found {coords}", "Convert without --decode.")
        # Region anchors are in grid cells: bring them to input pixels.
        anchors = anchors * np.array([ctx.net_w / head.w, ctx.net_h / head.h], dtype=np.float32)
    n = anchors.shape[0]
    per = coords + 1 + classes
    hw = head.h * head.w
    x = ctx.emit("Reshape", [head.value, b.const(np.array([0, n, per, hw], np.int64))], suffix="split")
    x = ctx.emit("Transpose", [x], {"perm": [0, 1, 3, 2]}, suffix="rows")
    x = ctx.emit("Reshape", [x, b.const(np.array([0, n * hw, per], np.int64))], suffix="flat")

    def part(lo: int, hi: int, tag: str) -> Value:
        return ctx.emit("Slice", [x, b.const(np.array([lo], np.int64)), b.const(np.array([hi], np.int64)),
                                 b.const(np.array([2], np.int64))], suffix=tag)

    gy, gx = np.meshgrid(np.arange(head.h, dtype=np.float32), np.arange(head.w, dtype=np.float32), indexing="ij")
    grid = np.tile(np.stack([gx.ravel(), gy.ravel()], axis=1), (n, 1)).astype(np.float32)
    cell = np.array([ctx.net_w / head.w, ctx.net_h / head.h], dtype=np.float32)
    anchor_rows = np.repeat(anchors, hw, axis=0).astype(np.float32)
    xy = ctx.emit("Add", [part(0, 2, "xy"), b.const(grid, name=f"{base}_grid")], suffix="xy_cell")
    xy = ctx.emit("Mul", [xy, b.const(cell, name=f"{base}_cell")], suffix="xy_px")
    wh = part(2, 4, "wh")
    if sec.type == "yolo" and sec.int("new_coords", 0):
        wh = ctx.emit("Mul", [wh, wh], suffix="wh_sq")
        wh = ctx.emit("Mul", [wh, b.const(np.array(4, np.float32))], suffix="wh_4")
    else:
        wh = ctx.emit("Exp", [wh], suffix="wh_exp")
    wh = ctx.emit("Mul", [wh, b.const(anchor_rows, name=f"{base}_anchors")], suffix="wh_px")
    scores = part(4, per, "scores")
    y = ctx.emit("Concat", [xy, wh, scores], {"axis": 2})
    return y, classes


def decode_heads(ctx: DarknetContext) -> Value:
    """Append box decoding for every head; returns N x detections x (4 + 1 + classes).

    Each row is ``[x, y, w, h]`` (box centre and size in input pixels), objectness, class scores
    (logistic for [yolo], softmax for [region]), ready for NMS.

    Raises:
        ModelFormatError: the heads have different class counts.
    """
    outs = []
    classes = None
    for index, sec, head in ctx.heads:
        with ctx.at(DecodeHead(index, sec)):
            y, k = _decode_one(ctx, index, sec, head)
        if classes is not None and k != classes:
            raise ctx.error(sec, f"--decode needs every head to have the same classes ({classes} vs {k})",
                            "Convert without --decode.")
        classes = k
        outs.append(y)
    if len(outs) == 1:
        return outs[0]
    return ctx.builder.op("Concat", outs, {"axis": 1}, name="detections_concat")  # joins heads: no one layer's
