"""One small TF function per op converter, converted and run in ONNX Runtime against TF eager.

Each case is a ``tf.function`` over placeholder inputs (constants for weights and axes), frozen
and folded exactly as a SavedModel signature is. Rank-4 inputs and outputs are NCHW in the
converted model; the check transposes them. The last test checks that every registered op type
is exercised here or by the model tests.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from convert.ir import Options, passes

pytestmark = pytest.mark.tensorflow
tf = pytest.importorskip("tensorflow")

RTOL = 1e-5
_RNG = np.random.default_rng(0)


def _w(*shape: int) -> object:
    return tf.constant(_RNG.standard_normal(shape).astype(np.float32))


# name -> (function, input shapes). Inputs are float32 standard normal unless a shape is negative.
CASES: dict[str, tuple[Callable[..., object], list[tuple[int, ...]]]] = {
    "compare_select": (lambda x, y: tf.where(tf.math.logical_and(tf.greater(x, y), tf.greater_equal(x, 0.1))
                                | tf.less(y, -1.0), x, y)
                       + tf.where(tf.less_equal(x, -0.2), 1.0, 0.0) + tf.where(tf.equal(x, y), 2.0, 0.0)
                       + tf.reverse(tf.tile(y, [1, 2, 1, 1]), [1, 3])[:, :3], [(1, 3, 4, 2), (1, 3, 4, 2)]),
    "conv_same_stride2": (lambda x: tf.nn.conv2d(x, _w(3, 3, 3, 5), 2, "SAME"), [(1, 9, 8, 3)]),
    "conv_explicit": (lambda x: tf.nn.conv2d(x, _w(2, 3, 3, 4), 1, [[0, 0], [1, 2], [0, 1], [0, 0]]),
                      [(1, 7, 7, 3)]),
    "grouped_conv": (lambda x: tf.nn.conv2d(x, _w(3, 3, 2, 4), 1, "SAME"), [(1, 6, 6, 4)]),
    "depthwise_mult2": (lambda x: tf.nn.depthwise_conv2d(x, _w(3, 3, 3, 2), [1, 2, 2, 1], "SAME"),
                        [(1, 8, 9, 3)]),
    "bias_relu6_elu_selu": (lambda x: tf.nn.selu(tf.nn.elu(tf.nn.relu6(tf.nn.bias_add(x, _w(3)) * 4))),
                            [(1, 4, 4, 3)]),
    "fused_batch_norm": (lambda x: tf.raw_ops.FusedBatchNormV3(
        x=tf.nn.conv2d(x, _w(1, 1, 3, 3), 1, "VALID"), scale=_w(3), offset=_w(3), mean=_w(3),
        variance=tf.abs(_w(3)) + 0.5, epsilon=1e-3, is_training=False)[0], [(1, 4, 5, 3)]),
    "fused_batch_norm_v1": (lambda x: tf.raw_ops.FusedBatchNorm(
        x=x, scale=_w(3), offset=_w(3), mean=_w(3), variance=tf.abs(_w(3)) + 0.5, is_training=False)[0],
        [(1, 4, 5, 3)]),
    "pools": (lambda x: tf.nn.avg_pool2d(tf.nn.max_pool2d(x, 3, 2, "SAME"), 2, 1, "VALID"), [(1, 9, 9, 2)]),
    "binary": (lambda x, y: tf.maximum(x - y, tf.minimum(x * y, x / (tf.abs(y) + 1))) + tf.pow(tf.abs(x), 1.5),
               [(2, 3, 4), (3, 4)]),
    "binary_nchw_const": (lambda x: tf.nn.conv2d(x, _w(1, 1, 2, 2), 1, "VALID") * _w(2) - _w(1, 1, 2),
                          [(1, 3, 3, 2)]),
    "squared_difference_addn": (lambda x, y: tf.add_n([tf.math.squared_difference(x, y), x, y]),
                                [(2, 5), (2, 5)]),
    "unary": (lambda x: tf.sigmoid(x) + tf.tanh(x) + tf.math.softplus(x) + tf.exp(-tf.abs(x))
              + tf.math.log(tf.abs(x) + 1) + tf.sqrt(tf.abs(x)) + tf.math.rsqrt(tf.abs(x) + 1)
              + tf.square(x) + tf.math.erf(x) + tf.floor(x) + tf.math.ceil(x) + tf.math.reciprocal(x * x + 1)
              + tf.sin(x) + tf.cos(x) + tf.sign(x) + tf.round(x) + tf.nn.relu(-x), [(3, 7)]),
    "leaky_relu": (lambda x: tf.nn.leaky_relu(x, 0.1), [(2, 3, 3, 2)]),
    "reductions_nchw": (lambda x: (tf.reduce_mean(x, [1, 2]) + tf.reduce_max(x, [1, 2])
                                   + tf.reduce_min(x, [1, 2]) + tf.reduce_sum(x, [1, 2])
                                   + tf.reduce_prod(tf.sigmoid(x), [1, 2])),
                        [(1, 3, 4, 5)]),
    "reduction_keepdims_channel": (lambda x: tf.reduce_mean(x, [3], keepdims=True) * x, [(1, 3, 4, 5)]),
    "reduction_mixed": (lambda x: tf.reduce_sum(x, [1]), [(1, 3, 4, 5)]),
    "matmul_transposes": (lambda x, y: tf.matmul(x, y, transpose_a=True, transpose_b=True) @ _w(3, 2),
                          [(4, 5), (3, 4)]),
    "matmul_const_transposed": (lambda x: tf.matmul(x, _w(3, 4), transpose_b=True), [(2, 4)]),
    "batch_matmul": (lambda x, y: tf.linalg.matmul(x, y, adjoint_b=True), [(2, 3, 4), (2, 5, 4)]),
    "softmax": (lambda x: tf.nn.softmax(x) + tf.nn.log_softmax(x), [(1, 3, 4, 6)]),
    "pads": (lambda x: tf.pad(tf.pad(x, [[0, 0], [1, 2], [0, 1], [0, 0]], constant_values=0.5),
                              [[0, 0], [1, 1], [2, 0], [0, 0]], mode="REFLECT"), [(1, 4, 5, 2)]),
    "pad_2d": (lambda x: tf.pad(x, [[1, 0], [0, 2]]), [(3, 4)]),
    "concat_nchw": (lambda x: tf.concat([tf.nn.relu(x), tf.nn.conv2d(x, _w(1, 1, 2, 3), 1, "VALID")], 3),
                    [(1, 4, 4, 2)]),
    "concat_2d": (lambda x, y: tf.concat([x, y], 0), [(2, 3), (4, 3)]),
    "reshape_squeeze_expand_transpose": (
        lambda x: tf.transpose(tf.expand_dims(tf.squeeze(tf.reshape(x, [2, 1, 12]), [1]), 0), [2, 0, 1]),
        [(2, 3, 4)]),
    "reshape_se_block": (lambda x: x * tf.reshape(tf.reduce_mean(x, [1, 2]), [-1, 1, 1, 4]), [(1, 3, 3, 4)]),
    "squeeze_all": (lambda x: tf.squeeze(x), [(1, 3, 1, 2)]),
    "raw_add": (lambda x, y: tf.raw_ops.Add(x=x, y=y), [(2, 3), (2, 3)]),
    "batch_matmul_v3": (lambda x, y: tf.raw_ops.BatchMatMulV3(x=x, y=y, Tout=tf.float32), [(2, 3, 4), (2, 4, 5)]),
    "fused_batch_norm_v2": (lambda x: tf.raw_ops.FusedBatchNormV2(
        x=x, scale=_w(3), offset=_w(3), mean=_w(3), variance=tf.abs(_w(3)) + 0.5, is_training=False)[0],
        [(1, 4, 5, 3)]),
    "strided_slice_nchw": (lambda x: tf.nn.relu(x)[:, 1:, :-1:2, :], [(1, 5, 6, 3)]),
    "strided_slice_shrink": (lambda x: x[1, ::-1, 2:] + x[:, 0, 2:][0], [(3, 4, 5)]),
    "einsum_erfc": (lambda x: tf.math.erfc(tf.einsum("bij,jk->bik", x, _w(4, 3))), [(2, 5, 4)]),
    "cast_identity": (lambda x: tf.cast(tf.cast(tf.identity(tf.stop_gradient(x)) * 3, tf.int32), tf.float32),
                      [(1, 3, 3, 2)]),
    # Decoder ops (Keras models of each variant: test_tf_decoder_ops.py)
    "conv2d_transpose_same_odd": (lambda x: tf.nn.conv2d_transpose(x, _w(3, 3, 4, 3), [1, 9, 12, 4], 2, "SAME"),
                                  [(1, 5, 6, 3)]),
    "conv2d_transpose_explicit": (lambda x: tf.nn.conv2d_transpose(
        x, _w(3, 3, 2, 3), [1, 8, 10, 2], 2, [[0, 0], [1, 0], [0, 1], [0, 0]]), [(1, 4, 5, 3)]),
    "resize_bilinear_nearest": (lambda x: tf.image.resize(x, (7, 9), "bilinear")
                                + tf.image.resize(x, (7, 9), "nearest"), [(1, 4, 5, 3)]),
    "depth_to_space_space_to_depth": (lambda x: tf.nn.space_to_depth(tf.nn.depth_to_space(x, 2) * 2, 3),
                                      [(1, 3, 6, 8)]),
}


def _run_case(fn: Callable[..., object], shapes: list[tuple[int, ...]], tmp_path: Path, *,
              free_batch: bool = False) -> float:
    from convert.exporters.onnx import EXPORTER
    from convert.frontends.tensorflow.graph import graph_from_function
    from convert.frontends.tensorflow.loader import convert_graph
    from convert.parity.runtimes.onnxruntime import open_runtime as open_ort

    specs = [tf.TensorSpec((None, *s[1:]) if free_batch else s, tf.float32, name=f"x{i}")
             for i, s in enumerate(shapes)]
    concrete = tf.function(lambda *a: {"y": fn(*a)}).get_concrete_function(*specs)
    graph = graph_from_function(concrete, [s.name for s in specs], ["y"], source="case")
    model = convert_graph(graph, Options())
    passes.standard_pipeline(validate=True)(model)
    EXPORTER.save(model, tmp_path / "m.onnx", Options())
    ours = open_ort([tmp_path / "m.onnx"], Options(extra={"device": "cpu"}))
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    want = np.asarray(concrete(*[tf.constant(x) for x in xs])["y"])
    feeds = {s.name: (x.transpose(0, 3, 1, 2) if x.ndim == 4 else x) for s, x in zip(specs, xs, strict=True)}
    got = ours.run(feeds)["y"]  # type: ignore[attr-defined]
    if got.ndim == 4:
        got = got.transpose(0, 2, 3, 1)
    assert got.shape == want.shape, (got.shape, want.shape)
    return float(np.abs(got.astype(np.float64) - want).max() / max(np.abs(want).max(), 1e-6))


@pytest.mark.parametrize("case", list(CASES))
def test_op_matches_tensorflow(case: str, tmp_path: Path) -> None:
    fn, shapes = CASES[case]
    err = _run_case(fn, shapes, tmp_path)
    assert err <= RTOL, f"{case}: max rel error {err:.2e}"


def _onnx_ops(tmp_path: Path) -> list[str]:
    import onnx

    return [n.op_type for n in onnx.load(str(tmp_path / "m.onnx")).graph.node]


def test_bias_add_after_conv_becomes_its_bias(tmp_path: Path) -> None:
    w, b = _w(3, 3, 3, 4), _w(4)
    err = _run_case(lambda x: tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), b), [(1, 5, 6, 3)], tmp_path)
    assert err <= RTOL, err
    assert _onnx_ops(tmp_path) == ["Conv"]


def test_conv_read_twice_keeps_its_add(tmp_path: Path) -> None:
    w, b = _w(3, 3, 3, 4), _w(4)

    def fn(x: object) -> object:
        y = tf.nn.conv2d(x, w, 1, "SAME")
        return tf.nn.bias_add(y, b) * y

    err = _run_case(fn, [(1, 5, 6, 3)], tmp_path)
    assert err <= RTOL, err
    assert _onnx_ops(tmp_path) == ["Conv", "Add", "Mul"]


def test_per_channel_mul_and_add_after_depthwise_conv_fold_into_it(tmp_path: Path) -> None:
    """A batch norm TensorFlow folded to Mul + Add after a depthwise convolution -> one Conv."""
    w, scale, shift = _w(3, 3, 3, 2), _w(6), _w(6)
    err = _run_case(lambda x: tf.nn.depthwise_conv2d(x, w, [1, 2, 2, 1], "SAME") * scale + shift,
                    [(1, 6, 8, 3)], tmp_path)
    assert err <= RTOL, err
    assert _onnx_ops(tmp_path) == ["Conv"]


def test_mul_that_is_not_per_channel_stays(tmp_path: Path) -> None:
    w, m = _w(3, 3, 3, 4), _w(5, 6, 4)
    err = _run_case(lambda x: tf.nn.conv2d(x, w, 1, "SAME") * m, [(1, 5, 6, 3)], tmp_path)
    assert err <= RTOL, err
    assert _onnx_ops(tmp_path) == ["Conv", "Mul"]


def test_zero_pad_before_a_conv_becomes_its_pads(tmp_path: Path) -> None:
    """Keras' ZeroPadding2D + a strided VALID convolution (MobileNetV2, ResNet50) -> one Conv."""
    w = _w(3, 3, 3, 4)
    err = _run_case(lambda x: tf.nn.conv2d(tf.pad(tf.nn.relu(x), [[0, 0], [0, 1], [1, 1], [0, 0]]), w, 2, "VALID"),
                    [(1, 6, 7, 3)], tmp_path)
    assert err <= RTOL, err
    assert _onnx_ops(tmp_path) == ["Relu", "Conv"]


