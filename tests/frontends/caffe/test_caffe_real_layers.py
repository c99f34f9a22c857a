"""Caffe layers the frontend reads, checked against real Caffe running the very net.

Each case is a small net after an input ``data`` (1, 4, 6, 5). Real Caffe (``scripts/build_caffe``)
runs it and is the reference; the converted ONNX runs in ONNX Runtime. Bound: 1e-5 of the
output's scale (exact for indices), after checking the reference has spread. The SSD fork runs
``CASES``; BVLC master runs ``BVLC_CASES``, what only it has (Clip, Swish, pooling ``round_mode``),
through the parity check, which picks it by the file's dialect.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from convert import api
from convert.parity.runtimes.caffe_runtime import RealCaffeRuntime, dialect_of, find_caffe

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "models" / "caffe"))

from build_nets import NetBuilder  # noqa: E402

SHAPE = (1, 4, 6, 5)

CASES: dict[str, Callable[[NetBuilder], None]] = {
    "tile-channels": lambda b: b.layer("Tile", "t", ["data"], ["t"], tile_param={"axis": 1, "tiles": 3}),
    "tile-width": lambda b: b.layer("Tile", "t", ["data"], ["t"], tile_param={"axis": -1, "tiles": 2}),
    "reduction-sum": lambda b: b.layer("Reduction", "r", ["data"], ["r"], reduction_param={"operation": 1, "axis": 1}),
    "reduction-asum-coeff": lambda b: b.layer("Reduction", "r", ["data"], ["r"],
                                              reduction_param={"operation": 2, "axis": 2, "coeff": 0.5}),
    "reduction-sumsq": lambda b: b.layer("Reduction", "r", ["data"], ["r"],
                                         reduction_param={"operation": 3, "axis": 3}),
    "reduction-mean-all": lambda b: b.layer("Reduction", "r", ["data"], ["r"], reduction_param={"operation": 4}),
    "argmax-axis": lambda b: b.layer("ArgMax", "a", ["data"], ["a"], argmax_param={"axis": 1}),
    "argmax-axis-max": lambda b: b.layer("ArgMax", "a", ["data"], ["a"], argmax_param={"axis": 2, "out_max_val": True}),
    "argmax-flat": lambda b: b.layer("ArgMax", "a", ["data"], ["a"], argmax_param={}),
    "argmax-flat-max": lambda b: b.layer("ArgMax", "a", ["data"], ["a"], argmax_param={"out_max_val": True}),
    "mvn": lambda b: b.layer("MVN", "m", ["data"], ["m"], mvn_param={}),
    "mvn-across": lambda b: b.layer("MVN", "m", ["data"], ["m"], mvn_param={"across_channels": True}),
    "mvn-mean-only": lambda b: b.layer("MVN", "m", ["data"], ["m"], mvn_param={"normalize_variance": False}),
    "priorbox": lambda b: b.layer("PriorBox", "p", ["data", "data"], ["p"], prior_box_param={
        "min_size": [2.0], "max_size": [4.5], "aspect_ratio": [2.0, 3.0], "flip": True, "clip": True,
        "variance": [0.1, 0.1, 0.2, 0.2]}),
    "priorbox-step": lambda b: b.layer("PriorBox", "p", ["data", "data"], ["p"], prior_box_param={
        "min_size": [30.0, 60.0], "aspect_ratio": [2.0, 0.5], "flip": False, "img_size": 300, "step": 50.0,
        "offset": 0.3, "variance": [0.1]}),
    "bias-channels": lambda b: b.layer("Bias", "bi", ["data"], ["bi"],
                                       blobs=[np.array([0.5, -1.0, 2.0, 0.25])], bias_param={"axis": 1}),
}

# BVLC master's layers and fields (not in the SSD fork)
BVLC_CASES: dict[str, Callable[[NetBuilder], None]] = {
    "clip": lambda b: b.layer("Clip", "c", ["data"], ["c"], clip_param={"min": -0.5, "max": 1.25}),
    "swish": lambda b: b.layer("Swish", "s", ["data"], ["s"], swish_param={"beta": 1.5}),
    "pool-round-floor": lambda b: b.layer("Pooling", "p", ["data"], ["p"], pooling_param={
        "pool": 0, "kernel_size": 2, "stride": 2, "round_mode": 1}),
    "pool-round-ceil-ave": lambda b: b.layer("Pooling", "p", ["data"], ["p"], pooling_param={
        "pool": 1, "kernel_size": 3, "stride": 2, "pad": 1, "round_mode": 0}),
}


@pytest.fixture(scope="module")
def caffe_dir() -> Path:
    found = find_caffe()
    if found is None:
        pytest.skip("real Caffe is not built here: run scripts/build_caffe")
    return found


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_layer_matches_real_caffe(case: str, caffe_dir: Path, tmp_path: Path) -> None:
    b = NetBuilder("net", 0)
    b.input("data", SHAPE)
    CASES[case](b)
    proto, model = b.save(tmp_path)
    x = (np.random.default_rng(4).standard_normal(SHAPE) * 2 + 0.5).astype(np.float32)
    ref = RealCaffeRuntime(proto, model, caffe_dir).run({"data": x})
    result = api.convert([proto, model], to="onnx", out=tmp_path / "net.onnx", check=False)
    sess = ort.InferenceSession(str(result.outputs[0]), providers=["CPUExecutionProvider"])
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"data": x}), strict=True))
    for name, r in ref.items():
        g = np.asarray(got[name])
        assert g.shape == r.shape, (name, g.shape, r.shape)
        scale = float(np.abs(r).max())
        assert scale > 0 and (r.size == 1 or float(r.std()) > 1e-3 * scale), f"degenerate reference {name}"
        assert float(np.abs(g - r).max()) <= 1e-5 * scale, name


@pytest.mark.parametrize("argmax_param", [{"axis": 1}, {}], ids=["axis", "flat"])
def test_argmax_ties_give_the_last_index_as_in_both_caffes(argmax_param: dict[str, int], caffe_dir: Path,
                                                           tmp_path: Path) -> None:
    """Caffe sorts (value, index) pairs largest first: on ties the last index wins (ONNX's select_last_index=1)."""
    b = NetBuilder("net", 0)
    b.input("data", SHAPE)
    b.layer("ArgMax", "a", ["data"], ["a"], argmax_param=argmax_param)
    proto, model = b.save(tmp_path)
    x = np.random.default_rng(4).standard_normal(SHAPE).astype(np.float32)
    x[0, :, :3] = 2.0  # every channel ties at the maximum on three rows (and the whole item ties for the flat form)
    x[0, 1:3, 3:] = 5.0
    result = api.convert([proto, model], to="onnx", out=tmp_path / "net.onnx", check=False)
    sess = ort.InferenceSession(str(result.outputs[0]), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"data": x})[0]
    bvlc = find_caffe("bvlc")
    for where, dialect in ((caffe_dir, "ssd"), *(((bvlc, "bvlc"),) if bvlc is not None else ())):
        ref = RealCaffeRuntime(proto, model, where, dialect).run({"data": x})["a"]
        np.testing.assert_array_equal(got, ref)
    assert float(got.max()) > 0


