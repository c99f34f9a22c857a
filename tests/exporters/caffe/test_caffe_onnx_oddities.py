"""ONNX forms the Caffe route met as internal errors (exit 3) that ONNX -> ONNX handled (#48).

* A ``sparse_initializer`` read by a node: read as the dense tensor it stands for (what ONNX Runtime
  does), so ONNX -> Caffe converts it; real Caffe runs the result against ONNX Runtime on the
  original file. Malformed sparse tensors are one line, exit 2.
* An attribute that refers to a function's attribute (``ref_attr_name``) outside any function:
  nothing gives it a value, so one line, exit 2, nothing written.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from convert import api
from convert.ir import ModelFormatError
from convert.parity.runtimes.caffe_runtime import RealCaffeRuntime, find_caffe

R = np.random.default_rng(11)
W = np.where(R.random((5, 8)) < 0.4, R.standard_normal((5, 8)), 0).astype(np.float32)
B = np.array([0, 0.5, 0, -1.25, 0], np.float32)


def _sparse(dense: np.ndarray, name: str, coordinates: bool) -> onnx.SparseTensorProto:
    at = np.nonzero(dense.ravel())[0]
    values = numpy_helper.from_array(dense.ravel()[at], name)
    index = np.stack(np.unravel_index(at, dense.shape), axis=1) if coordinates else at
    return helper.make_sparse_tensor(values, numpy_helper.from_array(index.astype(np.int64), f"{name}_index"),
                                     list(dense.shape))


def _gemm_model(path: Path, sparse: list[onnx.SparseTensorProto]) -> Path:
    graph = helper.make_graph([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])])
    graph.sparse_initializer.extend(sparse)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


@pytest.mark.parametrize("flavor", ["ssd", "bvlc"])
def test_sparse_initializers_are_densified_and_run_in_real_caffe(flavor: str, tmp_path: Path) -> None:
    src = _gemm_model(tmp_path / "sparse.onnx", [_sparse(W, "w", coordinates=True), _sparse(B, "b", False)])
    caffe_dir = find_caffe(flavor)
    if caffe_dir is None:
        pytest.skip("real Caffe is not built here: run scripts/build_caffe")
    result = api.convert([src], to="caffe", out=tmp_path / flavor / "net", caffe_flavor=flavor)  # was exit 3
    assert result.report is not None and result.report.verdict == "PASS", result.report.table()
    x = R.standard_normal((1, 8)).astype(np.float32)
    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(ref, x.astype(np.float64) @ W.T.astype(np.float64) + B, rtol=1e-5, atol=1e-6)
    got = RealCaffeRuntime(*result.outputs, caffe_dir, flavor).run({"x": x})["y"]
    assert float(np.abs(got.reshape(ref.shape) - ref).max()) <= 1e-5 * float(np.abs(ref).max())


@pytest.mark.parametrize(("case", "words"), [
    ("index-out-of-range", "sparse initializer 'w': an index lies outside its 40 elements"),
    ("index-twice", "sparse initializer 'w': an index appears twice"),
    ("coordinates-of-another-rank", "ONNX wants 1-D values and [NNZ] or [NNZ, 2] int64 indices"),
])
def test_malformed_sparse_initializer_is_one_line(case: str, words: str, tmp_path: Path) -> None:
    sparse = _sparse(W, "w", coordinates=case == "coordinates-of-another-rank")
    index = numpy_helper.to_array(sparse.indices).copy()
    if case == "index-out-of-range":
        index[-1] = 40
    elif case == "index-twice":
        index[1] = index[0]
    else:
        index = np.concatenate([index, index[:, :1]], axis=1)
    sparse.indices.CopyFrom(numpy_helper.from_array(index, "w_index"))
    src = _gemm_model(tmp_path / "bad.onnx", [sparse, _sparse(B, "b", False)])
    with pytest.raises(ModelFormatError) as info:
        api.convert([src], to="caffe", out=tmp_path / "o" / "net", check=False)
    assert words in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_attribute_reference_outside_a_function_is_one_line_exit_2(tmp_path: Path) -> None:
    node = helper.make_node("LeakyRelu", ["x"], ["y"])
    node.attribute.append(onnx.AttributeProto(name="alpha", ref_attr_name="slope", type=onnx.AttributeProto.FLOAT))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              tmp_path / "ref.onnx")
    out = tmp_path / "o" / "net"
    run = subprocess.run([sys.executable, "-m", "convert", "onnx:caffe", str(tmp_path / "ref.onnx"), "-o", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2, run.stdout + run.stderr  # was exit 3 (TypeError in the LeakyRelu emitter)
    errors = [ln for ln in run.stderr.splitlines() if ln.startswith("convert: error")]
    assert len(errors) == 1 and "attribute 'alpha' refers to the attribute 'slope'" in errors[0]
    assert "not inside a function" in errors[0] and "Traceback" not in run.stderr
    assert not out.parent.exists() or not any(out.parent.iterdir())
