"""Asymmetric pads (TensorFlow's SAME, tf2onnx) exported to Caffe, which pads symmetrically.

Each case is a one-layer ONNX model, exported in every flavour and run in real Caffe (the
brocolli-caffe fork, ``scripts/build_caffe``) and in OpenCV DNN, against ONNX Runtime on the source
within 1e-5 of the output's scale. Convolutions get zero kernel taps on the side with less
padding; average pools without count_include_pad get a divisor correction (a Scale); max pools
need nothing more than pad_before and Caffe's ceil rounding for TF SAME with stride >= 2. A zero
Pad is a grouped Deconvolution with a one-hot kernel.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from convert.exporters.caffe import EXPORTER
from convert.ir import Options, UnsupportedOpsError, passes, serde
from convert.parity.runtimes.caffe_runtime import find_caffe, real_caffe

RTOL = 1e-5
FLAVORS = ["ssd", "bvlc", "pspnet"]
C = 4


def _tf_same(size: int, k: int, s: int, d: int = 1) -> tuple[int, int]:
    """TensorFlow's SAME pads (before, after) on one axis: the odd pixel goes after."""
    total = max((-(-size // s) - 1) * s + d * (k - 1) + 1 - size, 0)
    return total // 2, total - total // 2


def _same(h: int, w: int, k: int, s: int, d: int = 1) -> list[int]:
    (hb, he), (wb, we) = _tf_same(h, k, s, d), _tf_same(w, k, s, d)
    return [hb, wb, he, we]


# name: (op, input (H, W), attributes, weight shape or None)
CASES: dict[str, tuple[str, tuple[int, int], dict[str, object], tuple[int, ...] | None]] = {
    "conv3x3_s2_even": ("Conv", (16, 16), {"kernel_shape": [3, 3], "strides": [2, 2],
                                           "pads": _same(16, 16, 3, 2)}, (6, C, 3, 3)),
    "conv4x4_s2_odd": ("Conv", (15, 15), {"kernel_shape": [4, 4], "strides": [2, 2],
                                          "pads": _same(15, 15, 4, 2)}, (6, C, 4, 4)),
    "conv2x2_s1_even_kernel": ("Conv", (9, 10), {"kernel_shape": [2, 2], "pads": _same(9, 10, 2, 1)}, (6, C, 2, 2)),
    "conv_mixed_sides": ("Conv", (10, 11), {"kernel_shape": [3, 3], "pads": [2, 0, 0, 2]}, (6, C, 3, 3)),
    "conv_dilated": ("Conv", (12, 12), {"kernel_shape": [3, 3], "dilations": [2, 2], "strides": [2, 2],
                                        "pads": [0, 0, 2, 2]}, (6, C, 3, 3)),
    "conv_auto_same_upper": ("Conv", (16, 13), {"kernel_shape": [3, 3], "strides": [2, 2],
                                                "auto_pad": "SAME_UPPER"}, (6, C, 3, 3)),
    "depthwise3x3_s2_even": ("Conv", (16, 16), {"kernel_shape": [3, 3], "strides": [2, 2], "group": C,
                                                "pads": _same(16, 16, 3, 2)}, (C, 1, 3, 3)),
    "depthwise5x5_s2_even": ("Conv", (16, 14), {"kernel_shape": [5, 5], "strides": [2, 2], "group": C,
                                                "pads": _same(16, 14, 5, 2)}, (C, 1, 5, 5)),
    "deconv_asym": ("ConvTranspose", (7, 8), {"kernel_shape": [3, 3], "strides": [2, 2],
                                              "pads": [0, 1, 1, 0]}, (C, 3, 3, 3)),
    "deconv_output_padding": ("ConvTranspose", (7, 7), {"kernel_shape": [3, 3], "strides": [2, 2],
                                                        "pads": [1, 1, 1, 1], "output_padding": [1, 1]}, (C, 3, 3, 3)),
    "maxpool3x3_s2_even": ("MaxPool", (16, 16), {"kernel_shape": [3, 3], "strides": [2, 2],
                                                 "pads": _same(16, 16, 3, 2)}, None),
    "maxpool3x3_s2_odd": ("MaxPool", (15, 16), {"kernel_shape": [3, 3], "strides": [2, 2],
                                                "pads": _same(15, 16, 3, 2)}, None),
    "maxpool2x2_s2_odd": ("MaxPool", (15, 15), {"kernel_shape": [2, 2], "strides": [2, 2],
                                                "pads": _same(15, 15, 2, 2)}, None),
    # yolov3-tiny's 2x2 stride-1 pool padded bottom/right: pad 1 both sides, then a Crop
    "maxpool2x2_s1_same": ("MaxPool", (13, 12), {"kernel_shape": [2, 2], "pads": _same(13, 12, 2, 1)}, None),
    "maxpool4x4_s1_same": ("MaxPool", (9, 9), {"kernel_shape": [4, 4], "pads": _same(9, 9, 4, 1)}, None),
    "avgpool3x3_s2_even": ("AveragePool", (16, 16), {"kernel_shape": [3, 3], "strides": [2, 2],
                                                     "pads": _same(16, 16, 3, 2)}, None),
    "avgpool3x3_s2_odd": ("AveragePool", (15, 15), {"kernel_shape": [3, 3], "strides": [2, 2],
                                                    "pads": _same(15, 15, 3, 2)}, None),
    "avgpool3x3_s1": ("AveragePool", (10, 9), {"kernel_shape": [3, 3], "pads": _same(10, 9, 3, 1)}, None),
    "avgpool5x5_s2_even": ("AveragePool", (16, 16), {"kernel_shape": [5, 5], "strides": [2, 2],
                                                     "pads": _same(16, 16, 5, 2)}, None),
    # Keras' ZeroPadding2D (ResNet50's before its max pool): a one-hot grouped Deconvolution
    "zero_pad": ("Pad", (9, 10), {"pads": [0, 0, 1, 0, 0, 0, 2, 3]}, None),
}


def _model(case: str) -> onnx.ModelProto:
    op, (h, w), attrs, wshape = CASES[case]
    rng = np.random.default_rng(7)
    inputs, inits = ["x"], []
    if wshape is not None:
        inits.append(numpy_helper.from_array(rng.standard_normal(wshape).astype(np.float32), "w"))
        out_c = wshape[0] if op == "Conv" else wshape[1] * int(attrs.get("group", 1))  # type: ignore[call-overload]
        inits.append(numpy_helper.from_array(rng.standard_normal(out_c).astype(np.float32), "b"))
        inputs += ["w", "b"]
    if op == "Pad":
        inits.append(numpy_helper.from_array(np.asarray(attrs["pads"], np.int64), "pads"))
        inputs, attrs = ["x", "pads"], {}
    node = helper.make_node(op, inputs, ["y"], **attrs)
    graph = helper.make_graph([node], case, [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, C, h, w])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model)
    return model


def _export(src: onnx.ModelProto, out: Path, flavor: str) -> list[Path]:
    model = serde.deserialize_model(src)
    passes.standard_pipeline()(model)
    return list(EXPORTER.save(model, out, Options(extra={"caffe_flavor": flavor})))


def _rel(ours: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(ours.reshape(ref.shape) - ref).max() / np.abs(ref).max())


@pytest.fixture(scope="module")
def caffe_dir() -> Path:
    found = find_caffe()
    if found is None or find_caffe("bvlc") is None:
        pytest.skip("real Caffe is not built here: run scripts/build_caffe")
    return found


PARAMS = [(c, f) for c in CASES for f in FLAVORS]


@pytest.mark.opencv
@pytest.mark.parametrize(("case", "flavor"), PARAMS, ids=[f"{c}-{f}" for c, f in PARAMS])
def test_asymmetric_pads_match_in_real_caffe_and_opencv(case: str, flavor: str, caffe_dir: Path,
                                                         tmp_path: Path) -> None:
    import onnxruntime as ort

    pytest.importorskip("cv2")
    from convert.parity.runtimes.opencv_caffe import open_runtime as open_cv

    src = _model(case)
    assert any(d.dim_value for d in src.graph.output[0].type.tensor_type.shape.dim)
    paths = _export(src, tmp_path / case, flavor)
    x = (np.random.default_rng(5).standard_normal([d.dim_value for d in
                                                  src.graph.input[0].type.tensor_type.shape.dim]) * 2)
    feeds = {"x": x.astype(np.float32)}
    ref = ort.InferenceSession(src.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert float(ref.std()) > 1e-3, "degenerate reference"
    proto = next(p for p in paths if str(p).endswith(".prototxt"))
    weights = next(p for p in paths if str(p).endswith(".caffemodel"))
    runtime = real_caffe(proto, weights)  # the file as written, in the real Caffe of its dialect
    assert runtime is not None and not runtime.notes, runtime and runtime.notes
    real = runtime.run(feeds)["y"]
    assert _rel(real, ref) <= RTOL, f"{runtime.name}: {_rel(real, ref):.2e}"
    text = proto.read_text()
    if "round_mode" not in text:  # OpenCV cannot parse BVLC's round_mode (the parity check translates; see flavor.py)
        cv = open_cv(paths, Options()).run(feeds)["y"]
        assert _rel(cv, ref) <= RTOL, f"OpenCV: {_rel(cv, ref):.2e}"
    if CASES[case][0] in ("Conv", "ConvTranspose", "Pad"):  # one layer: zero taps, no extra layers
        assert text.count("layer {") == (1 if flavor == "pspnet" else 2), text  # (+ Input layer)


def test_zero_taps_widen_the_kernel_only_where_pads_differ(tmp_path: Path) -> None:
    text = _export(_model("conv_mixed_sides"), tmp_path / "m", "ssd")[0].read_text()
    # H pads (2, 0): pad 2 both sides, 2 zero taps after; W pads (0, 2): 2 zero taps before.
    assert "kernel_size: 5" in text and "pad: 2" in text
    case = CASES["conv_mixed_sides"]
    CASES["_h_only"] = (case[0], case[1], {**case[2], "pads": [2, 1, 0, 1]}, case[3])
    try:
        text = _export(_model("_h_only"), tmp_path / "h", "ssd")[0].read_text()
    finally:
        del CASES["_h_only"]
    assert "kernel_h: 5" in text and "kernel_w: 3" in text and "pad_h: 2" in text and "pad_w: 1" in text


def test_average_pool_divisor_is_one_scale_layer(tmp_path: Path) -> None:
    text = _export(_model("avgpool3x3_s1"), tmp_path / "m", "ssd")[0].read_text()
    assert text.count('type: "Pooling"') == 1 and text.count('type: "Scale"') == 1
    assert "axis: 2" in text and "num_axes: 2" in text


def _refused(case: str, attrs: dict[str, object], tmp_path: Path) -> str:
    op, size, base, wshape = CASES[case]
    CASES["_refused"] = (op, size, {**base, **attrs}, wshape)
    try:
        with pytest.raises(UnsupportedOpsError) as info:
            _export(_model("_refused"), tmp_path / "r", "ssd")
    finally:
        del CASES["_refused"]
    return str(info.value)


def test_pads_a_dilation_cannot_shift_are_refused_in_one_line(tmp_path: Path) -> None:
    msg = _refused("conv_dilated", {"strides": [1, 1], "pads": [0, 0, 1, 1]}, tmp_path)
    assert "pads (0, 1) differ by 1, not a multiple of its dilation 2" in msg


def test_max_pool_stride_1_same_is_a_wider_pad_and_a_crop(tmp_path: Path) -> None:
    text = _export(_model("maxpool2x2_s1_same"), tmp_path / "m", "ssd")[0].read_text()
    assert text.count('type: "Pooling"') == 1 and text.count('type: "Crop"') == 1 and "pad: 1" in text


def test_pool_no_caffe_rounding_reproduces_is_refused_in_one_line(tmp_path: Path) -> None:
    """A 2x2 stride-1 average pool padded bottom/right: Caffe gives one window fewer (its pads count)."""
    msg = _refused("avgpool3x3_s2_odd", {"kernel_shape": [2, 2], "strides": [1, 1], "pads": [0, 0, 1, 1]},
                   tmp_path)
    assert "no Caffe rounding reproduces it" in msg and "\n" not in msg
