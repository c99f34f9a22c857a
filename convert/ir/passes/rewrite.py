"""Rewrite rules: a pattern, a check and a rewrite, applied by one pass until nothing matches.

A ``Rule`` names the op types its pattern is rooted at (``op_types``, in ``domain``); its
``check(node)`` looks at the rest of the pattern (producers, uses, constants, shapes) and returns
either a ``Match`` (the nodes and values the rewrite needs) or a string saying why the rule does
not apply there; its ``rewrite(rw, match)`` edits the graph through a ``Rewriter`` (an
``ir.GraphEditor`` that also carries provenance over from the nodes it replaces).

``RewriteRules(rules)`` visits the graph's nodes in order and, for each, tries the rules rooted
at its op type in list order; the first that matches rewrites. It sweeps again until a sweep
changes nothing (a fixed point), so a rule may rely on an earlier rewrite having happened; rules
that keep undoing each other are a bug and raise after ``max_sweeps``. Why a rule declined is
logged at debug level (``convert.ir.passes.rewrite``), with the node's provenance.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx_ir as _ir

from ..edit import GraphEditor, replace_value
from ..provenance import describe, get_provenance, set_provenance
from .base import Pass, PassResult

__all__ = ["Match", "RewriteRules", "Rewriter", "Rule"]

logger = logging.getLogger(__name__)

_ONNX = ("", "ai.onnx")


@dataclass(slots=True)
class Match:
    """What a rule's check found: the root node and whatever the rewrite needs, by name."""

    node: _ir.Node
    found: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.found[key]


Check = Callable[[_ir.Node], "Match | str"]
Rewrite = Callable[["Rewriter", Match], None]


@dataclass(frozen=True, slots=True)
class Rule:
    """One rewrite: rooted at ``op_types`` in ``domain`` ('' is the ONNX domain, 'ai.onnx' too)."""

    name: str
    op_types: tuple[str, ...]
    check: Check
    rewrite: Rewrite
    domain: str = ""


class Rewriter(GraphEditor):
    """The graph editor a rewrite gets; every node it adds takes the provenance of ``source``."""

    def insert(self, anchor: _ir.Node, new: _ir.Node, *, source: _ir.Node | None = None) -> _ir.Node:
        """Insert ``new`` before ``anchor`` with ``source``'s provenance (default: the anchor's)."""
        set_provenance(new, get_provenance(source if source is not None else anchor))
        self.graph.insert_before(anchor, new)
        return new

    def substitute(self, old: _ir.Node, new: _ir.Node, *, source: _ir.Node | None = None,
                   value: _ir.Value | None = None) -> None:
        """Put ``new`` in the place of ``old``: inserted before it, ``new``'s first output taking
        the uses, name, shape and type of ``value`` (default ``old``'s first output); ``old`` is removed.
        """
        old_out = value if value is not None else old.outputs[0]
        new_out = new.outputs[0]
        new_out.shape = old_out.shape
        new_out.type = old_out.type
        self.insert(old, new, source=source if source is not None else old)
        replace_value(self.graph, old_out, new_out)
        self.graph.remove(old, safe=True)

    def remove(self, *nodes: _ir.Node) -> None:
        """Remove nodes whose outputs are no longer used (onnx_ir checks)."""
        self.graph.remove(list(nodes), safe=True)


class RewriteRules(Pass):
    """Apply ``rules`` in place until a sweep over the graph changes nothing."""

    def __init__(self, rules: Sequence[Rule], *, max_sweeps: int = 16) -> None:
        self.rules = list(rules)
        self.max_sweeps = max_sweeps
        self._by_op: dict[tuple[str, str], list[Rule]] = {}
        for rule in self.rules:
            domain = "" if rule.domain in _ONNX else rule.domain
            for op in rule.op_types:
                self._by_op.setdefault((domain, op), []).append(rule)

    def rules_for(self, node: _ir.Node) -> list[Rule]:
        """Return the rules rooted at ``node``'s op type, in order."""
        domain = "" if node.domain in _ONNX else node.domain
        return self._by_op.get((domain, node.op_type), [])

    def call(self, model: _ir.Model) -> PassResult:
        """Rewrite ``model.graph`` to a fixed point; return whether anything changed."""
        graph = model.graph
        rw = Rewriter(graph)
        total = 0
        for _ in range(self.max_sweeps):
            changed = self.sweep(rw)
            total += changed
            if not changed:
                logger.debug("%s: %d rewrites", self.pass_name, total)
                return PassResult(model, total > 0)
        raise RuntimeError(f"{self.pass_name}: no fixed point after {self.max_sweeps} sweeps (rules undo each other)")

    def sweep(self, rw: Rewriter) -> int:
        """Visit every node once; return how many rewrites happened."""
        changed = 0
        for node in list(rw.graph):
            if node.graph is None:
                continue  # removed by an earlier rewrite of this sweep
            for rule in self.rules_for(node):
                found = rule.check(node)
                if isinstance(found, str):
                    if logger.isEnabledFor(logging.DEBUG):
                        logger.debug("%s: %s does not apply to %s: %s", self.pass_name, rule.name,
                                     describe(node), found)
                    continue
                rule.rewrite(rw, found)
                changed += 1
                break
        return changed
