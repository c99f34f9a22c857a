"""``--via paddle2onnx``: convert with paddle2onnx, then import its ONNX.

paddle2onnx (and the PaddlePaddle it needs) live in their own environment: paddle2onnx pins
``onnx<=1.17.0``. Two of its habits are handled here:

* Its ``export`` sets ``POLYGRAPHY_AUTOINSTALL_DEPS=1`` before using Polygraphy for constant
  folding (``optimize_tool="polygraphy"``, the default), which pip-installs onnx_graphsurgeon
  at conversion time. We pass ``optimize_tool="None"`` so Polygraphy is never imported, and
  hold ``POLYGRAPHY_AUTOINSTALL_DEPS=0`` for the call anyway; our own passes fold constants.
* It catches conversion errors, prints them, and carries on. We capture its output and turn a
  missing or empty result into a ``ConversionError`` that quotes its error lines.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from convert.ir import ConversionError, Model, Options, UsageError

__all__ = ["INSTALL_HINT", "load_via_paddle2onnx"]

INSTALL_HINT = ("--via paddle2onnx needs paddle2onnx, which is not installed here; it pins onnx<=1.17.0, "
                "so install it in a separate environment: "
                "pip install convert-toolkit[paddle2onnx] paddlepaddle")


@contextlib.contextmanager
def _env(**values: str) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _import_paddle2onnx() -> object:
    try:
        with _env(POLYGRAPHY_AUTOINSTALL_DEPS="0"):
            import paddle2onnx
    except ImportError as exc:
        raise UsageError(f"{INSTALL_HINT} ({exc})") from exc
    return paddle2onnx


def _error_lines(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if "error" in ln.lower() or "failed" in ln.lower()]
    return "; ".join(lines[-3:]) if lines else (text.strip().splitlines() or ["no output"])[-1]


def load_via_paddle2onnx(paths: Sequence[Path], options: Options) -> Model:
    """Convert with paddle2onnx into a temporary .onnx and read it with the ONNX frontend.

    Raises:
        UsageError: paddle2onnx is not installed, or the files are missing.
        ConversionError: paddle2onnx failed (its own error lines are quoted).
    """
    from convert.frontends.paddle.loader import resolve

    files = resolve(paths)
    if files.params is None:
        raise UsageError(f"{files.program.name}: --via paddle2onnx needs a combined .pdiparams file")
    p2o = _import_paddle2onnx()
    from convert.formats import frontend

    with tempfile.TemporaryDirectory(prefix="convert-p2o-") as tmp:
        out = Path(tmp) / (files.program.stem + ".onnx")
        captured = io.StringIO()
        try:
            with _env(POLYGRAPHY_AUTOINSTALL_DEPS="0"), contextlib.redirect_stdout(captured):
                p2o.export(  # type: ignore[attr-defined]
                    str(files.program), str(files.params), save_file=str(out),
                    opset_version=int(options.opset), auto_upgrade_opset=True,
                    enable_onnx_checker=True, optimize_tool="None", verbose=False,
                )
        except Exception as exc:  # paddle2onnx raises whatever its internals raise
            detail = _error_lines(captured.getvalue())
            raise ConversionError(f"{files.program.name} (paddle2onnx)",
                                  f"{type(exc).__name__}: {exc}; paddle2onnx said: {detail}") from exc
        if not out.is_file() or out.stat().st_size == 0:
            said = _error_lines(captured.getvalue())
            raise ConversionError(f"{files.program.name} (paddle2onnx)",
                                  f"no ONNX model was written; paddle2onnx said: {said}")
        model = frontend("onnx").load([out], options)
        # Keep the weights once the temporary folder is gone.
        _materialize(model)
    model.doc_string = f"converted from Paddle {files.program.name} by paddle2onnx"
    return model


def _materialize(model: Model) -> None:
    from convert.ir import from_array, is_file_slice

    for graph in (model.graph, *model.graph.subgraphs()):
        for value in graph.initializers.values():
            tensor = value.const_value
            if tensor is not None and is_file_slice(tensor):
                value.const_value = from_array(tensor.numpy(), name=tensor.name or value.name)