def test_pad_with_a_value_or_read_twice_stays(tmp_path: Path) -> None:
    w = _w(3, 3, 3, 4)

    def fn(x: object) -> object:
        p = tf.pad(tf.nn.relu(x), [[0, 0], [1, 1], [1, 1], [0, 0]], constant_values=1.5)
        q = tf.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]])
        return tf.nn.conv2d(p, w, 1, "VALID") + tf.nn.conv2d(q, w, 1, "VALID") + tf.reduce_sum(q)

    err = _run_case(fn, [(1, 5, 6, 3)], tmp_path)
    assert err <= RTOL, err
    assert _onnx_ops(tmp_path).count("Pad") == 2


def test_rank4_tensordot_becomes_a_1x1_conv(tmp_path: Path) -> None:
    """Keras' Dense on [N, H, W, C] (ConvNeXt): tensordot over a free batch -> one Conv, no Transpose."""
    w, b = _w(3, 5), _w(5)
    err = _run_case(lambda x: tf.nn.relu(tf.nn.bias_add(tf.tensordot(x, w, [[3], [0]]), b)), [(2, 4, 6, 3)],
                    tmp_path, free_batch=True)
    assert err <= RTOL, err
    assert _onnx_ops(tmp_path) == ["Conv", "Relu"]


def test_tensordot_over_other_axes_is_left_alone(tmp_path: Path) -> None:
    w = _w(6, 5)
    err = _run_case(lambda x: tf.tensordot(x, w, [[2], [0]]), [(2, 4, 6, 3)], tmp_path, free_batch=True)
    assert err <= RTOL, err
    assert "Conv" not in _onnx_ops(tmp_path)


