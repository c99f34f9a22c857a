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

from convert.ir import Node, Value
from convert.ir.passes.rewrite import Match, Rewriter, RewriteRules, Rule

from .flavor import Flavor

__all__ = ["DecomposeBoundedActivations"]


def _scalar(value: Value | None) -> float | None:
    if value is None or value.const_value is None or value.const_value.size != 1:
        return None
    return float(np.asarray(value.const_value.numpy()).reshape(-1)[0])


class DecomposeBoundedActivations(RewriteRules):
    """Rewrite Clip / HardSigmoid / HardSwish into ReLU and arithmetic, per the module docstring."""

    def __init__(self, flav: Flavor) -> None:
        self.flavor = flav
        super().__init__([Rule("bounded activation -> ReLU arithmetic", ("Clip", "HardSigmoid", "HardSwish"),
                               self._check, _decompose)])

    def _check(self, node: Node) -> Match | str:
        if node.inputs[0] is None:
            return "it has no input"
        if node.op_type != "Clip":
            return Match(node)
        lo = _scalar(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] is not None else -np.inf
        hi = _scalar(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None else np.inf
        if lo is None or hi is None:
            return "its bounds are computed (the emitter reports it)"
        if lo == 0.0 and hi == np.inf:
            return "it is a ReLU"
        if lo == 0.0 and hi == 6.0 and self.flavor.relu6:
            return "it is a ReLU6, which this flavor has"
        return Match(node, {"lo": lo, "hi": hi})


def _decompose(rw: Rewriter, m: Match) -> None:
    node = m.node
    x = node.inputs[0]
    assert x is not None
    b = _Builder(rw, node, x)
    if node.op_type == "Clip":
        y = b.clip(x, m["lo"], m["hi"])
    elif node.op_type == "HardSigmoid":
        alpha = node.attributes.get_float("alpha", 0.2)
        beta = node.attributes.get_float("beta", 0.5)
        y = b.clip(b.affine(x, alpha, beta), 0.0, 1.0)
    else:
        y = b.op("Mul", [x, b.clip(b.affine(x, 1 / 6, 0.5), 0.0, 1.0)])
    rw.replace(node, y)


class _Builder:
    """Nodes before ``anchor``, shaped like ``like`` (elementwise), named after the anchor."""

    def __init__(self, rw: Rewriter, anchor: Node, like: Value) -> None:
        self.rw, self.anchor, self.like = rw, anchor, like

    def const(self, value: float) -> Value:
        return self.rw.const(np.asarray(value, dtype=np.float32), f"{self.anchor.name or 'act'}_c")

    def op(self, op: str, inputs: list[Value]) -> Value:
        base = self.anchor.name or self.anchor.op_type.lower()
        return self.rw.node_before(self.anchor, op, inputs, base=f"{base}_{op.lower()}", like=self.like)

    def affine(self, x: Value, scale: float, shift: float) -> Value:
        y = x if scale == 1.0 else self.op("Mul", [x, self.const(scale)])
        return y if shift == 0.0 else self.op("Add", [y, self.const(shift)])

    def clip(self, x: Value, lo: float, hi: float) -> Value:
        if np.isinf(lo):  # hi - ReLU(hi - x)
            return self.affine(self.op("Relu", [self.affine(x, -1.0, hi)]), -1.0, hi)
        low = self.op("Relu", [self.affine(x, 1.0, -lo)])
        if not np.isinf(hi):
            high = self.op("Relu", [self.affine(x, 1.0, -hi)])
            low = self.op("Sub", [low, high])
        return self.affine(low, 1.0, lo)
