"""Passes: BatchNorm folding (lazy, exact), constant folding, DCE, validation, pass errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from convert import ir
from convert.exporters.onnx import save_onnx

ATOL_FP32 = 1e-5


def _conv_bn_model(tmp_path: Path, rng: np.random.Generator) -> tuple[ir.Model, dict[str, np.ndarray]]:
    w = (rng.standard_normal((8, 3, 3, 3)) / 5).astype(np.float32)
    weights = tmp_path / "w.bin"
    header = b"\x00" * 16  # the slice starts at an offset, as in real weight files
    weights.write_bytes(header + w.tobytes())
    b = ir.GraphBuilder("convbn", source="demo.cfg")
    x = b.input("x", ir.DataType.FLOAT, (1, 3, 16, 16))
    wv = b.initializer(ir.file_slice(weights, 16, "float32", w.shape, name="conv.weight"))
    y = b.op("Conv", [x, wv], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, name="conv",
             prov=ir.Provenance(line=3, kind="convolutional", layer="0"))
    params = {
        "gamma": rng.uniform(0.5, 1.5, 8), "beta": rng.standard_normal(8) * 0.1,
        "mean": rng.standard_normal(8) * 0.1, "var": rng.uniform(0.1, 2.0, 8),
    }
    vals = [b.const(params[k].astype(np.float32), k) for k in ("gamma", "beta", "mean", "var")]
    z = b.op("BatchNormalization", [y, *vals], {"epsilon": 1e-3}, name="bn")
    b.output(b.op("Relu", [z], name="relu"), "out")
    return b.build(), {"w": w, **params}


def _numpy_ref(x: np.ndarray, p: dict[str, np.ndarray]) -> np.ndarray:
    from numpy.lib.stride_tricks import sliding_window_view

    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = sliding_window_view(xp, (3, 3), axis=(2, 3))  # 1,3,16,16,3,3
    conv = np.einsum("nchwij,ocij->nohw", win, p["w"])
    s = (p["gamma"] / np.sqrt(p["var"] + 1e-3))[None, :, None, None]
    bn = (conv - p["mean"][None, :, None, None]) * s + p["beta"][None, :, None, None]
    return np.maximum(bn, 0)


def test_fold_batchnorm_is_lazy_and_exact(tmp_path: Path, rng: np.random.Generator) -> None:
    model, params = _conv_bn_model(tmp_path, rng)
    result = ir.passes.PassManager([ir.passes.FoldBatchNorm(), ir.passes.EliminateDeadCode()], validate=True)(model)
    assert result.modified
    ops = [n.op_type for n in model.graph]
    assert ops == ["Conv", "Relu"]
    conv = next(iter(model.graph))
    assert isinstance(conv.inputs[1].const_value, ir.LazyTensor)  # computed when written, not now
    assert ir.get_provenance(conv).line == 3
    out = save_onnx(model, tmp_path / "o.onnx", ir.Options())[0]
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    ref = _numpy_ref(x.astype(np.float64), params)
    assert float(np.abs(ref).max()) > 0.1
    assert float(np.abs(got - ref).max()) / float(np.abs(ref).max()) <= ATOL_FP32


def test_fold_batchnorm_reports_why_it_skips(tmp_path: Path, rng: np.random.Generator) -> None:
    b = ir.GraphBuilder("nofold")
    x = b.input("x", ir.DataType.FLOAT, (1, 4, 4, 4))
    vals = [b.const(np.ones(4, np.float32), f"p{i}") for i in range(4)]
    b.output(b.op("BatchNormalization", [x, *vals]), "y")
    model = b.build()
    p = ir.passes.FoldBatchNorm()
    assert not p(model).modified
    assert "not produced by a Conv" in p.skipped[0]


def test_validator_catches_use_before_definition() -> None:
    b = ir.GraphBuilder("bad")
    x = b.input("x", ir.DataType.FLOAT, (2,))
    y = b.op("Relu", [x], name="first")
    z = b.op("Neg", [y], name="second")
    b.output(z, "z")
    model = b.build()
    first, _second = list(model.graph)
    model.graph.remove(first)
    model.graph.append(first)  # now 'second' uses a value defined after it
    with pytest.raises(ir.ConvertError, match=r"'second'.*used before it is defined"):
        ir.passes.ValidateGraph()(model)
    assert ir.passes.TopologicalSort()(model).modified
    ir.passes.ValidateGraph()(model)


def test_pass_error_names_the_pass_and_the_ones_before() -> None:
    """A pass refusing the model is the user's error (PassError); a pass crashing is a bug (InternalError)."""

    class Refuse(ir.passes.Pass):
        def call(self, model: ir.Model) -> ir.passes.PassResult:
            raise ir.ExportError("cannot fold this")

    class Boom(ir.passes.Pass):
        def call(self, model: ir.Model) -> ir.passes.PassResult:
            raise RuntimeError("kaput")

    def model() -> ir.Model:
        b = ir.GraphBuilder("g")
        b.output(b.op("Relu", [b.input("x", ir.DataType.FLOAT, (1,))]), "y")
        return b.build()

    with pytest.raises(ir.PassError, match=r"pass 'Refuse' failed \(after: TopologicalSort\): cannot fold this"):
        ir.passes.PassManager([ir.passes.TopologicalSort(), Refuse()])(model())
    with pytest.raises(ir.InternalError, match=r"pass 'Boom' \(after: TopologicalSort\): RuntimeError: kaput") as info:
        ir.passes.PassManager([ir.passes.TopologicalSort(), Boom()])(model())
    assert not isinstance(info.value, ir.ConvertError)
    assert isinstance(info.value.__cause__, RuntimeError)


