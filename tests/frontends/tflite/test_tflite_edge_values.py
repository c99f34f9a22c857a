"""TFLite's elementwise ops on edge values, against TFLite's own interpreter.

The ``.tflite`` files are written by TensorFlow's TFLiteConverter from one-op functions; the
reference is the interpreter's reference kernels (``BUILTIN_REF``), which our conversion matches;
the default kernels (XNNPACK) are the same except where noted in docs/tensorflow.md ("Edge
values"). TFLite parts from TensorFlow (and ONNX) in two places, both fixed here: ``MAXIMUM`` and
``MINIMUM`` give the second operand when the first is NaN (``a > b ? a : b``; ONNX's Max gives
NaN), and ``CAST`` from float32 to uint8, int16 and int32 saturates (-3.7 to uint8 is 0 in TFLite,
253 in a C cast).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from edge_values import EDGE_F32, grid, mismatches

pytestmark = pytest.mark.tensorflow
tf = pytest.importorskip("tensorflow")


def _run(fn: Callable[..., object], xs: list[np.ndarray], tmp_path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(TFLite's default kernels, its reference kernels, ours in ONNX Runtime) of ``fn`` on ``xs``."""
    from convert.exporters.onnx import EXPORTER
    from convert.frontends.tflite import FRONTEND
    from convert.ir import Options
    from convert.parity.runtimes.onnxruntime import OnnxRuntime

    concrete = tf.function(fn).get_concrete_function(*[tf.TensorSpec(x.shape, tf.as_dtype(x.dtype)) for x in xs])
    path = tmp_path / "m.tflite"
    path.write_bytes(tf.lite.TFLiteConverter.from_concrete_functions([concrete], concrete).convert())
    results = []
    for resolver in ("BUILTIN", "BUILTIN_REF"):
        interp = tf.lite.Interpreter(model_path=str(path), num_threads=1,
                                     experimental_op_resolver_type=getattr(tf.lite.experimental.OpResolverType,
                                                                           resolver))
        interp.allocate_tensors()
        for detail, x in zip(interp.get_input_details(), xs, strict=True):
            interp.set_tensor(detail["index"], x)
        interp.invoke()
        results.append(np.array(interp.get_tensor(interp.get_output_details()[0]["index"])))
    EXPORTER.save(FRONTEND.load([path], Options()), tmp_path / "m.onnx", Options())
    ours = OnnxRuntime(tmp_path / "m.onnx")
    got = next(iter(ours.run(dict(zip([s.name for s in ours.inputs()], xs, strict=True))).values()))
    return results[0], results[1], got


@pytest.mark.parametrize("op", ["MAXIMUM", "MINIMUM"])
def test_maximum_minimum_take_the_second_operand_after_a_nan(op: str, tmp_path: Path) -> None:
    """All 729 pairs of edge values; ONNX's Max/Min gave NaN on the 26 pairs (NaN, b)."""
    a, b = grid()
    fn = tf.maximum if op == "MAXIMUM" else tf.minimum
    default, reference, got = _run(fn, [a, b], tmp_path)
    assert not mismatches(reference, default, ulps=0)  # TFLite's two paths agree here
    bad = mismatches(reference, got, ulps=0)
    assert not bad, f"{op}: {len(bad)} of {a.size} differ: {bad[:8]}"


_CAST_VALUES = np.array([np.nan, np.inf, -np.inf, 1e10, -1e10, 2147483520.0, 2147483648.0, -2147483904.0,
                         70000.0, -70000.0, 300.0, -300.0, 255.5, 3.7, -3.7, -0.5, 0.0, -0.0], np.float32)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int32", "int64"])
def test_cast_from_float_saturates_where_tflite_does(dtype: str, tmp_path: Path) -> None:
    """NaN, infinities, values past the type's range and negatives into unsigned: uint8, int16 and
    int32 saturate in TFLite (were a C cast: -3.7 -> 253, 1e10 -> -2147483648); int8, int64 do not."""
    default, reference, got = _run(lambda v: tf.cast(v, getattr(tf, dtype)), [_CAST_VALUES], tmp_path)
    assert np.array_equal(default, reference)
    assert got.dtype == reference.dtype and np.array_equal(got, reference), (reference.tolist(), got.tolist())


# op -> (function, ulps allowed against TFLite's reference kernels, absolute allowance). LOGISTIC:
# ONNX Runtime's sigmoid is 6e-9 off deep in the tail (sigmoid(-7), 6e-6 relative).
UNARY: dict[str, tuple[Callable[[object], object], float, float]] = {
    "RSQRT": (tf.math.rsqrt, 2, 0.0),
    "RELU6": (tf.nn.relu6, 0, 0.0),
    "RELU": (tf.nn.relu, 0, 0.0),
    "LEAKY_RELU": (lambda v: tf.nn.leaky_relu(v, 0.1), 0, 0.0),
    "LOGISTIC": (tf.sigmoid, 4, 1e-8),
    "SQUARE": (tf.square, 0, 0.0),
    "FLOOR": (tf.floor, 0, 0.0),
    "SQRT": (tf.sqrt, 1, 0.0),
    "LOG": (tf.math.log, 2, 0.0),
    "EXP": (tf.exp, 2, 0.0),
    "TANH": (tf.tanh, 4, 0.0),
    "HARD_SWISH": (lambda v: v * tf.nn.relu6(v + 3) / 6, 4, 0.0),
}


@pytest.mark.parametrize("op", list(UNARY))
def test_unary_op_on_edge_values(op: str, tmp_path: Path) -> None:
    fn, ulps, atol = UNARY[op]
    values = EDGE_F32
    if op == "HARD_SWISH":  # TFLite's x * (x + 3) overflows at 3.4e38 (inf); ONNX's HardSwish does not
        values = values[np.abs(values) != np.float32(3.4e38)]
    _, reference, got = _run(fn, [values], tmp_path)
    bad = mismatches(reference, got, ulps=ulps, atol=atol)
    assert not bad, f"{op}: {len(bad)} of {values.size} differ: {bad[:8]}"


BINARY: dict[str, tuple[Callable[[object, object], object], float]] = {
    "DIV": (tf.math.truediv, 1),
    "POW": (tf.pow, 2),
    "SQUARED_DIFFERENCE": (tf.math.squared_difference, 0),
}


@pytest.mark.parametrize("op", list(BINARY))
def test_binary_op_on_every_pair_of_edge_values(op: str, tmp_path: Path) -> None:
    fn, ulps = BINARY[op]
    a, b = grid()
    default, _, got = _run(fn, [a, b], tmp_path)
    # DIV: the reference kernels are a few ulps off both; TFLite flushes subnormal quotients to zero
    bad = mismatches(default, got, ulps=ulps, ftz=True)
    assert not bad, f"{op}: {len(bad)} of {a.size} differ: {bad[:8]}"