# Registered op types exercised by the model tests (test_tensorflow_models.py) rather than here.
# Shape/GatherV2/Pack appear only with a free dimension (Keras' Tensordot in the transformer block).
BY_MODEL_TESTS = {"Placeholder", "Const", "SpaceToBatchND", "BatchToSpaceND", "Shape", "GatherV2", "Pack",
                  # test_tf_recurrent.py (the recognised loops; go_backwards; Keras' Embedding), test_tf_decoder_ops.py
                  "KerasRecurrent", "ReverseV2", "Less", "SelectV2", "Tile",
                  # test_tf_control_flow.py (loops, conditionals, the lists in a loop body); below, with a free batch
                  "LoweredWhile", "LoweredCond", "TensorListGetItem", "TensorListSetItem",
                  "ZerosLike", "OnesLike", "Fill", "Split", "SplitV", "FloorMod", "NotEqual", "Any", "All"}


def _mask_and_split(x: tf.Tensor) -> tf.Tensor:
    """Ops Keras' masked layers and tf.while_loops use; a free batch keeps TF from folding the *Like ones."""
    a, b = tf.split(tf.math.floormod(x, 0.7), [1, -1], axis=1)  # SplitV, float FloorMod
    c, d = tf.split(x, 2, axis=2)  # Split
    keep = tf.cast(tf.reduce_any(tf.not_equal(tf.round(x), 0.0), axis=2, keepdims=True), tf.float32)
    every = tf.cast(tf.reduce_all(x > -1.5, axis=2, keepdims=True), tf.float32)
    filled = tf.zeros_like(x) + tf.ones_like(x) * 0.5 + tf.fill(tf.shape(x), 0.25)
    return tf.concat([a, b], 1) * keep + every + filled + tf.concat([d, c], 2)


