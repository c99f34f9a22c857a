"""``--via paddle2onnx``: convert with paddle2onnx, then import its ONNX.

paddle2onnx (and the PaddlePaddle it needs) live in their own environment: paddle2onnx pins
``onnx<=1.17.0``. Three of its habits are handled here:

* Its ``export`` sets ``POLYGRAPHY_AUTOINSTALL_DEPS=1`` before using Polygraphy for constant
  folding (``optimize_tool="polygraphy"``, the default), which pip-installs onnx_graphsurgeon
  at conversion time. We pass ``optimize_tool="None"`` so Polygraphy is never imported, and
  run it with ``POLYGRAPHY_AUTOINSTALL_DEPS=0`` anyway; our own passes fold constants.
* Its Python layer catches conversion errors, prints them and carries on; its C++ layer calls
  ``exit()`` on an unsupported op, which would end our process. So it runs in a child
  process, and a non-zero exit or a missing result becomes a ``ConversionError`` quoting its
  error lines.
* It prints to stdout; the child's output is captured, never shown.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from convert.ir import ConversionError, Model, Options, UsageError

__all__ = ["INSTALL_HINT", "load_via_paddle2onnx"]

INSTALL_HINT = ("--via paddle2onnx needs paddle2onnx, which is not installed here; it pins onnx<=1.17.0, "
                "so install it in a separate environment: "
                "pip install convert-toolkit[paddle2onnx] paddlepaddle")


_CHILD = """
import sys
import paddle2onnx
paddle2onnx.export(sys.argv[1], sys.argv[2], save_file=sys.argv[3], opset_version=int(sys.argv[4]),
                   auto_upgrade_opset=True, enable_onnx_checker=True, optimize_tool="None", verbose=False)
"""


def _error_lines(text: str) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    lines = [ln.strip() for ln in text.splitlines()
             if ("error" in ln.lower() or "failed" in ln.lower() or "not support" in ln.lower())
             and "UserWarning" not in ln]
    if lines:
        return "; ".join(dict.fromkeys(lines[-3:]))
    rest = [ln.strip() for ln in text.splitlines() if ln.strip() and "warn" not in ln.lower()]
    return rest[-1] if rest else "no output"


def load_via_paddle2onnx(paths: Sequence[Path], options: Options) -> Model:
    """Convert with paddle2onnx (in a child process) and read the ONNX it wrote into the IR.

    Raises:
        UsageError: paddle2onnx is not installed, or the files are missing.
        ConversionError: paddle2onnx failed (its own error lines are quoted).
    """
    from convert.frontends.paddle.loader import resolve

    files = resolve(paths)
    if files.params is None:
        raise UsageError(f"{files.program.name}: --via paddle2onnx needs a combined .pdiparams file")
    if importlib.util.find_spec("paddle2onnx") is None:
        raise UsageError(INSTALL_HINT)
    from convert.ir import load_file

    with tempfile.TemporaryDirectory(prefix="convert-p2o-") as tmp:
        out = Path(tmp) / (files.program.stem + ".onnx")
        env = dict(os.environ, POLYGRAPHY_AUTOINSTALL_DEPS="0")
        cmd = [sys.executable, "-c", _CHILD, str(files.program), str(files.params), str(out),
               str(int(options.opset if options.opset is not None else 17))]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace")
        except OSError as exc:
            raise ConversionError(f"{files.program.name} (paddle2onnx)", f"cannot start: {exc}") from exc
        said = _error_lines(proc.stdout + "\n" + proc.stderr)
        if "No module named 'paddle" in proc.stderr:
            raise UsageError(f"{INSTALL_HINT} ({said})")
        if proc.returncode != 0:
            raise ConversionError(f"{files.program.name} (paddle2onnx)",
                                  f"paddle2onnx exited with status {proc.returncode}: {said}")
        if not out.is_file() or out.stat().st_size == 0:
            raise ConversionError(f"{files.program.name} (paddle2onnx)",
                                  f"no ONNX model was written; paddle2onnx said: {said}")
        model = load_file(out)
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
                value.const_value = from_array(tensor.numpy(), name=tensor.name or value.name or "const")
