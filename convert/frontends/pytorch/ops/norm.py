"""Normalisation: batch_norm -> BatchNormalization, layer_norm -> LayerNormalization (opset 17),
group_norm -> LayerNormalization over groups + per-channel affine, instance_norm ->
InstanceNormalization.
"""

from __future__ import annotations

import numpy as np

from convert.ir import Value

from ._base import LowerContext, OpCall, lowers

__all__ = ["batch_norm", "group_norm", "instance_norm", "layer_norm", "native_batch_norm", "native_group_norm",
           "native_layer_norm"]


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
    return ctx.emit("BatchNormalization", [x, weight, bias, mean, var], {"epsilon": float(call["eps"])})  # type: ignore[arg-type]


@lowers("aten.batch_norm", to="BatchNormalization", notes="inference form only (model.eval())")
def batch_norm(call: OpCall, ctx: LowerContext) -> Value:
    """Lower batch_norm (eval) to one BatchNormalization."""
    return _bn(call, ctx, bool(call["training"]))


@lowers("aten._native_batch_norm_legit_no_training", to="BatchNormalization")
def native_batch_norm_no_training(call: OpCall, ctx: LowerContext) -> tuple[Value, None, None]:
    """Lower the core-ATen inference batch norm; only its first output may be used."""
    return _bn(call, ctx, False), None, None


@lowers("aten.native_batch_norm", "aten._native_batch_norm_legit", to="BatchNormalization / ReduceMean+...",
        notes="the no_stats form (instance_norm decomposed) normalises by the batch's own statistics")
def native_batch_norm(call: OpCall, ctx: LowerContext) -> tuple[Value, None, None]:
    """Lower native_batch_norm (eval); only its first output may be used.

    ``_native_batch_norm_legit.no_stats`` has no running statistics: it normalises over every axis
    but 1 with the input's own mean and (biased) variance, as instance_norm's decomposition needs.
    """
    if call.overload == "no_stats":
        return _batch_stats_norm(call, ctx), None, None
    return _bn(call, ctx, bool(call["training"])), None, None


def _batch_stats_norm(call: OpCall, ctx: LowerContext) -> Value:
    x = call.tensor("input")
    meta = call.meta("input")
    axes = [0, *range(2, meta.rank)]
    mean = ctx.emit("ReduceMean", [x], {"axes": axes, "keepdims": 1})
    centred = ctx.emit("Sub", [x, mean])
    var = ctx.emit("ReduceMean", [ctx.emit("Mul", [centred, centred])], {"axes": axes, "keepdims": 1})
    eps = ctx.const(np.asarray(float(call["eps"]), dtype=meta.dtype.numpy()))  # type: ignore[arg-type]
    y = ctx.emit("Div", [centred, ctx.emit("Sqrt", [ctx.emit("Add", [var, eps])])])
    affine = [meta.dim(1)] + [1] * (meta.rank - 2)
    weight, bias = call.get("weight"), call.get("bias")
    if isinstance(weight, Value):
        y = ctx.emit("Mul", [y, ctx.emit("Reshape", [weight, ctx.ints(affine)])])
    if isinstance(bias, Value):
        y = ctx.emit("Add", [y, ctx.emit("Reshape", [bias, ctx.ints(affine)])])
    return y


def _ln(call: OpCall, ctx: LowerContext, outputs: int = 1) -> tuple[Value, ...]:
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
    return ctx.emit_multi("LayerNormalization", inputs, {"axis": -len(shape), "epsilon": float(call["eps"])},  # type: ignore[arg-type]
                          outputs=outputs)


@lowers("aten.layer_norm", to="LayerNormalization")
def layer_norm(call: OpCall, ctx: LowerContext) -> Value:
    """Lower layer_norm to one LayerNormalization (axis = -len(normalized_shape))."""
    return _ln(call, ctx)[0]


