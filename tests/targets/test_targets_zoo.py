"""Models of the test zoo checked on each CPU deployment target: OpenVINO (CPU plugin), ncnn (via
pnnx) and the RKNN simulator (rknn-toolkit2 2.5.0, rk3588, float16), against the source in its own
framework (PyTorch, real Caffe or OpenCV, libdarknet), with the verdict's own rules.

Classifiers, a detector and a segmenter from three source formats (PyTorch modules of
models/pytorch, Caffe deploy nets of models/caffe with seeded weights, Darknet's yolov4-tiny.cfg
with random weights); each converts once and is checked on the three targets in that run. The
float32 targets must PASS within tol=1e-4 of each output's scale (the Caffe MobileNet-SSD detector:
OpenVINO does; ncnn and RKNN cannot take its detection ops, each said). The RKNN NPU computes in
float16: a PyTorch source is judged by the half-precision rule (within 2x of torch's own
``.half()`` run: PASS), other sources have no half-precision run, so their outputs are NOT VERIFIED
unless within tol, and their error is bounded here by what float16 costs these nets (< 2e-2 of
scale). Mutation: one conv weight of the converted file scaled by 1.1 FAILs on every target, and
OpenVINO and the RKNN simulator name that layer as the first that differs.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from convert import api

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "models" / "caffe"))

import sample_models  # noqa: E402

TOL = 1e-4  # the verdict's default: float32 targets must be within it
HALF_BOUND = 2e-2  # what float16 compute costs these nets on the RKNN simulator (measured 1.6e-3 .. 6e-3)
TARGETS = "openvino,ncnn,rknn"


def _module(name: str, size: int = 64) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    if name.startswith("tv:"):
        model, inputs = sample_models.vision_zoo().build(name)  # type: ignore[attr-defined]
        return model, inputs(0)
    model = sample_models.nets().build(name, size=size)  # type: ignore[attr-defined]
    return model, (torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(1)),)


def _caffe(net: str, tmp: Path) -> list[Path]:
    from fill_weights import fill

    proto = REPO / "models" / "caffe" / "deploy" / f"{net}.prototxt"
    weights = tmp / f"{net}.caffemodel"
    fill(proto, weights, 0)
    return [proto, weights]


def _darknet(cfg: str, size: int, tmp: Path) -> Path:
    text = (REPO / "models" / "darknet" / cfg).read_text()
    text = re.sub(r"(?m)^width=\d+", f"width={size}", text)
    text = re.sub(r"(?m)^height=\d+", f"height={size}", text)
    path = tmp / cfg
    path.write_text(text)
    return path


def _judge(result: api.ConversionResult, *, half_rule: bool) -> dict[str, float]:
    """Assert each target's verdict and bound its error; return the worst error per target."""
    report = result.report
    assert report is not None and report.passed is (report.verdict == "PASS")
    by_target = {t.target: t for t in report.targets}
    assert set(by_target) == {"openvino", "ncnn", "rknn"}, report.table()
    for name in ("openvino", "ncnn"):
        t = by_target[name]
        assert t.verdict == "PASS", report.table()
        assert t.worst() is not None and t.worst() <= TOL, report.table()  # type: ignore[operator]
    rknn = by_target["rknn"]
    assert rknn.precision == "fp16" and not rknn.refused and not rknn.unsupported, report.table()
    assert rknn.worst() is not None and rknn.worst() <= HALF_BOUND, report.table()  # type: ignore[operator]
    if half_rule:  # judged against torch's own fp16 run
        assert rknn.verdict == "PASS", report.table()
        assert all(o.by_half or o.rel_to_scale <= TOL for o in rknn.outputs)
    else:  # no half-precision run of the source: not judged, never a looser PASS
        assert rknn.verdict == "NOT VERIFIED", report.table()
        assert all(o.half_unjudged for o in rknn.outputs if not o.passed)
    return {n: t.worst() or 0.0 for n, t in by_target.items()}


@pytest.mark.parametrize("name", ["resnet", "yolo"], ids=["classifier-resnet", "detector-yolo"])
def test_pytorch_models_on_every_target(name: str, tmp_path: Path) -> None:
    model, example = _module(name)
    result = api.convert(model, example, to="onnx", out=tmp_path / "m.onnx", on=TARGETS)
    _judge(result, half_rule=True)


def test_pytorch_segmenter_on_every_target(tmp_path: Path) -> None:
    model, example = _module("tv:lraspp_mobilenet_v3_large")
    result = api.convert(model, example, to="onnx", out=tmp_path / "m.onnx", on=TARGETS)
    _judge(result, half_rule=True)


def test_caffe_classifier_on_every_target(tmp_path: Path) -> None:
    result = api.convert(_caffe("squeezenet_v1.1", tmp_path), to="onnx", out=tmp_path / "m.onnx", on=TARGETS)
    _judge(result, half_rule=False)


