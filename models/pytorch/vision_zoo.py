"""Real torchvision and timm models with seeded random weights, for the PyTorch zoo tests.

Each entry is built by torchvision's or timm's own constructor (``weights=None`` /
``pretrained=False``: nothing is downloaded), at a small input so that the whole set runs on two
CPU cores in minutes, with seeded weights and BatchNorm statistics measured on seeded data
(``nets.recalibrate``) so that outputs have a real spread. Needs the ``[vision]`` extra
(torchvision 0.29 with torch 2.14, timm).

``build(name)`` returns ``(model, inputs(seed))``: the eval-mode model and a function giving its
example inputs for a seed. Segmentation models return their ``"out"`` tensor (``Out`` wrapper).

``det:NAME`` entries are torchvision detectors (Faster R-CNN, SSDlite, RetinaNet, Mask R-CNN), whose
BatchNorm is calibrated on the backbone and whose class logits are scaled so that scores are spread
apart (tied scores would make the kept set arbitrary). ``Detections`` returns image 0's boxes,
scores and labels (and masks); their count depends on the data, so they are compared as sets.

``yolo:NAME`` entries are ultralytics' YOLOv8 / YOLO11 detect and segment models built from the
yaml files ultralytics ships (``DetectionModel("yolov8n.yaml")``), when ultralytics is importable.
Their heads have never run an eager inference when built (BatchNorm calibration runs in training
mode, which skips the anchor code), as with a model fresh from its yaml. They return a nested tuple:
the decoded predictions first, then the raw head tensors.

    python models/pytorch/vision_zoo.py       # list the models with their input shapes
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

__all__ = ["DETECTION", "DETECTORS", "NAMES", "TIMM", "TORCHVISION", "YOLO", "build", "shape_of",
           "ultralytics_available"]

# name -> (torchvision constructor, keyword arguments, input shape)
TORCHVISION: dict[str, tuple[str, dict[str, object], tuple[int, ...]]] = {
    "resnet18": ("resnet18", {}, (1, 3, 64, 64)),
    "resnext50_32x4d": ("resnext50_32x4d", {}, (1, 3, 64, 64)),
    "wide_resnet50_2": ("wide_resnet50_2", {}, (1, 3, 64, 64)),
    "alexnet": ("alexnet", {}, (1, 3, 64, 64)),  # 6x6 adaptive pool of a 1x1 map
    "vgg11_bn": ("vgg11_bn", {}, (1, 3, 64, 64)),  # 7x7 adaptive pool of a 2x2 map
    "squeezenet1_1": ("squeezenet1_1", {}, (1, 3, 64, 64)),
    "googlenet": ("googlenet", {"aux_logits": False, "init_weights": True}, (1, 3, 64, 64)),
    "inception_v3": ("inception_v3", {"aux_logits": False, "init_weights": True}, (1, 3, 96, 96)),
    "densenet121": ("densenet121", {}, (1, 3, 64, 64)),
    "mobilenet_v2": ("mobilenet_v2", {}, (1, 3, 64, 64)),
    "mobilenet_v3_large": ("mobilenet_v3_large", {}, (1, 3, 64, 64)),
    "mnasnet1_0": ("mnasnet1_0", {}, (1, 3, 64, 64)),
    "shufflenet_v2_x1_0": ("shufflenet_v2_x1_0", {}, (1, 3, 64, 64)),
    "efficientnet_b0": ("efficientnet_b0", {}, (1, 3, 64, 64)),
    "efficientnet_v2_s": ("efficientnet_v2_s", {}, (1, 3, 64, 64)),
    "regnet_y_400mf": ("regnet_y_400mf", {}, (1, 3, 64, 64)),
    "convnext_tiny": ("convnext_tiny", {}, (1, 3, 64, 64)),
    "swin_t": ("swin_t", {}, (1, 3, 64, 64)),
    "vit_b_16": ("vit_b_16", {"image_size": 32}, (1, 3, 32, 32)),
    "fcn_resnet50": ("segmentation.fcn_resnet50", {"weights_backbone": None, "aux_loss": False}, (1, 3, 64, 64)),
    "deeplabv3_mobilenet_v3_large": ("segmentation.deeplabv3_mobilenet_v3_large",
                                     {"weights_backbone": None, "aux_loss": False}, (1, 3, 64, 64)),
    "lraspp_mobilenet_v3_large": ("segmentation.lraspp_mobilenet_v3_large", {"weights_backbone": None},
                                  (1, 3, 64, 64)),
    "r3d_18": ("video.r3d_18", {}, (1, 3, 4, 32, 32)),
    "r2plus1d_18": ("video.r2plus1d_18", {}, (1, 3, 4, 32, 32)),
}
# timm families: name -> input size (square)
TIMM: dict[str, int] = {
    "resnet18": 64, "efficientnet_b0": 64, "mobilenetv3_small_100": 64, "convnext_atto": 64,
    "vit_tiny_patch16_224": 32, "regnety_002": 64, "mixnet_s": 64, "ghostnet_100": 64, "rexnet_100": 64,
    "mobilevit_xxs": 64, "poolformer_s12": 64, "cspdarknet53": 64, "dla34": 64, "repvgg_a0": 64,
    "levit_128s": 64, "hrnet_w18_small": 64,
}
# ultralytics models built from their yaml: name -> input size (square, a multiple of the stride 32)
YOLO: dict[str, int] = {"yolov8n": 320, "yolo11n": 320, "yolov8n-seg": 320, "yolo11n-seg": 320}
# torchvision detectors: name -> (constructor, keyword arguments, input size, gains: layer-name part ->
# the factor its weights are scaled by). Class logits are scaled up so that scores are spread apart;
# Mask R-CNN's mask logits are scaled down: with random weights their spread is ~54, which saturates
# the sigmoid (2 % of mask pixels between 0.05 and 0.95); at 1/20 the masks have a real spread.
DETECTION: dict[str, tuple[str, dict[str, object], int, dict[str, float]]] = {
    "fasterrcnn_mobilenet_v3_large_320_fpn": ("fasterrcnn_mobilenet_v3_large_320_fpn", {}, 320, {}),
    "ssdlite320_mobilenet_v3_large": ("ssdlite320_mobilenet_v3_large", {}, 320, {"classification_head": 10.0}),
    # 100 detections: ranks past that are near-ties (1e-6 apart) between overlapping boxes
    "retinanet_resnet50_fpn": ("retinanet_resnet50_fpn", {"min_size": 256, "max_size": 256, "detections_per_img": 100},
                               256, {"classification_head.cls_logits": 10.0}),
    "maskrcnn_resnet50_fpn": ("maskrcnn_resnet50_fpn", {"min_size": 256, "max_size": 256}, 256,
                              {"mask_predictor.mask_fcn_logits": 0.05}),
    "keypointrcnn_resnet50_fpn": ("keypointrcnn_resnet50_fpn", {"min_size": 256, "max_size": 256,
                                                              "box_detections_per_img": 30}, 256,
                                  {"box_predictor.cls_score": 3.0}),
}
_IMG_SIZE = ("vit", "deit", "swin", "levit", "mobilevit")  # timm models told their input size


def _nets() -> object:
    name = "pytorch_test_nets"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("nets.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


class Out(nn.Module):
    """A segmentation model's ``"out"`` tensor (torchvision returns a dict)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)["out"]


