"""Gathered TF control flow (``controlflow.py``) -> ONNX ``Loop`` and ``If`` with IR subgraphs.

A body or branch is converted node by node with the same converters into its own IR graph (the
builder appends to it while it is current); the values it reads from the enclosing graph are
used as they are (ONNX outer-scope references). Whatever a body binds (values, layouts made by a
Transpose, constants) is forgotten when it ends, so the enclosing graph never reads a value of a
subgraph.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from convert.frontends.tensorflow.context import TF, TFContext
from convert.frontends.tensorflow.controlflow import COND_OP, LOOP_OP, CondPlan, LoopPlan
from convert.frontends.tensorflow.graph import TFNode
from convert.frontends.tensorflow.ops import register
from convert.ir import DataType, Graph, Node, RefusedError, Shape, TensorType, Value, convert_all

__all__: list[str] = []


@contextmanager
def _scope(ctx: TFContext, sub: Graph) -> Iterator[None]:
    """Build into ``sub``; afterwards restore every table of ``ctx`` as it was before."""
    b = ctx.builder
    graph, consts_cache = b.graph, dict(b._consts)
    held = {k: (v, dict(v)) for k, v in ctx.values.items()}
    tables = [(t, dict(t)) for t in (ctx.consts, ctx.shapes, ctx.convs, ctx.zero_pads, ctx.space_to_batch,
                                      ctx.dilated, ctx.list_reads, ctx.list_writes, ctx.scan_items)]
    item = ctx.item
    b.graph = sub
    try:
        yield
    finally:
        b.graph, b._consts = graph, consts_cache
        for value, layouts in held.values():
            value.clear()
            value.update(layouts)
        ctx.values = {k: v for k, (v, _) in held.items()}
        for table, copy in tables:
            table.clear()
            table.update(copy)  # type: ignore[attr-defined]
        ctx.item = item


def _alias(ctx: TFContext, name: str, source: str) -> None:
    """Make tensor ``name`` the same as ``source`` (a branch's or body's view of an outer value)."""
    if source in ctx.consts:
        ctx.consts[name] = ctx.consts[source]
    else:
        if source not in ctx.values:
            raise RefusedError(f"tensor '{source}' is used before it is produced")
        ctx.values[name] = ctx.values[source]
    ctx.shapes[name] = ctx.shape(source)


def _convert(ctx: TFContext, nodes: Sequence[TFNode]) -> None:
    """Convert ``nodes`` (a body, a branch, a loop condition) into the current graph."""
    from convert.frontends.tensorflow.fold import fold_constant
    from convert.frontends.tensorflow.ops import OPS, Converter

    for node in nodes:
        for i, shape in enumerate(node.shapes):
            if shape is not None or f"{node.name}:{i}" not in ctx.shapes:
                ctx.shapes[f"{node.name}:{i}"] = shape

    def run(converter: Converter, node: TFNode) -> None:
        ctx.item = node
        if not fold_constant(node, ctx):
            converter(node, ctx)

    convert_all(list(nodes), OPS, key=lambda n: n.op, where=lambda n: f"{ctx.builder.source} {n.where()}",
                call=run)


def _outputs(ctx: TFContext, node: TFNode, sub: Graph, values: Sequence[Value]) -> None:
    """Make ``values`` the outputs of ``sub``; one not computed in it (or listed twice) passes an Identity."""
    ctx.item = node
    seen: set[int] = set()
    for v in values:
        producer = v.producer()
        if producer is None or producer.graph is not sub or v.is_graph_output() or id(v) in seen:
            out = Value(name=ctx.builder.names.fresh(f"{sub.name}_out"), type=v.type, shape=v.shape)
            sub.append(Node("", "Identity", [v], outputs=[out], name=ctx.builder.names.fresh(f"{sub.name}/Identity")))
            v = out
        seen.add(id(v))
        sub.outputs.append(v)


@register(LOOP_OP, maps_to="Loop",
          notes="a lowered while loop that is not one Keras cell (masking, custom tf.while_loop); carried values, "
                "loop-invariant inputs, TensorListFromTensor reads (Gather), per-step TensorListSetItem writes "
                "(scan outputs)")
def lowered_while(node: TFNode, ctx: TFContext) -> None:
    """One lowered TF while loop -> ONNX Loop (no trip count; the condition before and after each step)."""
    plan = node.attrs["plan"]
    assert isinstance(plan, LoopPlan)
    b = ctx.builder
    inits = [ctx.get(node.inputs[k], TF) for k in range(len(plan.carried))]
    for tensor, index in plan.invariants.items():
        _alias(ctx, tensor, node.inputs[index])
    # the condition on the initial values, in the enclosing graph
    first_scope = b.graph
    with _scope(ctx, first_scope):
        for k, (_, _, merge) in enumerate(plan.carried):
            _alias(ctx, merge, node.inputs[k])
        _convert(ctx, plan.cond_nodes)
        ctx.item = node
        first = ctx.get(plan.cond, TF)
    name = b.names.fresh(f"{node.name}_body")
    step = Value(name=f"{name}_i", type=TensorType(DataType.INT64), shape=Shape([]))
    go = Value(name=f"{name}_cond", type=TensorType(DataType.BOOL), shape=Shape([]))
    states = [Value(name=b.names.fresh(f"{name}_in{k}"), type=TensorType(DataType.from_numpy(node.dtypes[k])))
              for k in range(len(plan.carried))]
    sub = Graph([step, go, *states], [], nodes=[], name=name)
    with _scope(ctx, sub):
        ctx.item = node
        ctx.list_reads.update({t: node.inputs[i] for t, i in plan.reads.items()})
        ctx.list_writes.update(plan.writes)
        ctx.shapes.update(plan.shapes)
        for (body, _, _), state in zip(plan.carried, states, strict=True):
            ctx.values[body] = {TF: state}
        _convert(ctx, plan.body)
        ctx.item = node
        nexts = [ctx.get(nxt, TF) for _, nxt, _ in plan.carried]
        for (_, _, merge), value in zip(plan.carried, nexts, strict=True):
            ctx.values[merge] = {TF: value}
        _convert(ctx, plan.cond_nodes)
        ctx.item = node
        again = ctx.get(plan.cond, TF)
        missing = [slot for slot in range(len(plan.scans)) if slot not in ctx.scan_items]
        if missing:
            raise RefusedError("a tensor list the loop writes is not written in its body")
        scans = [ctx.scan_items[slot] for slot in range(len(plan.scans))]
        _outputs(ctx, node, sub, [again, *nexts, *scans])
    results = ctx.emit_multi("Loop", [None, first, *inits], {"body": sub}, outputs=len(plan.carried) + len(scans))
    _annotate(node, results, scans=len(scans))
    for k in range(len(plan.carried)):
        ctx.bind(results[k], TF, k)
    for slot, ((kind, length), scan) in enumerate(zip(plan.scans, results[len(plan.carried):], strict=True)):
        ctx.bind(_stacked(ctx, scan, kind, length, node.dtypes[len(plan.carried) + slot]), TF,
                 len(plan.carried) + slot)


def _annotate(node: TFNode, results: Sequence[Value], scans: int = 0) -> None:
    """Type the results of a Loop or If (shape inference leaves control flow's outputs as they are);
    a scan output, stacked by Loop, gets its rank from the list's stack when TF knew it."""
    for i, value in enumerate(results):
        value.type = TensorType(DataType.from_numpy(node.dtypes[i]))
        shape = node.shapes[i] if i < len(node.shapes) else None
        if shape is not None and i >= len(results) - scans:  # its rows: the steps run, n or fewer
            shape = (None, *shape[1:])
        if shape is not None:
            value.shape = Shape(list(shape))


def _stacked(ctx: TFContext, scan: Value, kind: str, length: int, dtype: np.dtype) -> Value:
    """The list as ``TensorListStack`` reads it: every step's item (unwritten rows zero) or the last one."""
    b = ctx.builder
    if kind == "last":  # Keras' one-element list, overwritten at every step
        last = ctx.emit("Gather", [scan, b.const(np.array(-1, np.int64))], {"axis": 0}, suffix="last")
        return ctx.emit("Unsqueeze", [last, b.const(np.array([0], np.int64))], suffix="last_row")
    if length < 0:
        return scan
    shape = ctx.emit("Shape", [scan], suffix="scan_shape")
    rows = ctx.emit("Slice", [shape, b.const(np.array([0], np.int64)), b.const(np.array([1], np.int64))],
                    suffix="scan_rows")
    rest = ctx.emit("Slice", [shape, b.const(np.array([1], np.int64)), b.const(np.array([2 ** 62], np.int64))],
                    suffix="scan_rest")
    missing = ctx.emit("Sub", [b.const(np.array([length], np.int64)), rows], suffix="unwritten")
    zeros = ctx.emit("Expand", [b.const(np.zeros((), dtype)), ctx.emit("Concat", [missing, rest], {"axis": 0})],
                     suffix="zeros")
    return ctx.emit("Concat", [scan, zeros], {"axis": 0}, suffix="stack")


@register(COND_OP, maps_to="If", notes="a lowered tf.cond (Switch/Merge on one predicate); each branch a subgraph")
def lowered_cond(node: TFNode, ctx: TFContext) -> None:
    """One lowered TF conditional -> ONNX If; only the branch taken runs."""
    plan = node.attrs["plan"]
    assert isinstance(plan, CondPlan)
    b = ctx.builder
    graphs = []
    for label, (side, nodes, outs) in zip(("then", "else"), plan.branches, strict=True):
        sub = Graph([], [], nodes=[], name=b.names.fresh(f"{node.name}_{label}"))
        with _scope(ctx, sub):
            ctx.item = node
            for tensor, index in side.items():
                _alias(ctx, tensor, node.inputs[index])
            _convert(ctx, nodes)
            ctx.item = node
            _outputs(ctx, node, sub, [ctx.get(t, TF) for t in outs])
        graphs.append(sub)
    pred = ctx.get(node.inputs[0], TF)
    results = ctx.emit_multi("If", [pred], {"then_branch": graphs[0], "else_branch": graphs[1]},
                             outputs=len(graphs[0].outputs))
    _annotate(node, results)
    for i, value in enumerate(results):
        ctx.bind(value, TF, i)


@register("TensorListGetItem", maps_to="Gather",
          notes="inside a converted loop, of a list made by TensorListFromTensor before it")
def tensor_list_get_item(node: TFNode, ctx: TFContext) -> None:
    """TensorListGetItem(TensorListFromTensor(x), i) -> Gather(x, i) on axis 0."""
    source = ctx.list_reads.get(node.inputs[0])
    if source is None:
        raise RefusedError("it reads a tensor list that is not a loop's TensorListFromTensor")
    ctx.bind(ctx.emit("Gather", [ctx.get(source, TF), ctx.get(node.inputs[1], TF)], {"axis": 0}))


@register("TensorListSetItem", maps_to="Loop scan output",
          notes="inside a converted loop: written once per step at the step counter, or at 0 of a one-element list")
def tensor_list_set_item(node: TFNode, ctx: TFContext) -> None:
    """TensorListSetItem(list, t, item) -> ``item`` as the loop's scan output for that list."""
    slot = ctx.list_writes.get(node.inputs[0])
    if slot is None:
        raise RefusedError("it writes a tensor list that is not a loop's TensorListReserve")
    ctx.scan_items[slot] = ctx.get(node.inputs[2], TF)
