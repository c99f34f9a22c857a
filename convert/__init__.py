"""convert: model conversion from PyTorch, TensorFlow, TFLite, Darknet, PaddlePaddle, Caffe and ONNX to ONNX and Caffe.

>>> import convert
>>> result = convert.convert("yolov4-tiny.cfg", to="onnx")   # doctest: +SKIP
>>> print(result.report.table())                            # doctest: +SKIP

Importing this package imports no framework, and not even onnx-ir or numpy: the API below is
imported on first use (``convert.convert``, ``convert.load`` ...), so that ``convert --help`` and
the other commands that need no model start fast (docs/startup.md). Each frontend imports its own
framework when used.
"""

from __future__ import annotations

from . import _signals

__version__ = "0.1.0"

if _signals.is_command():  # SIGTERM from the first moment the command runs: one line and 143
    _signals.install()

try:
    from ._errors import (
        ConversionError,
        ConvertError,
        ExportError,
        ModelFormatError,
        PassError,
        UnsupportedOpsError,
        UsageError,
    )
except KeyboardInterrupt as _exc:
    _signals.started_interrupted(_exc)
    raise

# Imported on first use: name -> module (relative to this package).
_LAZY = {
    "ConversionResult": "api",
    "convert": "api",
    "load": "api",
    "routes": "api",
    "save": "api",
    "supported_ops": "api",
    "verify": "api",
    "ParityReport": "parity",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'convert' has no attribute '{name}'")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    # ``annotations`` is the __future__ import's name, not part of the API
    return sorted((set(globals()) | set(_LAZY)) - {"annotations"})


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
