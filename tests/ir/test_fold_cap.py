"""A constant computed from a corrupt shape is not materialised: one line, exit 2, nothing written.

A 300-byte ONNX file whose Conv weight is ``ConstantOfShape([2^20, 2^20, 1, 1])`` (4 TiB) used to
reach a MemoryError (an internal error, exit 3) when the Caffe exporter wrote the folded weight.
``FoldWeights`` leaves a node whose output would exceed ``MAX_FOLD_BYTES`` as it is, and the
exporter names it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from convert.ir.passes.fold_weights import MAX_FOLD_BYTES


def test_weight_from_a_corrupt_shape_is_refused_in_one_line(tmp_path: Path) -> None:
    dims = [2**20, 2**20, 1, 1]
    assert int(np.prod(dims, dtype=object)) * 4 > MAX_FOLD_BYTES
    half = numpy_helper.from_array(np.array([0.5], np.float32))
    graph = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["shape"], ["w"], value=half),
         helper.make_node("Conv", ["x", "w"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2**20, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(dims, np.int64), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "bomb.onnx")
    assert (tmp_path / "bomb.onnx").stat().st_size < 1000
    done = subprocess.run([sys.executable, "-m", "convert", "onnx:caffe", str(tmp_path / "bomb.onnx"), "-o",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "ConstantOfShape" in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bomb.onnx"]
