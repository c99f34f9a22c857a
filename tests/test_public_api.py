"""The public surface: everything in ``convert.__all__`` exists, is documented and behaves."""

from __future__ import annotations

import inspect
from pathlib import Path

import models_onnx
import onnx
import pytest

import convert


def test_all_names_exist_and_are_documented() -> None:
    for name in convert.__all__:
        obj = getattr(convert, name)
        if callable(obj):
            assert (obj.__doc__ or "").strip(), f"convert.{name} has no docstring"


@pytest.mark.parametrize("func", ["convert", "load", "save", "verify"])
def test_options_are_keyword_only(func: str) -> None:
    sig = inspect.signature(getattr(convert, func))
    params = list(sig.parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    limit = {"convert": 2, "load": 1, "save": 2, "verify": 2}[func]
    assert len(positional) <= limit


def test_errors_form_a_hierarchy() -> None:
    for name in ("ModelFormatError", "UnsupportedOpsError", "ConversionError", "PassError", "ExportError",
                 "UsageError"):
        assert issubclass(getattr(convert, name), convert.ConvertError)


def test_load_save_verify_routes_ops(tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(models_onnx.conv_net(), str(src))
    model = convert.load(src)
    written = convert.save(model, tmp_path / "o.onnx", opset=18)
    assert written == [tmp_path / "o.onnx"]
    report = convert.verify(src, tmp_path / "o.onnx")
    assert report.passed and report.outputs[0].rel_to_scale < 1e-5
    assert ("onnx", "onnx") in convert.routes()
    assert any(row.op == "Conv" for row in convert.supported_ops("onnx"))
    with pytest.raises(convert.UsageError, match="unknown option"):
        convert.convert(src, to="onnx", out=tmp_path / "x.onnx", no_such_option=1)


def test_convert_result(tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(models_onnx.conv_net(), str(src))
    (tmp_path / "out").mkdir()
    result = convert.convert(src, to="onnx", out=tmp_path / "out")  # a folder: <stem>.onnx inside
    assert result.ok and result.outputs == [tmp_path / "out" / "m.onnx"]
    assert result.route == "onnx:onnx" and result.nodes > 0 and result.params > 0
    assert "PASS" in result.report.table()
