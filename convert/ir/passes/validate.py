"""Validate graph invariants: unique (SSA) names, topological order, no dangling values.

Run after every pass in tests and with ``--debug``; a failure is a bug in a frontend or pass.
"""

from __future__ import annotations

import onnx_ir as _ir

from ..errors import ConvertError
from ..provenance import describe
from .base import Pass, PassResult

__all__ = ["GraphInvariantError", "ValidateGraph"]


class GraphInvariantError(ConvertError):
    """The graph breaks an IR invariant."""


class ValidateGraph(Pass):
    """Check SSA names, topological order and that every used value is defined."""

    def call(self, model: _ir.Model) -> PassResult:
        """Raise ``GraphInvariantError`` listing every violation found in ``model.graph``."""
        _validate_graph(model.graph)
        return PassResult(model, False)


def _validate_graph(graph: _ir.Graph, outer: set[int] | None = None) -> None:
    problems: list[str] = []
    defined: set[int] = set(outer or ())
    names: dict[str, str] = {}

    def define(value: _ir.Value, what: str) -> None:
        defined.add(id(value))
        if value.name:
            if value.name in names:
                problems.append(f"value name '{value.name}' is defined twice ({names[value.name]} and {what})")
            names[value.name] = what
        else:
            problems.append(f"{what} defines an unnamed value")

    for v in graph.inputs:
        define(v, f"graph input '{v.name}'")
    for name, v in graph.initializers.items():
        if v.is_graph_input():
            continue
        if v.name != name:
            problems.append(f"initializer key '{name}' differs from its value's name '{v.name}'")
        define(v, f"initializer '{name}'")
    for node in graph:
        for i, inp in enumerate(node.inputs):
            if inp is not None and id(inp) not in defined:
                problems.append(f"{describe(node)} input {i} '{inp.name}' is used before it is defined")
        for attr in node.attributes.values():
            if attr.type == _ir.AttributeType.GRAPH:
                _validate_graph(attr.value, defined)
            elif attr.type == _ir.AttributeType.GRAPHS:
                for g in attr.value:
                    _validate_graph(g, defined)
        for out in node.outputs:
            if not out.name and not out.uses() and not out.is_graph_output():
                continue  # an optional output the node does not produce
            define(out, describe(node))
    for out in graph.outputs:
        if id(out) not in defined:
            problems.append(f"graph output '{out.name}' is never defined")
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise GraphInvariantError(f"graph '{graph.name}' is invalid: " + "; ".join(problems[:5]) + more)
