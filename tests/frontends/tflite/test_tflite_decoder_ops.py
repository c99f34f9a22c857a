"""Decoder, segmentation, super-resolution and audio ops, ``.tflite`` -> ONNX against TFLite's interpreter.

TRANSPOSE_CONV (-> ConvTranspose), RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR in each coordinate
mode (-> Resize), DEPTH_TO_SPACE / SPACE_TO_DEPTH, and Keras' dilated Conv1D (TFLite writes it as
SPACE_TO_BATCH_ND -> EXPAND_DIMS -> CONV_2D -> RESHAPE -> BATCH_TO_SPACE_ND: one dilated Conv
here). The models are ``tests/frontends/tensorflow/decoder_models.py``'s, written by TensorFlow's
TFLiteConverter (float; some also int8, full-integer post-training quantization), converted, run
in ONNX Runtime and compared with TFLite's interpreter on the same seeded input.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "frontends" / "tensorflow"))

import decoder_models  # noqa: E402  (tests/frontends/tensorflow)

pytestmark = pytest.mark.tensorflow
pytest.importorskip("tensorflow")

RTOL = 1e-5  # float: max |ours - TFLite| / max |TFLite|
INT8_STEPS = 2.0001  # int8: within two quantization steps of the output (TFLite's reference kernels)

EXPECTED = {"convT": "ConvTranspose", "upsample": "Resize", "resize": "Resize", "depth_to_space": "DepthToSpace",
            "space_to_depth": "SpaceToDepth"}


def _representative(model: object) -> object:
    rng = np.random.default_rng(1)
    shape = (1, *model.inputs[0].shape[1:])  # type: ignore[attr-defined]
    for _ in range(16):
        yield [rng.standard_normal(shape).astype(np.float32)]


def _tflite(name: str, folder: Path, *, int8: bool = False) -> Path:
    import tensorflow as tf

    model = decoder_models.build(name)
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    if int8:
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        conv.representative_dataset = lambda: _representative(model)
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    path = folder / f"{name}{'_int8' if int8 else ''}.tflite"
    path.write_bytes(conv.convert())
    return path


def _convert(path: Path, out: Path) -> list[str]:
    import onnx

    from convert.exporters.onnx import EXPORTER
    from convert.frontends.tflite import FRONTEND
    from convert.ir import Options

    options = Options()
    EXPORTER.save(FRONTEND.load([path], options), out, options)
    return [n.op_type for n in onnx.load(str(out)).graph.node]


def _run_both(tflite: Path, onnx_path: Path, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Return (TFLite's output, ONNX Runtime's output, the output's quantization step or 0)."""
    from convert.parity.runtimes.onnxruntime import OnnxRuntime
    from convert.parity.runtimes.tflite import TFLiteRuntime

    ref_rt = TFLiteRuntime(tflite)
    spec = ref_rt.inputs()[0]
    x = np.random.default_rng(seed).standard_normal([1 if d is None else d for d in spec.shape]).astype(np.float32)
    ref = next(iter(ref_rt.run({spec.name: x}).values()))
    ours = OnnxRuntime(onnx_path)
    got = next(iter(ours.run({ours.inputs()[0].name: x}).values()))
    assert got.shape == ref.shape, (got.shape, ref.shape)
    assert ref.std() > 1e-3 * np.abs(ref).max() > 0, "degenerate reference"
    return ref, got, next(iter(ref_rt.output_steps.values()), 0.0)


@pytest.mark.parametrize("case", list(decoder_models.CASES))
def test_float_decoder_op_matches_the_interpreter(case: str, tmp_path: Path) -> None:
    path = _tflite(case, tmp_path)
    ops = _convert(path, tmp_path / "m.onnx")
    err = 0.0
    for seed in (0, 1):
        ref, got, _ = _run_both(path, tmp_path / "m.onnx", seed)
        err = max(err, float(np.abs(got.astype(np.float64) - ref).max() / np.abs(ref).max()))
    print(f"TFLITE {case} {err:.1e}")
    assert err <= RTOL, f"{case}: max rel error {err:.2e}"
    family = next((op for prefix, op in EXPECTED.items() if case.startswith(prefix)), None)
    if family is not None:
        assert family in ops and "Transpose" not in ops, ops
    if case.startswith("conv1d"):  # one dilated Conv: SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND leave no node
        assert ops.count("Conv") == 1, ops
    if case.startswith(("conv1d", "tcn")):  # [N, C, L] between the Conv1Ds: Transposes only at the edges
        assert ops.count("Transpose") <= 2, ops


@pytest.mark.parametrize("case", decoder_models.INT8_CASES)
def test_int8_decoder_op_is_within_two_steps(case: str, tmp_path: Path) -> None:
    """int8: the TRANSPOSE_CONV filter stays int8 behind a per-channel DequantizeLinear (axis 1 of
    [in, out, H, W]); resizing and depth/space shuffles run on dequantized values and requantize."""
    path = _tflite(case, tmp_path, int8=True)
    ops = _convert(path, tmp_path / "q.onnx")
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops, ops
    worst = 0.0
    for seed in range(3):
        ref, got, step = _run_both(path, tmp_path / "q.onnx", seed)
        assert step > 0 and np.ptp(ref) > 20 * step, "the output spans many steps"
        worst = max(worst, float(np.abs(got - ref).max() / step))
    print(f"TFLITE-INT8 {case} {worst:.1f} steps")
    assert worst <= INT8_STEPS, f"{case}: {worst:.1f} steps"


def test_int8_transposed_conv_keeps_int8_weights(tmp_path: Path) -> None:
    import onnx

    path = _tflite("convT_k3_s2_same", tmp_path, int8=True)
    _convert(path, tmp_path / "q.onnx")
    model = onnx.load(str(tmp_path / "q.onnx"))
    conv_t = next(n for n in model.graph.node if n.op_type == "ConvTranspose")
    producers = {o: n for n in model.graph.node for o in n.output}
    dq = producers[conv_t.input[1]]
    assert dq.op_type == "DequantizeLinear" and next(a.i for a in dq.attribute if a.name == "axis") == 1
    w = next(t for t in model.graph.initializer if t.name == dq.input[0])
    assert w.data_type == onnx.TensorProto.INT8 and list(w.dims)[:2] == [4, 3], w.dims


def test_tiny_unet_tflite_through_the_api_passes(tmp_path: Path) -> None:
    from convert import api

    path = _tflite("unet", tmp_path)
    result = api.convert([path], format="tflite", to="onnx", out=tmp_path / "unet.onnx")
    report = result.report
    assert report is not None and report.verdict == "PASS", report.table() if report else result
    ref, got, _ = _run_both(path, tmp_path / "unet.onnx", 0)
    err = float(np.abs(got.astype(np.float64) - ref).max() / np.abs(ref).max())
    print(f"TFLITE unet {err:.1e}")
    assert err <= RTOL, err
