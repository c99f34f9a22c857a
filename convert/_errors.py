"""The error classes of ``convert.ir.errors``, without importing the rest of ``convert.ir``.

``convert/ir/__init__.py`` imports onnx-ir, and onnx-ir imports sympy when it is imported (upstream:
``onnx_ir/_core.py`` starts with ``import sympy``, in onnx-ir 1.1.0; ``ir/_sympy_later.py`` defers that
one), plus onnx and numpy: about 0.2 s of CPU even so, more than the whole of ``convert --help``
may cost (docs/startup.md).
The CLI and ``convert.formats`` raise and catch ``UsageError``/``ConvertError`` on paths that need no
model (unknown route, bad option), so they load ``ir/errors.py`` (standard library only) by itself,
under its own name. When ``convert.ir`` is imported later, its ``from .errors import ...`` finds
that module in ``sys.modules``: the classes are the same objects either way.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["ConversionError", "ConvertError", "ExportError", "ModelFormatError", "PassError",
           "UnsupportedOpsError", "UsageError", "errors_module",
           "printable", "shown"]

_NAME = "convert.ir.errors"


def errors_module() -> ModuleType:
    """Return ``convert.ir.errors``, loading its file alone when ``convert.ir`` is not imported yet."""
    module = sys.modules.get(_NAME)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(_NAME, Path(__file__).with_name("ir") / "errors.py")
    if spec is None or spec.loader is None:  # pragma: no cover - the file ships with the package
        return importlib.import_module(_NAME)
    module = importlib.util.module_from_spec(spec)
    sys.modules[_NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(_NAME, None)
        raise
    return module


_errors = errors_module()
ConvertError = _errors.ConvertError
UsageError = _errors.UsageError
ModelFormatError = _errors.ModelFormatError
UnsupportedOpsError = _errors.UnsupportedOpsError
ConversionError = _errors.ConversionError
PassError = _errors.PassError
ExportError = _errors.ExportError
printable = _errors.printable
shown = _errors.shown
