"""Detector look-alikes: torchvision's RetinaNet/SSDlite and Faster R-CNN structure at small sizes.

Each keeps what makes a detector hard to convert: a data-dependent number of detections from a
score threshold (boolean-mask indexing) and ``torchvision::nms`` (batched by class with torchvision's
coordinate-offset trick), and for the two-stage model proposals from an RPN pooled with
``torchvision::roi_align``. torchvision's operators come from ``tvops`` (torchvision's own when it
loads, else stand-ins with the same schema). Outputs are ``boxes [K, 4], scores [K], labels [K]``
for one image; K depends on the input.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch
from torch import nn

__all__ = ["FasterRCNNLike", "RetinaNetLike", "tvops"]


def _load(name: str) -> object:
    key = f"pytorch_test_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, Path(__file__).with_name(f"{name}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


tvops = _load("tvops")

STRIDE = 4
SIZES = (8.0, 16.0, 24.0)


def _backbone() -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.ReLU())


def _anchors(height: int, width: int) -> torch.Tensor:
    """Return [H*W*A, 4] square anchors (x1, y1, x2, y2) centred on each cell, cell-major."""
    ys, xs = torch.meshgrid(torch.arange(height) * STRIDE + STRIDE / 2, torch.arange(width) * STRIDE + STRIDE / 2,
                            indexing="ij")
    centres = torch.stack([xs, ys, xs, ys], -1).reshape(-1, 1, 4)
    half = torch.tensor(SIZES).reshape(1, -1, 1) / 2
    return (centres + torch.cat([-half, -half, half, half], -1)).reshape(-1, 4)


def decode(deltas: torch.Tensor, ref: torch.Tensor, weights: tuple[float, float, float, float],
           size: float) -> torch.Tensor:
    """Apply (dx, dy, dw, dh) box deltas to reference boxes as torchvision's BoxCoder does, clipped."""
    w = ref[..., 2] - ref[..., 0]
    h = ref[..., 3] - ref[..., 1]
    cx = ref[..., 0] + 0.5 * w
    cy = ref[..., 1] + 0.5 * h
    dx, dy = deltas[..., 0] / weights[0], deltas[..., 1] / weights[1]
    dw = (deltas[..., 2] / weights[2]).clamp(max=4.135)
    dh = (deltas[..., 3] / weights[3]).clamp(max=4.135)
    pcx, pcy = dx * w + cx, dy * h + cy
    pw, ph = torch.exp(dw) * w, torch.exp(dh) * h
    boxes = torch.stack([pcx - 0.5 * pw, pcy - 0.5 * ph, pcx + 0.5 * pw, pcy + 0.5 * ph], -1)
    return boxes.clamp(0.0, size)


def batched_nms(boxes: torch.Tensor, scores: torch.Tensor, labels: torch.Tensor, iou: float) -> torch.Tensor:
    """torchvision's batched_nms: boxes of different classes shifted apart so they never overlap."""
    offsets = labels.to(boxes) * (boxes.max() + 1)
    return tvops.nms(boxes + offsets[:, None], scores, iou)