def test_caffe_detector_on_every_target(tmp_path: Path) -> None:
    """MobileNet-SSD (Caffe's DetectionOutput: TopK, Gather and NonMaxSuppression in the ONNX file),
    on inputs giving 100 detections: OpenVINO computes the same rows (compared as a set); pnnx leaves
    TopK, Gather and its own shape expressions without an ncnn layer; rknn-toolkit2 refuses the
    data-dependent NonMaxSuppression at build. Each said, FAIL on those two, the exit status 1."""
    x = np.random.default_rng(1).standard_normal((1, 3, 150, 150)).astype(np.float32) * 3
    result = api.convert(_caffe("mobilenet_ssd", tmp_path), to="onnx", out=tmp_path / "m.onnx", on=TARGETS,
                         inputs={"data": x})
    report = result.report
    assert report is not None and [o.verdict for o in report.outputs] == ["PASS"], report.table() if report else ""
    by = {t.target: t for t in report.targets}
    ov = by["openvino"]
    assert ov.verdict == "PASS" and ov.worst() is not None and ov.worst() <= TOL, report.table()  # type: ignore[operator]
    assert ov.outputs[0].shape == (1, 1, 100, 7)  # 100 detections (as a set where their order differs)
    ncnn = by["ncnn"]
    assert ncnn.verdict == "FAIL" and ncnn.report is None, report.table()
    lacks = " ".join(ncnn.unsupported)
    for op in ("TopK", "Gather", "NonMaxSuppression"):
        assert f"{op} x" in lacks and "[DetectionOutput] 'detection_out'" in lacks, lacks
    rknn = by["rknn"]
    assert rknn.verdict == "FAIL" and "refused the file at build" in rknn.refused, report.table()
    assert "NonMaxSuppression('detection_out_nms')" in rknn.refused and "dynamic graph" in rknn.refused
    assert report.verdict == "FAIL" and not result.ok


def test_darknet_detector_on_every_target(tmp_path: Path) -> None:
    cfg = _darknet("yolov4-tiny.cfg", 128, tmp_path)
    result = api.convert([cfg], to="onnx", out=tmp_path / "m.onnx", random_weights=True, on=TARGETS)
    _judge(result, half_rule=False)


def test_caffe_file_in_rknns_caffe_parser(tmp_path: Path) -> None:
    """Our Caffe file (caffe:caffe) read by rknn-toolkit2's own Caffe parser (load_caffe)."""
    result = api.convert(_caffe("squeezenet_v1.1", tmp_path), to="caffe", out=tmp_path / "m.prototxt", on="rknn")
    assert result.report is not None
    (t,) = result.report.targets
    assert t.target == "rknn" and not t.refused and not t.unsupported, result.report.table()
    assert t.worst() is not None and t.worst() <= HALF_BOUND, result.report.table()  # type: ignore[operator]
    assert t.verdict in ("PASS", "NOT VERIFIED"), result.report.table()


def _scale_conv(src: Path, dst: Path, index: int, factor: float) -> str:
    """Write ``src`` to ``dst`` with the weight of its ``index``-th Conv scaled; return the node's
    output key (its source layer, or the BatchNorm folded into it)."""
    model = onnx.load(str(src))
    conv = [n for n in model.graph.node if n.op_type == "Conv"][index]
    for init in model.graph.initializer:
        if init.name == conv.input[1]:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(factor), init.name))
    onnx.save(model, str(dst))
    meta = {p.key: p.value for p in conv.metadata_props}
    return meta.get("convert:output_of") or meta.get("convert:source_layer") or conv.name


def test_one_scaled_weight_fails_on_every_target(tmp_path: Path) -> None:
    model, example = _module("resnet")
    source = tmp_path / "resnet.pt"
    torch.jit.trace(model, example).save(str(source))
    good = api.convert(source, to="onnx", out=tmp_path / "good.onnx")
    assert good.report is not None and good.report.passed
    layer = _scale_conv(tmp_path / "good.onnx", tmp_path / "bad.onnx", 3, 1.1)
    report = api.verify(source, tmp_path / "bad.onnx", on=TARGETS)
    assert report.verdict == "FAIL"
    by_target = {t.target: t for t in report.targets}
    for name, t in by_target.items():
        assert t.verdict == "FAIL", (name, report.table())
        assert t.worst() is not None and t.worst() > 10 * TOL, report.table()  # type: ignore[operator]
    for name in ("openvino", "rknn"):  # the toolchains that expose intermediate values
        loc = by_target[name].location
        assert loc is not None and loc.first_bad is not None, (name, report.table())
        assert loc.first_bad.key == layer, (name, loc.first_bad.key, layer)
    assert by_target["ncnn"].location is None  # pnnx renames and fuses: not localised
