"""Dead-code elimination: drop nodes whose outputs reach no graph output, and unused initializers."""

from __future__ import annotations

import onnx_ir as _ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from .base import Pass, PassResult

__all__ = ["EliminateDeadCode"]


class EliminateDeadCode(Pass):
    """Remove nodes and initializers that no graph output depends on."""

    def call(self, model: _ir.Model) -> PassResult:
        """Remove dead nodes and initializers from ``model`` in place."""
        result = RemoveUnusedNodesPass()(model)
        return PassResult(model, result.modified)
