"""convert: model conversion between PyTorch, Darknet, PaddlePaddle, Caffe and ONNX.

>>> import convert
>>> result = convert.convert("yolov4-tiny.cfg", to="onnx")   # doctest: +SKIP
>>> print(result.report.table())                            # doctest: +SKIP

Importing this package imports no framework; each frontend imports its own when used.
"""

from __future__ import annotations

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
