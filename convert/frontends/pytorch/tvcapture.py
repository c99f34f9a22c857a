"""torchvision's functions replaced while a model is captured, by forms a capture can follow.

Part of the capture layer (see ``__init__``'s "the path a model takes"): ``capture.capture_model``
captures a module inside ``torchvision_replaced_for_capture``, which puts each replacement whose
torchvision module is loaded in place of torchvision's own, and puts torchvision's back afterwards:
the batched NMS, the multi-scale RoIAlign, Mask R-CNN's mask paste and Keypoint R-CNN's keypoint
decoding (their forms are ``tvpost.py``'s), and two methods of the R-CNNs' transform and box coder
whose own versions write through a view or branch on a count.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from .tvpost import offset_batched_nms, paste_expanded_masks, traced_decode_heatmaps

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["torchvision_replaced_for_capture"]


@contextlib.contextmanager
def _replaced(modules: Sequence[str], name: str, replacement: object) -> Iterator[None]:
    """Put ``replacement`` in place of attribute ``name`` of each loaded module of ``modules`` that
    holds the first one's object (a re-export), and restore them afterwards."""
    loaded = [sys.modules.get(m) for m in modules]
    original = getattr(loaded[0], name, None)
    patched = [m for m in loaded if m is not None and original is not None and getattr(m, name, None) is original]
    for module in patched:
        setattr(module, name, replacement)
    try:
        yield
    finally:
        for module in patched:
            setattr(module, name, original)


def _batched_nms_replacement() -> object | None:
    """Return what replaces torchvision's ``batched_nms`` while a model is captured (None when
    torchvision's module is not loaded): ``tvpost.offset_batched_nms`` with torchvision's ``nms``,
    one NMS over class-separated boxes (torchvision's own branches on data twice, which no capture
    of a detector, whose box count is data, survives)."""
    boxes = sys.modules.get("torchvision.ops.boxes")
    nms = getattr(boxes, "nms", None)
    if nms is None:
        return None

    def batched_nms(boxes_: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor,
                    iou_threshold: float) -> torch.Tensor:
        return offset_batched_nms(boxes_, scores, idxs, iou_threshold, nms)

    return batched_nms


def _multiscale_roi_align_replacement() -> object | None:
    """Return what replaces torchvision's multi-scale RoIAlign while a model is captured (None when
    its module is not loaded): every box pooled at every level, and per box the level its size
    selects kept.

    torchvision's own version takes ``len(rois)`` (a Python int of a data-dependent count, which a
    capture can only settle from the example) and pools each level's boxes by data-dependent
    indexing. RoIAlign pools each box on its own, so pooling all boxes at every level and selecting
    by level gives the same values for every box, at a few times the RoIAlign work.
    """
    poolers = sys.modules.get("torchvision.ops.poolers")
    original = getattr(poolers, "_multiscale_roi_align", None)
    roi_align = getattr(poolers, "roi_align", None)
    if original is None or roi_align is None:
        return None
    import torch

    def multiscale_roi_align(x_filtered: list[torch.Tensor], boxes: list[torch.Tensor], output_size: list[int],
                             sampling_ratio: int, scales: list[float] | None, mapper: object) -> torch.Tensor:
        if scales is None or mapper is None:
            return original(x_filtered, boxes, output_size, sampling_ratio, scales, mapper)  # type: ignore[misc]
        first = x_filtered[0]
        image_of = torch.cat([torch.full_like(b[:, :1], i, dtype=first.dtype) for i, b in enumerate(boxes)])
        rois = torch.cat([image_of, torch.cat(boxes).to(first.dtype)], dim=1)
        height, width = (output_size, output_size) if isinstance(output_size, int) else output_size

        def pool(feature: torch.Tensor, scale: float) -> torch.Tensor:
            if feature.is_quantized:
                return roi_align(feature, rois, output_size=output_size, spatial_scale=scale,  # type: ignore[misc, no-any-return]
                                 sampling_ratio=sampling_ratio)
            # torchvision's operator itself: its Python wrapper first asserts rois.size(1) == 5 of the
            # [count, 5] rois made just above, which the trace's note would name as a test of a count
            return torch.ops.torchvision.roi_align(  # type: ignore[no-any-return]
                feature, rois, scale, height, width, sampling_ratio, False)

        pooled = [pool(feature, scale) for feature, scale in zip(x_filtered, scales, strict=True)]
        if len(pooled) == 1:
            return pooled[0]
        levels = mapper(boxes).reshape(-1, 1, 1, 1)  # type: ignore[operator]
        result = pooled[0]
        for level, values in enumerate(pooled[1:], start=1):
            result = torch.where(levels == level, values, result)
        return result

    return multiscale_roi_align


