"""Rewrite TF op patterns into ops the converters handle better, before support is checked.

One rewriter so far:

``tensordot_to_conv``: Keras' ``Dense`` on a rank-4 tensor ``x`` ([N, H, W, C], ConvNeXt's
pointwise layers) freezes as ``tf.tensordot(x, W, axes=[[3], [0]])``::

    Reshape(x, Pack(Prod(Gather(Shape(x), [0, 1, 2])), Prod(Gather(Shape(x), [3]))))   # [N*H*W, C]
    -> MatMul(., W[C, K])
    -> Reshape(., ConcatV2(Gather(Shape(x), [0, 1, 2]), [K]))                          # [N, H, W, K]

which is a 1x1 convolution: ``Conv2D(x, W.reshape(1, 1, C, K))``, stride 1, VALID. As a Conv it
runs in NCHW like its neighbours; as written it needs TF's axes (a Transpose on each side) and
the shape arithmetic at run time. The rewrite checks every piece of the pattern (the gathered
axes, that both targets come from ``Shape(x)``, that the intermediate results feed only the
next op) and leaves anything else alone.
"""

from __future__ import annotations

import logging

import numpy as np

from .graph import TFGraph, TFNode

__all__ = ["rewrite", "tensordot_to_conv"]

logger = logging.getLogger(__name__)


def _const(by_name: dict[str, TFNode], tensor: str) -> np.ndarray | None:
    node = by_name.get(tensor.split(":")[0])
    if node is None or node.op != "Const" or not isinstance(node.attrs.get("value"), np.ndarray):
        return None
    return node.attrs["value"]  # type: ignore[return-value]


def _gather_of_shape(by_name: dict[str, TFNode], tensor: str, x: str, indices: list[int]) -> bool:
    """Return True when ``tensor`` is ``GatherV2(Shape(x), indices, axis 0)``."""
    node = by_name.get(tensor.split(":")[0])
    if node is None or node.op != "GatherV2" or len(node.inputs) != 3:
        return False
    shape = by_name.get(node.inputs[0].split(":")[0])
    idx, axis = _const(by_name, node.inputs[1]), _const(by_name, node.inputs[2])
    return (shape is not None and shape.op == "Shape" and shape.inputs[:1] == [x]
            and idx is not None and idx.tolist() == indices and axis is not None and int(axis) == 0)


def _prod_of(by_name: dict[str, TFNode], tensor: str, x: str, indices: list[int]) -> bool:
    """Return True when ``tensor`` is ``Prod(GatherV2(Shape(x), indices), [0])``."""
    node = by_name.get(tensor.split(":")[0])
    if node is None or node.op != "Prod" or node.attrs.get("keep_dims"):
        return False
    axes = _const(by_name, node.inputs[1])
    return axes is not None and axes.reshape(-1).tolist() == [0] and _gather_of_shape(by_name, node.inputs[0], x,
                                                                                      indices)


def _tensordot(by_name: dict[str, TFNode], consumers: dict[str, int], outer: TFNode) -> tuple[str, np.ndarray] | None:
    """Return (x, W) when ``outer`` is the last Reshape of ``tensordot(x, W, [[3], [0]])``, else None."""
    matmul = by_name.get(outer.inputs[0].split(":")[0])
    if matmul is None or matmul.op != "MatMul" or matmul.attrs.get("transpose_a") or matmul.attrs.get("transpose_b"):
        return None
    weight = _const(by_name, matmul.inputs[1])
    inner = by_name.get(matmul.inputs[0].split(":")[0])
    if weight is None or weight.ndim != 2 or inner is None or inner.op != "Reshape":
        return None
    x = inner.inputs[0]
    producer = by_name.get(x.split(":")[0])
    index = int(x.split(":")[1]) if ":" in x else 0
    shape = producer.shapes[index] if producer is not None and index < len(producer.shapes) else None
    if shape is None or len(shape) != 4 or shape[3] != weight.shape[0]:
        return None
    if consumers.get(f"{inner.name}:0", 0) != 1 or consumers.get(f"{matmul.name}:0", 0) != 1:
        return None
    pack = by_name.get(inner.inputs[1].split(":")[0])
    if pack is None or pack.op != "Pack" or len(pack.inputs) != 2 or int(pack.attrs.get("axis", 0)) != 0:  # type: ignore[call-overload]
        return None
    if not (_prod_of(by_name, pack.inputs[0], x, [0, 1, 2]) and _prod_of(by_name, pack.inputs[1], x, [3])):
        return None
    concat = by_name.get(outer.inputs[1].split(":")[0])
    if concat is None or concat.op != "ConcatV2" or len(concat.inputs) != 3:
        return None
    last, axis = _const(by_name, concat.inputs[1]), _const(by_name, concat.inputs[2])
    if (last is None or last.reshape(-1).tolist() != [weight.shape[1]] or axis is None or int(axis) != 0
            or not _gather_of_shape(by_name, concat.inputs[0], x, [0, 1, 2])):
        return None
    return x, weight


def tensordot_to_conv(graph: TFGraph) -> int:
    """Replace each rank-4 ``tensordot(x, W, [[3], [0]])`` by a 1x1 ``Conv2D``; return how many."""
    by_name = {n.name: n for n in graph.nodes}
    consumers: dict[str, int] = {}
    for node in graph.nodes:
        for tensor in node.inputs:
            consumers[tensor] = consumers.get(tensor, 0) + 1
    nodes: list[TFNode] = []
    done = 0
    for node in graph.nodes:
        found = _tensordot(by_name, consumers, node) if node.op == "Reshape" else None
        if found is None:
            nodes.append(node)
            continue
        x, weight = found
        filt = TFNode(name=f"{node.name}/filter", op="Const", inputs=[],
                      attrs={"value": weight.reshape(1, 1, *weight.shape), "dtype": weight.dtype},
                      shapes=[(1, 1, *weight.shape)], dtypes=[weight.dtype])
        conv = TFNode(name=node.name, op="Conv2D", inputs=[x, f"{filt.name}:0"],
                      attrs={"strides": [1, 1, 1, 1], "dilations": [1, 1, 1, 1], "padding": "VALID",
                             "data_format": "NHWC", "T": node.dtypes[0]},
                      shapes=node.shapes, dtypes=node.dtypes)
        nodes.extend([filt, conv])
        done += 1
    graph.nodes[:] = nodes
    return done


def rewrite(graph: TFGraph) -> TFGraph:
    """Run every rewriter on ``graph`` in place and return it."""
    from .controlflow import lower_control_flow
    from .recurrent import recognise_recurrent

    count = tensordot_to_conv(graph)
    if count:
        logger.debug("tensorflow: %d rank-4 Tensordot(s) became 1x1 Conv2D", count)
    count = recognise_recurrent(graph)
    if count:
        logger.debug("tensorflow: %d while loop(s) became Keras recurrent layers", count)
    count = lower_control_flow(graph)
    if count:
        logger.debug("tensorflow: %d loop(s) and conditional(s) gathered for ONNX Loop / If", count)
    return graph
