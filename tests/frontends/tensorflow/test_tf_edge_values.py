"""The TensorFlow ops lowered through a formula, against TF's own kernels on edge values.

Random draws never hit the points where a formula and TF's kernel part (``tests/edge_values.py``):
float ``FloorMod`` as ``x - floor(x / y) * y`` returned 0 where TF returns about 0.1 for 30 of the
81 values ``k/10 mod 0.1``, and -inf where ``x / y`` overflows. Every elementwise op the frontend
lowers to more than its ONNX namesake, and those whose ONNX namesake rounds or treats NaN its own
way, is run here on signed zeros, halves, multiples of 0.1 and 2*pi, the largest floats, infinities
and NaN. The audit's verdict per op is in docs/tensorflow.md ("Edge values").
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from edge_values import EDGE_F32, INT_PAIRS, grid, mismatches, multiples

pytestmark = pytest.mark.tensorflow
tf = pytest.importorskip("tensorflow")


def _run(fn: Callable[..., object], xs: list[np.ndarray], tmp_path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(TF's result, the converted model's in ONNX Runtime) of ``fn`` on exactly ``xs``."""
    from convert.exporters.onnx import EXPORTER
    from convert.frontends.tensorflow.graph import graph_from_function
    from convert.frontends.tensorflow.loader import convert_graph
    from convert.ir import Options, passes
    from convert.parity.runtimes.onnxruntime import open_runtime as open_ort

    specs = [tf.TensorSpec(x.shape, tf.as_dtype(x.dtype), name=f"x{i}") for i, x in enumerate(xs)]
    concrete = tf.function(lambda *a: {"y": fn(*a)}).get_concrete_function(*specs)
    model = convert_graph(graph_from_function(concrete, [s.name for s in specs], ["y"], source="case"), Options())
    passes.standard_pipeline(validate=True)(model)
    EXPORTER.save(model, tmp_path / "m.onnx", Options())
    got = open_ort([tmp_path / "m.onnx"], Options(extra={"device": "cpu"})).run(
        {s.name: x for s, x in zip(specs, xs, strict=True)})["y"]  # type: ignore[attr-defined]
    return np.asarray(concrete(*[tf.constant(x) for x in xs])["y"]), got


def test_float_floormod_is_tfs_at_multiples_of_a_divisor_float32_cannot_hold(tmp_path: Path) -> None:
    """k/10 mod 0.1 and k*pi/4 mod 2*pi: the formula was 0 (or 2*pi off) on 36 of these 162 values."""
    x, y = multiples()
    want, got = _run(tf.math.floormod, [x, y], tmp_path)
    assert not mismatches(want, got, ulps=0, ftz=True), mismatches(want, got, ulps=0, ftz=True)[:8]
    want, got = _run(lambda a: tf.math.floormod(a, 0.1), [x[:81]], tmp_path)  # a constant divisor
    assert not mismatches(want, got, ulps=0, ftz=True), mismatches(want, got, ulps=0, ftz=True)[:8]


def test_float_floormod_on_signed_zeros_infinities_nan_and_huge_values(tmp_path: Path) -> None:
    """Every pair of edge values (729): exact, as fmod is; x / y overflowing made the formula -inf."""
    a, b = grid()
    want, got = _run(tf.math.floormod, [a, b], tmp_path)
    bad = mismatches(want, got, ulps=0, ftz=True)
    assert not bad, f"{len(bad)} of {a.size} differ: {bad[:8]}"


def test_integer_floormod_takes_the_divisors_sign(tmp_path: Path) -> None:
    for dtype in (np.int32, np.int64):
        a, b = (v.astype(dtype) for v in INT_PAIRS)
        want, got = _run(tf.math.floormod, [a, b], tmp_path)
        assert np.array_equal(want, got), (dtype, want, got)


# op -> (TF function, ulps allowed, absolute allowance). Erfc is 1 - Erf: within 1.2e-7 absolutely,
# its relative accuracy lost in the tail (erfc(7) = 4e-23 comes out 0; documented).
UNARY: dict[str, tuple[Callable[[object], object], float, float]] = {
    "Round": (tf.round, 0, 0.0),  # half to even, as ONNX's Round
    "Sign": (tf.sign, 0, 0.0),
    "Floor": (tf.floor, 0, 0.0),
    "Ceil": (tf.math.ceil, 0, 0.0),
    "Rsqrt": (tf.math.rsqrt, 2, 0.0),  # Reciprocal(Sqrt): rsqrt(+-0) = +-inf, rsqrt(inf) = 0
    "Square": (tf.square, 0, 0.0),
    "Relu6": (tf.nn.relu6, 0, 0.0),
    "Softplus": (tf.math.softplus, 4, 0.0),  # softplus(3.4e38) = 3.4e38, not inf
    "Elu": (tf.nn.elu, 4, 0.0),
    "Selu": (tf.nn.selu, 4, 0.0),
    "LeakyRelu": (lambda v: tf.nn.leaky_relu(v, 0.1), 0, 0.0),
    "Erfc": (tf.math.erfc, 4, 1.2e-7),
    "Reciprocal": (tf.math.reciprocal, 1, 0.0),
}


@pytest.mark.parametrize("op", list(UNARY))
def test_unary_op_on_edge_values(op: str, tmp_path: Path) -> None:
    fn, ulps, atol = UNARY[op]
    want, got = _run(fn, [EDGE_F32], tmp_path)
    bad = mismatches(want, got, ulps=ulps, atol=atol, ftz=True)
    assert not bad, f"{op}: {len(bad)} of {EDGE_F32.size} differ: {bad[:8]}"


BINARY: dict[str, tuple[Callable[[object, object], object], float]] = {
    "RealDiv": (tf.math.truediv, 1),
    "Pow": (tf.pow, 2),
    "SquaredDifference": (tf.math.squared_difference, 0),
    "Maximum": (tf.maximum, 0),  # NaN on either side gives NaN in both
    "Minimum": (tf.minimum, 0),
}


@pytest.mark.parametrize("op", list(BINARY))
def test_binary_op_on_every_pair_of_edge_values(op: str, tmp_path: Path) -> None:
    fn, ulps = BINARY[op]
    a, b = grid()
    want, got = _run(fn, [a, b], tmp_path)
    bad = mismatches(want, got, ulps=ulps, ftz=True)
    assert not bad, f"{op}: {len(bad)} of {a.size} differ: {bad[:8]}"
