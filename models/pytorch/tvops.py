"""torchvision's two detection operators, for detector look-alikes: the real ones, or stand-ins.

A detector traced or exported with torchvision carries ``torchvision::nms`` and
``torchvision::roi_align`` calls. When torchvision's compiled operators are importable they are used
as they are. Otherwise (this machine's package disk has only torchvision's CUDA wheel, which cannot
load next to CPU torch) ``ensure()`` defines the two operators under the same names and schemas, with
reference kernels written here from their definitions:

- nms: sort by score (descending), keep a box unless its IoU with an already kept box is above the
  threshold; IoU = intersection / (area_a + area_b - intersection), area = (x2 - x1) * (y2 - y1).
  Returns the kept indices (int64) in score order.
- roi_align (average mode): each RoI ``[batch, x1, y1, x2, y2]`` is scaled by ``spatial_scale``
  (minus 0.5 with ``aligned``; without it the RoI is at least 1x1), cut into pooled_h x pooled_w bins,
  and each bin averages ``sampling_ratio`` (or ceil(bin size)) bilinear samples per axis. A sample more
  than one pixel outside the map is 0; otherwise coordinates are clamped to the map.

Both carry fake kernels, so torch.export captures them with a data-dependent nms length.
"""

from __future__ import annotations

import math

import torch

__all__ = ["ensure", "nms", "roi_align"]

_LIB: list[object] = []


def _have_torchvision() -> bool:
    try:
        import torchvision  # noqa: F401
    except Exception:
        return False
    return hasattr(torch.ops, "torchvision") and hasattr(torch.ops.torchvision, "nms")


def _nms_ref(dets: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    order = torch.argsort(scores, descending=True, stable=True)
    boxes = dets[order].double()
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    suppressed = torch.zeros(len(order), dtype=torch.bool)
    keep = []
    for i in range(len(order)):
        if suppressed[i]:
            continue
        keep.append(int(order[i]))
        lt = torch.maximum(boxes[i, :2], boxes[:, :2])
        rb = torch.minimum(boxes[i, 2:], boxes[:, 2:])
        wh = (rb - lt).clamp(min=0)
        inter = wh[:, 0] * wh[:, 1]
        iou = inter / (area[i] + area - inter)
        suppressed |= iou > iou_threshold
    return torch.tensor(keep, dtype=torch.int64)


def _bilinear(feat: torch.Tensor, y: float, x: float) -> torch.Tensor:
    height, width = feat.shape[-2:]
    if y < -1.0 or y > height or x < -1.0 or x > width:
        return feat.new_zeros(feat.shape[0])
    y, x = max(y, 0.0), max(x, 0.0)
    y0, x0 = int(y), int(x)
    if y0 >= height - 1:
        y0 = y1 = height - 1
        y = float(y0)
    else:
        y1 = y0 + 1
    if x0 >= width - 1:
        x0 = x1 = width - 1
        x = float(x0)
    else:
        x1 = x0 + 1
    ly, lx = y - y0, x - x0
    hy, hx = 1.0 - ly, 1.0 - lx
    return (hy * hx * feat[:, y0, x0] + hy * lx * feat[:, y0, x1]
            + ly * hx * feat[:, y1, x0] + ly * lx * feat[:, y1, x1])


def _roi_align_ref(inp: torch.Tensor, rois: torch.Tensor, spatial_scale: float, pooled_height: int,
                   pooled_width: int, sampling_ratio: int, aligned: bool) -> torch.Tensor:
    out = inp.new_zeros(rois.shape[0], inp.shape[1], pooled_height, pooled_width)
    offset = 0.5 if aligned else 0.0
    for r, roi in enumerate(rois.double().tolist()):
        feat = inp[int(roi[0])].double()
        x1, y1, x2, y2 = (v * spatial_scale - offset for v in roi[1:])
        w, h = x2 - x1, y2 - y1
        if not aligned:
            w, h = max(w, 1.0), max(h, 1.0)
        bin_h, bin_w = h / pooled_height, w / pooled_width
        gh = sampling_ratio if sampling_ratio > 0 else math.ceil(h / pooled_height)
        gw = sampling_ratio if sampling_ratio > 0 else math.ceil(w / pooled_width)
        count = max(gh * gw, 1)
        for ph in range(pooled_height):
            for pw in range(pooled_width):
                acc = feat.new_zeros(feat.shape[0])
                for iy in range(gh):
                    y = y1 + ph * bin_h + (iy + 0.5) * bin_h / gh
                    for ix in range(gw):
                        x = x1 + pw * bin_w + (ix + 0.5) * bin_w / gw
                        acc += _bilinear(feat, y, x)
                out[r, :, ph, pw] = (acc / count).to(out.dtype)
    return out


def ensure() -> None:
    """Make ``torch.ops.torchvision.nms`` and ``roi_align`` callable (torchvision's, else the stand-ins)."""
    if _LIB or _have_torchvision():
        return
    lib = torch.library.Library("torchvision", "DEF")  # kept alive in _LIB
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
               "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor")
    lib.impl("nms", _nms_ref, "CPU")
    lib.impl("roi_align", _roi_align_ref, "CPU")
    _LIB.append(lib)

    @torch.library.register_fake("torchvision::nms", lib=lib)
    def _nms_fake(dets: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
        ctx = torch.library.get_ctx()
        n = ctx.new_dynamic_size()
        return dets.new_empty(n, dtype=torch.int64)

    @torch.library.register_fake("torchvision::roi_align", lib=lib)
    def _roi_align_fake(inp: torch.Tensor, rois: torch.Tensor, spatial_scale: float, pooled_height: int,
                        pooled_width: int, sampling_ratio: int, aligned: bool) -> torch.Tensor:
        return inp.new_empty((rois.shape[0], inp.shape[1], pooled_height, pooled_width))


def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Call ``torchvision::nms``."""
    ensure()
    return torch.ops.torchvision.nms(boxes, scores, iou_threshold)


def roi_align(inp: torch.Tensor, rois: torch.Tensor, output_size: int, spatial_scale: float,
              sampling_ratio: int = -1, aligned: bool = False) -> torch.Tensor:
    """Call ``torchvision::roi_align`` with torchvision's argument order."""
    ensure()
    return torch.ops.torchvision.roi_align(inp, rois, spatial_scale, output_size, output_size, sampling_ratio,
                                           aligned)
