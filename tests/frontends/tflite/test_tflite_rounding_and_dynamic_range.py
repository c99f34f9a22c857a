"""Two things a float ``.tflite`` check must not get wrong: float32 rounding, and dynamic-range weights.

**Rounding.** No runtime runs a ``.tflite`` file in float64, so a float output that misses ``--tol``
is judged by TFLite's second kernel path, its reference kernels (``BUILTIN_REF``): how far those are
from the default kernels measures what float32 rounding costs the net. MobileNetV3Large (Keras'
defaults: preprocessing on, so N(0, 1) inputs all map near -1) FAILed at 1.4e-4 while ours was as
close to float64 as TFLite's own run; here it is built small (alpha 0.25, 32x32, 10 classes, 2.3
MB), where the default seed still misses tol (2.4e-4; TFLite's two paths 2.2e-4 apart).

**Dynamic range.** ``Optimize.DEFAULT`` without a representative dataset stores int8 weights with
float activations; TFLite runs such operators with hybrid kernels that quantize their input on the
fly (``convert/frontends/tflite/hybrid.py``). Converted as a float model on dequantized weights, a
small CNN was 1.2e-3 of its scale from TFLite and FAILed its check; as TFLite computes it, 1e-7.
Deep random-weight nets amplify the one-step differences of on-the-fly quantization so much that
TFLite's own two paths are 0.1-0.9 of scale apart (XNNPACK quantizes its own way): NOT VERIFIED.
Other operators with int8 weights and float activations are refused in one line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "frontends" / "tensorflow"))

pytestmark = pytest.mark.tensorflow
tf = pytest.importorskip("tensorflow")


def _tflite(model: object, path: Path, *, dynamic_range: bool = False) -> Path:
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if dynamic_range:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]  # no representative dataset: int8 weights only
    path.write_bytes(converter.convert())
    return path


@pytest.fixture(scope="module")
def v3_large(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """MobileNetV3Large at its smallest (alpha 0.25, 32x32, 10 classes; Keras' default preprocessing),
    seeded weights and recalibrated batch norms, as a float and a dynamic-range ``.tflite``."""
    import keras
    import tf_models

    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV3Large(input_shape=(32, 32, 3), alpha=0.25, classes=10, weights=None,
                                                classifier_activation=None)
    tf_models.recalibrate(model)
    folder = tmp_path_factory.mktemp("v3_large")
    return {"float": _tflite(model, folder / "v3_large.tflite"),
            "dynamic": _tflite(model, folder / "v3_large_dr.tflite", dynamic_range=True)}


@pytest.fixture(scope="module", params=["per_channel", "per_tensor"])
def small_cnn_dr(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Keras small CNN of the TensorFlow tests (conv, depthwise, dense), dynamic-range quantized:
    its 3x3 conv (1728 weights) and first dense layer hold int8 weights (TFLite quantizes weights of
    1024 elements or more), with a scale per output channel (TFLite's default: the input quantized
    asymmetrically) or one per tensor (symmetrically)."""
    import keras
    import tf_models

    keras.utils.set_random_seed(0)
    model = tf_models.NETS["small_cnn"]()
    tf_models.recalibrate(model)
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter._experimental_disable_per_channel = request.param == "per_tensor"
    path = tmp_path_factory.mktemp("small_cnn_dr") / f"small_cnn_dr_{request.param}.tflite"
    path.write_bytes(converter.convert())
    return path


def _convert(path: Path, out: Path) -> Path:
    from convert.exporters.onnx import EXPORTER
    from convert.frontends.tflite import FRONTEND
    from convert.ir import Options

    EXPORTER.save(FRONTEND.load([path], Options()), out, Options())
    return out


def _check(tflite: Path, onnx_path: Path, seed: int = 0) -> object:
    from convert.ir import Options
    from convert.parity import run_parity

    report = run_parity("tflite", [tflite], "onnx", [onnx_path], options=Options(extra={"device": "cpu"}),
                        seed=seed, locate=False)
    assert len(report.outputs) == 1
    return report.outputs[0]


def test_mobilenet_v3_large_float32_rounding_passes_by_tflites_reference_kernels(v3_large: dict[str, Path],
                                                                                 tmp_path: Path) -> None:
    out = _check(v3_large["float"], _convert(v3_large["float"], tmp_path / "v3.onnx"))
    assert out.rel_to_scale > 1e-4, "the default seed no longer misses tol: the rule is not exercised"  # type: ignore[attr-defined]
    assert out.verdict == "PASS", out.note  # type: ignore[attr-defined]
    assert "BUILTIN_REF" in out.note and "float32 rounding" in out.note, out.note  # type: ignore[attr-defined]


def test_a_wrong_weight_still_fails_beside_tflites_second_path(v3_large: dict[str, Path], tmp_path: Path) -> None:
    """One convolution's weight 2 % off: far outside what TFLite's two paths are apart, FAIL."""
    import onnx
    from onnx import numpy_helper

    path = _convert(v3_large["float"], tmp_path / "v3.onnx")
    model = onnx.load(str(path))
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    weights = {t.name: t for t in model.graph.initializer}
    w = weights[convs[len(convs) // 2].input[1]]
    w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w) * np.float32(1.02), w.name))
    onnx.save(model, str(path))
    out = _check(v3_large["float"], path)
    assert out.verdict == "FAIL", out.note  # type: ignore[attr-defined]


