"""Decompose bounded activations into layers every Caffe runs (before legalisation).

Caffe forks disagree on bounded activations: BVLC master has ``Clip``, the SSD fork ``ReLU6``,
older BVLC and OpenCV's Caffe importer neither. Plain layers express them exactly::

    Clip(x, lo, hi)        = ReLU(x - lo) - ReLU(x - hi) + lo          (lo, hi finite)
    Clip(x, lo, +inf)      = ReLU(x - lo) + lo
    Clip(x, -inf, hi)      = hi - ReLU(hi - x)
    HardSigmoid(x; a, b)   = Clip(a*x + b, 0, 1)
    HardSwish(x)           = x * HardSigmoid(x; 1/6, 1/2)

so the export runs in any Caffe: the subtractions become ``Power`` (scalar shift/scale) and
``Eltwise`` SUM with coefficients 1, -1; the product ``Eltwise`` PROD. ``Clip(x, 0, +inf)`` stays a
ReLU, and with a flavor that has ``ReLU6`` (``ssd``) ``Clip(x, 0, 6)`` stays one layer.
"""

from __future__ import annotations

import numpy as np

from convert.ir import GraphEditor, Model, Node, Value
from convert.ir.passes import Pass, PassResult

from .flavor import Flavor

__all__ = ["DecomposeBoundedActivations"]

_TARGETS = {"Clip", "HardSigmoid", "HardSwish"}


def _scalar(value: Value | None) -> float | None:
    if value is None or value.const_value is None or value.const_value.size != 1:
        return None
    return float(np.asarray(value.const_value.numpy()).reshape(-1)[0])


class DecomposeBoundedActivations(Pass):
    """Rewrite Clip / HardSigmoid / HardSwish into ReLU and arithmetic, per the module docstring."""

    def __init__(self, flav: Flavor) -> None:
        self.flavor = flav

    def call(self, model: Model) -> PassResult:
        """Rewrite in place; returns whether anything changed."""
        graph = model.graph
        self._graph = graph
        self._edit = GraphEditor(graph)
        changed = 0
        for node in list(graph):
            if node.domain not in ("", "ai.onnx") or node.op_type not in _TARGETS:
                continue
            x = node.inputs[0]
            if x is None:
                continue
            self._anchor = node
            self._like = x
            if node.op_type == "Clip":
                lo = _scalar(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] is not None else -np.inf
                hi = _scalar(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None else np.inf
                if lo is None or hi is None:
                    continue  # computed bounds: the emitter reports it
                if lo == 0.0 and hi == np.inf:
                    continue  # a ReLU
                if lo == 0.0 and hi == 6.0 and self.flavor.relu6:
                    continue  # a ReLU6
                y = self._clip(x, lo, hi)
            elif node.op_type == "HardSigmoid":
                alpha = node.attributes.get_float("alpha", 0.2)
                beta = node.attributes.get_float("beta", 0.5)
                y = self._clip(self._affine(x, alpha, beta), 0.0, 1.0)
            else:
                y = self._op("Mul", [x, self._clip(self._affine(x, 1 / 6, 0.5), 0.0, 1.0)])
            self._replace(node, y)
            changed += 1
        return PassResult(model, changed > 0)

    # -- building blocks -----------------------------------------------------------------------
    def _const(self, value: float) -> Value:
        return self._edit.const(np.asarray(value, dtype=np.float32), f"{self._anchor.name or 'act'}_c")

    def _op(self, op: str, inputs: list[Value]) -> Value:
        base = self._anchor.name or self._anchor.op_type.lower()
        return self._edit.node_before(self._anchor, op, inputs, base=f"{base}_{op.lower()}", like=self._like)

    def _affine(self, x: Value, scale: float, shift: float) -> Value:
        y = x if scale == 1.0 else self._op("Mul", [x, self._const(scale)])
        return y if shift == 0.0 else self._op("Add", [y, self._const(shift)])

    def _clip(self, x: Value, lo: float, hi: float) -> Value:
        if np.isinf(lo):  # hi - ReLU(hi - x)
            return self._affine(self._op("Relu", [self._affine(x, -1.0, hi)]), -1.0, hi)
        low = self._op("Relu", [self._affine(x, 1.0, -lo)])
        if not np.isinf(hi):
            high = self._op("Relu", [self._affine(x, 1.0, -hi)])
            low = self._op("Sub", [low, high])
        return self._affine(low, 1.0, lo)

    def _replace(self, node: Node, new: Value) -> None:
        self._edit.replace(node, new)
