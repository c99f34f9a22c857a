"""tflite->onnx against TFLite's own interpreter, float and int8; reading needs no TensorFlow.

The committed ``models/tflite/small_cnn*.tflite`` and nets written here by TensorFlow's
TFLiteConverter (``models/tflite/build.py``; seeded weights, recalibrated batch norm) are
converted and run in ONNX Runtime; the reference is the TFLite interpreter on the same seeded
NCHW input (transposed to NHWC for it). Float bound: 1e-5 of the output's scale (ResNet50 and
MobileNetV3Small: 1e-4, float32 rounding as in the TensorFlow tests, measured 6e-5 and 4e-5).
int8 outputs are compared in quantization steps of the output (see ``test_int8_*``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = ROOT / "models" / "tflite"
sys.path.insert(0, str(SAMPLES))
sys.path.insert(0, str(ROOT / "tests" / "frontends" / "tensorflow"))

pytestmark = pytest.mark.tensorflow


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convert", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


def _lines(text: str) -> list[str]:
    return [ln for ln in text.strip().splitlines() if ln.strip()]


def _convert(path: Path, out: Path) -> Path:
    from convert.exporters.onnx import EXPORTER
    from convert.frontends.tflite import FRONTEND
    from convert.ir import Options

    options = Options()
    EXPORTER.save(FRONTEND.load([path], options), out, options)
    return out


def _run_both(tflite: Path, onnx_path: Path, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Return (TFLite's output, ONNX Runtime's output, the output's quantization step or 0)."""
    from convert.parity.runtimes.onnxruntime import OnnxRuntime
    from convert.parity.runtimes.tflite import TFLiteRuntime

    ref_rt = TFLiteRuntime(tflite)
    spec = ref_rt.inputs()[0]
    x = np.random.default_rng(seed).standard_normal([1 if d is None else d for d in spec.shape]).astype(np.float32)
    ref = next(iter(ref_rt.run({spec.name: x}).values()))
    ort_rt = OnnxRuntime(onnx_path)
    got = next(iter(ort_rt.run({ort_rt.inputs()[0].name: x}).values()))
    return ref, got, next(iter(ref_rt.output_steps.values()), 0.0)


def _rel(ours: np.ndarray, ref: np.ndarray) -> float:
    assert ref.std() > 1e-3 * np.abs(ref).max() > 0, "degenerate reference"
    return float(np.abs(ours - ref).max() / np.abs(ref).max())


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Path]]:
    pytest.importorskip("tensorflow")
    import build

    folder = tmp_path_factory.mktemp("tflite")
    return {net: build.build(net, folder, int8=net in INT8_NETS)
            for net in FLOAT_NETS}


# Every keras.applications family of tests/frontends/tensorflow/tf_models.py, with its bound against
# TFLite's interpreter. ConvNeXt: its pointwise Dense layers (RESHAPE -> FULLY_CONNECTED -> RESHAPE
# on a free batch) are 1x1 Convs.
FLOAT_BOUNDS = {"mobilenet_v2": 1e-5, "resnet50": 1e-4, "mobilenet_v3_small": 1e-4, "efficientnet_b0": 1e-5,
                "convnext_tiny": 1e-5, "nasnet_mobile": 1e-4, "densenet121": 1e-4, "xception": 1e-4,
                "vgg16": 1e-5, "inception_v3": 1e-4}
FLOAT_NETS = list(FLOAT_BOUNDS)
# int8 nets: the quantized tensors each has at least, and the share of elements of its first four
# that may differ by a rounding step. Depthwise and 1x1 convs, ReLU6 (MobileNetV2), hard-swish and
# squeeze-excite (MobileNetV3Small), swish, sigmoid gates and their Mul (EfficientNetB0), residual
# adds (ResNet50), concatenations and batch norm as a standalone Mul and Add (DenseNet121), average
# pools and concatenations of branches (InceptionV3, NASNetMobile), separable convs (Xception),
# decomposed layer norm and GELU (ConvNeXtTiny), dense layers (VGG16). Where 3x3 convs read many
# channels (VGG16, InceptionV3), the 2 % of elements one step apart in the second layer reach up to
# 7 % in the fourth (measured), all within one step.
INT8_NETS = {"mobilenet_v2": (60, 0.03), "mobilenet_v3_small": (100, 0.03), "efficientnet_b0": (240, 0.03),
             "resnet50": (70, 0.03), "densenet121": (300, 0.03), "inception_v3": (120, 0.1), "xception": (100, 0.03),
             "convnext_tiny": (360, 0.03), "nasnet_mobile": (560, 0.03), "vgg16": (20, 0.05)}


