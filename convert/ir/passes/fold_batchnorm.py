"""Fold BatchNormalization into the Conv before it.

For ``y = BN(Conv(x, W, b))`` with per-channel ``s = gamma / sqrt(var + eps)``::

    W' = W * s[:, None, None, None]        b' = (b - mean) * s + beta

Preconditions (checked, with the reason logged when one fails): the Conv's output feeds only
the BatchNormalization and is not a graph output; W, b and every BN parameter are constants; BN is in
inference form (one output). ``W'`` and ``b'`` are lazy tensors: each is computed when the
exporter writes it, so folding a multi-GB model holds one weight in memory at a time.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx_ir as _ir

from ..edit import replace_value
from ..errors import ModelFormatError
from ..provenance import describe, set_output_of
from ..tensors import lazy
from .base import Pass, PassResult

__all__ = ["FoldBatchNorm"]

logger = logging.getLogger(__name__)


def _check_shapes(conv: _ir.Node, bn: _ir.Node) -> None:
    """Refuse a Conv bias or BatchNormalization parameter whose length is not the Conv's output channels.

    Raises:
        ModelFormatError: naming the node, the tensor and both sizes (a corrupt model: the folded
            bias would have the wrong length, #29's fuzzing found a SerdeError on write).
    """
    w_shape = conv.inputs[1].const_value.shape  # type: ignore[union-attr]
    if len(w_shape) < 3:
        raise ModelFormatError(f"{describe(conv)}: its weight has shape {list(w_shape)}; a Conv weight has the rank "
                               "of its input (N, C, spatial...). Is the file corrupt?")
    out_ch = int(w_shape[0])
    named = [(conv, "bias", conv.inputs[2] if len(conv.inputs) > 2 else None)]
    named += [(bn, what, v) for what, v in zip(("scale", "B", "mean", "var"), bn.inputs[1:5], strict=False)]
    for node, what, value in named:
        if value is None or value.const_value is None:
            continue
        shape = tuple(int(d) for d in value.const_value.shape)
        if shape != (out_ch,):
            raise ModelFormatError(
                f"{describe(node)}: its {what} '{value.name}' has shape {list(shape)}, but the Conv has {out_ch} "
                "output channels. Is the file corrupt?")


class FoldBatchNorm(Pass):
    """Fold Conv -> BatchNormalization pairs into one Conv with lazily computed weights."""

    def __init__(self) -> None:
        self.skipped: list[str] = []

    def call(self, model: _ir.Model) -> PassResult:
        """Fold every eligible pair in ``model.graph``; returns whether any was folded."""
        graph = model.graph
        count = 0
        for bn in list(graph):
            if bn.op_type != "BatchNormalization" or bn.domain not in ("", "ai.onnx"):
                continue
            reason = self._check(bn)
            if reason:
                self.skipped.append(f"{bn.name}: {reason}")
                logger.debug("not folding %s: %s", bn.name, reason)
                continue
            self._fold(graph, bn)
            count += 1
        return PassResult(model, count > 0)

    @staticmethod
    def _check(bn: _ir.Node) -> str:
        x = bn.inputs[0]
        conv = x.producer() if x is not None else None
        if conv is None or conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx"):
            return "input is not produced by a Conv"
        if len(bn.outputs) != 1 or bn.attributes.get_int("training_mode", 0):
            return "BatchNormalization is in training form"
        if len(x.uses()) != 1 or x.is_graph_output():
            return "the Conv output is used elsewhere"
        if any(v is None or v.const_value is None for v in bn.inputs[1:5]):
            return "BatchNormalization parameters are not constants"
        w = conv.inputs[1]
        if w is None or w.const_value is None:
            return "the Conv weight is not a constant"
        if len(conv.inputs) > 2 and conv.inputs[2] is not None and conv.inputs[2].const_value is None:
            return "the Conv bias is not a constant"
        _check_shapes(conv, bn)
        return ""

    @staticmethod
    def _fold(graph: _ir.Graph, bn: _ir.Node) -> None:
        conv = bn.inputs[0].producer()
        w_t = conv.inputs[1].const_value
        b_v = conv.inputs[2] if len(conv.inputs) > 2 else None
        b_t = b_v.const_value if b_v is not None else None
        gamma, beta, mean, var = (v.const_value for v in bn.inputs[1:5])
        eps = bn.attributes.get_float("epsilon", 1e-5)
        out_ch = w_t.shape[0]
        dtype = w_t.dtype

        def scale() -> np.ndarray:
            return (gamma.numpy().astype(np.float64) / np.sqrt(var.numpy().astype(np.float64) + eps))

        def weight() -> np.ndarray:
            s = scale().reshape((-1,) + (1,) * (len(w_t.shape) - 1))
            return (w_t.numpy().astype(np.float32) * s.astype(np.float32)).astype(dtype.numpy())

        def bias() -> np.ndarray:
            b = b_t.numpy().astype(np.float64) if b_t is not None else np.zeros(out_ch)
            return ((b - mean.numpy()) * scale() + beta.numpy()).astype(dtype.numpy())

        base = conv.name or "conv"
        w_new = _ir.Value(name=f"{base}.weight_bnfold", shape=_ir.Shape(w_t.shape), type=_ir.TensorType(dtype),
                          const_value=lazy(weight, dtype, w_t.shape, name=f"{base}.weight_bnfold"))
        b_new = _ir.Value(name=f"{base}.bias_bnfold", shape=_ir.Shape((out_ch,)), type=_ir.TensorType(dtype),
                          const_value=lazy(bias, dtype, (out_ch,), name=f"{base}.bias_bnfold"))
        graph.register_initializer(w_new)
        graph.register_initializer(b_new)
        conv.replace_input_with(1, w_new)
        if len(conv.inputs) > 2:
            conv.replace_input_with(2, b_new)
        else:
            conv.resize_inputs(3)
            conv.replace_input_with(2, b_new)
        replace_value(graph, bn.outputs[0], conv.outputs[0])
        set_output_of(conv, bn)
        graph.remove(bn, safe=True)