def test_dynamic_range_cnn_is_computed_as_tflites_hybrid_kernels(small_cnn_dr: Path, tmp_path: Path) -> None:
    """int8 x int8 products (ConvInteger, MatMulInteger) on the input quantized per batch item as TFLite
    does: within 3e-7 of TFLite's built-in kernels, reference and optimised (without XNNPACK, which
    quantizes its input its own way: 1.3e-2 apart on a per-tensor net), on 4 inputs, batch 1 and 2
    (was 1.2e-3). The check's reference is the reference kernels: PASS."""
    import onnx

    from convert.parity.runtimes.onnxruntime import OnnxRuntime

    path = _convert(small_cnn_dr, tmp_path / "dr.onnx")
    ours = OnnxRuntime(path)
    for resolver in ("BUILTIN_WITHOUT_DEFAULT_DELEGATES", "BUILTIN_REF"):
        interp = tf.lite.Interpreter(model_path=str(small_cnn_dr), num_threads=1,
                                     experimental_op_resolver_type=getattr(tf.lite.experimental.OpResolverType,
                                                                           resolver))
        detail = interp.get_input_details()[0]
        for seed in range(4):
            for batch in (1, 2):
                x = np.random.default_rng(seed).standard_normal((batch, 32, 32, 3)).astype(np.float32)
                interp.resize_tensor_input(detail["index"], list(x.shape))
                interp.allocate_tensors()
                interp.set_tensor(detail["index"], x)
                interp.invoke()
                ref = interp.get_tensor(interp.get_output_details()[0]["index"]).astype(np.float64)
                got = next(iter(ours.run({ours.inputs()[0].name: x.transpose(0, 3, 1, 2)}).values()))
                err = float(np.abs(got - ref).max() / np.abs(ref).max())
                assert err <= 3e-7, (resolver, seed, batch, err)
    ops = {n.op_type for n in onnx.load(str(path)).graph.node}
    assert {"ConvInteger", "MatMulInteger"} <= ops, ops
    out = _check(small_cnn_dr, path)
    assert out.verdict == "PASS", out.note  # type: ignore[attr-defined]


def test_dynamic_range_deep_net_is_not_verified_where_tflites_own_kernels_disagree(v3_large: dict[str, Path],
                                                                                   tmp_path: Path) -> None:
    """Random weights amplify on-the-fly quantization: TFLite's reference kernels (the reference here)
    and its optimised ones are ~0.3 of scale apart and ours ~0.15 from each; the check cannot judge
    it (NOT VERIFIED), it does not FAIL it."""
    out = _check(v3_large["dynamic"], _convert(v3_large["dynamic"], tmp_path / "v3_dr.onnx"))
    assert out.verdict == "NOT VERIFIED", out.note  # type: ignore[attr-defined]
    assert "optimised kernels" in out.note, out.note  # type: ignore[attr-defined]


def test_other_dynamic_range_operator_is_refused_in_one_line(tmp_path: Path) -> None:
    """TRANSPOSE_CONV with int8 weights and float activations: exit 2, one line naming the operator
    and the ways to re-export."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(0)
    x = keras.Input((8, 8, 16))
    model = keras.Model(x, layers.Conv2D(4, 3)(layers.Conv2DTranspose(32, 3, strides=2, padding="same")(x)))
    path = _tflite(model, tmp_path / "tconv_dr.tflite", dynamic_range=True)
    r = subprocess.run([sys.executable, "-m", "convert", "tflite:onnx", str(path), "-o", str(tmp_path / "t.onnx")],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("convert: error:")]
    assert len(errors) == 1 and "TRANSPOSE_CONV" in errors[0] and "Optimize.DEFAULT" in errors[0] \
        and "representative dataset" in errors[0], r.stderr[-2000:]
    assert not (tmp_path / "t.onnx").exists()
