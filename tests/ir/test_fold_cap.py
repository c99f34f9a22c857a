"""A constant computed from a corrupt shape is not materialised: one line, exit 2, nothing written.

A 300-byte ONNX file whose Conv weight is ``ConstantOfShape([2^20, 2^20, 1, 1])`` (4 TiB) used to
reach a MemoryError (an internal error, exit 3) when the Caffe exporter wrote the folded weight.
``FoldWeights`` refuses, naming the node, a folded constant larger than the model's bound
(``max(256 MiB, 2 x stored)`` per tensor, #29), before computing any of it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
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


def _constant_of_shape_add(n: int) -> onnx.ModelProto:
    """``Add(x, ConstantOfShape([1, n]))``: a file of under 200 bytes whose folded constant takes 4n bytes."""
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["shp"], value=helper.make_tensor("s", TensorProto.INT64, [2], [1, n])),
         helper.make_node("ConstantOfShape", ["shp"], ["c"],
                          value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
         helper.make_node("Add", ["x", "c"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("n", [2**27, 2**29], ids=["512MiB", "2GiB"])
def test_a_large_constant_from_a_tiny_file_is_refused_before_it_is_computed(tmp_path: Path, n: int) -> None:
    """#29: a 180-byte file whose folded constant takes 2 GiB exited 0 after 2.1 GB of memory (512 MiB: 19 s)."""
    from click.testing import CliRunner

    from convert.cli import cli

    onnx.save(_constant_of_shape_add(n), tmp_path / "m.onnx")
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["onnx:caffe", str(tmp_path / "m.onnx"), "-o", f"{out}/", "--no-check", "-q"])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, result.stderr
    assert len(lines) == 1 and "ConstantOfShape" in lines[0] and "computes a" in lines[0], lines
    assert "at most 256.0 MiB per computed weight" in lines[0]
    assert not out.exists() or not any(out.iterdir())


def test_the_fold_bound_grows_with_what_the_model_stores() -> None:
    """One folded tensor may take max(256 MiB, 2 x stored bytes); all of them max(1 GiB, 2 x stored)."""
    import onnx_ir as oir

    from convert import ir
    from convert.ir.passes.fold_weights import FOLD_CEILING, FOLD_TOTAL_CEILING, fold_limits

    graph = oir.Graph([], [], nodes=[], name="g")
    model = oir.Model(graph, ir_version=8)
    assert fold_limits(model) == (0, FOLD_CEILING, FOLD_TOTAL_CEILING)
    big = ir.lazy(lambda: np.zeros(0), np.float32, [300, 2**20], name="w")  # 1.17 GiB, never read
    graph.register_initializer(oir.Value(name="w", shape=oir.Shape([300, 2**20]), type=oir.TensorType(big.dtype),
                                         const_value=big))
    stored = 300 * 2**20 * 4
    assert fold_limits(model) == (stored, 2 * stored, 2 * stored)