@lowers("aten.native_layer_norm", to="LayerNormalization", notes="mean and rstd too (its Mean, InvStdDev)")
def native_layer_norm(call: OpCall, ctx: LowerContext) -> tuple[Value, Value | None, Value | None]:
    """Lower native_layer_norm; its mean and rstd (read by a backward op) are LayerNormalization's
    optional outputs, of torch's shape (the normalised dims kept as 1)."""
    if call.uses(1) or call.uses(2):
        y, mean, rstd = _ln(call, ctx, outputs=3)
        return y, mean, rstd
    return _ln(call, ctx)[0], None, None


@lowers("aten.group_norm", to="Reshape+LayerNormalization+Reshape+Mul+Add")
def group_norm(call: OpCall, ctx: LowerContext) -> Value:
    """Lower group_norm: normalise [N, G, C/G*spatial] over its last axis, then scale per channel."""
    return _gn(call, ctx, int(call["num_groups"]))[0]  # type: ignore[call-overload]


@lowers("aten.native_group_norm", to="Reshape+LayerNormalization+Reshape+Mul+Add",
        notes="mean and rstd too, [N, G]")
def native_group_norm(call: OpCall, ctx: LowerContext) -> tuple[Value, Value | None, Value | None]:
    """Lower the Core ATen group norm like group_norm; its mean and rstd (read by a backward op)
    are the group LayerNormalization's optional outputs, squeezed to torch's [N, G]."""
    stats = call.uses(1) or call.uses(2)
    y, *extra = _gn(call, ctx, int(call["group"]), stats=stats)  # type: ignore[call-overload]
    if not stats:
        return y, None, None
    last = ctx.ints([2])
    return y, ctx.emit("Squeeze", [extra[0], last]), ctx.emit("Squeeze", [extra[1], last])


def _gn(call: OpCall, ctx: LowerContext, groups: int, stats: bool = False) -> list[Value]:
    x = call.tensor("input")
    meta = call.meta("input")
    c = int(meta.shape[1])
    per_group = int(np.prod([int(d) for d in meta.shape[1:]])) // groups
    y = ctx.emit("Reshape", [x, ctx.shape_value([meta.shape[0], groups, per_group], like=meta)])
    ones = ctx.const(np.ones(per_group), meta.dtype)
    y, *extra = ctx.emit_multi("LayerNormalization", [y, ones], {"axis": -1, "epsilon": float(call["eps"])},  # type: ignore[arg-type]
                               outputs=3 if stats else 1)
    y = ctx.emit("Reshape", [y, ctx.shape_value(list(meta.shape), like=meta)])
    affine = [c] + [1] * (meta.rank - 2)
    weight = call.get("weight")
    bias = call.get("bias")
    if isinstance(weight, Value):
        y = ctx.emit("Mul", [y, ctx.emit("Reshape", [weight, ctx.ints(affine)])])
    if isinstance(bias, Value):
        y = ctx.emit("Add", [y, ctx.emit("Reshape", [bias, ctx.ints(affine)])])
    return [y, *extra]


@lowers("aten.instance_norm", to="InstanceNormalization / BatchNormalization",
        notes="use_input_stats=False (running statistics) lowers like batch_norm")
def instance_norm(call: OpCall, ctx: LowerContext) -> Value:
    """Lower instance_norm: per-sample statistics -> InstanceNormalization (missing affine = 1, 0)."""
    if not call.get("use_input_stats", True):
        return _bn(call, ctx, False)
    x = call.tensor("input")
    meta = call.meta("input")
    channels = meta.dim(1)
    weight = call.get("weight")
    bias = call.get("bias")
    if not isinstance(weight, Value):
        weight = ctx.const(np.ones(channels), meta.dtype)
    if not isinstance(bias, Value):
        bias = ctx.const(np.zeros(channels), meta.dtype)
    return ctx.emit("InstanceNormalization", [x, weight, bias], {"epsilon": float(call["eps"])})  # type: ignore[arg-type]
