"""darknet->caffe through the same IR (no Darknet code in the Caffe exporter), checked by the parity run."""

from __future__ import annotations

from pathlib import Path

import pytest
from darknet_helpers import ALEXEYAB_CFGS, ROOT, SYSTEM_CFG, needs_opencv, sized_cfg

import convert
from convert.frontends.darknet.random_weights import write_random_weights

# yolov3-tiny / yolov2-tiny: a 2x2 stride-1 maxpool padded bottom/right (pad 1 both sides, then a Crop)
CASES = [(ALEXEYAB_CFGS / "yolov4-tiny.cfg", 160), (SYSTEM_CFG / "yolov3.cfg", 96),
         (SYSTEM_CFG / "yolov3-tiny.cfg", 96), (SYSTEM_CFG / "yolov2-tiny.cfg", 96)]


@needs_opencv
@pytest.mark.opencv
@pytest.mark.parametrize(("src", "size"), CASES, ids=[c[0].name for c in CASES])
def test_darknet_to_caffe_passes_parity(src: Path, size: int, tmp_path: Path) -> None:
    if "caffe" not in convert.formats.exporter_names():
        pytest.skip("the Caffe exporter is not part of this installation")
    if not src.is_file():
        pytest.skip(f"{src} is absent")
    cfg = sized_cfg(src, tmp_path, size)
    weights = write_random_weights(cfg, tmp_path / "w.weights")
    result = convert.convert([cfg, weights], to="caffe", out=tmp_path / "net.prototxt")
    assert result.report is not None and result.report.passed, result.report


@pytest.mark.opencv
def test_default_caffe_file_of_yolov4_tiny_is_checked_in_opencv(tmp_path: Path) -> None:
    """The default (ssd) file of yolov4-tiny is checkable with the default install's Caffe runtime,
    OpenCV DNN: its upsampling is a fixed Deconvolution (OpenCV cannot create the fork's Upsample,
    which --caffe-upsample-layer writes on request)."""
    import os
    import subprocess
    import sys

    cfg = ROOT / "models" / "darknet" / "yolov4-tiny.cfg"
    env = {**os.environ, "CONVERT_CAFFE_RUNTIME": "opencv"}
    done = subprocess.run([sys.executable, "-m", "convert", "darknet:caffe", str(cfg), "--random-weights", "-o",
                           str(tmp_path / "y")], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0 and "parity PASS" in done.stdout + done.stderr, done.stdout + done.stderr
    text = (tmp_path / "y.prototxt").read_text()
    assert "Upsample" not in text and 'type: "Deconvolution"' in text
