"""Shape inference that works beyond protobuf's 2 GiB limit.

onnx's C++ inference needs a ModelProto; large weights are left out of the proto handed to it
(only their types and shapes go in, as inputs), so the proto stays small whatever the model's size.
"""

from __future__ import annotations

import logging

import onnx_ir as _ir
from onnx_ir.passes.common import ShapeInferencePass

from .base import Pass, PassResult

__all__ = ["InferShapes"]

logger = logging.getLogger(__name__)


class InferShapes(Pass):
    """Fill in value types and shapes with onnx's shape inference (partial on failure)."""

    def __init__(self, *, data_prop: bool = True) -> None:
        self.data_prop = data_prop

    def call(self, model: _ir.Model) -> PassResult:
        """Infer shapes of every value of ``model`` in place."""
        # Silence onnx_ir's per-value warnings for values of custom-domain ops.
        ir_logger = logging.getLogger("onnx_ir.passes.common.shape_inference")
        level = ir_logger.level
        ir_logger.setLevel(logging.ERROR)
        try:
            result = ShapeInferencePass(check_type=False, strict_mode=False, data_prop=self.data_prop)(model)
        finally:
            ir_logger.setLevel(level)
        return PassResult(model, result.modified)
