"""Parity of whole Darknet cfgs against real Darknet: libdarknet (pjreddie's) and OpenCV DNN.

Random seeded weights, inputs shrunk where the cfg allows, every head (and the last layer)
compared: max|ours - ref| / max|ref| <= 1e-4. Classifiers are also compared before their final
softmax, where the outputs have more spread. Every net is checked twice: with random statistics,
and with trained-like batch-norm statistics (variances x1e-4) converted at the default lineage,
where each reference's own batch-norm epsilon would decide the verdict if its weights were not
matched to the conversion's lineage (``convert/parity/runtimes/_darknet_bn.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from darknet_helpers import ALEXEYAB_CFGS, SYSTEM_CFG, needs_libdarknet, needs_opencv, parity, sized_cfg

# (cfg, input size or None to keep the cfg's, what to compare): "full" = the cfg as it is,
# "logits" = without its trailing [softmax]/[cost], "both" = both.
_CROP = {"crop_width": "56", "crop_height": "48"}
ORIGINAL = [
    ("yolov3-tiny.cfg", 224, "full", None),
    ("yolov2-tiny.cfg", 224, "full", None),
    ("yolov2.cfg", 160, "full", None),  # reorg + region
    ("yolov3.cfg", 96, "full", None),
    ("yolov3-spp.cfg", 96, "full", None),  # stride-1 maxpools
    ("darknet53.cfg", 96, "logits", None),
    ("darknet19.cfg", 128, "both", None),
    ("resnet50.cfg", 96, "logits", None),  # shortcuts between maps of different shapes
    ("resnext50.cfg", 64, "logits", None),  # grouped convolutions
    ("densenet201.cfg", 64, "logits", None),  # 98 routes
    ("tiny.cfg", 128, "full", None),
    ("alexnet.cfg", None, "logits", None),  # connected layers
    ("vgg-16.cfg", 64, "logits", _CROP),  # [crop] off-centre
    ("jnet-conv.cfg", 128, "full", None),
    ("writing.cfg", 96, "full", None),
]
SLOW_ORIGINAL = [
    ("yolov2-voc.cfg", 128, "full", None),
    ("extraction.cfg", 128, "logits", None),
    ("darknet.cfg", 128, "full", None),
    ("strided.cfg", 64, "logits", _CROP),
    ("cifar.cfg", 32, "logits", None),
    ("resnet152.cfg", 64, "logits", None),
    ("yolov3-openimages.cfg", 96, "full", None),
    ("yolov1-tiny.cfg", None, "full", None),  # [connected] + [detection]
]
ALEXEYAB = [
    ("yolov4-tiny.cfg", 224),  # route groups
    ("yolov4.cfg", 96),  # mish, SPP, scale_x_y
    ("yolov4-csp.cfg", 96),  # new_coords
    ("efficientnet_b0.cfg", 128),  # swish, scale_channels
]


def _system(name: str) -> Path:
    path = SYSTEM_CFG / name
    if not path.is_file():
        pytest.skip(f"{path} is not installed")
    return path


def _shared(name: str) -> Path:
    return ALEXEYAB_CFGS / name


def _run_original(name: str, size: int | None, mode: str, replace: dict[str, str] | None, tmp_path: Path) -> None:
    src = _system(name)
    if mode in ("full", "both"):
        cfg = sized_cfg(src, tmp_path, size, replace=replace)
        parity(cfg, tmp_path, "libdarknet")
        parity(cfg, tmp_path, "libdarknet", trained=True)
    if mode in ("logits", "both"):
        sub = tmp_path / "logits"
        sub.mkdir()
        cfg = sized_cfg(src, sub, size, drop_last=("cost", "softmax"), replace=replace)
        parity(cfg, sub, "libdarknet")
        parity(cfg, sub, "libdarknet", trained=True)


@needs_libdarknet
@pytest.mark.darknet
@pytest.mark.parametrize(("name", "size", "mode", "replace"), ORIGINAL, ids=[c[0] for c in ORIGINAL])
def test_original_lineage_matches_libdarknet(name: str, size: int | None, mode: str,
                                             replace: dict[str, str] | None, tmp_path: Path) -> None:
    _run_original(name, size, mode, replace, tmp_path)


@needs_libdarknet
@pytest.mark.darknet
@pytest.mark.slow
@pytest.mark.parametrize(("name", "size", "mode", "replace"), SLOW_ORIGINAL, ids=[c[0] for c in SLOW_ORIGINAL])
def test_original_lineage_matches_libdarknet_slow(name: str, size: int | None, mode: str,
                                                  replace: dict[str, str] | None, tmp_path: Path) -> None:
    _run_original(name, size, mode, replace, tmp_path)


@needs_opencv
@pytest.mark.opencv
@pytest.mark.parametrize(("name", "size"), ALEXEYAB, ids=[c[0] for c in ALEXEYAB])
def test_alexeyab_lineage_matches_opencv(name: str, size: int, tmp_path: Path) -> None:
    cfg = sized_cfg(_shared(name), tmp_path, size)
    parity(cfg, tmp_path, "opencv")
    parity(cfg, tmp_path, "opencv", trained=True)


@needs_opencv
@pytest.mark.opencv
def test_efficientnet_logits_match_opencv(tmp_path: Path) -> None:
    cfg = sized_cfg(_shared("efficientnet_b0.cfg"), tmp_path, 128, drop_last=("softmax",))
    parity(cfg, tmp_path, "opencv")
    parity(cfg, tmp_path, "opencv", trained=True)


@needs_opencv
@pytest.mark.opencv
def test_original_cfg_also_matches_opencv(tmp_path: Path) -> None:
    """OpenCV as the fallback reference for an original-lineage cfg (no libdarknet needed)."""
    cfg = sized_cfg(_system("yolov3-tiny.cfg"), tmp_path, 160)
    parity(cfg, tmp_path, "opencv", darknet_lineage="original")
    parity(cfg, tmp_path, "opencv", trained=True, darknet_lineage="original")
