"""The Darknet frontend's contract: sniffing, support table, options, decoding, the public route."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from darknet_helpers import (
    SYSTEM_CFG,
    compare,
    convert_to_onnx,
    needs_libdarknet,
    run_onnx,
    seeded_input,
    sized_cfg,
    write_cfg,
)

import convert
from convert.frontends.darknet import FRONTEND
from convert.frontends.darknet.layers import LAYERS
from convert.frontends.darknet.random_weights import write_random_weights
from convert.ir import Options
from convert.parity.runtimes.darknet import DarknetLib, OpenCVDarknet

NET = "[net]\nbatch=64\nchannels=3\nheight=32\nwidth=32\n"
YOLO = ("[convolutional]\nfilters=14\nsize=1\nactivation=linear\n"
        "[yolo]\nmask=0,1\nanchors=4,6,9,12,20,16\nclasses=2\nnum=3\n")


def test_sniff_and_spec(tmp_path: Path) -> None:
    cfg = write_cfg(tmp_path, "# a comment\n" + NET + YOLO, "model.txt")
    assert FRONTEND.sniff(cfg)
    binary = tmp_path / "x.bin"
    binary.write_bytes(b"\0\1\2\3")
    assert not FRONTEND.sniff(binary)
    flags = {o.flag for o in FRONTEND.options}
    assert {"--random-weights", "--decode", "--allow-trailing-bytes", "--darknet-lineage"} <= flags
    ops = "\n".join(row.op for row in FRONTEND.ops())
    for key in LAYERS.keys():  # noqa: SIM118 (a Registry, not a dict)
        assert f"[{key}]" in ops


def test_cfg_syntax_as_darknet_reads_it(tmp_path: Path) -> None:
    """Whitespace anywhere, ';' and '#' comments, a trailing '#' after a value, repeated keys (first wins)."""
    text = ("[net]\n  width = 32 \nheight=32\nchannels=3\n; comment\n\n[convolutional]\nfilters = 4 # four\n"
            "filters=9\nsize=3\npad=1\nactivation = leaky\n")
    model = FRONTEND.load([write_cfg(tmp_path, text)], Options(extra={"random_weights": True}))
    (out,) = model.graph.outputs
    assert out.name == "convolutional_0"
    w = model.graph.initializers["convolutional_0.weight"].const_value
    assert tuple(w.shape) == (4, 3, 3, 3)


def test_input_shape_override_and_dynamic_batch(tmp_path: Path) -> None:
    cfg = write_cfg(tmp_path, NET + YOLO)
    options = Options(input_shapes={"data": (1, 3, 64, 48)}, dynamic_batch=True, extra={"random_weights": True})
    model = FRONTEND.load([cfg], options)
    (inp,) = model.graph.inputs
    assert [str(d) for d in inp.shape] == ["N", "3", "64", "48"]
    from convert.exporters.onnx import EXPORTER
    from convert.ir import passes

    passes.standard_pipeline(validate=True)(model)
    EXPORTER.save(model, tmp_path / "d.onnx", Options(dynamic_batch=True))
    out = run_onnx(tmp_path / "d.onnx", seeded_input((2, 3, 64, 48)))
    assert out["yolo_1"].shape == (2, 14, 64, 48)


@needs_libdarknet
@pytest.mark.darknet
@pytest.mark.parametrize("name", ["yolov3-tiny.cfg", "yolov2-tiny.cfg"])
def test_decode_matches_darknet_boxes(name: str, tmp_path: Path) -> None:
    src = SYSTEM_CFG / name
    if not src.is_file():
        pytest.skip(f"{src} is not installed")
    cfg = sized_cfg(src, tmp_path, 160)
    weights = write_random_weights(cfg, tmp_path / "w.weights")
    path, options = convert_to_onnx(cfg, weights, tmp_path / "d.onnx", decode=True)
    x = seeded_input((1, 3, 160, 160))
    got = run_onnx(path, x)
    rt = DarknetLib(cfg, weights, options)
    ref = rt.run({"data": x})
    assert list(got) == ["detections"] == list(rt.outputs())
    compare(ref, got, tol=1e-4)
    # Independent of the runtime's decoder: the first box of the first head, by Darknet's formula.
    heads = DarknetLib(cfg, weights, Options()).run({"data": x})
    first_name = next(iter(heads))
    head = heads[first_name]
    sec = rt.plan.sections[1 + int(first_name.split("_")[1])]
    n, w = len(sec.ints("mask", [0, 1, 2, 3, 4])), head.shape[3]
    anchors = np.array(sec.floats("anchors"), np.float32).reshape(-1, 2)
    anchor = anchors[sec.ints("mask")[0]] if sec.type == "yolo" else anchors[0] * 160 / w
    box = got["detections"][0, 0]
    assert box[0] == pytest.approx(head[0, 0, 0, 0] / w * 160, rel=1e-4)
    assert box[2] == pytest.approx(np.exp(head[0, 2, 0, 0]) * anchor[0], rel=1e-3)
    assert got["detections"].shape[1] == sum(
        (len(s.ints("mask")) if s.type == "yolo" else s.int("num")) * o.shape[2] * o.shape[3]
        for s, o in ((rt.plan.sections[1 + int(k.split("_")[1])], v) for k, v in heads.items())
    )
    assert n > 0


def test_decode_without_heads_warns(tmp_path: Path) -> None:
    cfg = write_cfg(tmp_path, NET + "[convolutional]\nfilters=4\nsize=1\nactivation=linear\n")
    options = Options(extra={"random_weights": True, "decode": True})
    FRONTEND.load([cfg], options)
    assert any("--decode" in w for w in options.diagnostics.warnings)


def test_runtime_outputs_follow_the_graph(tmp_path: Path) -> None:
    pytest.importorskip("cv2")
    cfg = write_cfg(tmp_path, NET.replace("height=32", "height=64") + YOLO + "[route]\nlayers=-2\n" + YOLO)
    weights = write_random_weights(cfg, tmp_path / "w.weights")
    model = FRONTEND.load([cfg, weights], Options())
    rt = OpenCVDarknet(cfg, weights, Options())
    assert [o.name for o in model.graph.outputs] == list(rt.outputs()) == ["yolo_1", "yolo_4"]


@needs_libdarknet
@pytest.mark.darknet
def test_public_convert_runs_the_parity_check(tmp_path: Path) -> None:
    cfg = sized_cfg(SYSTEM_CFG / "yolov3-tiny.cfg", tmp_path, 96)
    weights = write_random_weights(cfg, tmp_path / "w.weights")
    result = convert.convert([cfg, weights], to="onnx", out=tmp_path / "y.onnx")
    assert result.report is not None and result.report.passed
    report = convert.verify([cfg, weights], [tmp_path / "y.onnx"], format="darknet", to="onnx")
    assert report.passed


@needs_libdarknet
@pytest.mark.darknet
def test_input_shape_override_reaches_libdarknet(tmp_path: Path) -> None:
    """--input-shape resizes the cfg's network in libdarknet too (resize_network)."""
    src = SYSTEM_CFG / "yolov3-tiny.cfg"
    if not src.is_file():
        pytest.skip(f"{src} is not installed")
    weights = write_random_weights(src, tmp_path / "w.weights")
    options = Options(input_shapes={"data": (1, 3, 128, 160)})
    model = FRONTEND.load([src, weights], options)
    from convert.exporters.onnx import EXPORTER
    from convert.ir import passes

    passes.standard_pipeline(validate=True)(model)
    EXPORTER.save(model, tmp_path / "y.onnx", Options())
    x = seeded_input((1, 3, 128, 160))
    got = run_onnx(tmp_path / "y.onnx", x)
    ref = DarknetLib(src, weights, options).run({"data": x})
    assert got["yolo_16"].shape == (1, 255, 4, 5)
    compare(ref, got)


@pytest.mark.opencv
@pytest.mark.parametrize("name", ["yolov4-tiny.cfg", "yolov4-csp.cfg"])  # scale_x_y; new_coords
def test_decode_alexeyab_heads(name: str, tmp_path: Path) -> None:
    pytest.importorskip("cv2")
    from darknet_helpers import ALEXEYAB_CFGS

    src = ALEXEYAB_CFGS / name
    if not src.is_file():
        pytest.skip(f"{src} is absent")
    cfg = sized_cfg(src, tmp_path, 96)
    weights = write_random_weights(cfg, tmp_path / "w.weights")
    path, options = convert_to_onnx(cfg, weights, tmp_path / "d.onnx", decode=True)
    x = seeded_input((1, 3, 96, 96))
    compare(OpenCVDarknet(cfg, weights, options).run({"data": x}), run_onnx(path, x), tol=1e-3)
