"""Caffe frontend: the test nets against OpenCV DNN, single layers, and every error path."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from convert.ir import ConversionError, ModelFormatError, Options, UnsupportedOpsError, get_provenance, serde

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "models" / "caffe"))

import build_nets  # noqa: E402
from single_layers import SINGLES  # noqa: E402

from convert._proto import caffe_pb2  # noqa: E402
from convert.frontends.caffe import FRONTEND  # noqa: E402

RTOL = 1e-5  # max|ours - ref| / max|ref|
NETS = ["lenet", "lenet_v1", "resnet", "mobilenet", "vgg", "ssd", "seg"]


def _ort(model: object) -> object:
    ort = pytest.importorskip("onnxruntime")
    proto = serde.serialize_model(model)  # type: ignore[arg-type]
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])


def _opencv(paths: list[Path]) -> object:
    pytest.importorskip("cv2")
    from convert.parity.runtimes.opencv_caffe import open_runtime

    return open_runtime(paths, Options())


def _rel(ours: np.ndarray, ref: np.ndarray) -> float:
    ours = ours.reshape(ref.shape)
    return float(np.abs(ours - ref).max() / np.abs(ref).max())


@pytest.mark.opencv
@pytest.mark.parametrize("name", NETS, ids=NETS)
def test_net_matches_opencv(name: str, tmp_path: Path) -> None:
    """Caffe -> IR -> ONNX in ONNX Runtime matches OpenCV DNN on the original Caffe net."""
    paths = list(build_nets.build(name, tmp_path))
    model = FRONTEND.load(paths, Options())
    sess = _ort(model)
    cv = _opencv(paths)
    spec = cv.inputs()[0]
    x = np.random.default_rng(1).standard_normal(spec.shape).astype(np.float32)
    ref = cv.run({spec.name: x})
    ours = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {spec.name: x}), strict=True))
    assert set(ours) == set(ref)
    for key, r in ref.items():
        assert float(r.std()) > 1e-3, f"degenerate reference output {key}"
        assert _rel(ours[key], r) <= RTOL, key


def test_provenance_has_prototxt_lines(tmp_path: Path) -> None:
    proto, weights = build_nets.build("lenet", tmp_path)
    model = FRONTEND.load([proto, weights], Options())
    lines = proto.read_text().splitlines()
    for node in model.graph:
        prov = get_provenance(node)
        assert prov.file == proto.name and prov.line is not None
        assert lines[prov.line - 1].strip().startswith("layer")
        assert f'name: "{prov.layer}"' in lines[prov.line]


# ---- single layers vs OpenCV ---------------------------------------------------------------------
def _single(tmp_path: Path, shape: tuple[int, ...], add: object, seed: int = 0) -> list[Path]:
    b = build_nets.NetBuilder("single", seed)
    b.input("data", shape)
    add(b)  # type: ignore[operator]
    return list(b.save(tmp_path))


@pytest.mark.opencv
@pytest.mark.parametrize("case", list(SINGLES), ids=list(SINGLES))
def test_single_layers_match_opencv(case: str, tmp_path: Path) -> None:
    paths = _single(tmp_path, (1, 4, 10, 10), SINGLES[case])
    if case == "pool_floor":
        # OpenCV reads ceil_mode (its field 13); ours keeps it at 1013 in text only.
        pass
    model = FRONTEND.load(paths, Options())
    sess = _ort(model)
    cv = _opencv(paths)
    x = np.random.default_rng(3).standard_normal((1, 4, 10, 10)).astype(np.float32)
    ref = cv.run({"data": x})
    ours = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"data": x}), strict=True))
    for key, r in ref.items():
        assert _rel(ours[key], r) <= RTOL, key


def test_upsample_and_interp_against_numpy(tmp_path: Path) -> None:
    def add(b: build_nets.NetBuilder) -> None:
        b.layer("Upsample", "up", ["data"], ["up"], upsample_param={"scale": 2})
        b.layer("Interp", "ip", ["data"], ["ip"], interp_param={"height": 5, "width": 5})
        b.layer("Bias", "bi", ["up"], ["bi"], [np.arange(2.0)])

    paths = _single(tmp_path, (1, 2, 3, 3), add)
    sess = _ort(FRONTEND.load(paths, Options()))
    x = np.random.default_rng(0).standard_normal((1, 2, 3, 3)).astype(np.float32)
    out = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"data": x}), strict=True))
    up = x.repeat(2, axis=2).repeat(2, axis=3)
    np.testing.assert_allclose(out["bi"], up + np.arange(2.0).reshape(1, 2, 1, 1), rtol=1e-6)
    # align_corners: output sample i maps to input (i * (3 - 1) / (5 - 1)); even samples hit inputs exactly.
    np.testing.assert_allclose(out["ip"][:, :, ::2, ::2], x, rtol=1e-6, atol=1e-6)


# ---- errors ------------------------------------------------------------------------------------------
def test_syntax_error_names_line_and_column(tmp_path: Path) -> None:
    proto, weights = build_nets.build("lenet", tmp_path)
    text = proto.read_text().splitlines()
    text[5] = text[5] + " bogus_field: 3"
    proto.write_text("\n".join(text))
    with pytest.raises(ModelFormatError, match=r"lenet\.prototxt:6:\d+: prototxt syntax error.*bogus_field"):
        FRONTEND.load([proto, weights], Options())


def test_unknown_layers_listed_at_once(tmp_path: Path) -> None:
    def add(b: build_nets.NetBuilder) -> None:
        b.layer("SPP", "m", ["data"], ["m"])
        b.layer("Embed", "a", ["m"], ["a"])
        b.layer("SPP", "m2", ["a"], ["m2"])

    paths = _single(tmp_path, (1, 2, 3, 3), add)
    gaps = FRONTEND.check_support(paths, Options())
    assert [(g.op, g.count) for g in gaps] == [("SPP", 2), ("Embed", 1)]
    with pytest.raises(
        UnsupportedOpsError, match=r"2 unsupported layer types: SPP x2 \(first at single\.prototxt:\d+ 'm'\)"
    ):
        FRONTEND.load(paths, Options())


def test_unsupported_settings_listed_before_conversion(tmp_path: Path) -> None:
    def add(b: build_nets.NetBuilder) -> None:
        b.layer("Pooling", "sp", ["data"], ["sp"], pooling_param={"pool": 2, "kernel_size": 2, "stride": 2})
        b.layer("LRN", "ln", ["data"], ["ln"], lrn_param={"norm_region": 1})
        b.layer("SPP", "tl", ["data"], ["tl"])

    paths = _single(tmp_path, (1, 2, 4, 4), add)
    gaps = FRONTEND.check_support(paths, Options())
    assert [(g.op, "STOCHASTIC" in g.reason or "WITHIN" in g.reason or not g.reason) for g in gaps] == [
        ("Pooling", True),
        ("LRN", True),
        ("SPP", True),
    ]
    with pytest.raises(UnsupportedOpsError, match=r"3 unsupported layer types: Pooling \(first at single"):
        FRONTEND.load(paths, Options())


def test_missing_blob_names_layer(tmp_path: Path) -> None:
    proto, weights = build_nets.build("lenet", tmp_path)
    net = caffe_pb2.NetParameter.FromString(weights.read_bytes())
    for layer in net.layer:
        if layer.name == "conv2":
            del layer.blobs[:]
    weights.write_bytes(net.SerializeToString())
    with pytest.raises(ModelFormatError, match=r"layer 'conv2' \(Convolution, lenet\.prototxt:\d+\) has no blobs"):
        FRONTEND.load([proto, weights], Options())


def test_misshaped_blob_names_layer(tmp_path: Path) -> None:
    proto, weights = build_nets.build("lenet", tmp_path)
    text = proto.read_text().replace("num_output: 64", "num_output: 65")
    proto.write_text(text)
    with pytest.raises(ModelFormatError,
                       match=r"layer 'ip1' \(InnerProduct.*holds \[65, 256\] \(16640 values\), not 16384"):
        FRONTEND.load([proto, weights], Options())


def test_caffemodel_passed_as_prototxt(tmp_path: Path) -> None:
    _, weights = build_nets.build("lenet", tmp_path)
    with pytest.raises(ModelFormatError, match=r"not a text prototxt.*caffemodel"):
        FRONTEND.load([weights], Options())


def test_truncated_caffemodel(tmp_path: Path) -> None:
    proto, weights = build_nets.build("lenet", tmp_path)
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFormatError, match=r"not a valid caffemodel.*truncated"):
        FRONTEND.load([proto, weights], Options())


def test_bad_layer_reference_is_a_conversion_error(tmp_path: Path) -> None:
    def add(b: build_nets.NetBuilder) -> None:
        b.layer("ReLU", "r", ["nowhere"], ["r"])

    with pytest.raises(ConversionError, match=r"layer 'r' \(ReLU\).*'nowhere'"):
        FRONTEND.load(_single(tmp_path, (1, 2, 3, 3), add), Options())


def test_elementwise_layers_against_numpy(tmp_path: Path) -> None:
    def add(b: build_nets.NetBuilder) -> None:
        b.layer("Split", "sp", ["data"], ["d1", "d2"])
        b.layer("Clip", "cl", ["d1"], ["cl"], clip_param={"min": -0.5, "max": 0.7})
        b.layer("Swish", "sw", ["d2"], ["sw"], swish_param={"beta": 1.5})
        b.layer("Exp", "ex", ["d2"], ["ex"], exp_param={"base": 2.0, "scale": 0.5, "shift": 0.1})
        b.layer("AbsVal", "ab", ["d2"], ["ab"])
        b.layer("Log", "lg", ["ab"], ["lg"], log_param={"base": 10.0, "shift": 1.0})
        b.layer("Threshold", "th", ["d2"], ["th"], threshold_param={"threshold": 0.2})
        b.layer("BNLL", "bn", ["d2"], ["bn"])
        b.layer("Silence", "si", ["d1"], [])

    paths = _single(tmp_path, (1, 2, 3, 3), add)
    sess = _ort(FRONTEND.load(paths, Options()))
    x = np.random.default_rng(4).standard_normal((1, 2, 3, 3)).astype(np.float32)
    out = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"data": x}), strict=True))
    expect = {
        "cl": np.clip(x, -0.5, 0.7),
        "sw": x / (1 + np.exp(-1.5 * x)),
        "ex": 2.0 ** (0.1 + 0.5 * x),
        "lg": np.log10(np.abs(x) + 1.0),
        "th": (x > 0.2).astype(np.float32),
        "bn": np.log1p(np.exp(x)),
    }
    assert set(out) == set(expect)
    for key, ref in expect.items():
        np.testing.assert_allclose(out[key], ref, rtol=1e-5, atol=1e-6, err_msg=key)


def test_every_layer_type_is_tested() -> None:
    from convert.frontends.caffe.layers import LAYERS

    here = [
        Path(__file__),
        Path(build_nets.__file__),
        Path(build_nets.__file__).with_name("single_layers.py"),
        Path(__file__).with_name("test_caffe_real_layers.py"),
    ]
    text = "".join(p.read_text() for p in here)
    untested = [k for k in LAYERS.keys() if f'"{k}"' not in text]  # noqa: SIM118
    assert untested == []


def test_pspnet_bn_layer_against_its_formula(tmp_path: Path) -> None:
    """PSPNet's BN (no runtime here has it): slope * (x - mean) / sqrt(var + eps) + bias, in numpy."""
    import onnxruntime as ort

    rng = np.random.default_rng(9)
    c = 4
    slope, bias, mean = rng.uniform(0.5, 2, c), rng.uniform(-1, 1, c), rng.uniform(-1, 1, c)
    var = rng.uniform(0.01, 3, c)

    def add(b: build_nets.NetBuilder) -> None:
        b.layer("BN", "bn", ["data"], ["bn"], [a.reshape(1, c, 1, 1).astype(np.float32)
                                              for a in (slope, bias, mean, var)], bn_param={"eps": 1e-4})

    paths = _single(tmp_path, (1, c, 5, 6), add)
    model = FRONTEND.load(paths, Options())
    x = rng.standard_normal((1, c, 5, 6)).astype(np.float32)
    got = ort.InferenceSession(serde.serialize_model(model).SerializeToString()).run(None, {"data": x})[0]
    k = lambda a: a.reshape(1, c, 1, 1)  # noqa: E731
    ref = k(slope) * (x.astype(np.float64) - k(mean)) / np.sqrt(k(var) + 1e-4) + k(bias)
    assert float(ref.std()) > 0.1
    assert float(np.abs(got - ref).max()) <= 1e-5 * float(np.abs(ref).max())


def test_priorbox_without_clip_is_read_as_true_with_a_warning(tmp_path: Path) -> None:
    def add(b: build_nets.NetBuilder) -> None:
        b.layer("PriorBox", "pb", ["data", "data"], ["pb"], prior_box_param={"min_size": [2.0]})

    options = Options()
    model = FRONTEND.load(_single(tmp_path, (1, 2, 4, 4), add), options)
    assert any("PriorBox 'pb'" in w and "does not set clip" in w for w in options.diagnostics.warnings)
    boxes = model.graph.initializers["pb.priors"].const_value.numpy()[0, 0]
    assert boxes.min() == 0.0 and boxes.max() == 1.0  # clipped: the corner cells' boxes leave the image
