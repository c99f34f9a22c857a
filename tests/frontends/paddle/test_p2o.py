"""``--via paddle2onnx`` without paddle2onnx installed: a stand-in package plays its part.

The route runs paddle2onnx in a child process (its C++ layer calls ``exit()`` on some
failures), so the stand-in is a real package put on ``PYTHONPATH``.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
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


def _stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    """Install a fake ``paddle2onnx`` whose ``export`` runs ``body`` and records its arguments."""
    root = tmp_path / "site"
    (root / "paddle2onnx").mkdir(parents=True)
    log = tmp_path / "calls.txt"
    head = ("import os, sys\n"
            "def export(model_file, params_file, save_file=None, **kw):\n"
            f"    with open({str(log)!r}, 'w') as f:\n"
            "        f.write(repr((os.environ.get('POLYGRAPHY_AUTOINSTALL_DEPS'), kw)))\n")
    source = head + textwrap.indent(textwrap.dedent(body).strip(), "    ") + "\n"
    (root / "paddle2onnx" / "__init__.py").write_text(source)
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONPATH", str(root))
    return log


def test_missing_paddle2onnx_says_how_to_install(model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", [p for p in sys.path if "paddle2onnx" not in p])
    import importlib.util

    if importlib.util.find_spec("paddle2onnx") is not None:
        pytest.skip("paddle2onnx is installed here")
    with pytest.raises(UsageError, match=r"pip install convert-toolkit\[paddle2onnx\]"):
        FRONTEND.load([model], VIA)


def test_logged_failure_becomes_conversion_error(model: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    log = _stand_in(tmp_path, monkeypatch,
                    'print("[Paddle2ONNX] [ERROR] Failed to convert PaddlePaddle model: op foo unsupported.")')
    with pytest.raises(ConversionError, match=r"paddle2onnx.*no ONNX model was written.*op foo unsupported"):
        FRONTEND.load([model], VIA)
    env, kwargs = eval(log.read_text())  # written by the stand-in above
    assert env == "0" and kwargs["optimize_tool"] == "None"


def test_exit_in_paddle2onnx_does_not_end_our_process(model: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_in(tmp_path, monkeypatch, 'print("[ERROR] Unimplemented op bar"); sys.stdout.flush(); os._exit(255)')
    with pytest.raises(ConversionError, match=r"exited with status 255.*Unimplemented op bar"):
        FRONTEND.load([model], VIA)


def test_result_is_imported(model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body = """
        import numpy as np, onnx
        from onnx import helper
        w = helper.make_tensor("w", onnx.TensorProto.FLOAT, [3], np.arange(3, dtype=np.float32))
        graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                                  [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3])],
                                  [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 3])], [w])
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), save_file)
    """
    _stand_in(tmp_path, monkeypatch, body)
    model_ir = FRONTEND.load([model], VIA)
    assert [n.op_type for n in model_ir.graph] == ["Add"]
    assert model_ir.graph.initializers["w"].const_value.numpy().tolist() == [0, 1, 2]