def _schema_has_resize() -> bool:
    from convert._proto import caffe_pb2

    return "resize_param" in caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_name


RESIZES = {
    "up-odd": {"height": 7, "width": 9},
    "up-twice": {"height": 12, "width": 10},
    "down": {"height": 4, "width": 3},
    "up-and-down": {"height": 3, "width": 11},
    "pyramid": {"is_pyramid_test": True, "out_height_scale": 1.5, "out_width_scale": 0.7},
}


@pytest.mark.xfail(condition=not _schema_has_resize(), strict=True,
                   reason="convert/_proto/caffe.proto has no resize_param (field 251) yet")
@pytest.mark.parametrize("case", list(RESIZES), ids=list(RESIZES))
def test_fork_resize_matches_real_caffe(case: str, caffe_dir: Path, tmp_path: Path) -> None:
    """The SSD fork's Resize (bilinear at o * in / out, the pixel past the edge taken as 0) -> ONNX."""
    b = NetBuilder("net", 0)
    b.input("data", SHAPE)
    b.layer("Resize", "r", ["data"], ["r"], resize_param=RESIZES[case])
    proto, model = b.save(tmp_path)
    x = (np.random.default_rng(4).standard_normal(SHAPE) * 2 + 0.5).astype(np.float32)
    ref = RealCaffeRuntime(proto, model, caffe_dir).run({"data": x})["r"]
    result = api.convert([proto, model], to="onnx", out=tmp_path / "net.onnx", check=False)
    sess = ort.InferenceSession(str(result.outputs[0]), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"data": x})[0]
    scale = float(np.abs(ref).max())
    assert got.shape == ref.shape and float(ref.std()) > 1e-3 * scale
    assert float(np.abs(got - ref).max()) <= 1e-5 * scale