@pytest.mark.parametrize(("net", "bound"), list(FLOAT_BOUNDS.items()))
def test_float_tflite_matches_the_interpreter(built: dict[str, dict[str, Path]], net: str, bound: float,
                                              tmp_path: Path) -> None:
    import onnx

    out = _convert(built[net]["float"], tmp_path / f"{net}.onnx")
    for seed in (0, 1):
        ref, got, _ = _run_both(built[net]["float"], out, seed)
        print(f"TFLITE {net} seed {seed} {_rel(got, ref):.1e}")
        assert _rel(got, ref) <= bound, (net, seed, _rel(got, ref))
    ops = [n.op_type for n in onnx.load(str(out)).graph.node]
    assert "Transpose" not in ops, "NCHW inside: no transposes in a keras.applications CNN"


def test_small_cnn_float_and_int8_through_the_cli(tmp_path: Path) -> None:
    for name in ("small_cnn", "small_cnn_int8"):
        r = _cli("tflite:onnx", str(SAMPLES / f"{name}.tflite"), "-o", str(tmp_path / f"{name}.onnx"))
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        assert "PASS" in r.stdout and "TFLite" in r.stdout, r.stdout
    ref, got, _ = _run_both(SAMPLES / "small_cnn.tflite", tmp_path / "small_cnn.onnx", 3)
    assert _rel(got, ref) <= 1e-5


def test_int8_small_cnn_is_within_two_steps(tmp_path: Path) -> None:
    """int8 weights stay int8 (per-channel DequantizeLinear); the output is within two steps of
    TFLite's reference kernels (measured: 0 to 2 on 8 seeds; one step of XNNPACK's)."""
    import onnx

    out = _convert(SAMPLES / "small_cnn_int8.tflite", tmp_path / "q.onnx")
    model = onnx.load(str(out))
    int8_weights = [t for t in model.graph.initializer if t.data_type == onnx.TensorProto.INT8 and len(t.dims) == 4]
    assert len(int8_weights) >= 3, "conv weights are int8 initializers"
    for seed in range(4):
        ref, got, step = _run_both(SAMPLES / "small_cnn_int8.tflite", out, seed)
        assert step > 0
        assert np.abs(ref).max() > 20 * step, "the output spans many steps"
        assert np.abs(got - ref).max() <= 2.0001 * step, (seed, np.abs(got - ref).max() / step)