def test_mask_and_split_ops_with_a_free_batch(tmp_path: Path) -> None:
    err = _run_case(_mask_and_split, [(4, 3, 4)], tmp_path, free_batch=True)
    assert err <= RTOL, err
    ops = _onnx_ops(tmp_path)
    assert {"Split", "Mod", "Not", "ReduceMax", "ReduceMin", "Expand"} <= set(ops), ops


def test_the_same_op_on_the_same_input_is_computed_once(tmp_path: Path) -> None:
    """Keras repeats work (NASNet: a separate ReLU layer per branch on the same tensor); it is merged."""
    w1, w2 = _w(1, 1, 3, 4), _w(1, 1, 3, 4)

    def fn(x: tf.Tensor) -> tf.Tensor:
        a = tf.nn.conv2d(tf.nn.relu(x), w1, 1, "VALID")
        b = tf.nn.conv2d(tf.nn.relu(x), w2, 1, "VALID")
        return tf.nn.avg_pool2d(a, 2, 2, "VALID") + tf.nn.avg_pool2d(a, 2, 2, "VALID") * b[:, ::2, ::2, :]

    err = _run_case(fn, [(1, 6, 6, 3)], tmp_path)
    assert err <= RTOL, err
    ops = _onnx_ops(tmp_path)
    assert ops.count("Relu") == 1 and ops.count("AveragePool") == 1 and ops.count("Conv") == 2, ops


