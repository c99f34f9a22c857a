"""run_parity takes runtimes already open on both sides: several input sets, each model loaded once."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import convert.parity as parity


def test_two_input_sets_one_session_each(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Tanh", ["m"], ["y"])],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], [w])
    src, dst = tmp_path / "src.onnx", tmp_path / "dst.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), src)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), dst)
    source = parity.open_runtime("onnx", [src], parity.source_options("onnx", parity.Options()))
    converted = parity.open_runtime("onnx", [dst], parity.Options())
    opened: list[str] = []
    real = parity.open_runtime
    monkeypatch.setattr(parity, "open_runtime", lambda fmt, paths, options: opened.append(fmt) or real(fmt, paths,
                                                                                                       options))
    reports = [parity.run_parity("onnx", [src], "onnx", [dst], source_runtime=source, dest_runtime=converted,
                                 inputs={"x": rng.standard_normal((4, 16)).astype(np.float32)}) for _ in range(2)]
    assert opened == []  # neither model opened again
    assert all(r.passed for r in reports)
    assert reports[0].outputs[0].ref_std > 0.1 and reports[1].outputs[0].ref_std > 0.1
