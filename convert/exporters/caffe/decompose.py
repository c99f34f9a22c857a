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

from convert.ir import (
    DataType,
    Model,
    Node,
    Shape,
    TensorType,
    Value,
    from_array,
    get_provenance,
    replace_value,
    set_provenance,
)
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
        self._names = set(graph.initializers) | {v.name for n in graph for v in n.outputs if v.name}
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
    def _fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self._names:
            name, i = f"{base}_{i}", i + 1
        self._names.add(name)
        return name

    def _const(self, value: float) -> Value:
        name = self._fresh(f"{self._anchor.name or 'act'}_c")
        arr = np.asarray(value, dtype=np.float32)
        v = Value(name=name, shape=Shape(()), type=TensorType(DataType.FLOAT), const_value=from_array(arr, name=name))
        self._graph.register_initializer(v)
        return v

    def _op(self, op: str, inputs: list[Value]) -> Value:
        base = self._anchor.name or self._anchor.op_type.lower()
        out = Value(name=self._fresh(f"{base}_{op.lower()}"), shape=self._like.shape, type=self._like.type)
        node = Node("", op, inputs, outputs=[out], name=out.name)
        set_provenance(node, get_provenance(self._anchor))
        self._graph.insert_before(self._anchor, node)
        return out

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
        replace_value(self._graph, node.outputs[0], new)
        self._graph.remove(node, safe=True)
