"""`convert check --locate`: the first source layer the converted model gets wrong, on every route.

Each test converts a real model, scales one weight tensor of one chosen layer of the *converted*
files by 1.02 (a 2% error a buggy converter could make), and checks that the localisation names
that layer, found by comparing every layer's output in the source's own runtime (libdarknet or
OpenCV's Darknet importer, real Caffe or OpenCV's Caffe importer, torch.fx running the captured
program, Paddle Inference, ONNX Runtime) with the converted model's in ONNX Runtime or the Caffe
runtime. The unperturbed conversion must
localise nothing: every compared layer within the tolerance.

A Conv with its BatchNorm folded in computes the BatchNorm layer's output, so a perturbed Conv
weight is reported at the BatchNorm layer (the Conv alone has no counterpart).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from convert import api
from convert._proto import caffe_pb2

REPO = Path(__file__).resolve().parents[2]
MIN_LAYERS = 10  # each model below has more comparable layers than this


def _scale_onnx_weight(src: Path, dst: Path, layer: str) -> str:
    """Write ``src`` to ``dst`` with the weight of the Conv/Gemm node of source layer ``layer`` x 1.02."""
    model = onnx.load(str(src))
    weight = ""
    for node in model.graph.node:
        meta = {p.key: p.value for p in node.metadata_props}
        if node.op_type in ("Conv", "Gemm") and (meta.get("convert:source_layer") or node.name) == layer:
            weight = node.input[1]
    assert weight, f"no Conv/Gemm node of layer {layer!r} in {src}"
    for init in model.graph.initializer:
        if init.name == weight:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(1.02), weight))
    onnx.save(model, str(dst))
    return weight


def _scale_caffe_weight(model_path: Path, layer: str) -> None:
    """Scale the first blob of Caffe layer ``layer`` in the caffemodel by 1.02, in place."""
    net = caffe_pb2.NetParameter()
    net.ParseFromString(model_path.read_bytes())
    hits = [lp for lp in net.layer if lp.name == layer]
    assert hits and hits[0].blobs, f"no layer {layer!r} with weights in {model_path}"
    blob = hits[0].blobs[0]
    blob.data[:] = (np.asarray(blob.data, dtype=np.float32) * np.float32(1.02)).tolist()
    model_path.write_bytes(net.SerializeToString())


def _conv_layer_of(prototxt: Path, key: str) -> str:
    """Return the name of the Convolution layer written for source layer ``key`` (from its comment)."""
    text = prototxt.read_text()
    pattern = re.compile(r'# from layer ' + re.escape(json.dumps(key)) + r'[^\n]*\nlayer \{\n  name: "([^"]+)"\n'
                         r'  type: "Convolution"')
    m = pattern.search(text)
    assert m, f"no Convolution written for layer {key!r}"
    return m.group(1)


def _locate(src: list[Path], dst: list[Path], **kw: object) -> api.ParityReport:
    report = api.verify(src, dst, locate=True, **kw)
    assert report.location is not None and not report.location.unavailable, report.location
    return report


def _assert_clean(report: api.ParityReport) -> None:
    loc = report.location
    assert loc is not None
    assert report.passed, report.table()
    assert loc.compared >= MIN_LAYERS, loc.lines()
    assert loc.first_bad is None, loc.lines()
    assert max(c.error for c in loc.checks) <= 1e-4


def _assert_named(report: api.ParityReport, key: str, where: str) -> None:
    loc = report.location
    assert loc is not None and loc.first_bad is not None, report.table()
    assert loc.first_bad.key == key, loc.lines()
    assert where in loc.first_bad.where, loc.lines()
    # the perturbation is 2% of one tensor: a layer error between 0.1% and 10% of its scale
    assert 1e-3 < loc.first_bad.error < 0.1, loc.lines()
    before = [c for c in loc.checks[: loc.checks.index(loc.first_bad)]]
    assert before and all(c.error <= 1e-4 for c in before)


# -- Darknet ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    tmp = tmp_path_factory.mktemp("tiny")
    cfg = tmp / "yolov4-tiny.cfg"
    cfg.write_text((REPO / "models/darknet/yolov4-tiny.cfg").read_text())
    weights = tmp / "yolov4-tiny.weights"
    subprocess.run([sys.executable, "-m", "convert", "random-weights", "darknet", str(cfg), "-o", str(weights)],
                   check=True, capture_output=True, timeout=120)
    return tmp, cfg, weights


def test_darknet_onnx_names_the_perturbed_cfg_layer(tiny: tuple[Path, Path, Path]) -> None:
    tmp, cfg, weights = tiny
    good = tmp / "t.onnx"
    api.convert([cfg, weights], to="onnx", out=good, check=False)
    _assert_clean(_locate([cfg, weights], [good]))
    _scale_onnx_weight(good, tmp / "bad.onnx", "4")
    _assert_named(_locate([cfg, weights], [tmp / "bad.onnx"]), "4", "yolov4-tiny.cfg:63 [convolutional]")


def test_darknet_caffe_names_the_perturbed_cfg_layer(tiny: tuple[Path, Path, Path]) -> None:
    tmp, cfg, weights = tiny
    result = api.convert([cfg, weights], to="caffe", out=tmp / "caffe" / "t", check=False)
    proto, model = result.outputs
    _assert_clean(_locate([cfg, weights], [proto, model]))
    _scale_caffe_weight(model, _conv_layer_of(proto, "10"))
    _assert_named(_locate([cfg, weights], [proto, model]), "10", "[convolutional]")


# -- Caffe ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def resnet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    sys.path.insert(0, str(REPO / "models/caffe"))
    try:
        from build_nets import build
    finally:
        sys.path.pop(0)
    tmp = tmp_path_factory.mktemp("caffe")
    proto, model = build("resnet", tmp)
    return tmp, proto, model


def test_caffe_onnx_names_the_folded_batchnorm_of_the_perturbed_conv(resnet: tuple[Path, Path, Path]) -> None:
    tmp, proto, model = resnet
    good = tmp / "r.onnx"
    api.convert([proto, model], to="onnx", out=good, check=False)
    _assert_clean(_locate([proto, model], [good]))
    _scale_onnx_weight(good, tmp / "bad.onnx", "res0b")  # the Conv now computes Conv + res0b_bn
    _assert_named(_locate([proto, model], [tmp / "bad.onnx"]), "res0b_bn", "resnet.prototxt:89 [Convolution] 'res0b'")


def test_caffe_caffe_names_the_perturbed_layer(resnet: tuple[Path, Path, Path]) -> None:
    tmp, proto, model = resnet
    out_proto, out_model = api.convert([proto, model], to="caffe", out=tmp / "cc" / "r", check=False,
                                       fold_batchnorm=False).outputs
    _assert_clean(_locate([proto, model], [out_proto, out_model]))
    _scale_caffe_weight(out_model, "res1a")
    _assert_named(_locate([proto, model], [out_proto, out_model]), "res1a", "[Convolution] 'res1a'")


# -- ONNX -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def plain_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A hand-written ONNX CNN with named nodes and no provenance: 6 convs, ReLU, a pooled Gemm."""
    rng = np.random.default_rng(3)
    nodes, inits, prev, c = [], [], "x", 3
    for i, cout in enumerate((8, 8, 16, 16, 16, 16)):
        w = (rng.standard_normal((cout, c, 3, 3)) * np.sqrt(2 / (9 * c))).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(rng.standard_normal(cout).astype(
            np.float32) * 0.1, f"b{i}")]
        nodes.append(helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}", pads=[1] * 4))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"))
        prev, c = f"r{i}", cout
    nodes.append(helper.make_node("GlobalAveragePool", [prev], ["g"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["g"], ["f"], name="flat"))
    inits.append(numpy_helper.from_array(rng.standard_normal((10, c)).astype(np.float32), "fw"))
    nodes.append(helper.make_node("Gemm", ["f", "fw"], ["y"], name="fc", transB=1))
    graph = helper.make_graph(nodes, "plain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("onnx") / "plain.onnx"
    onnx.save(model, str(path))
    return path


def test_onnx_onnx_names_the_perturbed_node(plain_onnx: Path, tmp_path: Path) -> None:
    good = tmp_path / "o.onnx"
    api.convert([plain_onnx], to="onnx", out=good, check=False)
    _assert_clean(_locate([plain_onnx], [good]))
    _scale_onnx_weight(good, tmp_path / "bad.onnx", "conv3")
    _assert_named(_locate([plain_onnx], [tmp_path / "bad.onnx"]), "conv3", "plain.onnx [Conv] 'conv3'")


def test_onnx_caffe_names_the_perturbed_node(plain_onnx: Path, tmp_path: Path) -> None:
    proto, model = api.convert([plain_onnx], to="caffe", out=tmp_path / "c" / "p", check=False).outputs
    _assert_clean(_locate([plain_onnx], [proto, model]))
    _scale_caffe_weight(model, _conv_layer_of(proto, "conv2"))
    _assert_named(_locate([plain_onnx], [proto, model]), "conv2", "[Conv] 'conv2'")


# -- PyTorch ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def torch_resnet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(REPO / "models/pytorch"))
    try:
        from nets import build
    finally:
        sys.path.pop(0)
    model = build("resnet")
    path = tmp_path_factory.mktemp("torch") / "resnet.pt2"
    torch.export.save(torch.export.export(model, (torch.randn(1, 3, 64, 64),)), str(path))
    return path


def test_pytorch_onnx_names_the_perturbed_module(torch_resnet: Path, tmp_path: Path) -> None:
    good = tmp_path / "r.onnx"
    api.convert([torch_resnet], to="onnx", out=good, check=False)
    _assert_clean(_locate([torch_resnet], [good]))
    _scale_onnx_weight(good, tmp_path / "bad.onnx", "layers.1.conv2.0")  # Conv of Sequential(conv, bn, relu)
    _assert_named(_locate([torch_resnet], [tmp_path / "bad.onnx"]), "layers.1.conv2.1", "'layers.1.conv2.1'")


def test_pytorch_caffe_names_the_perturbed_module(torch_resnet: Path, tmp_path: Path) -> None:
    proto, model = api.convert([torch_resnet], to="caffe", out=tmp_path / "c" / "r", check=False,
                               fold_batchnorm=False).outputs
    _assert_clean(_locate([torch_resnet], [proto, model]))
    _scale_caffe_weight(model, _conv_layer_of(proto, "layers.2.conv1.0"))
    _assert_named(_locate([torch_resnet], [proto, model]), "layers.2.conv1.0", "'layers.2.conv1.0'")


# -- the CLI ----------------------------------------------------------------------------------------
def test_cli_localises_when_parity_fails_and_reports_it(plain_onnx: Path, tmp_path: Path) -> None:
    good = tmp_path / "o.onnx"
    api.convert([plain_onnx], to="onnx", out=good, check=False)
    _scale_onnx_weight(good, tmp_path / "bad.onnx", "conv1")
    report = tmp_path / "r.json"
    run = subprocess.run([sys.executable, "-m", "convert", "check", str(plain_onnx), "--against",
                          str(tmp_path / "bad.onnx"), "--report", str(report)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "first layer out of tolerance" in run.stdout and "'conv1'" in run.stdout, run.stdout
    data = json.loads(report.read_text())
    assert data["location"]["first_bad"]["layer"] == "conv1"
    quiet = subprocess.run([sys.executable, "-m", "convert", "check", str(plain_onnx), "--against",
                            str(tmp_path / "bad.onnx"), "--no-locate"], capture_output=True, text=True, timeout=120)
    assert quiet.returncode == 1 and "locate:" not in quiet.stdout
    passing = subprocess.run([sys.executable, "-m", "convert", "check", str(plain_onnx), "--against", str(good)],
                             capture_output=True, text=True, timeout=120)
    assert passing.returncode == 0 and "locate:" not in passing.stdout, passing.stdout


# -- Paddle -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def paddle_resnet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("paddle")
    root = tmp_path_factory.mktemp("paddle")
    out = {}
    for fmt, extra in (("json", []), ("pdmodel", ["--legacy"])):
        run = subprocess.run([sys.executable, str(REPO / "models/paddle/build_models.py"), str(root / fmt), "resnet18",
                              *extra], capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-2000:]
        out[fmt] = root / fmt / "resnet18"
    return out


def _third_conv_layer(onnx_path: Path) -> tuple[str, str]:
    """Return (the Conv's own layer, the layer whose output it computes) of the third Conv."""
    convs = [n for n in onnx.load(str(onnx_path)).graph.node if n.op_type == "Conv"]
    meta = {p.key: p.value for p in convs[2].metadata_props}
    return meta["convert:source_layer"], meta.get("convert:output_of") or meta["convert:source_layer"]


@pytest.mark.parametrize("dest", ["onnx", "caffe"])
def test_paddle_names_the_perturbed_op(dest: str, paddle_resnet: dict[str, Path], tmp_path: Path) -> None:
    src = paddle_resnet["json"]
    if dest == "onnx":
        good = [tmp_path / "r.onnx"]
        api.convert([src], to="onnx", out=good[0], check=False, format="paddle")
        _assert_clean(_locate([src], good, format="paddle"))
        conv, named = _third_conv_layer(good[0])
        _scale_onnx_weight(good[0], tmp_path / "bad.onnx", conv)
        bad = [tmp_path / "bad.onnx"]
    else:
        good = list(api.convert([src], to="caffe", out=tmp_path / "c" / "r", check=False, fold_batchnorm=False,
                                format="paddle", input_shapes={"x": (1, 3, 64, 64)}).outputs)
        _assert_clean(_locate([src], good, format="paddle"))
        api.convert([src], to="onnx", out=tmp_path / "probe.onnx", check=False, fold_batchnorm=False,
                    format="paddle", input_shapes={"x": (1, 3, 64, 64)})
        conv, named = _third_conv_layer(tmp_path / "probe.onnx")
        _scale_caffe_weight(good[1], _conv_layer_of(good[0], conv))
        bad = good
    assert named.startswith("batch_norm" if dest == "onnx" else "conv2d"), named
    _assert_named(_locate([src], bad, format="paddle"), named, "[conv2d]" if dest == "caffe" else "")


def test_legacy_paddle_program_says_localisation_is_unavailable(paddle_resnet: dict[str, Path],
                                                                tmp_path: Path) -> None:
    src = paddle_resnet["pdmodel"]
    api.convert([src], to="onnx", out=tmp_path / "r.onnx", check=False, format="paddle")
    loc = api.verify([src], [tmp_path / "r.onnx"], locate=True, format="paddle").location
    assert loc is not None and loc.unavailable and "PIR program" in loc.lines()[0]


def test_gradual_float_rounding_is_not_named_a_jump_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """The naming rule: over tol *and* 10x every earlier layer's error (errors built here, by hand)."""
    from convert.ir import Options
    from convert.parity import locate as loc_mod

    rng = np.random.default_rng(0)
    ref = {f"l{i}": [rng.standard_normal((1, 8, 4, 4)).astype(np.float32)] for i in range(6)}
    errors = [1e-6, 3e-5, 8e-5, 1.3e-4, 2e-4, 1e-2]  # rounding grows past tol at l3; l5 jumps
    got = {k: (f"'{k}'", [v[0] + np.float32(e) * np.abs(v[0]).max() * np.sign(rng.standard_normal(v[0].shape))
                         .astype(np.float32)]) for (k, v), e in zip(ref.items(), errors, strict=True)}
    monkeypatch.setitem(loc_mod._SOURCES, "onnx", lambda *a: ref)
    monkeypatch.setitem(loc_mod._DESTS, "caffe", lambda *a: got)
    result = loc_mod.locate("onnx", [], "caffe", [], None, {}, {}, Options(), 1e-4)  # type: ignore[arg-type]
    assert result.first_bad is not None and result.first_bad.key == "l5", result.lines()
    got.pop("l5")
    result = loc_mod.locate("onnx", [], "caffe", [], None, {}, {}, Options(), 1e-4)  # type: ignore[arg-type]
    assert result.first_bad is None and "grows gradually" in result.lines()[0]


def test_in_memory_module_is_localised(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(REPO / "models/pytorch"))
    try:
        from nets import build
    finally:
        sys.path.pop(0)
    result = api.convert(build("resnet"), torch.randn(1, 3, 64, 64), to="onnx", out=tmp_path / "m.onnx", locate=True)
    assert result.report is not None and result.report.location is not None
    _assert_clean(result.report)


def test_in_place_activations_do_not_rewrite_the_recorded_layers(tmp_path: Path) -> None:
    """conv -> BN -> in-place hardswish/ReLU (torchvision's MobileNetV3): the reference's layer values
    are copied when recorded, so a correct conversion has no layer out of tolerance (the conv's value
    used to be rewritten by the hardswish_ after it and named as the first bad layer)."""
    torch = pytest.importorskip("torch")
    from torch import nn

    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Conv2d(3 if i == 0 else 8, 8, 3, padding=1), nn.BatchNorm2d(8),
                            nn.Hardswish(inplace=True) if i % 2 else nn.ReLU(inplace=True)) for i in range(6)]
    model = nn.Sequential(*blocks, nn.Conv2d(8, 4, 1)).eval()
    with torch.no_grad():
        for block in blocks:
            block[1].running_mean.uniform_(-0.5, 0.5)
            block[1].running_var.uniform_(0.5, 1.5)
    result = api.convert(model, torch.randn(1, 3, 16, 16), to="onnx", out=tmp_path / "m.onnx", locate=True)
    assert result.report is not None and result.report.passed
    assert result.report.location is not None
    _assert_clean(result.report)


# -- TFLite -----------------------------------------------------------------------------------------
def test_tflite_onnx_names_the_perturbed_op(tmp_path: Path) -> None:
    """TFLite's interpreter keeps every tensor (NHWC); the converted values are NCHW: each layer is
    compared in the converted value's layout, and a 2 % change to one conv's weights is named."""
    pytest.importorskip("tensorflow")
    source = REPO / "models/tflite/small_cnn.tflite"
    good = tmp_path / "o.onnx"
    api.convert([source], to="onnx", out=good, check=False)
    _assert_clean(_locate([source], [good]))
    layer = "small_cnn_1/conv2d_1_2/convolution1"
    _scale_onnx_weight(good, tmp_path / "bad.onnx", layer)
    _assert_named(_locate([source], [tmp_path / "bad.onnx"]), layer, "CONV_2D")


def test_quantized_tflite_says_localisation_is_unavailable(tmp_path: Path) -> None:
    """int8 layers differ by rounding steps: --locate says it cannot judge them, names no layer."""
    pytest.importorskip("tensorflow")
    source = REPO / "models/tflite/small_cnn_int8.tflite"
    api.convert([source], to="onnx", out=tmp_path / "q.onnx", check=False)
    report = api.verify([source], [tmp_path / "q.onnx"], locate=True)
    assert report.location is not None and report.location.first_bad is None
    assert "quantized" in report.location.unavailable


def test_tensorflow_onnx_names_the_perturbed_node(tmp_path: Path) -> None:
    """A SavedModel: the folded graph the converter read runs in a session (its weights fed) with
    every node fetched (NHWC), compared in the converted value's layout; a 2 % weight change is named."""
    pytest.importorskip("tensorflow")
    sys.path.insert(0, str(REPO / "tests/frontends/tensorflow"))
    try:
        import tf_models
    finally:
        sys.path.pop(0)
    source = tf_models.build("small_cnn", tmp_path)["savedmodel"]
    good = tmp_path / "o.onnx"
    api.convert([source], format="tensorflow", to="onnx", out=good, check=False)
    _assert_clean(_locate([source], [good], format="tensorflow"))
    # Keras numbers its layer names per process (small_cnn_1/conv2d_1_2 ...): take the third conv's
    convs = [meta.value for node in onnx.load(str(good)).graph.node if node.op_type == "Conv"
             for meta in node.metadata_props if meta.key == "convert:source_layer"]
    assert len(convs) >= 3, convs
    layer = convs[2]
    _scale_onnx_weight(good, tmp_path / "bad.onnx", layer)
    # That Conv carries its bias: its output is TensorFlow's BiasAdd after the Conv2D.
    _assert_named(_locate([source], [tmp_path / "bad.onnx"], format="tensorflow"), layer, "BiasAdd")


def test_rows_in_another_order_are_compared_sorted_not_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Downstream of a sort, top-k or NMS whose near-ties the two runtimes order differently (Mask
    R-CNN's proposals on noise input), a layer holds the reference's rows in another order: it is
    compared row by row (each row with its nearest reference row) and not named, also where a few
    rows at a top-k cut differ; a layer wrong after that is still named, and so is a reordered layer
    whose values are also wrong (layers built here, by hand)."""
    from convert.ir import Options
    from convert.parity import locate as loc_mod

    rng = np.random.default_rng(0)
    ref = {f"l{i}": [rng.standard_normal((12, 16, 3, 3)).astype(np.float32)] for i in range(5)}
    order = rng.permutation(12)
    got = {k: (f"'{k}'", [v[0][order] if i in (2, 3) else v[0].copy()]) for i, (k, v) in enumerate(ref.items())}

    def run() -> object:
        monkeypatch.setitem(loc_mod._SOURCES, "onnx", lambda *a: ref)
        monkeypatch.setitem(loc_mod._DESTS, "caffe", lambda *a: got)
        return loc_mod.locate("onnx", [], "caffe", [], None, {}, {}, Options(), 1e-4)  # type: ignore[arg-type]

    result = run()
    assert result.first_bad is None, result.lines()
    assert [c.key for c in result.checks if c.reordered] == ["l2", "l3"]
    assert "2 layer(s) hold the reference's rows in another order, from 'l2'" in "\n".join(result.lines())
    got["l4"][1][0] = got["l4"][1][0] * np.float32(1.01)  # wrong after the reordered layers
    assert run().first_bad.key == "l4"
    got["l4"][1][0] = ref["l4"][0].copy()
    got["l3"][1][0] = got["l3"][1][0] * np.float32(1.01)  # reordered and wrong
    assert run().first_bad.key == "l3"
    # 400 rows (a top-k cut): two rows past the cut replaced by others, the rest reordered
    ref = {f"l{i}": [rng.standard_normal((400, 32)).astype(np.float32)] for i in range(3)}
    cut = ref["l1"][0][rng.permutation(400)]
    cut[:2] = rng.standard_normal((2, 32)).astype(np.float32)
    got = {"l0": ("'l0'", [ref["l0"][0].copy()]), "l1": ("'l1'", [cut]), "l2": ("'l2'", [ref["l2"][0].copy()])}
    result = run()
    assert result.first_bad is None and [c.unmatched for c in result.checks if c.reordered] == [2], result.lines()
    cut[2:] *= np.float32(1.001)  # and every kept row off by 1e-3: named
    result = run()
    assert result.first_bad is not None and result.first_bad.key == "l1", result.lines()
