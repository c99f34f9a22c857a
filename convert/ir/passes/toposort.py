"""Sort every graph's nodes topologically (stable: keeps the given order where it can)."""

from __future__ import annotations

import onnx_ir as _ir
from onnx_ir.passes.common import TopologicalSortPass

from .base import Pass, PassResult

__all__ = ["TopologicalSort"]


class TopologicalSort(Pass):
    """Order nodes so that every value is produced before it is used."""

    def call(self, model: _ir.Model) -> PassResult:
        """Sort ``model``'s graphs in place."""
        before = [id(n) for n in model.graph]
        TopologicalSortPass()(model)
        return PassResult(model, [id(n) for n in model.graph] != before)