def test_fold_constants_and_dce() -> None:
    b = ir.GraphBuilder("shape")
    x = b.input("x", ir.DataType.FLOAT, (2, 3, 4))
    shape = b.op("Shape", [x])
    two = b.op("Gather", [shape, b.const(np.array([0], np.int64))], {"axis": 0})
    target = b.op("Concat", [two, b.const(np.array([-1], np.int64))], {"axis": 0})
    b.op("Neg", [x], name="dead")
    b.output(b.op("Reshape", [x, target]), "y")
    model = b.build()
    ir.passes.standard_pipeline(validate=True)(model)
    assert [n.op_type for n in model.graph] == ["Reshape"]
    reshape = next(iter(model.graph))
    assert reshape.inputs[1].const_value.numpy().tolist() == [2, -1]
    assert list(model.graph.outputs[0].shape) == [2, 12]


def test_builder_names_are_unique_and_provenance_described() -> None:
    b = ir.GraphBuilder("n", source="net.prototxt")
    x = b.input("x", ir.DataType.FLOAT, (1,))
    a = b.op("Relu", [x], name="act", prov=ir.Provenance(layer="relu1", kind="ReLU", line=7))
    c = b.op("Relu", [a], name="act")
    assert a.name != c.name
    node = a.producer()
    assert ir.describe(node) == "node 'act' (Relu) from net.prototxt:7 [ReLU] 'relu1'"


def test_output_name_taken_by_another_value() -> None:
    b = ir.GraphBuilder("names")
    x = b.input("x", ir.DataType.FLOAT, (2,))
    y = b.op("Relu", [x], name="y")
    z = b.op("Neg", [y], name="z")
    b.output(z, "y")  # the output must be called 'y'; the Relu's value is renamed
    model = b.build()
    ir.passes.ValidateGraph()(model)
    assert model.graph.outputs[0].name == "y" and y.name != "y"


def test_scalar_constants_stay_scalar() -> None:
    b = ir.GraphBuilder("scalars")
    v = b.const(np.array(3, np.int64), "idx")
    assert list(v.shape) == [] and v.const_value.numpy().shape == ()


_DEAD_CODE_MODELS = {
    "dead chain, unused initializer, dropout's mask": """
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 3] x) => (float[2, 3] y) <float[3] w = {1, 2, 3}, float[3] unused = {4, 5, 6}> {
            d, mask = Dropout (x)
            dead = Relu (x)
            dead2 = Neg (dead)
            y = Add (d, w)
        }""",
    "batch norm: training outputs unused, training_mode 0 or absent": """
        <ir_version: 8, opset_import: ["" : 15]>
        g (float[1, 2, 3, 3] x, float[2] s, float[2] b, float[2] m, float[2] v) => (float[1, 2, 3, 3] y,
                                                                                  float[1, 2, 3, 3] z) {
            y, rm, rv = BatchNormalization <training_mode = 0> (x, s, b, m, v)
            z = BatchNormalization (x, s, b, m, v)
        }""",
    "batch norm in training mode keeps its outputs": """
        <ir_version: 8, opset_import: ["" : 15]>
        g (float[1, 2, 3, 3] x, float[2] s, float[2] b, float[2] m, float[2] v) => (float[1, 2, 3, 3] y) {
            y, rm, rv = BatchNormalization <training_mode = 1> (x, s, b, m, v)
        }""",
    "max pool's indices, top-k's values, split's variadic outputs": """
        <ir_version: 8, opset_import: ["" : 13]>
        g (float[1, 1, 4, 4] x, int64[1] k) => (float[1, 1, 2, 2] p, int64[1, 1, 4, 1] i, float[1, 1, 2, 4] a) {
            p, idx = MaxPool <kernel_shape = [2, 2], strides = [2, 2]> (x)
            vals, i = TopK <axis = -1> (x, k)
            a, b = Split <axis = 2> (x)
        }""",
    "dead nodes inside an If's branches, an op of another domain": """
        <ir_version: 8, opset_import: ["" : 17, "custom.domain" : 1]>
        g (bool c, float[2] x) => (float[2] y, float[2] q) {
            y = If (c) <then_branch = t () => (float[2] a) { dead = Relu (x) a = Neg (x) },
                        else_branch = e () => (float[2] bb) { bb = Abs (x) }>
            q, unused_out = custom.domain.Thing (x)
        }""",
}


