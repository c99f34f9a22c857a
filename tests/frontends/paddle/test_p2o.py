"""``--via paddle2onnx`` without paddle2onnx installed: a stand-in module plays its part."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper
from paddle_helpers import write_params, write_program

from convert.frontends.paddle import FRONTEND
from convert.ir import ConversionError, Options, UsageError

VIA = Options(extra={"paddle_via": "paddle2onnx"})


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = write_program(tmp_path / "inference.pdmodel", feeds={"x": ([1, 3], "float32")}, ops=[],
                         fetches=["x"], params={}, shapes={})
    write_params(tmp_path / "inference.pdiparams", {})
    return path


def _fake(monkeypatch: pytest.MonkeyPatch, export: object) -> dict[str, object]:
    seen: dict[str, object] = {}
    mod = types.ModuleType("paddle2onnx")

    def wrapped(*args: object, **kwargs: object) -> None:
        seen["env"] = os.environ.get("POLYGRAPHY_AUTOINSTALL_DEPS")
        seen["kwargs"] = kwargs
        export(*args, **kwargs)  # type: ignore[operator]

    mod.export = wrapped  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "paddle2onnx", mod)
    return seen


def test_missing_paddle2onnx_says_how_to_install(model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "paddle2onnx", None)
    with pytest.raises(UsageError, match=r"pip install convert-toolkit\[paddle2onnx\]"):
        FRONTEND.load([model], VIA)


def test_logged_failure_becomes_conversion_error(model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def export(model_file: str, params_file: str, save_file: str, **kw: object) -> None:
        print("[Paddle2ONNX] [ERROR] Failed to convert PaddlePaddle model: Oops, op foo unsupported.")

    seen = _fake(monkeypatch, export)
    with pytest.raises(ConversionError, match=r"paddle2onnx.*no ONNX model was written.*op foo unsupported"):
        FRONTEND.load([model], VIA)
    assert seen["env"] == "0"
    assert seen["kwargs"]["optimize_tool"] == "None"  # type: ignore[index]
    assert "POLYGRAPHY_AUTOINSTALL_DEPS" not in os.environ or os.environ["POLYGRAPHY_AUTOINSTALL_DEPS"] != "1"


def test_result_is_imported(model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def export(model_file: str, params_file: str, save_file: str, **kw: object) -> None:
        w = helper.make_tensor("w", onnx.TensorProto.FLOAT, [3], np.arange(3, dtype=np.float32))
        graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                                  [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3])],
                                  [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 3])], [w])
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), save_file)

    _fake(monkeypatch, export)
    model_ir = FRONTEND.load([model], VIA)
    assert [n.op_type for n in model_ir.graph] == ["Add"]
    np.testing.assert_array_equal(model_ir.graph.initializers["w"].const_value.numpy(), [0, 1, 2])