def _quantized_tensors(tflite: Path, onnx_path: Path, x: np.ndarray) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Each quantized op output as (TFLite tensor name, TFLite's reference kernels' int8 values, ours).

    Our ONNX graph's QuantizeLinear nodes carry the TFLite tensor they quantize as their
    ``convert:source_layer``; those are exposed as outputs and run in ONNX Runtime (basic
    optimisations, as the parity check runs QDQ models). TFLite's interpreter keeps every tensor.
    """
    import onnx
    import onnxruntime as ort
    import tensorflow as tf

    model = onnx.load(str(onnx_path))
    layers = {}
    for node in model.graph.node:
        meta = {p.key: p.value for p in node.metadata_props}
        if node.op_type == "QuantizeLinear" and "convert:source_layer" in meta:
            layers[node.output[0]] = meta["convert:source_layer"]
            model.graph.output.append(onnx.helper.make_tensor_value_info(node.output[0], onnx.TensorProto.INT8, None))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    ours = dict(zip([o.name for o in session.get_outputs()],
                    session.run(None, {session.get_inputs()[0].name: x}), strict=True))
    interp = tf.lite.Interpreter(model_path=str(tflite), num_threads=1, experimental_preserve_all_tensors=True,
                                 experimental_op_resolver_type=tf.lite.experimental.OpResolverType.BUILTIN_REF)
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], x.transpose(0, 2, 3, 1))
    interp.invoke()
    index = {d["name"]: d["index"] for d in interp.get_tensor_details()}
    found = []
    for value, layer in layers.items():
        if layer in index:
            got = ours[value].astype(np.int32)
            found.append((layer, interp.get_tensor(index[layer]).astype(np.int32),
                          got.transpose(0, 2, 3, 1) if got.ndim == 4 else got))
    return found


@pytest.mark.parametrize("net", list(INT8_NETS))
def test_int8_layers_match_tflites_reference_kernels(built: dict[str, dict[str, Path]], net: str,
                                                     tmp_path: Path) -> None:
    """Op by op, our int8 tensors are TFLite's reference kernels' up to rounding; the output is
    within twice the distance between TFLite's reference and optimised kernels of one of them, and
    the check says NOT VERIFIED (or PASS), not FAIL.

    With random weights these nets amplify rounding: one step changed in an early layer moves the
    logits by up to a third of their range. TFLite's optimised kernels (XNNPACK: float
    requantization) and its reference kernels (fixed point) then disagree by ~30 steps of an output
    spanning ~100, and so do we: a comparison of the output alone cannot judge this conversion, which
    is why the first layers are compared one by one (there the rounding has not been amplified yet).
    From the fifth on, a layer can differ by more than two steps (checked by hand once: each such
    element of MobileNetV3Small's fifth layer, a depthwise conv, reads an input one or two steps off).
    """
    from convert.parity.compare import compare_one
    from convert.parity.runtimes.onnxruntime import OnnxRuntime
    from convert.parity.runtimes.tflite import TFLiteRuntime

    path = built[net]["int8"]
    out = _convert(path, tmp_path / "q.onnx")
    ref_rt, ours_rt = TFLiteRuntime(path), OnnxRuntime(out)
    shape = [1 if d is None else d for d in ref_rt.inputs()[0].shape]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    tensors = _quantized_tensors(path, out, x)
    least, share = INT8_NETS[net]
    assert len(tensors) >= least, len(tensors)  # every quantized op output was found
    for layer, ref, got in tensors[:4]:  # QUANTIZE, then the first layers: rounding only
        diff = np.abs(got - ref)
        assert diff.max() <= 2 and (diff > 0).mean() <= share, (layer, diff.max(), (diff > 0).mean())
    assert "reference kernels" in ref_rt.name
    for seed in range(3):
        feed = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        ref_rt.output_spread.clear()
        (name, ref), = ref_rt.run({ref_rt.inputs()[0].name: feed}).items()
        got = next(iter(ours_rt.run({ours_rt.inputs()[0].name: feed}).values()))
        step, spread = ref_rt.output_steps[name], ref_rt.output_spread[name]
        second = ref_rt.output_second[name]  # TFLite's optimised kernels
        assert np.ptp(ref) > 20 * step  # the output spans 20 steps or more: not saturated, not flat
        result = compare_one(name, ref, name, got, 1e-4, 1e-3, step=step, spread=spread, second=second)
        far, beside = np.abs(got - ref).max(), np.abs(got - second).max()
        print(f"INT8 {net} seed {seed}: ours-reference {far / step:.0f} steps, ours-optimised {beside / step:.0f}, "
              f"reference-optimised {spread / step:.0f}")
        assert result.verdict in ("PASS", "NOT VERIFIED"), (seed, result.note)
        assert min(far, beside) <= 2 * spread + 2 * step, (seed, far / step, beside / step, spread / step)


def test_reading_and_converting_need_no_tensorflow(tmp_path: Path) -> None:
    code = ("import sys; sys.modules['tensorflow'] = None; sys.modules['ai_edge_litert'] = None\n"
            "import convert\n"
            f"convert.convert({str(SAMPLES / 'small_cnn_int8.tflite')!r}, format='tflite', to='onnx', "
            f"out={str(tmp_path / 'q.onnx')!r}, check=False)\n"
            "assert 'tensorflow' not in [m for m, v in sys.modules.items() if v is not None]\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "q.onnx").is_file()


@pytest.mark.parametrize("cut", [0, 7, 100, 2000, 20000, -16])
def test_truncated_tflite_is_one_line_exit_2(tmp_path: Path, cut: int) -> None:
    data = (SAMPLES / "small_cnn.tflite").read_bytes()
    path = tmp_path / "cut.tflite"
    path.write_bytes(data[:cut] if cut >= 0 else data[:len(data) + cut])
    r = _cli("tflite:onnx", str(path), "-o", str(tmp_path / "m.onnx"), "--no-check")
    assert r.returncode == 2, r.stdout + r.stderr
    assert len(_lines(r.stderr)) == 1 and "cut.tflite" in r.stderr, r.stderr
    assert not (tmp_path / "m.onnx").exists()


def test_not_a_tflite_and_unknown_signature_are_one_line_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "model.tflite"
    path.write_bytes(b"\x18\x00\x00\x00ABCD" + bytes(64))
    r = _cli("tflite:onnx", str(path), "-o", str(tmp_path / "m.onnx"), "--no-check")
    assert r.returncode == 2 and len(_lines(r.stderr)) == 1 and "TFL3" in r.stderr, r.stderr
    r = _cli("tflite:onnx", str(SAMPLES / "small_cnn.tflite"), "--tflite-signature", "nope",
             "-o", str(tmp_path / "m.onnx"), "--no-check")
    assert r.returncode == 2 and len(_lines(r.stderr)) == 1, r.stderr
    assert "'nope'" in r.stderr and "serving_default" in r.stderr, r.stderr


def test_every_unsupported_op_is_listed_at_once(tmp_path: Path) -> None:
    """Two ops without converters (CUMSUM, ARG_MAX) are named together, with their first places."""
    pytest.importorskip("tensorflow")
    import tensorflow as tf

    from convert.frontends.tflite import FRONTEND
    from convert.ir import Options, UnsupportedOpsError

    @tf.function(input_signature=[tf.TensorSpec([1, 6, 5], tf.float32)])
    def gaps(x: object) -> tuple[object, object]:
        return tf.math.cumsum(x, axis=1), tf.math.argmax(x, axis=-1)

    path = tmp_path / "gaps.tflite"
    path.write_bytes(tf.lite.TFLiteConverter.from_concrete_functions([gaps.get_concrete_function()], gaps).convert())
    with pytest.raises(UnsupportedOpsError) as err:
        FRONTEND.load([path], Options())
    text = str(err.value)
    assert "CUMSUM" in text and "ARG_MAX" in text and "gaps.tflite" in text, text


@pytest.mark.opencv
def test_float_tflite_to_caffe_matches_the_interpreter(tmp_path: Path) -> None:
    """A CNN with TF's SAME padding (asymmetric on its stride-2 layers) through the Caffe exporter,
    checked by the project's parity check against the TFLite interpreter (real Caffe when built, else OpenCV)."""
    pytest.importorskip("tensorflow")
    import keras
    import tensorflow as tf
    import tf_models
    from keras import layers

    import convert

    keras.utils.set_random_seed(1)
    inp = keras.Input((32, 32, 3), name="image")
    x = layers.Conv2D(8, 3, strides=2, padding="same")(inp)
    x = layers.BatchNormalization()(x)
    x = layers.ReLU(max_value=6.0)(x)
    y = layers.DepthwiseConv2D(3, padding="same", activation="relu")(x)
    x = layers.Add()([x, layers.Conv2D(8, 1)(y)])
    x = layers.MaxPooling2D(3, strides=2, padding="same")(x)
    x = layers.Conv2D(16, 3, padding="same", activation="sigmoid")(x)
    x = layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inp, layers.Dense(4)(x))
    tf_models.recalibrate(model)
    path = tmp_path / "cnn.tflite"
    path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    result = convert.convert(str(path), format="tflite", to="caffe", out=str(tmp_path / "cnn.prototxt"),
                             input_shapes={"image": (1, 3, 32, 32)})
    assert result.report is not None and result.report.passed, result.report.table() if result.report else result
    assert result.report.dest == "caffe"
    assert max(o.rel_to_scale for o in result.report.outputs) <= 1e-5