@pytest.mark.parametrize(("case", "flavor"), [("up-odd", "ssd"), ("down", "bvlc"), ("up-and-down", "ssd"),
                                              ("pyramid", "bvlc")])
def test_fork_resize_round_trips_to_caffe(case: str, flavor: str, caffe_dir: Path, tmp_path: Path) -> None:
    """Caffe -> Caffe keeps the SSD fork's Resize: written as interpolation matrices (InnerProduct,
    with Permute in ssd or Reshape in bvlc, and a zero edge where an axis grows), which the fork,
    BVLC master and OpenCV all read; the fork's own layer is not written, as OpenCV 4.x cannot
    create it (it asks for an ``interpolation`` the fork's schema lacks). Real Caffe of the flavour
    runs the output, the fork runs the source."""
    if flavor == "bvlc" and find_caffe("bvlc") is None:
        pytest.skip("BVLC master Caffe is not built here: run scripts/build_caffe")
    b = NetBuilder("net", 0)
    b.input("data", SHAPE)
    b.layer("Resize", "r", ["data"], ["r"], resize_param=RESIZES[case])
    proto, model = b.save(tmp_path)
    x = (np.random.default_rng(5).standard_normal(SHAPE) * 2 + 0.5).astype(np.float32)
    ref = RealCaffeRuntime(proto, model, caffe_dir).run({"data": x})["r"]
    result = api.convert([proto, model], to="caffe", out=tmp_path / "out", check=False, caffe_flavor=flavor)
    out_proto, out_model = (str(p) for p in result.outputs)
    got = RealCaffeRuntime(Path(out_proto), Path(out_model), find_caffe(flavor) or caffe_dir, dialect=flavor).run(
        {"data": x})["r"]
    assert 'type: "Resize"' not in Path(out_proto).read_text()
    scale = float(np.abs(ref).max())
    assert got.shape == ref.shape and float(ref.std()) > 1e-3 * scale
    assert float(np.abs(got - ref).max()) <= 1e-5 * scale, float(np.abs(got - ref).max()) / scale

def _one_line_per_layer(proto: Path) -> None:
    """Rewrite ``proto`` with each layer on one line (``layer { name: ... type: "Clip" ... }``), as
    many tools write: the dialect must be read from the net, not from the line layout."""
    from google.protobuf import text_format

    from convert._proto import caffe_pb2

    net = caffe_pb2.NetParameter()
    text_format.Parse(proto.read_text(), net)
    layers = list(net.layer)
    del net.layer[:]
    head = text_format.MessageToString(net)
    proto.write_text(head + "".join(f"layer {{ {text_format.MessageToString(ly, as_one_line=True)} }}\n"
                                    for ly in layers))


@pytest.mark.parametrize("layout", ["as written", "one line per layer"])
@pytest.mark.parametrize("case", list(BVLC_CASES), ids=list(BVLC_CASES))
def test_bvlc_layer_matches_bvlc_master(case: str, layout: str, caffe_dir: Path, tmp_path: Path) -> None:
    if find_caffe("bvlc") is None:
        pytest.skip("BVLC master Caffe is not built here: run scripts/build_caffe")
    b = NetBuilder("net", 0)
    b.input("data", SHAPE)
    BVLC_CASES[case](b)
    proto, model = b.save(tmp_path)
    if layout == "one line per layer":
        _one_line_per_layer(proto)
        assert "\n  type:" not in proto.read_text()
    assert dialect_of(proto) == "bvlc"
    result = api.convert([proto, model], to="onnx", out=tmp_path / "net.onnx", seed=4)
    report = result.report
    assert report is not None and report.source_runtime == "Caffe (BVLC master 99bd997)"
    assert report.passed and not report.notes, report.table()
    x = (np.random.default_rng(4).standard_normal(SHAPE) * 2 + 0.5).astype(np.float32)
    ref = RealCaffeRuntime(proto, model, find_caffe("bvlc"), "bvlc").run({"data": x})  # type: ignore[arg-type]
    sess = ort.InferenceSession(str(result.outputs[0]), providers=["CPUExecutionProvider"])
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"data": x}), strict=True))
    for name, r in ref.items():
        assert got[name].shape == r.shape, (name, got[name].shape, r.shape)
        scale = float(np.abs(r).max())
        assert float(r.std()) > 1e-3 * scale, f"degenerate reference {name}"
        assert float(np.abs(got[name] - r).max()) <= 1e-5 * scale, name