def _torchvision(name: str) -> tuple[nn.Module, tuple[int, ...]]:
    import torchvision

    ctor, kwargs, shape = TORCHVISION[name]
    fn: object = torchvision.models
    for part in ctor.split("."):
        fn = getattr(fn, part)
    classes = {"num_classes": 5} if ctor.startswith("segmentation.") else {"num_classes": 10}
    model = fn(weights=None, **classes, **kwargs)  # type: ignore[operator]
    return (Out(model) if ctor.startswith("segmentation.") else model), shape


def _timm(name: str) -> tuple[nn.Module, tuple[int, ...]]:
    import timm

    size = TIMM[name]
    kwargs = {"img_size": size} if any(k in name for k in _IMG_SIZE) else {}
    return timm.create_model(name, pretrained=False, num_classes=10, **kwargs), (1, 3, size, size)


class Detections(nn.Module):
    """A torchvision detector on a batch-1 image tensor: image 0's boxes, scores and labels, then its
    masks (Mask R-CNN: one probability map per detection, the size of the image) or its keypoints
    and their scores (Keypoint R-CNN: 17 per detection)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        found = self.model(list(x))[0]
        return tuple(found[k] for k in ("boxes", "scores", "labels", "masks", "keypoints", "keypoints_scores")
                     if k in found)


def _detector(name: str) -> tuple[nn.Module, tuple[int, ...]]:
    import torchvision

    ctor, kwargs, size, gains = DETECTION[name]
    model = getattr(torchvision.models.detection, ctor)(weights=None, weights_backbone=None, num_classes=5,
                                                        **kwargs)
    _nets().recalibrate(model.backbone, (1, 3, size, size))  # type: ignore[attr-defined]
    with torch.no_grad():
        for key, module in model.named_modules():
            gain = [g for part, g in gains.items() if part in key]
            if isinstance(module, (nn.Linear, nn.Conv2d)) and gain:
                module.weight.mul_(gain[0])
    return Detections(model), (1, 3, size, size)


def _yolo(name: str) -> tuple[nn.Module, tuple[int, ...]]:
    import os
    import tempfile

    # ultralytics writes a settings file on import; keep it out of the user's home
    os.environ.setdefault("YOLO_CONFIG_DIR", os.path.join(tempfile.gettempdir(), "convert-ultralytics"))
    from ultralytics.nn.tasks import DetectionModel, SegmentationModel

    cls = SegmentationModel if name.endswith("-seg") else DetectionModel
    return cls(f"{name}.yaml", verbose=False), (1, 3, YOLO[name], YOLO[name])


def ultralytics_available() -> bool:
    """Whether the ``yolo:`` entries can be built."""
    return importlib.util.find_spec("ultralytics") is not None


def build(name: str, seed: int = 0) -> tuple[nn.Module, Callable[[int], tuple[torch.Tensor, ...]]]:
    """Return ``(model, inputs)`` for ``tv:NAME``, ``timm:NAME``, ``yolo:NAME`` or ``det:NAME``."""
    source, _, short = name.partition(":")
    torch.manual_seed(seed)
    builders = {"tv": _torchvision, "timm": _timm, "yolo": _yolo, "det": _detector}
    model, shape = builders[source](short)
    with torch.no_grad():  # zero-initialised layers (ViT's head) would give an all-zero output
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.Conv2d)) and not module.weight.any():
                module.weight.normal_(0.0, 0.02)
    if source == "det":  # calibrated on the backbone: in training mode a detector wants targets
        model.eval()
    else:
        model = _nets().recalibrate(model.eval(), shape, seed=seed)  # type: ignore[attr-defined]

    def inputs(s: int) -> tuple[torch.Tensor, ...]:
        gen = torch.Generator().manual_seed(s)  # detectors take images in [0, 1]
        return (torch.rand(shape, generator=gen) if source == "det" else torch.randn(shape, generator=gen),)

    return model, inputs


NAMES = [f"tv:{n}" for n in TORCHVISION] + [f"timm:{n}" for n in TIMM] + [f"yolo:{n}" for n in YOLO]
DETECTORS = [f"det:{n}" for n in DETECTION]  # outputs compared as sets


def shape_of(name: str) -> tuple[int, ...]:
    """The input shape of entry ``name``."""
    source, _, short = name.partition(":")
    if source == "tv":
        return TORCHVISION[short][2]
    size = TIMM[short] if source == "timm" else YOLO[short] if source == "yolo" else DETECTION[short][2]
    return (1, 3, size, size)

if __name__ == "__main__":
    for n in NAMES + DETECTORS:
        print(n, shape_of(n))
