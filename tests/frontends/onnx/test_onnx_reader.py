"""ONNX frontend: lazy external data, and every kind of bad input as a one-line error."""

from __future__ import annotations

import os
from pathlib import Path

import models_onnx
import numpy as np
import onnx
import pytest
from onnx import external_data_helper

import convert
from convert import ir


def _save_external(model: onnx.ModelProto, folder: Path, location: str = "w.data") -> Path:
    path = folder / "m.onnx"
    external_data_helper.convert_model_to_external_data(model, all_tensors_to_one_file=True,
                                                        location=location, size_threshold=0)
    onnx.save(model, str(path))
    return path


def test_external_data_is_read_lazily(tmp_path: Path) -> None:
    path = _save_external(models_onnx.conv_net(), tmp_path)
    model = convert.load(path)
    tensors = [v.const_value for v in model.graph.initializers.values()]
    assert tensors and all(ir.is_file_slice(t) for t in tensors)
    # dtype/shape/size without I/O: nothing has been mapped yet
    assert all(getattr(t, "raw", None) is None for t in tensors)
    assert ir.model_stats(model)["params"] == sum(int(np.prod(t.shape)) for t in tensors)


def test_external_data_round_trip_matches(tmp_path: Path) -> None:
    path = _save_external(models_onnx.transformer_block(), tmp_path)
    out = tmp_path / "out" / "o.onnx"
    out.parent.mkdir()
    result = convert.convert(path, to="onnx", out=out, external_data=True)
    assert result.report is not None and result.report.passed
    assert (out.parent / "o.onnx.data").exists()
    proto = onnx.load(str(out), load_external_data=False)
    locations = {e.value for t in proto.graph.initializer for e in t.external_data if e.key == "location"}
    assert locations == {"o.onnx.data"}  # relative, beside the model
    inline = [t.name for t in proto.graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL]
    assert all(np.prod(t.dims) * 4 <= 1024 for t in proto.graph.initializer if t.name in inline)


def _expect(path: Path, error: type[Exception], *words: str) -> None:
    with pytest.raises(error) as info:
        convert.convert(path, to="onnx", out=path.parent / "never.onnx", check=False)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message
    assert not (path.parent / "never.onnx").exists()
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".never")]


def test_truncated_model(tmp_path: Path) -> None:
    data = models_onnx.conv_net().SerializeToString()
    path = tmp_path / "t.onnx"
    path.write_bytes(data[: len(data) // 2])
    _expect(path, convert.ModelFormatError, "t.onnx", "not a valid ONNX model", "truncated")


def test_not_an_onnx_file(tmp_path: Path) -> None:
    path = tmp_path / "x.onnx"
    path.write_text("[net]\nwidth=416\n")
    _expect(path, convert.ModelFormatError, "x.onnx", "ONNX")


def test_external_path_leaving_the_folder(tmp_path: Path) -> None:
    inner = tmp_path / "model"
    inner.mkdir()
    path = _save_external(models_onnx.conv_net(), inner)
    (inner / "w.data").rename(tmp_path / "w.data")
    proto = onnx.load(str(path), load_external_data=False)
    for t in proto.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "../w.data"
    onnx.save(proto, str(path))
    _expect(path, convert.ModelFormatError, "../w.data", "outside the model's folder")


def test_absolute_external_path(tmp_path: Path) -> None:
    path = _save_external(models_onnx.conv_net(), tmp_path)
    proto = onnx.load(str(path), load_external_data=False)
    for t in proto.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = str(tmp_path / "w.data")
    onnx.save(proto, str(path))
    _expect(path, convert.ModelFormatError, "absolute path")


def test_symlink_leaving_the_folder(tmp_path: Path) -> None:
    inner = tmp_path / "model"
    inner.mkdir()
    path = _save_external(models_onnx.conv_net(), inner)
    (inner / "w.data").rename(tmp_path / "real.data")
    os.symlink(tmp_path / "real.data", inner / "w.data")
    _expect(path, convert.ModelFormatError, "outside the model's folder")


def test_hard_linked_data_is_explained(tmp_path: Path) -> None:
    path = _save_external(models_onnx.conv_net(), tmp_path)
    os.link(tmp_path / "w.data", tmp_path / "other.data")
    _expect(path, convert.ModelFormatError, "hard links", "cp --remove-destination")


def test_truncated_external_data(tmp_path: Path) -> None:
    path = _save_external(models_onnx.conv_net(), tmp_path)
    data = (tmp_path / "w.data").read_bytes()
    (tmp_path / "w.data").write_bytes(data[:100])
    _expect(path, convert.ModelFormatError, "truncated", "w.data")


def test_unknown_ops_are_listed_together(tmp_path: Path) -> None:
    text = """
    <ir_version: 8, opset_import: ["" : 17, "my.domain" : 1]>
    g (float[2] x) => (float[2] y) {
        a = FooBar (x)
        b = FooBar (a)
        c = my.domain.Gizmo (b)
        y = Relu (c)
    }
    """
    path = tmp_path / "u.onnx"
    onnx.save(onnx.parser.parse_model(text), str(path))
    _expect(path, convert.UnsupportedOpsError, "2 unsupported ops", "FooBar x2", "my.domain::Gizmo",
            "convert.supported_ops('onnx')")  # the API's words for `convert ops onnx` (#52 item 13)


def test_missing_input_file(tmp_path: Path) -> None:
    with pytest.raises(convert.UsageError, match="no such file"):
        convert.convert(tmp_path / "absent.onnx", to="onnx", out=tmp_path / "o.onnx")


def test_input_shape_override_for_symbolic_inputs(tmp_path: Path) -> None:
    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[N, 4] x) => (float[N, 4] y) {
        y = Relu (x)
    }
    """
    path = tmp_path / "s.onnx"
    onnx.save(onnx.parser.parse_model(text), str(path))
    model = convert.load(path, input_shapes={"x": (3, 4)})
    assert list(model.graph.inputs[0].shape) == [3, 4]
    with pytest.raises(convert.UsageError, match="'nope', which is not an input"):
        convert.load(path, input_shapes={"nope": (3, 4)})