def _ssd_head(b: NetBuilder, code_type: int, keep_top_k: int) -> None:
    """Two feature maps, each with location / confidence convolutions and a PriorBox, then
    DetectionOutput, as SSD deploy files wire them (Permute, Flatten, Concat, Softmax)."""
    classes = 4
    b.input("data", (1, 3, 24, 24))
    b.conv("f1", "data", "f1", 3, 8, 3, s=2, p=1)  # 12x12
    b.conv("f2", "f1", "f2", 8, 8, 3, s=2, p=1)  # 6x6
    locs, confs, priors = [], [], []
    for name, size, mn, mx in (("f1", 12, 5.0, 11.0), ("f2", 6, 11.0, 18.0)):
        n_priors = 6  # ratios 1, 2, 1/2, 3, 1/3 and the max-size box
        b.conv(f"{name}_loc", name, f"{name}_loc", 8, n_priors * 4, 3, p=1)
        b.conv(f"{name}_conf", name, f"{name}_conf", 8, n_priors * classes, 3, p=1)
        for kind, out in (("loc", locs), ("conf", confs)):
            b.layer("Permute", f"{name}_{kind}_perm", [f"{name}_{kind}"], [f"{name}_{kind}_perm"],
                    permute_param={"order": [0, 2, 3, 1]})
            b.layer("Flatten", f"{name}_{kind}_flat", [f"{name}_{kind}_perm"], [f"{name}_{kind}_flat"])
            out.append(f"{name}_{kind}_flat")
        b.layer("PriorBox", f"{name}_prior", [name, "data"], [f"{name}_prior"], prior_box_param={
            "min_size": [mn], "max_size": [mx], "aspect_ratio": [2.0, 3.0], "flip": True, "clip": False,
            "variance": [0.1, 0.1, 0.2, 0.2], "step": 24.0 / size})
        priors.append(f"{name}_prior")
    b.layer("Concat", "loc", locs, ["loc"], concat_param={"axis": 1})
    b.layer("Concat", "conf", confs, ["conf"], concat_param={"axis": 1})
    b.layer("Concat", "priors", priors, ["priors"], concat_param={"axis": 2})
    b.layer("Reshape", "conf_r", ["conf"], ["conf_r"], reshape_param={"shape": {"dim": [0, -1, classes]}})
    b.layer("Softmax", "conf_s", ["conf_r"], ["conf_s"], softmax_param={"axis": 2})
    b.layer("Flatten", "conf_f", ["conf_s"], ["conf_f"])
    b.layer("DetectionOutput", "det", ["loc", "conf_f", "priors"], ["det"], detection_output_param={
        "num_classes": classes, "share_location": True, "background_label_id": 0,
        "nms_param": {"nms_threshold": 0.45, "top_k": 40}, "code_type": code_type, "keep_top_k": keep_top_k,
        "confidence_threshold": 0.3})


@pytest.mark.parametrize(("code_type", "keep_top_k"), [(2, 25), (2, -1), (1, 25)],
                         ids=["center-size-keep25", "center-size-all", "corner-keep25"])
def test_detection_output_matches_real_caffe(code_type: int, keep_top_k: int, caffe_dir: Path,
                                             tmp_path: Path) -> None:
    """SSD's DetectionOutput: the same detections, in the same order, as real Caffe's layer."""
    b = NetBuilder("ssd", 0)
    _ssd_head(b, code_type, keep_top_k)
    proto, model = b.save(tmp_path)
    x = (np.random.default_rng(6).standard_normal((1, 3, 24, 24)) * 2).astype(np.float32)
    ref = RealCaffeRuntime(proto, model, caffe_dir).run({"data": x})["det"]
    result = api.convert([proto, model], to="onnx", out=tmp_path / "ssd.onnx", check=False)
    sess = ort.InferenceSession(str(result.outputs[0]), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"data": x})[0]
    assert ref.shape[2] >= 10, f"too few detections to test ({ref.shape[2]})"  # the input gives real work
    if keep_top_k > 0:
        assert ref.shape[2] == keep_top_k  # more candidates than kept: the cut is exercised
    assert got.shape == ref.shape
    np.testing.assert_array_equal(got[..., :2], ref[..., :2])  # image id, label
    assert float(np.abs(got[..., 2:] - ref[..., 2:]).max()) <= 1e-5
