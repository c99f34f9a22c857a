"""Bring attribute forms of old opsets into the input forms the Caffe emitters read.

Old ONNX files (opsets 7-10, the early model zoo) hold some operands as attributes that later
opsets moved to inputs: ``Clip`` min/max (inputs since 11), ``Pad`` pads/value (since 11),
``Slice`` starts/ends/axes (since 10). The emitters and rewrites read the input form only; left
as attributes, a ``Clip(0, 6)`` would read as unbounded and a Pad or Slice would look operandless.
This pass moves those attributes to constant inputs; the nodes' meaning is unchanged (the graph
is only written as Caffe afterwards, never as ONNX).
"""

from __future__ import annotations

import numpy as np

from convert.ir import DataType, Graph, Model, Shape, TensorType, Value, from_array
from convert.ir.passes import Pass, PassResult

__all__ = ["AttributesToInputs"]

# op -> (first opset with the input form, [(attribute, dtype) in input order after the data input])
_MOVED: dict[str, tuple[int, list[tuple[str, type]]]] = {
    "Clip": (11, [("min", np.float32), ("max", np.float32)]),
    "Pad": (11, [("pads", np.int64), ("value", np.float32)]),
    "Slice": (10, [("starts", np.int64), ("ends", np.int64), ("axes", np.int64)]),
}


class AttributesToInputs(Pass):
    """Move pre-opset-11 attribute operands (Clip, Pad, Slice) to constant inputs, in place."""

    def call(self, model: Model) -> PassResult:
        """Rewrite the main graph's old-form nodes; return whether any changed."""
        graph = model.graph
        default = graph.opset_imports.get("", graph.opset_imports.get("ai.onnx", 17))
        names = set(graph.initializers) | {v.name for n in graph for v in n.outputs if v.name}
        changed = False
        for node in graph:
            moved = _MOVED.get(node.op_type)
            if moved is None or node.domain not in ("", "ai.onnx"):
                continue
            since, attrs = moved
            if (node.version or default) >= since or not any(a in node.attributes for a, _ in attrs):
                continue
            if len(node.inputs) != 1:
                continue  # already in input form
            inputs: list[Value | None] = []
            for attr, dtype in attrs:
                a = node.attributes.pop(attr, None)
                if a is None:
                    inputs.append(None)
                    continue
                arr = np.asarray(a.value, dtype=dtype)
                inputs.append(_const(graph, names, f"{node.name or node.op_type}_{attr}", arr))
            while inputs and inputs[-1] is None:
                inputs.pop()
            node.resize_inputs(1 + len(inputs))
            for i, v in enumerate(inputs, 1):
                if v is not None:
                    node.replace_input_with(i, v)
            changed = True
        return PassResult(model, changed)


def _const(graph: Graph, names: set[str], base: str, arr: np.ndarray) -> Value:
    name, i = base, 1
    while name in names:
        name, i = f"{base}_{i}", i + 1
    names.add(name)
    value = Value(name=name, shape=Shape(arr.shape), type=TensorType(DataType.from_numpy(arr.dtype)),
                  const_value=from_array(arr, name=name))
    graph.register_initializer(value)
    return value