def test_caffe_hint_for_free_dims_is_in_the_declared_nchw_order() -> None:
    """The graph input is NCHW and --input-shape takes that order (as `convert inspect` prints it): so does the hint."""
    import convert.exporters.caffe as caffe
    from convert.frontends.tensorflow.graph import graph_from_function
    from convert.frontends.tensorflow.loader import convert_graph
    from convert.ir import UnsupportedOpsError

    w = _w(3, 3, 3, 4)

    def fn(x: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"y": tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME"))}

    spec = tf.TensorSpec((1, None, None, 3), tf.float32, name="image")
    model = convert_graph(graph_from_function(tf.function(fn).get_concrete_function(spec), ["image"], ["y"],
                                              source="case"), Options())
    passes.standard_pipeline()(model)
    with pytest.raises(UnsupportedOpsError, match=r"--input-shape image=1,3,\?,\?"):
        caffe.EXPORTER.save(model, Path("/nonexistent/never.prototxt"), Options())


def test_every_registered_op_is_exercised(tmp_path: Path) -> None:
    from convert.frontends.tensorflow.graph import graph_from_function
    from convert.frontends.tensorflow.loader import live_nodes
    from convert.frontends.tensorflow.ops import OPS

    seen: set[str] = set()
    for fn, shapes in CASES.values():
        specs = [tf.TensorSpec(s, tf.float32) for s in shapes]
        concrete = tf.function(lambda *a, f=fn: {"y": f(*a)}).get_concrete_function(*specs)
        graph = graph_from_function(concrete, [f"args_{i}" for i in range(len(shapes))], ["y"], source="case")
        seen |= {n.op for n in live_nodes(graph)}
    registered = OPS.keys()  # a Registry is not iterable
    missing = sorted(str(k) for k in registered if k not in seen and k not in BY_MODEL_TESTS)
    assert not missing, f"registered but never exercised: {missing}"
