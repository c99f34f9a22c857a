"""Darknet verdicts the reference cannot give: NOT VERIFIED with the reason, never PASS or FAIL.

- OpenCV DNN, the only reference for AlexeyAB cfgs, ignores ``dilation`` and ``stride_x``/``stride_y``:
  an output computed from such a layer is not Darknet's in OpenCV, so the check neither passes nor
  fails it (ours matches numpy references of Darknet's code: ``test_darknet_layers.py``); outputs
  that do not depend on that layer are judged as usual.
- A variance below zero in the weights makes Darknet's output NaN: said so, with the layer, not
  "degenerate" nor blamed on a sort.
- ``--darknet-lineage original`` on a cfg only AlexeyAB's darknet runs is refused (feature, line).

The lineage verdicts (assumed lineage, the file's record of it) are in ``test_darknet_bn_reference.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from darknet_helpers import ALEXEYAB_CFGS, needs_libdarknet, needs_opencv, write_cfg

import convert
from convert.frontends.darknet import FRONTEND
from convert.frontends.darknet.random_weights import write_random_weights
from convert.ir import Options, UsageError
from convert.parity.runtimes._darknet_bn import param_regions

TOL = 1e-4
_HEAD = "[yolo]\nmask=0,1,2\nanchors=10,14, 23,27, 37,58\nclasses=1\nnum=3\n\n"


def _two_heads(option: str) -> str:
    """Two [yolo] heads: the first computed through a convolution with ``option``, the second not."""
    return (
        "[net]\nwidth=16\nheight=16\nchannels=3\n\n"
        "[convolutional]\nbatch_normalize=1\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=leaky\n\n"
        f"[convolutional]\nbatch_normalize=1\nfilters=8\nsize=3\nstride=1\npad=1\n{option}\nactivation=leaky\n\n"
        "[convolutional]\nfilters=18\nsize=1\nstride=1\npad=0\nactivation=linear\n\n"
        + _HEAD
        + "[route]\nlayers=0\n\n[convolutional]\nfilters=18\nsize=1\nstride=1\npad=0\nactivation=linear\n\n"
        + _HEAD
    )


@needs_opencv
@pytest.mark.opencv
@pytest.mark.parametrize(("option", "said"), [("dilation=2", "dilation=2"), ("stride_x=2\nstride_y=1", "stride_x=2")],
                         ids=["dilation", "stride_xy"])
def test_a_layer_the_reference_cannot_express_is_not_verified(option: str, said: str, tmp_path: Path) -> None:
    """The head after the dilated (or stride_x) convolution: NOT VERIFIED naming what OpenCV ignores
    and where (was FAIL: 1.1 of scale off for dilation, a shape mismatch for stride_x); the other
    head is judged: PASS within tol. No layer is blamed."""
    cfg = write_cfg(tmp_path, _two_heads(option))
    line = 1 + cfg.read_text().splitlines().index(said)
    result = convert.convert([cfg], to="onnx", out=tmp_path / "net.onnx", random_weights=True)
    report = result.report
    assert report is not None and report.verdict == "NOT VERIFIED", report.table()
    by_name = {o.name: o for o in report.outputs}
    cut, kept = by_name["yolo_3"], by_name["yolo_6"]
    assert cut.verdict == "NOT VERIFIED" and kept.verdict == "PASS" and kept.rel_to_scale <= TOL
    assert f"ignores {said} in Darknet cfgs (layer 1 [convolutional] at net.cfg:{line})" in cut.undecided
    table = report.table()
    assert "NOT VERIFIED: 'yolo_3': OpenCV DNN" in table and "FAIL" not in table
    assert report.location is None  # nothing to locate: no output failed


@needs_libdarknet
@pytest.mark.darknet
def test_a_negative_variance_is_named_with_its_layer(tmp_path: Path) -> None:
    """Two of layer 1's variances below zero: the reference (and ours) are NaN there. NOT VERIFIED,
    saying so and naming the layer, its line and the values (was 'reference is degenerate (near zero
    or constant)', and the localisation blamed 'a sort, top-k or NMS')."""
    text = ("[net]\nwidth=12\nheight=12\nchannels=3\n\n"
            + "[convolutional]\nbatch_normalize=1\nfilters=6\nsize=3\nstride=1\npad=1\nactivation=leaky\n\n" * 3)
    cfg = write_cfg(tmp_path, text)
    weights = write_random_weights(cfg, tmp_path / "net.weights")
    region = param_regions(cfg, weights, Options())[1]
    data = bytearray(weights.read_bytes())
    variances = np.frombuffer(data, dtype="<f4", count=region.count, offset=region.offset)
    variances[[2, 4]] = [-0.5, -3.0]
    weights.write_bytes(bytes(data))
    result = convert.convert([cfg, weights], to="onnx", out=tmp_path / "net.onnx", darknet_lineage="original")
    report = result.report
    assert report is not None and report.verdict == "NOT VERIFIED", report.table()
    (out,) = report.outputs
    assert "below zero" in out.undecided and "layer 1 [convolutional] (net.cfg:14)" in out.undecided
    assert "2 of its 6 channels, down to -3" in out.undecided
    table = report.table()
    assert "degenerate" not in table and "sort, top-k" not in table and report.location is None


def test_original_lineage_on_an_alexeyab_cfg_is_refused() -> None:
    """yolov4-tiny uses route groups, which pjreddie's darknet cannot run: --darknet-lineage original
    is refused, naming the feature and its line (it converted silently, 0.89 of scale off AlexeyAB)."""
    cfg = ALEXEYAB_CFGS / "yolov4-tiny.cfg"
    line = 1 + next(i for i, ln in enumerate(cfg.read_text().splitlines()) if ln.strip().startswith("groups="))
    with pytest.raises(UsageError, match=rf"--darknet-lineage original, but the cfg uses \[route\] groups= at "
                                         rf"yolov4-tiny\.cfg:{line}, which only AlexeyAB's darknet has"):
        FRONTEND.load([cfg], Options(extra={"random_weights": True, "darknet_lineage": "original"}))
    model = FRONTEND.load([cfg], Options(extra={"random_weights": True, "darknet_lineage": "alexeyab"}))
    assert model.metadata_props["convert:darknet_lineage"] == "alexeyab"