@pytest.mark.opencv
@pytest.mark.parametrize("net", ["small_cnn", "mobilenet_v2"])
def test_float_tflite_with_same_padding_to_caffe(net: str, tmp_path: Path) -> None:
    """The committed sample (SAME depthwise/avg pool stride 2, asymmetric ZeroPadding2D) and a float
    MobileNetV2 .tflite to Caffe, checked by the parity check against the TFLite interpreter."""
    import convert

    if net == "small_cnn":
        path = SAMPLES / "small_cnn.tflite"
    else:
        pytest.importorskip("tensorflow")
        import tensorflow as tf
        import tf_models

        keras_file = tf_models.build(net, tmp_path / net, savedmodel=False)["keras"]
        import keras

        model = keras.saving.load_model(str(keras_file), compile=False)
        path = tmp_path / f"{net}.tflite"
        path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    size = 32 if net == "small_cnn" else 96
    if net == "small_cnn":
        name = "image"
    else:  # Keras numbers its input layers per process (input_layer_5 ...): read the signature's
        name = tf.lite.Interpreter(model_path=str(path)).get_signature_list()["serving_default"]["inputs"][0]
    result = convert.convert(str(path), format="tflite", to="caffe", out=str(tmp_path / f"{net}.prototxt"),
                             input_shapes={name: (1, 3, size, size)})
    assert result.report is not None and result.report.passed, result.report.table() if result.report else result
    err = max(o.rel_to_scale for o in result.report.outputs)
    print(f"PARITY-TFLITE-CAFFE {net} {err:.1e} ({result.report.dest_runtime})")
    assert err <= 1e-5


