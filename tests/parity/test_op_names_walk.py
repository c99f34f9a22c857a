"""The parity runtime finds which op types a model holds by walking its protobuf fields, jumping over
weights; the answer is onnx's own parse of the same file, subgraphs and functions included."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from convert.parity.runtimes.onnxruntime import _op_names_in

WORDS = ["TopK", "NonZero", "QuantizeLinear", "RandomNormal", "Relu", "Neg", "Abs", "MatMul", "If", "Custom"]


def _model_with_subgraphs() -> onnx.ModelProto:
    then = helper.make_graph([helper.make_node("TopK", ["x", "k"], ["t", "ti"]),
                              helper.make_node("Neg", ["t"], ["y1"])],
                             "then", [], [helper.make_tensor_value_info("y1", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Abs", ["x"], ["y2"])], "else", [],
                              [helper.make_tensor_value_info("y2", TensorProto.FLOAT, None)])
    big = numpy_helper.from_array(np.arange(1 << 20, dtype=np.float32).reshape(1024, 1024), "w")  # 4 MiB inline
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("ReduceSum", ["m"], ["s"], keepdims=0),
             helper.make_node("Cast", ["s"], ["c"], to=TensorProto.BOOL),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
             helper.make_node("Twice", ["y"], ["z"], domain="local")]
    twice = helper.make_function("local", "Twice", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
                                 [helper.make_opsetid("", 17)])
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                              [big, numpy_helper.from_array(np.array([2], np.int64), "k")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                             functions=[twice])


def _parsed_op_types(model: onnx.ModelProto) -> set[str]:
    found: set[str] = set()

    def graph(g: onnx.GraphProto) -> None:
        for node in g.node:
            found.add(node.op_type)
            for attr in node.attribute:
                if attr.HasField("g"):
                    graph(attr.g)
                for sub in attr.graphs:
                    graph(sub)

    graph(model.graph)
    for fn in model.functions:
        for node in fn.node:
            found.add(node.op_type)
    return found


def test_walk_finds_what_onnx_parses(tmp_path):
    model = _model_with_subgraphs()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    expected = _parsed_op_types(onnx.load(path)) & set(WORDS)
    assert expected == {"TopK", "Neg", "Abs", "MatMul", "If", "Relu"}
    assert _op_names_in(path, WORDS) == expected


def test_a_name_is_not_an_op_type(tmp_path):
    """A node or tensor named like an op is not that op (the byte scan said it was)."""
    graph = helper.make_graph([helper.make_node("Relu", ["TopK_in"], ["NonZero_out"], name="TopK")], "g",
                              [helper.make_tensor_value_info("TopK_in", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("NonZero_out", TensorProto.FLOAT, [2])])
    path = tmp_path / "named.onnx"
    onnx.save(helper.make_model(graph, ir_version=8), path)
    assert _op_names_in(path, WORDS) == {"Relu"}


def test_damaged_file_falls_back_to_a_scan(tmp_path):
    path = tmp_path / "cut.onnx"
    data = _model_with_subgraphs().SerializeToString()
    path.write_bytes(data[: len(data) // 2] + b"TopK")  # cut mid-weight: the walk cannot follow it
    assert "TopK" in _op_names_in(path, WORDS)
    assert _op_names_in(tmp_path / "missing.onnx", WORDS) == set()
