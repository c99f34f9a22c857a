"""convert: model conversion from PyTorch, TensorFlow, TFLite, Darknet, PaddlePaddle, Caffe and ONNX to ONNX and Caffe.

>>> import convert
>>> result = convert.convert("yolov4-tiny.cfg", to="onnx")   # doctest: +SKIP
>>> print(result.report.table())                            # doctest: +SKIP

Importing this package imports no framework; each frontend imports its own when used.
"""

from __future__ import annotations

import sys as _sys


def _interrupted_at_start() -> None:
    """Ctrl-C while the ``convert`` command imports its modules: one line and 130, not a traceback.

    Only when this process is the command (the console script or ``python -m convert``); a
    program importing the package gets its KeyboardInterrupt as usual.
    """
    argv = getattr(_sys, "orig_argv", _sys.argv)
    as_module = any(a == "-m" and argv[i + 1: i + 2] == ["convert"] for i, a in enumerate(argv))
    if as_module or _sys.argv[0].rsplit("/", 1)[-1] in ("convert", "convert-model"):
        print("convert: error: interrupted while starting; nothing was written", file=_sys.stderr)
        raise SystemExit(130) from None


try:
    from .api import ConversionResult, convert, load, routes, save, supported_ops, verify
    from .ir.errors import (
        ConversionError,
        ConvertError,
        ExportError,
        ModelFormatError,
        PassError,
        UnsupportedOpsError,
        UsageError,
    )
    from .parity import ParityReport
except KeyboardInterrupt:
    _interrupted_at_start()
    raise

__version__ = "0.1.0"

__all__ = [
    "ConversionError",
    "ConversionResult",
    "ConvertError",
    "ExportError",
    "ModelFormatError",
    "ParityReport",
    "PassError",
    "UnsupportedOpsError",
    "UsageError",
    "__version__",
    "convert",
    "load",
    "routes",
    "save",
    "supported_ops",
    "verify",
]
