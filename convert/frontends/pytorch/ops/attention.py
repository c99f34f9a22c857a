"""Attention: scaled_dot_product_attention -> MatMul, Mul, (Add mask), Softmax, MatMul; the fused
inference kernels of nn.MultiheadAttention (_native_multi_head_attention) and
nn.TransformerEncoderLayer (_transformer_encoder_layer_fwd) -> the same pattern per head.

Kept as the explicit MatMul/Softmax pattern (no fused op exists at opset 17), so every
destination that has matrix products and softmax can run it.
"""

from __future__ import annotations

import math

import numpy as np

from convert.ir import DataType, Value

from ._base import LowerContext, OpCall, TensorMeta, lowers

__all__ = ["native_multi_head_attention", "scaled_dot_product_attention", "transformer_encoder_layer"]


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
    kt = ctx.emit("Transpose", [k], {"perm": perm})
    scores = ctx.emit("MatMul", [q, kt])
    scores = ctx.emit("Mul", [scores, ctx.scalar_like(scale_f, qm)])
    length, source = qm.shape[-2], km.shape[-2]
    if call.get("is_causal", False):
        length, source = qm.dim(qm.rank - 2), km.dim(km.rank - 2)
        causal = np.triu(np.full((length, source), -np.inf, dtype=qm.dtype.numpy()), k=1)
        scores = ctx.emit("Add", [scores, ctx.const(causal)])
    mask = call.get("attn_mask")
    valid = None
    if isinstance(mask, Value):
        mask, valid = _additive_mask(ctx, mask, call.meta("attn_mask"), qm)
        scores = ctx.emit("Add", [scores, mask])
    probs = ctx.emit("Softmax", [scores], {"axis": -1})
    if valid is not None:
        probs = ctx.emit("Where", [valid, probs, ctx.scalar_like(0.0, qm)])
    return ctx.emit("MatMul", [probs, v])


def _additive_mask(ctx: LowerContext, mask: Value, meta: TensorMeta, like: TensorMeta) -> tuple[Value, Value]:
    """Return (the mask as an additive float, a bool 'row has an allowed key' of the same rank).

    torch's attention gives 0, not NaN, for a query whose keys are all masked (left padding, an
    all-zero attention_mask row); the second value lets the lowering do the same after Softmax.
    """
    if meta.dtype.name == "BOOL":
        as_int = ctx.emit("Cast", [mask], {"to": DataType.INT32})
        allowed = ctx.emit("ReduceMax", [as_int], {"axes": [-1], "keepdims": 1})
        valid = ctx.emit("Cast", [allowed], {"to": DataType.BOOL})
        additive = ctx.emit("Where", [mask, ctx.scalar_like(0.0, like), ctx.scalar_like(-np.inf, like)])
        return additive, valid
    top = ctx.emit("ReduceMax", [mask], {"axes": [-1], "keepdims": 1})
    return mask, ctx.emit("Greater", [top, ctx.scalar_like(-np.inf, like)])


def _project(ctx: LowerContext, x: Value, w: Value, b: Value | None, rows: tuple[int, int] | None) -> Value:
    """Return x @ W[rows]^T + b[rows] (the rows of a packed q/k/v weight)."""
    if rows is not None:
        start, end = ctx.ints([rows[0]]), ctx.ints([rows[1]])
        w = ctx.emit("Slice", [w, start, end, ctx.ints([0])])
        b = ctx.emit("Slice", [b, start, end, ctx.ints([0])]) if b is not None else None
    y = ctx.emit("MatMul", [x, ctx.emit("Transpose", [w], {"perm": [1, 0]})])
    return ctx.emit("Add", [y, b]) if b is not None else y


