"""Graph edits that every rewrite needs, done once and in the order onnx_ir requires."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx_ir as _ir

from .builder import NameAuthority
from .provenance import get_provenance, set_provenance
from .tensors import DataType, from_array

__all__ = ["GraphEditor", "replace_value"]


class GraphEditor:
    """What every rewrite of an existing graph needs: fresh names, constants, nodes before an anchor.

    The names already in the graph (inputs, initializers, node outputs) are reserved first, so a
    rewrite never shadows one; a node inserted for an anchor keeps the anchor's provenance.
    """

    def __init__(self, graph: _ir.Graph) -> None:
        self.graph = graph
        self.names = NameAuthority(sanitize=False)
        for name in graph.initializers:
            self.names.reserve(name)
        for value in graph.inputs:
            self.names.reserve(value.name or "")
        for node in graph:
            for value in node.outputs:
                self.names.reserve(value.name or "")

    def fresh(self, base: str) -> str:
        """Return a name not yet used in the graph: ``base``, else ``base_1``, ``base_2`` ..."""
        return self.names.fresh(base)

    def const(self, array: np.ndarray, base: str) -> _ir.Value:
        """Add ``array`` (its own dtype and shape) as an initializer under a fresh name from ``base``."""
        name = self.fresh(base)
        arr = np.ascontiguousarray(array)
        value = _ir.Value(name=name, shape=_ir.Shape(arr.shape), type=_ir.TensorType(DataType.from_numpy(arr.dtype)),
                          const_value=from_array(arr, name=name))
        self.graph.register_initializer(value)
        return value

    def node_before(self, anchor: _ir.Node, op_type: str, inputs: Sequence[_ir.Value | None],
                    attributes: Mapping[str, object] | None = None, *, base: str | None = None,
                    like: _ir.Value | None = None) -> _ir.Value:
        """Insert one ``op_type`` node before ``anchor`` (with its provenance); return its output.

        The output is named from ``base`` (default: the anchor's name and the op) and takes the
        shape and type of ``like`` when given.
        """
        name = self.fresh(base or f"{anchor.name or op_type.lower()}_{op_type.lower()}")
        out = _ir.Value(name=name, shape=like.shape if like is not None else None,
                        type=like.type if like is not None else None)
        attrs = _ir.convenience.convert_attributes(dict(attributes or {}))
        node = _ir.Node("", op_type, list(inputs), attrs, outputs=[out], name=name)
        set_provenance(node, get_provenance(anchor))  # not output_of: the anchor's output is not this one's
        self.graph.insert_before(anchor, node)
        return out

    def replace(self, node: _ir.Node, new: _ir.Value) -> None:
        """Make ``new`` take the place of ``node``'s only output (uses, graph outputs, name); remove ``node``."""
        replace_value(self.graph, node.outputs[0], new)
        self.graph.remove(node, safe=True)


def replace_value(graph: _ir.Graph, old: _ir.Value, new: _ir.Value) -> None:
    """Make every user of ``old`` (graph outputs included) use ``new``, which takes ``old``'s name.

    Graph outputs are swapped first: onnx_ir refuses to redirect the uses of a value that is
    still a graph output. The producer of ``old`` is left for the caller to remove.
    """
    name = old.name
    for i, out in enumerate(graph.outputs):
        if out is old:
            graph.outputs[i] = new
    _ir.convenience.replace_all_uses_with(old, new)
    old.name = None
    new.name = name