@pytest.mark.parametrize("name", sorted(_DEAD_CODE_MODELS))
def test_dead_code_elimination_is_onnx_irs(name: str) -> None:
    """EliminateDeadCode (convert/ir/passes/dce.py, written for speed) leaves the model onnx-ir's own
    RemoveUnusedNodesPass leaves, byte for byte."""
    import onnx
    import onnx_ir
    from onnx_ir.passes.common import RemoveUnusedNodesPass

    proto = onnx.parser.parse_model(_DEAD_CODE_MODELS[name])
    ours, theirs = onnx_ir.serde.deserialize_model(proto), onnx_ir.serde.deserialize_model(proto)
    changed = ir.passes.EliminateDeadCode()(ours).modified
    assert changed == RemoveUnusedNodesPass()(theirs).modified
    assert onnx_ir.serde.serialize_model(ours).SerializeToString() == \
        onnx_ir.serde.serialize_model(theirs).SerializeToString()
    if name.startswith("dead chain"):
        assert changed and [n.op_type for n in ours.graph] == ["Dropout", "Add"]
        assert "unused" not in ours.graph.initializers and len(next(iter(ours.graph)).outputs) == 1


def test_shape_inference_asks_onnx_only_where_something_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    from convert.ir.passes import shape_inference

    asked: list[object] = []
    real = shape_inference._infer
    monkeypatch.setattr(shape_inference, "_infer", lambda *a: asked.append(a) or real(*a))
    b = ir.GraphBuilder("known")
    x = b.input("x", ir.DataType.FLOAT, (2, 3))
    y = b.op("Relu", [x])
    y.dtype, y.shape = ir.DataType.FLOAT, ir.Shape([2, 3])
    b.output(y, "y")
    model = b.build()
    assert not ir.passes.InferShapes()(model).modified and not asked  # all known: onnx not asked
    b = ir.GraphBuilder("unknown")
    x = b.input("x", ir.DataType.FLOAT, (2, 3))
    b.output(b.op("Neg", [b.op("Relu", [x])]), "y")
    model = b.build()
    assert ir.passes.InferShapes()(model).modified and asked
    assert all(list(v.shape) == [2, 3] and v.dtype == ir.DataType.FLOAT for n in model.graph for v in n.outputs)


def test_shape_inference_propagates_data_only_where_sizes_are_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    import onnx

    runs: list[bool] = []
    real = onnx.shape_inference.infer_shapes

    def counted(proto: object, **kwargs: object) -> object:
        runs.append(bool(kwargs.get("data_prop")))
        return real(proto, **kwargs)

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", counted)
    b = ir.GraphBuilder("static")
    x = b.input("x", ir.DataType.FLOAT, (2, 3))
    b.output(b.op("Neg", [b.op("Relu", [x])]), "y")
    ir.passes.InferShapes()(b.build())
    assert runs == [False]  # every size known after the first run
    runs.clear()
    b = ir.GraphBuilder("sizes_from_data")
    x = b.input("x", ir.DataType.FLOAT, (2, 3))
    swapped = b.op("Gather", [b.op("Shape", [x]), b.const(np.array([1, 0], np.int64))], {"axis": 0})
    y = b.op("Reshape", [x, swapped])
    b.output(y, "y")
    model = b.build()
    ir.passes.InferShapes()(model)
    assert runs == [False, True] and list(y.shape) == [3, 2]