def _mask_paste_replacement() -> object | None:
    """Return what replaces torchvision's ``paste_masks_in_image`` (Mask R-CNN) while a model is
    captured (None when its module is not loaded): the padding torchvision's ``expand_masks`` does
    and its ``expand_boxes``, then all
    masks pasted at once (``tvpost.paste_expanded_masks``) instead of a Python loop over the
    detections (a data-dependent count) that resizes each mask to its box's size (data-dependent too).
    """
    roi_heads = sys.modules.get("torchvision.models.detection.roi_heads")
    expand_boxes = getattr(roi_heads, "expand_boxes", None)
    if expand_boxes is None:
        return None
    import torch

    def paste_masks_in_image(masks: torch.Tensor, boxes: torch.Tensor, img_shape: tuple[int, int],
                             padding: int = 1) -> torch.Tensor:
        # expand_masks' scale, (side + 2 * padding) / side, computed here: under a trace torchvision's
        # makes it with torch.tensor(side), a constant of a size of a tensor whose count depends on
        # data, which the trace refuses; here it stays arithmetic on a size the graph reads
        side = masks.shape[-1]
        scale = (side + 2 * padding) / side
        masks = torch.nn.functional.pad(masks, (padding,) * 4)
        boxes = expand_boxes(boxes, scale).to(dtype=torch.int64)  # type: ignore[misc]
        return paste_expanded_masks(masks, boxes, img_shape[0], img_shape[1])[:, None]

    return paste_masks_in_image


def _keypoint_decoding_replacement() -> object | None:
    """Return what replaces torchvision's ``heatmaps_to_keypoints`` (Keypoint R-CNN) while a model
    is captured (None when its module is not loaded): ``tvpost.decode_heatmaps``, a loop a capture
    can follow (torchvision's own loops in Python over the detections and resizes each one's
    heatmaps to its box's size: a data-dependent count of data-dependent sizes), which torch's
    tracer records as one operator (``tvpost.traced_decode_heatmaps``)."""
    roi_heads = sys.modules.get("torchvision.models.detection.roi_heads")
    if getattr(roi_heads, "heatmaps_to_keypoints", None) is None:
        return None
    return traced_decode_heatmaps


# torchvision's functions replaced while a model is captured: the modules that hold each (the first
# defines it, the others re-export it), its name, and the function that builds its replacement.
_CAPTURE_REPLACEMENTS = (
    (("torchvision.ops.boxes", "torchvision.ops"), "batched_nms", _batched_nms_replacement),
    (("torchvision.ops.poolers",), "_multiscale_roi_align", _multiscale_roi_align_replacement),
    (("torchvision.models.detection.roi_heads", "torchvision.models.detection.transform"), "paste_masks_in_image",
     _mask_paste_replacement),
    (("torchvision.models.detection.roi_heads",), "heatmaps_to_keypoints", _keypoint_decoding_replacement),
)


def _batch_images_replacement() -> object | None:
    """Return what replaces ``GeneralizedRCNNTransform.batch_images`` (every torchvision R-CNN,
    RetinaNet, SSD and FCOS) while a model is captured (None when its module is not loaded): the same
    zero padding to a multiple of ``size_divisible``, as ``F.pad`` of each image and one ``stack``.

    torchvision's own fills a ``new_full`` batch with ``batch[i, :c, :h, :w].copy_(img)``: a write
    through a view, which the lowering cannot rebind, so torch had to functionalize the whole
    program again (``run_decompositions``, a second capture: 14 s of Faster R-CNN's 25). The values
    are the same (zeros where an image is smaller than the batch).
    """
    transform = sys.modules.get("torchvision.models.detection.transform")
    owner = getattr(transform, "GeneralizedRCNNTransform", None)
    if owner is None or getattr(owner, "batch_images", None) is None:
        return None
    import math

    import torch

    def batch_images(self: object, images: list[torch.Tensor], size_divisible: int = 32) -> torch.Tensor:
        max_size = list(self.max_by_axis([list(img.shape) for img in images]))  # type: ignore[attr-defined]
        stride = float(size_divisible)
        max_size[1] = int(math.ceil(float(max_size[1]) / stride) * stride)
        max_size[2] = int(math.ceil(float(max_size[2]) / stride) * stride)
        padded = [torch.nn.functional.pad(img, (0, max_size[2] - img.shape[2], 0, max_size[1] - img.shape[1],
                                                0, max_size[0] - img.shape[0])) for img in images]
        return torch.stack(padded)

    return batch_images


