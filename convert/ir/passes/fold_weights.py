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

Bound: a folded constant is computed when written, so its size is memory the conversion will
take. What a real model computes this way is of the order of what it stores (a ``Transpose`` or
``Cast`` of an initializer: at most twice its bytes) or modest (the model zoo's "light" files
build every weight with ``ConstantOfShape``: light ResNet-50 about 100 MiB in all). So one folded
tensor may take at most ``max(FOLD_CEILING, 2 x the bytes the model stores)`` and all of them
together at most ``max(FOLD_TOTAL_CEILING, 2 x stored)``; a model past that (a 300-byte file
whose ``ConstantOfShape`` asks for 2 GiB) is refused, naming the node and the sizes, before any
of it is computed.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx_ir as _ir

from ..errors import ModelFormatError
from ..provenance import describe
from ..tensors import lazy
from .base import Pass, PassResult
from .fold_constants import NEVER_FOLD, replace_by_constants, run_reference

__all__ = ["FOLD_CEILING", "FOLD_TOTAL_CEILING", "MAX_FOLD_BYTES", "FoldWeights", "fold_limits"]

#: No folded weight may exceed this, whatever the model stores (the largest single weights of real
#: models are a few GiB).
MAX_FOLD_BYTES = 16 * 2**30
#: One folded tensor may take this much even in a model that stores (almost) nothing.
FOLD_CEILING = 256 * 2**20
#: All folded tensors together may take this much even in a model that stores (almost) nothing.
FOLD_TOTAL_CEILING = 1 * 2**30


def _mib(n: int) -> str:
    if n < 2**20:
        return f"{n:,} bytes"
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def fold_limits(model: _ir.Model) -> tuple[int, int, int]:
    """Return ``(stored, per_tensor, total)``: the bytes the model's initializers take (no I/O)
    and the bytes one folded tensor, and all of them, may take (see the module docstring)."""
    stored = sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)
    return stored, min(MAX_FOLD_BYTES, max(FOLD_CEILING, 2 * stored)), max(FOLD_TOTAL_CEILING, 2 * stored)

logger = logging.getLogger(__name__)


def _static_shape(value: _ir.Value) -> tuple[int, ...] | None:
    if value.shape is None or value.dtype is None or not value.shape.is_static():
        return None
    return tuple(int(d) for d in value.shape)


class FoldWeights(Pass):
    """Replace nodes computed only from constants by lazy initializers (computed on write)."""

    def call(self, model: _ir.Model) -> PassResult:
        """Fold in place; returns whether anything was folded.

        Raises:
            ModelFormatError: a folded constant would take more than the bound (module docstring).
        """
        graph = model.graph
        opset = graph.opset_imports.get("", 17)
        stored, per_tensor, total_limit = fold_limits(model)
        total = 0
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
            total += size
            if size > per_tensor or total > total_limit:
                what = (f"a {_mib(size)} constant" if size > per_tensor else
                        f"a constant that brings the computed weights to {_mib(total)}")
                raise ModelFormatError(
                    f"{describe(node)} computes {what} from constants, and the model stores only {_mib(stored)} "
                    f"of weights (at most {_mib(per_tensor)} per computed weight and {_mib(total_limit)} in all "
                    "are folded). Is a shape in the file corrupt?")
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
