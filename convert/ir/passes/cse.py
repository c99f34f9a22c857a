"""Common-subexpression elimination: nodes with the same op, inputs and attributes are merged."""

from __future__ import annotations

import onnx_ir as _ir
from onnx_ir.passes.common import CommonSubexpressionEliminationPass

from .base import Pass, PassResult

__all__ = ["EliminateCommonSubexpressions"]


class EliminateCommonSubexpressions(Pass):
    """Merge nodes that compute the same thing (same op, same input values, same attributes).

    onnx_ir's pass does the work: the first node of each group is kept (with its provenance), the
    others' uses read its outputs; random ops and control flow are left alone, and a constant
    attribute over 10 elements is never compared.
    """

    def call(self, model: _ir.Model) -> PassResult:
        """Merge duplicate nodes of ``model`` in place."""
        result = CommonSubexpressionEliminationPass()(model)
        return PassResult(model, result.modified)
