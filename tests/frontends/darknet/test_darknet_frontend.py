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
from convert.frontends.darknet.cfg import parse_cfg
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
    path, _ = convert_to_onnx(cfg, weights, tmp_path / "d.onnx", decode=True)
    x = seeded_input((1, 3, 160, 160))
    got = run_onnx(path, x)["detections"][0].astype(np.float64)
    # Reference: pjreddie's box formulas (yolo_layer.c / region_layer.c), written in this file,
    # applied to each head's input as libdarknet computes it.
    body = parse_cfg(cfg)[1:]
    layers = DarknetLib(cfg, weights, Options()).all_layer_outputs({"data": x})
    ref = np.concatenate([(_yolo_boxes if s.type == "yolo" else _region_boxes)(layers[i - 1][0], s.options, 160, 160)
                          for i, s in enumerate(body) if s.type in ("yolo", "region")])
    assert got.shape == ref.shape and ref[:, :4].std() > 1.0
    err = np.abs(got - ref).max(axis=0)
    assert err[:4].max() <= 1e-4 * np.abs(ref[:, :4]).max(), err[:4]
    assert err[4:].max() <= 1e-5, err[4:].max()


def test_decode_nodes_name_their_head(tmp_path: Path) -> None:
    """Each head's decoding is named and traced after that head's layer (--locate, error messages)."""
    src = Path(__file__).resolve().parents[3] / "models" / "darknet" / "yolov4-tiny.cfg"
    model = FRONTEND.load([src], Options(extra={"random_weights": True, "decode": True}))
    heads = {i for i, s in enumerate(parse_cfg(src)[1:]) if s.type == "yolo"}
    decoded = {}
    for node in model.graph:
        if node.name.startswith("decode_"):
            decoded.setdefault(int(node.name.split("_")[1]), set()).add(node.metadata_props["convert:source_layer"])
    assert len(heads) == 2 and set(decoded) == heads
    assert all(layers == {str(i)} for i, layers in decoded.items()), decoded


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


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


def _yolo_boxes(head_in: np.ndarray, options: dict[str, str], net_w: int, net_h: int) -> np.ndarray:
    """Decode one [yolo] head as AlexeyAB's yolo_layer.c does, written here independently of the product.

    Rows are anchor-major (anchor, row, column): x, y, w, h in input pixels, objectness, class scores.
    With ``new_coords=1`` the conv before the head already applied the logistic: x, y are only
    scaled, w = (2 t)^2 anchor; otherwise x, y, objectness and classes take the logistic, w = e^t anchor.
    """
    mask = [int(v) for v in options["mask"].split(",")]
    anchors = np.array([float(v) for v in options["anchors"].split(",")]).reshape(-1, 2)
    classes = int(options["classes"])
    sxy = float(options.get("scale_x_y", "1"))
    new = options.get("new_coords", "0") == "1"
    _, h, w = head_in.shape
    jj, ii = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    rows = []
    for a, m in enumerate(mask):
        t = head_in[a * (5 + classes):(a + 1) * (5 + classes)].astype(np.float64)
        act = t if new else np.concatenate([_sigmoid(t[:2]), t[2:4], _sigmoid(t[4:])])
        x = (ii + act[0] * sxy - 0.5 * (sxy - 1)) / w * net_w
        y = (jj + act[1] * sxy - 0.5 * (sxy - 1)) / h * net_h
        bw = (act[2] ** 2 * 4 if new else np.exp(act[2])) * anchors[m, 0]
        bh = (act[3] ** 2 * 4 if new else np.exp(act[3])) * anchors[m, 1]
        rows.append(np.stack([x, y, bw, bh, *act[4:]]).reshape(5 + classes, -1).T)
    return np.concatenate(rows)


def _region_boxes(head_in: np.ndarray, options: dict[str, str], net_w: int, net_h: int) -> np.ndarray:
    """Decode one [region] head as pjreddie's region_layer.c does (anchors in grid cells, softmax classes)."""
    anchors = np.array([float(v) for v in options["anchors"].split(",")]).reshape(-1, 2)
    classes, num = int(options["classes"]), int(options["num"])
    _, h, w = head_in.shape
    jj, ii = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    rows = []
    for a in range(num):
        t = head_in[a * (5 + classes):(a + 1) * (5 + classes)].astype(np.float64)
        e = np.exp(t[5:] - t[5:].max(axis=0))
        rows.append(np.stack([(ii + _sigmoid(t[0])) / w * net_w, (jj + _sigmoid(t[1])) / h * net_h,
                              np.exp(t[2]) * anchors[a, 0] / w * net_w, np.exp(t[3]) * anchors[a, 1] / h * net_h,
                              _sigmoid(t[4]), *(e / e.sum(axis=0))]).reshape(5 + classes, -1).T)
    return np.concatenate(rows)


@pytest.mark.opencv
@pytest.mark.parametrize("name", ["yolov4-tiny.cfg", "yolov4-csp.cfg"])  # scale_x_y; new_coords
def test_decode_alexeyab_heads(name: str, tmp_path: Path) -> None:
    """--decode against AlexeyAB's box formulas applied to the heads' inputs as OpenCV computes them."""
    pytest.importorskip("cv2")
    from darknet_helpers import ALEXEYAB_CFGS

    src = ALEXEYAB_CFGS / name
    cfg = sized_cfg(src, tmp_path, 96)
    weights = write_random_weights(cfg, tmp_path / "w.weights")
    path, _ = convert_to_onnx(cfg, weights, tmp_path / "d.onnx", decode=True)
    x = seeded_input((1, 3, 96, 96))
    got = run_onnx(path, x)["detections"][0].astype(np.float64)
    body = parse_cfg(cfg)[1:]
    layers = OpenCVDarknet(cfg, weights, Options()).all_layer_outputs({"data": x})
    ref = np.concatenate([_yolo_boxes(layers[i - 1][0], s.options, 96, 96)
                          for i, s in enumerate(body) if s.type == "yolo"])
    assert got.shape == ref.shape and ref[:, :4].std() > 1.0
    err = np.abs(got - ref).max(axis=0)
    assert err[:4].max() <= 1e-4 * np.abs(ref[:, :4]).max(), err[:4]  # boxes, in pixels
    # objectness and class scores, in [0, 1]: OpenCV's and ONNX Runtime's convolutions differ by ~1e-5
    assert err[4:].max() <= 5e-5, err[4:].max()
    if name == "yolov4-tiny.cfg":
        # OpenCV's own [yolo] decoding (boxes relative to the input, scores = objectness x class
        # probability, zeroed under 0.2), matched row by row after sorting by centre.
        import cv2

        net = cv2.dnn.readNetFromDarknet(str(cfg), str(weights))
        net.setInput(x)
        cv = np.concatenate(net.forward(net.getUnconnectedOutLayersNames())).astype(np.float64)
        ours = got.copy()
        ours[:, :4] /= 96
        ours[:, 5:] *= ours[:, 4:5]
        ours, cv = (a[np.lexsort((a[:, 1], a[:, 0]))] for a in (ours, cv))
        assert np.abs(ours[:, :5] - cv[:, :5]).max() <= 1e-4 * np.abs(cv[:, :5]).max()
        kept = cv[:, 5:] > 0
        assert kept.mean() > 0.3 and np.abs(ours[:, 5:][kept] - cv[:, 5:][kept]).max() <= 5e-5
