"""Control flow of an ExportedProgram lowered to ONNX subgraphs: ``torch.cond`` to ``If``,
``while_loop`` to ``Loop``.

A mixin of the lowering (``lowering.Lowering``): each branch or loop body is an FX graph module of
the program, lowered node by node into its own IR graph with the lowering's own ``run_node``.
"""

from __future__ import annotations

from collections.abc import Sequence

from convert.ir import ConversionError, DataType, Graph, Node, Shape, TensorType, Value

from .facts import COND, WHILE_LOOP, get_attr_of
from .irvalues import annotate, meta_of, place_of
from .ops import OpCall

__all__ = ["ControlFlowLowering"]


class ControlFlowLowering:
    """``_cond`` and ``_while`` for ``lowering.Lowering``, which provides ``env``, ``consts``, ``ctx``,
    ``builder``, ``ep``, ``source``, ``sym_names``, ``value`` and ``run_node``."""

    def _cond(self, node: object) -> None:
        """Lower torch.cond(pred, true_fn, false_fn, operands) to If with two subgraphs.

        Each branch's graph is lowered into its own IR graph; its placeholders are the operands,
        which the subgraph reads from the enclosing scope. Constants made inside a branch stay there.
        """
        key = COND
        where, prov = place_of(key, node, self.source)
        pred_node, true_node, false_node, operands = node.args[:4]  # type: ignore[attr-defined]
        pred = self.value(pred_node)
        if not isinstance(pred, Value):
            raise ConversionError(where, "the condition is a Python value; torch.export should have specialised it")
        outer = [self.value(o) for o in operands]
        branches = []
        count = 0
        for label, ref in (("then", true_node), ("else", false_node)):
            module = get_attr_of(self.ep.graph_module, ref.target)
            saved = self.builder.graph, dict(self.builder._consts), dict(self.ctx._scalars)
            sub = Graph([], [], nodes=[], name=self.builder.names.fresh(f"{prov.layer or 'cond'}_{label}"))
            self.builder.graph = sub
            try:
                outs = self._lower_branch(module, outer, where)
            finally:
                self.builder.graph, self.builder._consts, self.ctx._scalars = saved
            # an output must be produced inside the branch: outer values and constants pass an Identity
            for i, v in enumerate(outs):
                if v.producer() is None or v.producer().graph is not sub or v.is_graph_output():
                    ident = Value(name=self.builder.names.fresh(f"{sub.name}_out{i}"), type=v.type, shape=v.shape)
                    sub.append(Node("", "Identity", [v], outputs=[ident], name=self.builder.names.fresh("Identity")))
                    v = ident
                sub.outputs.append(v)
            count = len(outs)
            branches.append(sub)
        self.ctx.call = OpCall(op=key, overload="", args={}, metas={}, out=None, where=where, module=prov.layer,
                               prov=prov)
        cond = self.ctx.emit("Cast", [self.ctx.emit("Reshape", [pred, self.ctx.ints([])])], {"to": DataType.BOOL})
        results = self.ctx.emit_multi("If", [cond], {"then_branch": branches[0], "else_branch": branches[1]},
                                    outputs=count)
        metas = meta_of(node.meta.get("val"), self.sym_names)  # type: ignore[attr-defined]
        if isinstance(metas, list):
            for r, m in zip(results, metas, strict=False):
                annotate(r, m)
        self.env[node] = tuple(results)

    def _while(self, node: object) -> None:
        """Lower torch's while_loop(cond_fn, body_fn, carried, additional) to ONNX Loop.

        The condition is computed once before the loop, on the initial values, and again at the
        end of each iteration on the new ones (ONNX Loop's cond input and output). The body graph
        takes ONNX's iteration number and condition, then the carried values; the additional
        inputs are read from the enclosing scope.
        """
        key = WHILE_LOOP
        where, prov = place_of(key, node, self.source)
        cond_ref, body_ref, carried, additional = node.args[:4]  # type: ignore[attr-defined]
        graphs = self.ep.graph_module  # type: ignore[attr-defined]
        cond_module, body_module = get_attr_of(graphs, cond_ref.target), get_attr_of(graphs, body_ref.target)
        initial = [self.value(c) for c in carried]
        extra = [self.value(a) for a in additional]
        if not all(isinstance(v, Value) for v in initial):
            raise ConversionError(where, "a loop-carried value is a Python value; ONNX Loop carries tensors")
        call = OpCall(op=key, overload="", args={}, metas={}, out=None, where=where, module=prov.layer,
                      prov=prov)
        self.ctx.call = call
        (first,) = self._lower_branch(cond_module, [*initial, *extra], where)
        first = self.ctx.emit("Cast", [self.ctx.emit("Reshape", [first, self.ctx.ints([])])], {"to": DataType.BOOL})
        metas = [meta_of(c.meta.get("val"), self.sym_names) for c in carried]  # type: ignore[attr-defined]
        name = self.builder.names.fresh(f"{prov.layer or 'while_loop'}_body")
        step = Value(name=f"{name}_i", type=TensorType(DataType.INT64), shape=Shape([]))
        cond_in = Value(name=f"{name}_cond", type=TensorType(DataType.BOOL), shape=Shape([]))
        state = []
        for i, m in enumerate(metas):
            v = Value(name=f"{name}_in{i}")
            annotate(v, m)
            state.append(v)
        sub = Graph([step, cond_in, *state], [], nodes=[], name=name)
        saved = self.builder.graph, dict(self.builder._consts), dict(self.ctx._scalars)
        self.builder.graph = sub
        try:
            outs = self._lower_branch(body_module, [*state, *extra], where)
            (again,) = self._lower_branch(cond_module, [*outs, *extra], where)
            self.ctx.call = call  # the body's ops made their own calls current
            again = self.ctx.emit("Cast", [self.ctx.emit("Reshape", [again, self.ctx.ints([])])],
                                  {"to": DataType.BOOL})
        finally:
            self.builder.graph, self.builder._consts, self.ctx._scalars = saved
        for i, v in enumerate([again, *outs]):
            if v.producer() is None or v.producer().graph is not sub or v.is_graph_output():
                ident = Value(name=self.builder.names.fresh(f"{name}_out{i}"), type=v.type, shape=v.shape)
                sub.append(Node("", "Identity", [v], outputs=[ident], name=self.builder.names.fresh("Identity")))
                v = ident
            sub.outputs.append(v)
        self.ctx.call = call
        results = self.ctx.emit_multi("Loop", [None, first, *initial], {"body": sub}, outputs=len(initial))
        for r, m in zip(results, metas, strict=True):
            annotate(r, m)
        self.env[node] = tuple(results)

    def _lower_branch(self, module: object, operands: Sequence[object], where: str) -> list[Value]:
        placeholders = [n for n in module.graph.nodes if n.op == "placeholder"]  # type: ignore[attr-defined]
        if len(placeholders) != len(operands):
            raise ConversionError(where, f"a branch takes {len(placeholders)} inputs, {len(operands)} were given")
        for n, v in zip(placeholders, operands, strict=True):
            self.env[n] = v
        outs: list[Value] = []
        for n in module.graph.nodes:  # type: ignore[attr-defined]
            if n.op == "call_function":
                self.run_node(n)
            elif n.op == "get_attr":
                self.consts[n] = get_attr_of(module, n.target)
            elif n.op == "output":
                returned = n.args[0]
                for o in returned if isinstance(returned, (list, tuple)) else [returned]:
                    v = self.value(o)
                    if not isinstance(v, Value):
                        raise ConversionError(where, "a branch returns a Python value; ONNX If needs tensors")
                    outs.append(v)
        return outs
