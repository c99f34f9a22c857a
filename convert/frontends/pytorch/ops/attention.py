"""Attention: scaled_dot_product_attention -> MatMul, Mul, (Add mask), Softmax, MatMul.

Kept as the explicit MatMul/Softmax pattern (no fused op exists at opset 17), so every
destination that has matrix products and softmax can run it.
"""

from __future__ import annotations

import math

import numpy as np

from convert.ir import Value

from ._base import LowerContext, OpCall, lowers

__all__ = ["scaled_dot_product_attention"]


@lowers("aten.scaled_dot_product_attention", to="MatMul+Mul+Softmax+MatMul",
        notes="attn_mask (bool or float) and is_causal supported; dropout_p must be 0; enable_gqa not supported")
def scaled_dot_product_attention(call: OpCall, ctx: LowerContext) -> Value:
    """Lower softmax(Q K^T * scale + mask) V."""
    if float(call.get("dropout_p", 0.0)) != 0.0:  # type: ignore[arg-type]
        raise call.unsupported("attention with dropout_p > 0", "call model.eval() before converting")
    if call.get("enable_gqa", False):
        raise call.unsupported("attention with enable_gqa=True")
    qm = call.meta("query")
    km = call.meta("key")
    q, k, v = call.tensor("query"), call.tensor("key"), call.tensor("value")
    rank = qm.rank
    scale = call.get("scale")
    scale_f = float(scale) if scale is not None else 1.0 / math.sqrt(qm.shape[-1])  # type: ignore[arg-type]
    perm = list(range(rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    kt = ctx.op("Transpose", [k], {"perm": perm})
    scores = ctx.op("MatMul", [q, kt])
    scores = ctx.op("Mul", [scores, ctx.scalar_like(scale_f, qm)])
    length, source = qm.shape[-2], km.shape[-2]
    if call.get("is_causal", False):
        length, source = qm.dim(qm.rank - 2), km.dim(km.rank - 2)
        causal = np.triu(np.full((length, source), -np.inf, dtype=qm.dtype.numpy()), k=1)
        scores = ctx.op("Add", [scores, ctx.const(causal)])
    mask = call.get("attn_mask")
    if isinstance(mask, Value):
        if call.meta("attn_mask").dtype.name == "BOOL":
            mask = ctx.op("Where", [mask, ctx.scalar_like(0.0, qm), ctx.scalar_like(-np.inf, qm)])
        scores = ctx.op("Add", [scores, mask])
    probs = ctx.op("Softmax", [scores], {"axis": -1})
    return ctx.op("MatMul", [probs, v])
