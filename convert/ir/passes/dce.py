"""Dead-code elimination: drop nodes whose outputs reach no graph output, and unused initializers.

This does what onnx-ir's ``RemoveUnusedNodesPass`` does (nodes, unused initializers, functions, and
the unused optional outputs of standard ops unnamed), written here for speed: that pass asks onnx for
the schema of every node it keeps, 0.05-0.5 ms each (``onnx.defs.get_schema``), and a conversion runs
it twice (a 90-node BERT look-alike: 20 ms of its 80 ms of work). Here the schema is asked for only
where a node has an unused output (or is a batch norm, whose training_mode the pass settles), and
once per (op, opset, domain).
"""

from __future__ import annotations

import functools

import onnx
import onnx_ir as _ir

from .base import Pass, PassResult

__all__ = ["EliminateDeadCode"]

_STANDARD_DOMAINS = ("", "onnx.ai")


class EliminateDeadCode(Pass):
    """Remove nodes and initializers that no graph output depends on."""

    def call(self, model: _ir.Model) -> PassResult:
        """Remove dead nodes and initializers from ``model`` in place."""
        graph = model.graph
        count = _sweep(graph, graph.opset_imports.get(""))
        kept = frozenset(graph.outputs) | frozenset(graph.inputs)
        for value in list(graph.initializers.values()):
            if not value.uses() and value not in kept:
                del graph.initializers[value.name]  # type: ignore[arg-type]
                count += 1
        for function in model.functions.values():
            count += _sweep(function, function.opset_imports.get(""))
        return PassResult(model, bool(count))


def _sweep(graph: _ir.Graph | _ir.Function, opset: int | None) -> int:
    """Remove the dead nodes of ``graph`` (and of its nodes' subgraphs), last first; their number."""
    outputs = frozenset(graph.outputs)
    count = 0
    for node in reversed(graph):
        if not any(out in outputs or out.uses() for out in node.outputs):
            graph.remove(node, safe=True)
            count += 1
            continue
        while node.inputs and node.inputs[-1] is None:  # trailing omitted inputs
            node.resize_inputs(len(node.inputs) - 1)
        if opset is not None and node.domain in _STANDARD_DOMAINS:
            _unname_unused_optional_outputs(node, outputs, opset)
        for attr in node.attributes.values():
            if attr.type == _ir.AttributeType.GRAPH:
                count += _sweep(attr.as_graph(), opset)
            elif attr.type == _ir.AttributeType.GRAPHS:
                for sub in attr.as_graphs():
                    count += _sweep(sub, opset)
    return count


def _unname_unused_optional_outputs(node: _ir.Node, outputs: frozenset[_ir.Value], opset: int) -> None:
    """Unname the unused optional outputs of a standard op, and drop the trailing unnamed ones."""
    if node.op_type != "BatchNormalization" and all(out in outputs or out.uses() for out in node.outputs):
        return  # nothing to unname (an unnamed output is unused): no schema needed
    optional = _optional_outputs(node.op_type, opset, node.domain)
    if optional is None:
        return
    if node.op_type == "BatchNormalization":
        # Before opset 14 the number of outputs chooses training or inference; from 14 on, training
        # outputs are dropped only where training_mode is known to be 0 (inference), then implied.
        if not _has_training_mode(node.op_type, opset, node.domain):
            return
        mode = node.attributes.get("training_mode")
        if mode is not None and (mode.is_ref() or mode.type != _ir.AttributeType.INT or mode.as_int() != 0):
            return
        node.attributes.pop("training_mode", None)
    if not any(optional):
        return
    for i, out in enumerate(node.outputs[: len(optional)]):
        if optional[i] and out not in outputs and not out.uses():
            out.name = ""
    count = len(node.outputs)
    while count and not node.outputs[count - 1].name:  # trailing unnamed outputs
        count -= 1
    node.resize_outputs(count)


@functools.cache
def _schema(op_type: str, opset: int, domain: str) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(op_type, opset, domain=domain)
    except Exception:  # an op onnx does not know at this opset: nothing of it is changed
        return None


def _optional_outputs(op_type: str, opset: int, domain: str) -> tuple[bool, ...] | None:
    """Whether each output of the op's schema is optional; None where it has no schema or a variadic
    output (nothing is unnamed then)."""
    schema = _schema(op_type, opset, domain)
    if schema is None:
        return None
    options = [out.option for out in schema.outputs]
    if onnx.defs.OpSchema.FormalParameterOption.Variadic in options:
        return None
    return tuple(o == onnx.defs.OpSchema.FormalParameterOption.Optional for o in options)


def _has_training_mode(op_type: str, opset: int, domain: str) -> bool:
    schema = _schema(op_type, opset, domain)
    return schema is not None and "training_mode" in schema.attributes
