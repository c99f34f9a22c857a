"""Hand-made ONNX models round-tripped ONNX -> IR -> ONNX at opsets 13-21, compared in ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import models_onnx
import numpy as np
import onnx
import onnxruntime as ort
import pytest

import convert

ATOL_FP32 = 1e-5
OPSETS = list(range(13, 22))


def _run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    init = {i.name for i in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in init:
            continue
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _check(src_model: onnx.ModelProto, tmp_path: Path, opset: int) -> None:
    src = tmp_path / "src.onnx"
    onnx.save(src_model, str(src))
    out = tmp_path / f"out{opset}.onnx"
    result = convert.convert(src, to="onnx", out=out, opset=opset, check=False, validate=True)
    assert result.outputs == [out]
    written = onnx.load(str(out))
    assert {o.version for o in written.opset_import if o.domain == ""} == {opset}
    onnx.checker.check_model(written)
    feeds = _feeds(src_model)
    ref = _run(src, feeds)
    got = _run(out, feeds)
    for r, g in zip(ref, got, strict=True):
        scale = float(np.abs(r).max())
        assert scale > 1e-3 and float(np.std(r)) > 1e-4, "degenerate reference output"
        assert float(np.abs(r - g).max()) / scale <= ATOL_FP32


@pytest.mark.parametrize("opset", OPSETS, ids=[f"opset{o}" for o in OPSETS])
def test_conv_net(tmp_path: Path, opset: int) -> None:
    _check(models_onnx.conv_net(17), tmp_path, opset)


@pytest.mark.parametrize("opset", OPSETS, ids=[f"opset{o}" for o in OPSETS])
def test_transformer_block(tmp_path: Path, opset: int) -> None:
    # LayerNormalization (opset 17) is decomposed by the version adapter below 17.
    _check(models_onnx.transformer_block(17), tmp_path, opset)


@pytest.mark.parametrize("opset", OPSETS, ids=[f"opset{o}" for o in OPSETS])
def test_broadcasting(tmp_path: Path, opset: int) -> None:
    _check(models_onnx.broadcasting(13), tmp_path, opset)


@pytest.mark.parametrize("opset", OPSETS, ids=[f"opset{o}" for o in OPSETS])
def test_reshapes_and_slices(tmp_path: Path, opset: int) -> None:
    _check(models_onnx.reshapes(13), tmp_path, opset)


def test_batchnorm_is_folded_and_shape_subgraph_folded(tmp_path: Path) -> None:
    src = tmp_path / "src.onnx"
    onnx.save(models_onnx.conv_net(17), str(src))
    convert.convert(src, to="onnx", out=tmp_path / "o.onnx", check=False)
    ops = [n.op_type for n in onnx.load(str(tmp_path / "o.onnx")).graph.node]
    assert "BatchNormalization" not in ops and ops.count("Conv") == 2
    onnx.save(models_onnx.reshapes(13), str(src))
    convert.convert(src, to="onnx", out=tmp_path / "r.onnx", check=False)
    ops = [n.op_type for n in onnx.load(str(tmp_path / "r.onnx")).graph.node]
    assert "Shape" not in ops and "Concat" not in ops  # the static shape subgraph became a constant


def test_opset_that_cannot_express_an_op_fails_loudly(tmp_path: Path) -> None:
    text = """
    <ir_version: 10, opset_import: ["" : 21]>
    g (float[2, 4, 8] x) => (float[2, 4, 8] y) {
        s = Constant <value = float[4] {1, 1, 1, 1}> ()
        b = Constant <value = float[4] {0, 0, 0, 0}> ()
        y = GroupNormalization <num_groups = 2> (x, s, b)
    }
    """
    src = tmp_path / "g.onnx"
    onnx.save(onnx.parser.parse_model(text), str(src))
    expected = r"unsupported op at opset 17: GroupNormalization .*producing 'y'.*does not exist before opset 18"
    with pytest.raises(convert.UnsupportedOpsError, match=expected):
        convert.convert(src, to="onnx", out=tmp_path / "o.onnx", opset=17, check=False)
    assert not (tmp_path / "o.onnx").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["g.onnx"]


def test_dynamic_batch(tmp_path: Path) -> None:
    src = tmp_path / "src.onnx"
    onnx.save(models_onnx.conv_net(17), str(src))
    out = tmp_path / "dyn.onnx"
    convert.convert(src, to="onnx", out=out, dynamic_batch=True, check=False)
    model = onnx.load(str(out))
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    x = np.random.default_rng(1).standard_normal((3, 3, 32, 32)).astype(np.float32)
    got = _run(out, {"x": x})[0]
    ref = np.concatenate([_run(src, {"x": x[i : i + 1]})[0] for i in range(3)])
    assert got.shape == (3, 10)
    assert float(np.abs(got - ref).max()) / float(np.abs(ref).max()) <= ATOL_FP32


def test_adapter_on_a_graph_output(tmp_path: Path) -> None:
    """A decomposed op whose result is the graph output keeps the output's name."""
    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 4] x) => (float[2, 4] y) {
        s = Constant <value = float[4] {1, 2, 3, 4}> ()
        y = LayerNormalization <axis = -1> (x, s)
    }
    """
    src = tmp_path / "ln.onnx"
    onnx.save(onnx.parser.parse_model(text), str(src))
    out = tmp_path / "ln13.onnx"
    convert.convert(src, to="onnx", out=out, opset=13, check=False, validate=True)
    assert [o.name for o in onnx.load(str(out)).graph.output] == ["y"]
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)}
    ref, got = _run(src, feeds)[0], _run(out, feeds)[0]
    assert float(np.abs(ref - got).max()) / float(np.abs(ref).max()) <= ATOL_FP32


def test_a_graph_without_a_name_gets_one(tmp_path: Path) -> None:
    """A source whose graph has no name (found by the #48 fuzz campaign: a SavedModel whose signature's
    fields were renumbered) was refused by the ONNX checker, 'Field name of graph is required', after
    the whole conversion; the writer names it."""
    import onnx.helper as oh
    from onnx import TensorProto

    x = oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    model = oh.make_model(oh.make_graph([oh.make_node("Neg", ["x"], ["y"])], "", [x], [y]),
                          opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    src = tmp_path / "nameless.onnx"
    onnx.save(model, str(src))
    out = tmp_path / "o.onnx"
    convert.convert(src, to="onnx", out=out, check=False)
    assert onnx.load(str(out)).graph.name == "main_graph"
    feed = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(ort.InferenceSession(str(out)).run(None, {"x": feed})[0], -feed)