class RetinaNetLike(nn.Module):
    """One-stage detector (RetinaNet / SSDlite post-processing): sigmoid class scores per anchor,
    top-k candidates, score threshold, class-batched NMS, at most ``max_det`` detections."""

    def __init__(self, classes: int = 3, size: int = 64, topk: int = 96, score_thresh: float = 0.82,
                 iou: float = 0.5, max_det: int = 50) -> None:
        super().__init__()
        self.classes, self.size, self.topk = classes, size, topk
        self.score_thresh, self.iou, self.max_det = score_thresh, iou, max_det
        self.backbone = _backbone()
        self.cls = nn.Conv2d(32, len(SIZES) * classes, 3, 1, 1)
        self.reg = nn.Conv2d(32, len(SIZES) * 4, 3, 1, 1)
        nn.init.normal_(self.cls.weight, std=0.05)  # scores spread over (0, 1), not all near 0.5
        self.register_buffer("anchors", _anchors(size // STRIDE, size // STRIDE), persistent=False)

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        feat = self.backbone(image)
        logits = self.cls(feat).permute(0, 2, 3, 1).reshape(-1, self.classes)
        deltas = self.reg(feat).permute(0, 2, 3, 1).reshape(-1, 4)
        boxes = decode(deltas, self.anchors, (1.0, 1.0, 1.0, 1.0), float(self.size))
        scores, idx = torch.sigmoid(logits).flatten().topk(self.topk)
        keep = scores > self.score_thresh
        scores, idx = scores[keep], idx[keep]
        labels = idx % self.classes
        boxes = boxes[torch.div(idx, self.classes, rounding_mode="floor")]
        keep = batched_nms(boxes, scores, labels, self.iou)[: self.max_det]
        return boxes[keep], scores[keep], labels[keep]


class FasterRCNNLike(nn.Module):
    """Two-stage detector (Faster R-CNN): RPN proposals by objectness top-k and NMS, RoIAlign 7x7 on the
    proposals, a two-layer box head, per-class box regression, softmax scores, threshold, batched NMS."""

    def __init__(self, classes: int = 3, size: int = 64, pre_nms: int = 64, post_nms: int = 16,
                 score_thresh: float = 0.3, iou: float = 0.5, max_det: int = 50) -> None:
        super().__init__()
        self.classes, self.size, self.pre_nms, self.post_nms = classes, size, pre_nms, post_nms
        self.score_thresh, self.iou, self.max_det = score_thresh, iou, max_det
        self.backbone = _backbone()
        self.rpn_conv = nn.Conv2d(32, 32, 3, 1, 1)
        self.objectness = nn.Conv2d(32, len(SIZES), 1)
        self.rpn_reg = nn.Conv2d(32, len(SIZES) * 4, 1)
        self.fc6 = nn.Linear(32 * 7 * 7, 64)
        self.fc7 = nn.Linear(64, 64)
        self.cls_score = nn.Linear(64, classes + 1)
        self.bbox_pred = nn.Linear(64, (classes + 1) * 4)
        nn.init.normal_(self.cls_score.weight, std=1.0)  # class scores spread, not all near 1 / (classes + 1)
        self.register_buffer("anchors", _anchors(size // STRIDE, size // STRIDE), persistent=False)

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        feat = self.backbone(image)
        t = torch.relu(self.rpn_conv(feat))
        obj = self.objectness(t).permute(0, 2, 3, 1).reshape(-1)
        deltas = self.rpn_reg(t).permute(0, 2, 3, 1).reshape(-1, 4)
        proposals = decode(deltas, self.anchors, (1.0, 1.0, 1.0, 1.0), float(self.size))
        obj, idx = obj.topk(self.pre_nms)
        proposals = proposals[idx]
        proposals = proposals[tvops.nms(proposals, obj, 0.7)[: self.post_nms]]
        rois = torch.cat([torch.full_like(proposals[:, :1], 0.0), proposals], 1)
        pooled = tvops.roi_align(feat, rois, 7, 1.0 / STRIDE, sampling_ratio=2, aligned=False)
        h = torch.relu(self.fc7(torch.relu(self.fc6(pooled.flatten(1)))))
        scores = torch.softmax(self.cls_score(h), -1)[:, 1:]
        box_deltas = self.bbox_pred(h).reshape(-1, self.classes + 1, 4)[:, 1:]
        boxes = decode(box_deltas, proposals[:, None], (10.0, 10.0, 5.0, 5.0), float(self.size))
        labels = torch.arange(1, self.classes + 1).expand_as(scores)
        boxes, scores, labels = boxes.reshape(-1, 4), scores.reshape(-1), labels.reshape(-1)
        keep = scores > self.score_thresh
        boxes, scores, labels = boxes[keep], scores[keep], labels[keep]
        keep = batched_nms(boxes, scores, labels, self.iou)[: self.max_det]
        return boxes[keep], scores[keep], labels[keep]