def _box_decode_replacement() -> object | None:
    """Return what replaces ``BoxCoder.decode`` (the R-CNNs' RPN and box head) while a model is
    captured (None when its module is not loaded): the same boxes, with no branch on their count.

    torchvision's reshapes its codes to ``[count, -1]`` and its boxes to ``[count, -1, 4]`` only
    ``if box_sum > 0`` (``count`` is the proposals', after an NMS: the data's), since a reshape of
    nothing to ``[0, -1]`` is ambiguous. A capture takes that branch as the example did: the file then
    holds for inputs with at least one proposal. Here the codes, ``[count, 4 * classes]`` in both of
    torchvision's calls, are already of that shape, and the boxes are reshaped to
    ``[-1, classes, 4]``, which is defined for any count. With no proposal torchvision's keeps
    ``[0, 4 * classes]`` where this gives ``[0, classes, 4]``: both are empty, and so are the
    detections made of them (the post-processing reshapes them to ``[-1, 4]``).
    """
    utils = sys.modules.get("torchvision.models.detection._utils")
    owner = getattr(utils, "BoxCoder", None)
    original = getattr(owner, "decode", None)
    if original is None:
        return None
    import torch

    def decode(self: object, rel_codes: torch.Tensor, boxes: list[torch.Tensor]) -> torch.Tensor:
        # (no test of a size here: under a trace each is a tensor, and a test of one would be a branch)
        if not isinstance(boxes, (list, tuple)) or not isinstance(rel_codes, torch.Tensor) or rel_codes.dim() != 2:
            return original(self, rel_codes, boxes)  # type: ignore[no-any-return]  # not as torchvision calls it
        pred_boxes = self.decode_single(rel_codes, torch.cat(boxes, dim=0))  # type: ignore[attr-defined]
        return pred_boxes.reshape(-1, rel_codes.shape[1] // 4, 4)  # type: ignore[no-any-return]

    return decode


# torchvision's methods replaced while a model is captured: the module, the class, the method's
# name, and the function that builds its replacement.
_CAPTURE_METHOD_REPLACEMENTS = (
    ("torchvision.models.detection.transform", "GeneralizedRCNNTransform", "batch_images",
     _batch_images_replacement),
    ("torchvision.models.detection._utils", "BoxCoder", "decode", _box_decode_replacement),
)


@contextlib.contextmanager
def _method_replaced(owner: type, name: str, replacement: object) -> Iterator[None]:
    """Put ``replacement`` in place of method ``name`` of class ``owner``, and restore it afterwards."""
    original = owner.__dict__[name]
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, original)


@contextlib.contextmanager
def torchvision_replaced_for_capture() -> Iterator[None]:
    """Put each replacement of ``_CAPTURE_REPLACEMENTS`` (and ``_CAPTURE_METHOD_REPLACEMENTS``) whose
    torchvision module is loaded in place while a model is captured, and put torchvision's own
    functions back afterwards."""
    with contextlib.ExitStack() as stack:
        for modules, name, build in _CAPTURE_REPLACEMENTS:
            replacement = build()
            if replacement is not None:
                stack.enter_context(_replaced(modules, name, replacement))
        for module, cls, method, build in _CAPTURE_METHOD_REPLACEMENTS:
            owner = getattr(sys.modules.get(module), cls, None)
            replacement = build()
            if isinstance(owner, type) and method in owner.__dict__ and replacement is not None:
                stack.enter_context(_method_replaced(owner, method, replacement))
        yield
