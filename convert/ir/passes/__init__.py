"""Graph passes over the IR, one per module."""

from __future__ import annotations

from .base import Pass, PassManager, PassResult
from .cse import EliminateCommonSubexpressions
from .dce import EliminateDeadCode
from .fold_batchnorm import FoldBatchNorm
from .fold_constants import FoldConstants, FoldShapeChains
from .fold_weights import FoldWeights
from .rewrite import Match, Rewriter, RewriteRules, Rule
from .shape_inference import InferShapes
from .toposort import TopologicalSort
from .validate import GraphInvariantError, ValidateGraph

__all__ = [
    "EliminateCommonSubexpressions",
    "EliminateDeadCode",
    "FoldBatchNorm",
    "FoldConstants",
    "FoldShapeChains",
    "FoldWeights",
    "GraphInvariantError",
    "InferShapes",
    "Match",
    "Pass",
    "PassManager",
    "PassResult",
    "RewriteRules",
    "Rewriter",
    "Rule",
    "TopologicalSort",
    "ValidateGraph",
    "standard_pipeline",
]


def standard_pipeline(*, fold_batchnorm: bool = True, validate: bool = False) -> PassManager:
    """Return the passes every conversion runs before export, in order."""
    passes: list[Pass] = [TopologicalSort(), FoldConstants(), EliminateDeadCode()]
    if fold_batchnorm:
        passes.append(FoldBatchNorm())
        passes.append(EliminateDeadCode())
    passes.append(InferShapes())
    passes.append(FoldShapeChains())  # shape chains that inference made static (torch.onnx's chunk)
    return PassManager(passes, validate=validate)
