"""Bring attribute forms of old opsets into the input forms the Caffe emitters read.

Old ONNX files (opsets 7-10, the early model zoo) hold some operands as attributes that later
opsets moved to inputs: ``Clip`` min/max (inputs since 11), ``Pad`` pads/value (since 11),
``Slice`` starts/ends/axes (since 10). The emitters and rewrites read the input form only; left
as attributes, a ``Clip(0, 6)`` would read as unbounded and a Pad or Slice would look operandless.
This pass moves those attributes to constant inputs with the ONNX exporter's opset adapters
(the registry entries of those ops at the opset where they changed); the nodes' meaning is
unchanged (the graph is only written as Caffe afterwards, never as ONNX).
"""

from __future__ import annotations

from convert.exporters.onnx.adapters import ADAPTERS, Ctx, adapt_node
from convert.ir import Model
from convert.ir.passes import Pass, PassResult

__all__ = ["AttributesToInputs"]

_OPS = ("Clip", "Pad", "Slice")


class AttributesToInputs(Pass):
    """Move pre-opset-11 attribute operands (Clip, Pad, Slice) to constant inputs, in place."""

    def call(self, model: Model) -> PassResult:
        """Rewrite the main graph's old-form nodes; return whether any changed."""
        graph = model.graph
        default = graph.opset_imports.get("", graph.opset_imports.get("ai.onnx", 17))
        changed = False
        ctx: Ctx | None = None
        for node in list(graph):
            if node.op_type not in _OPS or node.domain not in ("", "ai.onnx"):
                continue
            version = node.version or default
            newest = ADAPTERS.versions(node.op_type)[-1]
            if version >= newest or len(node.inputs) != 1:
                continue  # already in input form
            before = len(node.attributes)
            ctx = ctx or Ctx(graph, version, newest)
            ctx.source, ctx.target, ctx.up = version, newest, True
            adapt_node(ctx, node)
            changed |= len(node.attributes) != before
        return PassResult(model, changed)