def test_input_shape_is_in_the_declared_order_for_conversion_and_parity(tmp_path: Path) -> None:
    """--input-shape takes the shape in the converted model's order (NCHW, as `convert inspect` prints
    it; #33 item 11); the parity feeds are NCHW too. With --keep-nhwc the model and the option are NHWC."""
    import onnx

    r = _cli("tflite:onnx", str(SAMPLES / "small_cnn.tflite"), "--input-shape", "image=2,3,32,32",
             "-o", str(tmp_path / "m.onnx"))
    assert r.returncode == 0 and "PASS" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    assert "image 2x3x32x32" in r.stdout, r.stdout
    dims = [d.dim_value for d in onnx.load(str(tmp_path / "m.onnx")).graph.input[0].type.tensor_type.shape.dim]
    assert dims == [2, 3, 32, 32], dims
    r = _cli("tflite:onnx", str(SAMPLES / "small_cnn.tflite"), "--keep-nhwc", "--input-shape", "image=2,32,32,3",
             "-o", str(tmp_path / "k.onnx"))
    assert r.returncode == 0 and "PASS" in r.stdout and "image 2x32x32x3" in r.stdout, r.stdout[-2000:] + r.stderr
    inspected = _cli("inspect", str(tmp_path / "m.onnx"))
    assert "2x3x32x32" in inspected.stdout, inspected.stdout


def test_corrupted_bytes_are_user_errors_never_internal_ones(tmp_path: Path) -> None:
    """200 seeded corruptions of the committed file (flipped bytes in the flatbuffer's tables and in
    the weights): each converts or raises one of convert's user errors, never a bug's exception."""
    from convert.exporters.onnx import EXPORTER
    from convert.frontends.tflite import FRONTEND
    from convert.ir import ConvertError, Options

    data = bytearray((SAMPLES / "small_cnn_int8.tflite").read_bytes())
    rng = np.random.default_rng(7)
    outcomes = {"converted": 0, "refused": 0}
    for case in range(200):
        bad = bytearray(data)
        for pos in rng.integers(0, len(bad), size=int(rng.integers(1, 6))):
            bad[int(pos)] = int(rng.integers(0, 256))
        path = tmp_path / f"bad{case}.tflite"
        path.write_bytes(bytes(bad))
        try:
            EXPORTER.save(FRONTEND.load([path], Options()), tmp_path / "bad.onnx", Options())
            outcomes["converted"] += 1
        except ConvertError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0, outcomes


def _pointwise_dense(batch: int | None) -> object:
    """Conv, then Keras Dense -> gelu -> Dense on [N, 8, 8, C] (ConvNeXt's pointwise block), residual add."""
    import keras

    keras.utils.set_random_seed(3)
    inp = keras.Input((8, 8, 16), batch_size=batch)
    y = keras.layers.Conv2D(16, 3, padding="same")(inp)
    y = keras.layers.Dense(32)(y)
    y = keras.layers.Activation("gelu")(y)
    y = keras.layers.Dense(16)(y)
    return keras.Model(inp, keras.layers.Add()([inp, y]))


@pytest.mark.parametrize("batch", [1, None])
def test_dense_on_rank4_is_a_1x1_conv(batch: int | None, tmp_path: Path) -> None:
    """TFLite writes Dense on [N, H, W, C] as FULLY_CONNECTED with keep_num_dims (batch 1) or as
    RESHAPE -> FULLY_CONNECTED -> RESHAPE on shapes computed at run time (free batch). Both become
    one 1x1 Conv in NCHW: no Transpose, no Reshape, no shape arithmetic; float and int8 outputs agree
    with TFLite (int8 within two steps of its reference kernels)."""
    import onnx
    import tensorflow as tf

    model = _pointwise_dense(batch)
    float_path = tmp_path / "f.tflite"
    float_path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    rng = np.random.default_rng(0)

    def representative() -> object:
        for _ in range(16):
            yield [rng.standard_normal((1, 8, 8, 16)).astype(np.float32)]

    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = representative
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    int8_path = tmp_path / "q.tflite"
    int8_path.write_bytes(conv.convert())
    for tfl, bound_steps in ((float_path, None), (int8_path, 2.0001)):
        out = _convert(tfl, tmp_path / f"{tfl.stem}.onnx")
        ops = [n.op_type for n in onnx.load(str(out)).graph.node]
        assert ops.count("Conv") == 3 and not {"Transpose", "Reshape", "Shape", "MatMul", "Gemm"} & set(ops), ops
        for seed in (0, 1):
            ref, got, step = _run_both(tfl, out, seed)
            if bound_steps is None:
                assert _rel(got, ref) <= 1e-5, (batch, seed, _rel(got, ref))
            else:
                assert step > 0 and np.abs(ref).max() > 20 * step
                assert np.abs(got - ref).max() <= bound_steps * step, (batch, seed, np.abs(got - ref).max() / step)
