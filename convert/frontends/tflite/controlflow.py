"""TFLite control flow: ``WHILE`` -> ONNX ``Loop``, ``IF`` -> ONNX ``If``, their subgraphs as IR subgraphs.

TFLiteConverter writes every ``tf.while_loop`` (Keras 3's LSTM, GRU and SimpleRNN among them,
their TensorLists lowered to ``SLICE``/``CONCATENATION`` of a carried tensor) as ``WHILE`` and every
``tf.cond`` it does not fold as ``IF``; the loop's condition and body, and the two branches, are
other subgraphs of the file (``model.py`` reads and checks them).

- ``WHILE(v...)`` with cond ``C`` and body ``B``: ``C(v)`` is converted once before the loop (ONNX
  ``Loop``'s ``cond`` input) and again at the end of the body on ``B(v)``'s results (the body's
  ``cond`` output); no trip count. Every input is loop-carried; the outputs are the final values.
- ``IF(c, v...)`` with branches ``T`` and ``E``: ``If(c)`` whose branches compute ``T(v)`` and
  ``E(v)``, reading ``v`` from the enclosing graph (ONNX branches take no inputs).

Each subgraph is converted with a context of its own (``lower.lower_subgraph``) and every tensor
crosses a boundary in TFLite's layout, so a loop is correct whatever the layouts around it; a
rank-4 tensor inside pays a Transpose where a converter wants NCHW. Quantized (int8/uint8)
tensors crossing a boundary are refused.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from convert.frontends.tensorflow.context import TF, TFContext
from convert.frontends.tensorflow.graph import TFNode
from convert.ir import DataType, Graph, Node, RefusedError, Shape, TensorType, Value

from .model import TFLModel, TFLOp, TFLTensor
from .ops import register

__all__ = ["if_", "while_"]


def _lowering(ctx: TFContext) -> tuple[TFLModel, TFLOp]:
    low = ctx.lowering  # type: ignore[attr-defined]
    model, op = low.model, low.current
    for i in op.inputs + op.outputs:
        if i >= 0 and low.is_quant_activation(model.tensors[i]):
            raise RefusedError(f"quantized tensor '{model.tensors[i].name}' crosses the boundary of a subgraph; "
                               f"only float control flow is converted")
    return model, op


def _type(t: TFLTensor) -> TensorType:
    return TensorType(DataType.from_numpy(t.dtype))


@contextmanager
def _inside(ctx: TFContext, graph: Graph) -> Iterator[Graph]:
    """Make the builder fill ``graph`` (its constants its own) for the duration of the block."""
    builder = ctx.builder
    saved = builder.graph, builder._consts
    builder.graph, builder._consts = graph, {}
    try:
        yield graph
    finally:
        builder.graph, builder._consts = saved


def _close(ctx: TFContext, graph: Graph, values: Sequence[Value]) -> None:
    """Make ``values`` the outputs of ``graph`` (the builder filling it); one not computed there
    (an input, an outer value, a constant, or one already an output) passes an Identity."""
    for v in values:
        producer = v.producer()
        if producer is None or producer.graph is not graph or v.is_graph_output() or v in graph.outputs:
            ident = Value(name=ctx.builder.names.fresh(f"{graph.name}_out"), type=v.type, shape=v.shape)
            graph.append(Node("", "Identity", [v], outputs=[ident], name=ctx.builder.names.fresh("Identity")))
            v = ident
        graph.outputs.append(v)


def _condition(ctx: TFContext, value: Value, t: TFLTensor) -> Value:
    """A one-element condition as ONNX's scalar bool."""
    if t.shape != ():
        value = ctx.emit("Reshape", [value, ctx.builder.const(np.zeros(0, np.int64))], suffix="cond")
    if t.dtype != np.bool_:
        value = ctx.emit("Cast", [value], {"to": DataType.BOOL}, suffix="cond")
    return value


@register("WHILE", maps_to="Loop", notes="cond subgraph before the loop and after each iteration; body subgraph "
                                         "as the Loop body; every input carried; float tensors")
def while_(node: TFNode, ctx: TFContext) -> None:
    """WHILE(v...) -> Loop(M="", cond=C(v), v...) with body (i, cond, v...) -> (C(B(v)), B(v)...)."""
    from .lower import lower_subgraph

    model, op = _lowering(ctx)
    cond, body = model.runs(op)
    initial = [ctx.get(key, TF) for key in node.inputs]
    cond_out = cond.tensors[cond.graph_outputs[0]]
    first = _condition(ctx, lower_subgraph(ctx, cond, initial)[0], cond_out)
    names = ctx.builder.names
    name = names.fresh(f"{node.name}/body")
    step = Value(name=names.fresh(f"{name}_i"), type=TensorType(DataType.INT64), shape=Shape([]))
    go_on = Value(name=names.fresh(f"{name}_cond"), type=TensorType(DataType.BOOL), shape=Shape([]))
    state = [Value(name=names.fresh(f"{name}_v{k}"), type=_type(t), shape=Shape(list(t.shape)))
             for k, t in enumerate(body.tensors[i] for i in body.graph_inputs)]
    graph = Graph([step, go_on, *state], [], nodes=[], name=name)
    with _inside(ctx, graph):
        outs = lower_subgraph(ctx, body, state)
        again = _condition(ctx, lower_subgraph(ctx, cond, outs)[0], cond_out)
        _close(ctx, graph, [again, *outs])
    results = ctx.emit_multi("Loop", [None, first, *initial], {"body": graph}, outputs=len(initial))
    for k, (value, index) in enumerate(zip(results, op.outputs, strict=True)):
        value.type = _type(model.tensors[index])
        ctx.bind(value, TF, index=k)


@register("IF", maps_to="If", notes="then/else subgraphs as branches reading the operands; float tensors")
def if_(node: TFNode, ctx: TFContext) -> None:
    """IF(c, v...) -> If(c) with then_branch T(v) and else_branch E(v)."""
    from .lower import lower_subgraph

    model, op = _lowering(ctx)
    pred = _condition(ctx, ctx.get(node.inputs[0], TF), model.tensors[op.inputs[0]])
    operands = [ctx.get(key, TF) for key in node.inputs[1:]]
    branches = []
    for label, sg in zip(("then", "else"), model.runs(op), strict=True):
        graph = Graph([], [], nodes=[], name=ctx.builder.names.fresh(f"{node.name}/{label}"))
        with _inside(ctx, graph):
            _close(ctx, graph, lower_subgraph(ctx, sg, operands))
        branches.append(graph)
    results = ctx.emit_multi("If", [pred], {"then_branch": branches[0], "else_branch": branches[1]},
                             outputs=len(op.outputs))
    for k, (value, index) in enumerate(zip(results, op.outputs, strict=True)):
        value.type = _type(model.tensors[index])
        ctx.bind(value, TF, index=k)