def _heads(ctx: LowerContext, x: Value, heads: int, dim: int) -> Value:
    """[B, L, E] -> [B, H, L, E/H]."""
    y = ctx.emit("Reshape", [x, ctx.ints([0, 0, heads, dim // heads])])
    return ctx.emit("Transpose", [y], {"perm": [0, 2, 1, 3]})


def _attend(call: OpCall, ctx: LowerContext, q_in: Value, k_in: Value, v_in: Value, meta: TensorMeta,
            args: dict[str, object]) -> tuple[Value, Value]:
    """Return (output [B, L, E], probabilities [B, H, L, S]) of packed-weight multi-head attention."""
    dim = int(args["embed_dim"])  # type: ignore[call-overload]
    heads = int(args["num_heads"])  # type: ignore[call-overload]
    w, b = args["qkv_weight"], args["qkv_bias"]
    if not isinstance(w, Value):
        raise call.unsupported("attention without a packed qkv_weight")
    bias = b if isinstance(b, Value) else None
    q = _heads(ctx, _project(ctx, q_in, w, bias, (0, dim)), heads, dim)
    k = _heads(ctx, _project(ctx, k_in, w, bias, (dim, 2 * dim)), heads, dim)
    v = _heads(ctx, _project(ctx, v_in, w, bias, (2 * dim, 3 * dim)), heads, dim)
    scores = ctx.emit("MatMul", [q, ctx.emit("Transpose", [k], {"perm": [0, 1, 3, 2]})])
    scores = ctx.emit("Mul", [scores, ctx.scalar_like(1.0 / math.sqrt(dim // heads), meta)])
    mask = args.get("mask")
    if isinstance(mask, Value):
        mask_meta = call.meta("mask")
        if mask_meta.dtype.name == "BOOL":  # True marks a position that must not be attended
            mask = ctx.emit("Not", [mask])
        if args.get("mask_type") == 1 and mask_meta.rank == 2:  # key padding [B, S]
            mask = ctx.emit("Unsqueeze", [mask, ctx.ints([1, 2])])
        # unlike scaled_dot_product_attention, this kernel gives NaN where every key is masked: kept
        mask = _additive_mask(ctx, mask, mask_meta, meta)[0]
        scores = ctx.emit("Add", [scores, mask])
    probs = ctx.emit("Softmax", [scores], {"axis": -1})
    out = ctx.emit("Transpose", [ctx.emit("MatMul", [probs, v])], {"perm": [0, 2, 1, 3]})
    out = ctx.emit("Reshape", [out, ctx.ints([0, 0, dim])])
    pw, pb = args["proj_weight"], args["proj_bias"]
    if not isinstance(pw, Value):
        raise call.unsupported("attention without an output projection")
    return _project(ctx, out, pw, pb if isinstance(pb, Value) else None, None), probs


@lowers("aten._native_multi_head_attention", to="MatMul+Softmax+MatMul (per head)",
        notes="nn.MultiheadAttention's inference fast path; batch-first [B, L, E]")
def native_multi_head_attention(call: OpCall, ctx: LowerContext) -> tuple[Value, Value | None]:
    """Lower the fused MultiheadAttention kernel: packed q/k/v projections, attention, projection."""
    meta = call.meta("query")
    if meta.rank != 3:
        raise call.unsupported("_native_multi_head_attention of an unbatched input")
    args = dict(call.args)
    args["num_heads"] = call["num_head"]
    out, probs = _attend(call, ctx, call.tensor("query"), call.tensor("key"), call.tensor("value"), meta, args)
    if not call.get("need_weights", True):
        return out, None
    if call.get("average_attn_weights", True):
        probs = ctx.emit("ReduceMean", [probs], {"axes": [1], "keepdims": 0})
    return out, probs


@lowers("aten._transformer_encoder_layer_fwd", to="LayerNormalization+attention+MatMul (FFN)",
        notes="nn.TransformerEncoderLayer's inference fast path (traced under no_grad)")
def transformer_encoder_layer(call: OpCall, ctx: LowerContext) -> Value:
    """Lower the fused encoder layer: attention and a ReLU/GELU feed-forward, norm first or last."""
    meta = call.meta("src")
    if meta.rank != 3:
        raise call.unsupported("_transformer_encoder_layer_fwd of an unbatched input")
    eps = float(call["eps"])  # type: ignore[arg-type]

    def norm(x: Value, i: int) -> Value:
        return ctx.emit("LayerNormalization", [x, call.tensor(f"norm_weight_{i}"), call.tensor(f"norm_bias_{i}")],
                      {"axis": -1, "epsilon": eps})

    def attention(x: Value) -> Value:
        return _attend(call, ctx, x, x, x, meta, call.args)[0]

    def ffn(x: Value) -> Value:
        h = _project(ctx, x, call.tensor("ffn_weight_1"), call.tensor("ffn_bias_1"), None)
        if call.get("use_gelu", False):
            h = ctx.emit("Mul", [ctx.emit("Mul", [h, ctx.emit("Add", [
                ctx.emit("Erf", [ctx.emit("Div", [h, ctx.scalar_like(math.sqrt(2.0), meta)])]),
                ctx.scalar_like(1.0, meta)])]), ctx.scalar_like(0.5, meta)])
        else:
            h = ctx.emit("Relu", [h])
        return _project(ctx, h, call.tensor("ffn_weight_2"), call.tensor("ffn_bias_2"), None)

    x = call.tensor("src")
    if call.get("norm_first", False):
        x = ctx.emit("Add", [x, attention(norm(x, 1))])
        return ctx.emit("Add", [x, ffn(norm(x, 2))])
    x = norm(ctx.emit("Add", [x, attention(x)]), 1)
    return norm(ctx.emit("Add", [x, ffn(x)]), 2)
