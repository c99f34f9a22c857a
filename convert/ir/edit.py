"""Graph edits that every rewrite needs, done once and in the order onnx_ir requires."""

from __future__ import annotations

import onnx_ir as _ir

__all__ = ["replace_value"]


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
