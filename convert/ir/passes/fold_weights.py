"""Fold constant subgraphs of any size into lazy constants.

Formats that hold weights as blobs (Caffe) need a Conv or Gemm weight to be a constant, but
old ONNX files often compute it: ``ConstantOfShape`` (the model zoo's "light" files), a
``Transpose`` of an initializer, a ``Reshape`` or ``Cast`` of one. A node is folded when every
input is a constant (an initializer, including an initializer that an IR < 4 file also lists as
a graph input, which is a constant default rather than a runtime input) and its output's type
and static shape are known. The folded value is a *lazy* tensor: onnx's reference
implementation runs the node when the exporter reads the data, one node at a time, so folding
a large model never holds more than the weights being written.

Precondition: shapes inferred (``InferShapes``); outputs with unknown or symbolic shapes are
left alone, as are graph outputs and nodes whose value depends on more than their inputs.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx_ir as _ir

from ..tensors import lazy
from .base import Pass, PassResult
from .fold_constants import NEVER_FOLD, replace_by_constants, run_reference

__all__ = ["MAX_FOLD_BYTES", "FoldWeights"]

#: No folded weight may exceed this (the largest single weights of real models are a few GiB): a
#: larger one comes from a corrupt shape, and is left as the node that computes it, which the
#: exporter then names, instead of a MemoryError on write.
MAX_FOLD_BYTES = 16 * 2**30

logger = logging.getLogger(__name__)


def _static_shape(value: _ir.Value) -> tuple[int, ...] | None:
    if value.shape is None or value.dtype is None or not value.shape.is_static():
        return None
    return tuple(int(d) for d in value.shape)


class FoldWeights(Pass):
    """Replace nodes computed only from constants by lazy initializers (computed on write)."""

    def call(self, model: _ir.Model) -> PassResult:
        """Fold in place; returns whether anything was folded."""
        graph = model.graph
        opset = graph.opset_imports.get("", 17)
        folded = 0
        for node in list(graph):
            if node.domain not in ("", "ai.onnx") or node.op_type in NEVER_FOLD or not node.inputs:
                continue
            if any(o.is_graph_output() for o in node.outputs):
                continue
            if any(i is not None and i.const_value is None for i in node.inputs):
                continue
            shapes = [_static_shape(o) for o in node.outputs]
            if any(s is None for s in shapes):
                continue
            size = sum(int(np.prod(s, dtype=object)) * np.dtype(o.dtype.numpy()).itemsize  # type: ignore[union-attr]
                       for o, s in zip(node.outputs, shapes, strict=True) if s is not None)
            if size > MAX_FOLD_BYTES:  # a corrupt shape (ConstantOfShape of 2^40): left as computed
                logger.debug("not folding %s: %d bytes", node.name, size)
                continue
            tensors = [lazy(_Evaluate(node, index, opset), out.dtype, shape, name=(out.name or "folded") + "__w")
                       for index, (out, shape) in enumerate(zip(node.outputs, shapes, strict=True))
                       if shape is not None and out.dtype is not None]  # all are: checked above
            replace_by_constants(graph, node, tensors)
            folded += 1
        if folded:
            logger.debug("folded %d constant nodes into lazy weights", folded)
        return PassResult(model, folded > 0)


class _Evaluate:
    """Compute output ``index`` of a detached copy of ``node`` from its constant inputs."""

    def __init__(self, node: _ir.Node, index: int, opset: int) -> None:
        self._proto = _ir.serde.serialize_node(node)
        self._inputs = [None if i is None else i.const_value for i in node.inputs]
        self._n_outputs = len(node.outputs)
        self._index = index
        self._opset = opset

    def __call__(self) -> np.ndarray:
        arrays = [None if t is None else np.asarray(t.numpy()) for t in self._inputs]
        return run_reference(self._proto, self._n_outputs, arrays, self._opset)[self._index]
