"""Normalisation: batch_norm -> BatchNormalization, layer_norm -> LayerNormalization (opset 17),
group_norm -> LayerNormalization over groups + per-channel affine.
"""

from __future__ import annotations

import numpy as np

from convert.ir import Value

from ._base import LowerContext, OpCall, lowers

__all__ = ["batch_norm", "group_norm", "layer_norm", "native_batch_norm", "native_layer_norm"]


def _bn(call: OpCall, ctx: LowerContext, training: bool) -> Value:
    if training:
        raise call.unsupported("batch_norm in training mode", "call model.eval() before exporting")
    x = call.tensor("input")
    meta = call.meta("input")
    channels = meta.dim(1)
    weight = call.get("weight")
    bias = call.get("bias")
    mean = call.get("running_mean")
    var = call.get("running_var")
    if not isinstance(mean, Value) or not isinstance(var, Value):
        raise call.unsupported("batch_norm without running statistics",
                               "use track_running_stats=True or call model.eval()")
    if not isinstance(weight, Value):
        weight = ctx.const(np.ones(channels), meta.dtype)
    if not isinstance(bias, Value):
        bias = ctx.const(np.zeros(channels), meta.dtype)
    return ctx.op("BatchNormalization", [x, weight, bias, mean, var], {"epsilon": float(call["eps"])})  # type: ignore[arg-type]


@lowers("aten.batch_norm", to="BatchNormalization", notes="inference form only (model.eval())")
def batch_norm(call: OpCall, ctx: LowerContext) -> Value:
    """Lower batch_norm (eval) to one BatchNormalization."""
    return _bn(call, ctx, bool(call["training"]))


@lowers("aten._native_batch_norm_legit_no_training", to="BatchNormalization")
def native_batch_norm_no_training(call: OpCall, ctx: LowerContext) -> tuple[Value, None, None]:
    """Lower the core-ATen inference batch norm; only its first output may be used."""
    return _bn(call, ctx, False), None, None


@lowers("aten.native_batch_norm", "aten._native_batch_norm_legit", to="BatchNormalization")
def native_batch_norm(call: OpCall, ctx: LowerContext) -> tuple[Value, None, None]:
    """Lower native_batch_norm (eval); only its first output may be used."""
    return _bn(call, ctx, bool(call["training"])), None, None


def _ln(call: OpCall, ctx: LowerContext) -> Value:
    x = call.tensor("input")
    meta = call.meta("input")
    shape = [int(d) for d in call["normalized_shape"]]  # type: ignore[attr-defined]
    weight = call.get("weight")
    bias = call.get("bias")
    if not isinstance(weight, Value):
        weight = ctx.const(np.ones(shape), meta.dtype)
    inputs: list[Value | None] = [x, weight]
    if isinstance(bias, Value):
        inputs.append(bias)
    return ctx.op("LayerNormalization", inputs, {"axis": -len(shape), "epsilon": float(call["eps"])})  # type: ignore[arg-type]


@lowers("aten.layer_norm", to="LayerNormalization")
def layer_norm(call: OpCall, ctx: LowerContext) -> Value:
    """Lower layer_norm to one LayerNormalization (axis = -len(normalized_shape))."""
    return _ln(call, ctx)


@lowers("aten.native_layer_norm", to="LayerNormalization")
def native_layer_norm(call: OpCall, ctx: LowerContext) -> tuple[Value, None, None]:
    """Lower native_layer_norm; only its first output may be used."""
    return _ln(call, ctx), None, None


@lowers("aten.group_norm", to="Reshape+LayerNormalization+Reshape+Mul+Add")
def group_norm(call: OpCall, ctx: LowerContext) -> Value:
    """Lower group_norm: normalise [N, G, C/G*spatial] over its last axis, then scale per channel."""
    x = call.tensor("input")
    meta = call.meta("input")
    groups = int(call["num_groups"])  # type: ignore[call-overload]
    c = int(meta.shape[1])
    per_group = int(np.prod([int(d) for d in meta.shape[1:]])) // groups
    y = ctx.op("Reshape", [x, ctx.shape_value([meta.shape[0], groups, per_group], like=meta)])
    ones = ctx.const(np.ones(per_group), meta.dtype)
    y = ctx.op("LayerNormalization", [y, ones], {"axis": -1, "epsilon": float(call["eps"])})  # type: ignore[arg-type]
    y = ctx.op("Reshape", [y, ctx.shape_value(list(meta.shape), like=meta)])
    affine = [c] + [1] * (meta.rank - 2)
    weight = call.get("weight")
    bias = call.get("bias")
    if isinstance(weight, Value):
        y = ctx.op("Mul", [y, ctx.op("Reshape", [weight, ctx.ints(affine)])])
    if isinstance(bias, Value):
        y = ctx.op("Add", [y, ctx.op("Reshape", [bias, ctx.ints(affine)])])
    return y
