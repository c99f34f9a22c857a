"""Opset version adapters: rewrite nodes whose signature changed between two opsets.

An op needs an adapter only when its *signature* changed (an attribute became an input, an op
appeared); ops whose new versions only widened their types pass through after a generic check
(every attribute still exists, the input count still fits). An op that cannot be expressed at the
target opset is reported, with its provenance, together with every other such op.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx

from convert import ir

__all__ = ["ADAPTERS", "adapt_opset"]

# adapter(node, graph_builder_like, source_opset, target_opset) -> None; rewrites in place.
Adapter = Callable[["_Ctx", ir.Node], None]
ADAPTERS: ir.Registry[Adapter] = ir.Registry("onnx opset adapters")

# Ops whose 'axes' moved from an attribute to an optional second input, and the opset of that change.
_AXES_INPUT_SINCE = {
    "ReduceSum": 13, "Squeeze": 13, "Unsqueeze": 13,
    "ReduceMax": 18, "ReduceMean": 18, "ReduceMin": 18, "ReduceProd": 18, "ReduceL1": 18,
    "ReduceL2": 18, "ReduceLogSum": 18, "ReduceLogSumExp": 18, "ReduceSumSquare": 18,
}


class _Ctx(ir.GraphEditor):
    """What an adapter needs: the graph editor and the two opsets."""

    def __init__(self, graph: ir.Graph, source: int, target: int) -> None:
        super().__init__(graph)
        self.source = source
        self.target = target


def _axes_adapter(ctx: _Ctx, node: ir.Node) -> None:
    since = _AXES_INPUT_SINCE[node.op_type]
    src_input, tgt_input = ctx.source >= since, ctx.target >= since
    if src_input == tgt_input:
        return
    if tgt_input:  # attribute -> input
        axes = node.attributes.pop("axes", None)
        if axes is not None:
            value = ctx.const(np.asarray(axes.as_ints(), dtype=np.int64), f"{node.name}_axes")
            if len(node.inputs) < 2:
                node.resize_inputs(2)
            node.replace_input_with(1, value)
        return
    # input -> attribute
    if len(node.inputs) < 2 or node.inputs[1] is None:
        return
    axes_v = node.inputs[1]
    if axes_v.const_value is None:
        raise _NotExpressibleError(f"its axes come from a computed tensor, which opset {ctx.target} "
                              f"cannot take (the attribute form needs constants)")
    node.attributes["axes"] = ir.Attr("axes", ir.AttributeType.INTS,
                                      [int(a) for a in axes_v.const_value.numpy().reshape(-1)])
    node.resize_inputs(1)


for _op in _AXES_INPUT_SINCE:
    ADAPTERS.register(_op)(_axes_adapter)


@ADAPTERS.register("Split")
def _split(ctx: _Ctx, node: ir.Node) -> None:
    """Split: 'split' attribute <13, input >=13; 'num_outputs' attribute >=18."""
    if ctx.target < 18 and "num_outputs" in node.attributes:
        node.attributes.pop("num_outputs")
        x = node.inputs[0]
        axis = node.attributes.get_int("axis", 0)
        if x is None or x.shape is None or not isinstance(x.shape[axis], int):
            raise _NotExpressibleError("it uses num_outputs on an axis of unknown size")
        size, n = int(x.shape[axis]), len(node.outputs)
        chunk = -(-size // n)
        sizes = [chunk] * (size // chunk) + ([size % chunk] if size % chunk else [])
        if len(sizes) != n:
            raise _NotExpressibleError(f"num_outputs={n} does not divide an axis of {size}")
        node.resize_inputs(2)
        node.replace_input_with(1, ctx.const(np.asarray(sizes, np.int64), f"{node.name}_split"))
    src_input, tgt_input = ctx.source >= 13, ctx.target >= 13
    if src_input == tgt_input:
        return
    if tgt_input:
        split = node.attributes.pop("split", None)
        if split is not None:
            node.resize_inputs(2)
            node.replace_input_with(1, ctx.const(np.asarray(split.as_ints(), np.int64), f"{node.name}_split"))
    elif len(node.inputs) > 1 and node.inputs[1] is not None:
        sv = node.inputs[1]
        if sv.const_value is None:
            raise _NotExpressibleError("its split sizes are computed at run time")
        node.attributes["split"] = ir.Attr("split", ir.AttributeType.INTS,
                                           [int(v) for v in sv.const_value.numpy().reshape(-1)])
        node.resize_inputs(1)


@ADAPTERS.register("LayerNormalization")
def _layer_norm(ctx: _Ctx, node: ir.Node) -> None:
    """LayerNormalization (opset 17) decomposed for older opsets into Reduce/Sub/Div arithmetic."""
    if ctx.target >= 17:
        return
    if len(node.outputs) > 1 and any(o.uses() or o.is_graph_output() for o in node.outputs[1:]):
        raise _NotExpressibleError("its Mean/InvStdDev outputs are used")
    x, scale = node.inputs[0], node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    axis = node.attributes.get_int("axis", -1)
    eps = node.attributes.get_float("epsilon", 1e-5)
    if x is None or x.shape is None:
        raise _NotExpressibleError("its input rank is unknown")
    rank = len(x.shape)
    axes = list(range(axis % rank, rank))
    mean = ctx.node_before(node, "ReduceMean", [x], {"axes": axes, "keepdims": 1})
    d = ctx.node_before(node, "Sub", [x, mean])
    var = ctx.node_before(node, "ReduceMean", [ctx.node_before(node, "Mul", [d, d])], {"axes": axes, "keepdims": 1})
    eps_v = ctx.const(np.asarray(eps, dtype=np.float32), f"{node.name}_eps")
    std = ctx.node_before(node, "Sqrt", [ctx.node_before(node, "Add", [var, eps_v])])
    y = ctx.node_before(node, "Mul", [ctx.node_before(node, "Div", [d, std]), scale])
    if bias is not None:
        y = ctx.node_before(node, "Add", [y, bias])
    _replace(ctx, node, y)


@ADAPTERS.register("Gelu")
def _gelu(ctx: _Ctx, node: ir.Node) -> None:
    """Gelu (opset 20) decomposed for older opsets: exact (Erf) or tanh approximation."""
    if ctx.target >= 20:
        return
    x = node.inputs[0]
    approx = node.attributes.get_string("approximate", "none")
    half = ctx.const(np.asarray(0.5, np.float32), f"{node.name}_half")
    one = ctx.const(np.asarray(1.0, np.float32), f"{node.name}_one")
    if approx == "tanh":
        c = ctx.const(np.asarray(np.sqrt(2 / np.pi), np.float32), f"{node.name}_c")
        k = ctx.const(np.asarray(0.044715, np.float32), f"{node.name}_k")
        x3 = ctx.node_before(node, "Mul", [ctx.node_before(node, "Mul", [x, x]), x])
        kx3 = ctx.node_before(node, "Mul", [k, x3])
        inner = ctx.node_before(node, "Mul", [c, ctx.node_before(node, "Add", [x, kx3])])
        t = ctx.node_before(node, "Tanh", [inner])
    else:
        r = ctx.const(np.asarray(1 / np.sqrt(2), np.float32), f"{node.name}_rsqrt2")
        t = ctx.node_before(node, "Erf", [ctx.node_before(node, "Mul", [x, r])])
    y = ctx.node_before(node, "Mul", [ctx.node_before(node, "Mul", [x, half]), ctx.node_before(node, "Add", [t, one])])
    _replace(ctx, node, y)


def _replace(ctx: _Ctx, node: ir.Node, new: ir.Value) -> None:
    ctx.replace(node, new)


class _NotExpressibleError(Exception):
    pass


def _schema(op: str, opset: int, domain: str = "") -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(op, max_inclusive_version=opset, domain=domain)
    except onnx.defs.SchemaError:
        return None


def _generic_check(node: ir.Node, target: int) -> str:
    schema = _schema(node.op_type, target)
    if schema is None:
        return f"it does not exist before opset {_first_opset(node.op_type)}"
    extra = [a for a in node.attributes if a not in schema.attributes]
    if extra:
        return f"opset {target} has no attribute {', '.join(repr(a) for a in extra)}"
    n = len(node.inputs)
    while n and node.inputs[n - 1] is None:
        n -= 1
    if n > schema.max_input:
        return f"opset {target} takes at most {schema.max_input} inputs, it has {n}"
    return ""


def _first_opset(op: str) -> int:
    for v in range(1, 30):
        if _schema(op, v) is not None:
            return v
    return 0


def adapt_opset(model: ir.Model, target: int) -> int:
    """Rewrite ``model`` in place for opset ``target``; returns the number of nodes rewritten.

    Raises:
        UnsupportedOpsError: listing every op (with count and first provenance) that cannot be
            expressed at ``target``.
    """
    graph = model.graph
    source = graph.opset_imports.get("", graph.opset_imports.get("ai.onnx", target))
    gaps = ir.GapCollector(by_reason=False)
    changed = 0
    if source != target:
        ctx = _Ctx(graph, source, target)
        for node in list(graph):
            if node.domain not in ("", "ai.onnx"):
                continue
            src = _schema(node.op_type, source)
            tgt = _schema(node.op_type, target)
            if src is not None and tgt is not None and src.since_version == tgt.since_version:
                continue
            adapter = ADAPTERS.lookup(node.op_type)
            try:
                if adapter is not None:
                    adapter(ctx, node)
                    changed += 1
                else:
                    why = _generic_check(node, target)
                    if why:
                        raise _NotExpressibleError(why)
            except _NotExpressibleError as exc:
                gaps.add(node.op_type, ir.describe(node), str(exc))
    gaps.raise_if_any(f"the model (opset {source})", what=f"op at opset {target}", hint="Choose another --opset.")
    graph.opset_imports[""] = target
    graph.opset_imports.pop("ai.onnx", None)
    return changed
