"""One lowering of an FX program to the IR: the environment of FX nodes, the folded constants, the
converters called node by node.

A layer of the lowering (see ``__init__``'s "the path a model takes"): ``Lowering`` holds one
program's state. It finds the nodes torch can compute at conversion (``foldable``: constants and
small results of them), lists every op the table cannot convert (``missing``) and every in-place
write that rebinding cannot express (``alias_hazards``) before anything is converted, then runs
each node (``run_node``): folded by torch, or converted by its entry of the op table (``ops``);
``torch.cond`` and ``while_loop`` by its control-flow part (``controlflow.py``). The fast capture
(``traced.py``) asks the same two questions of a traced graph before it offers it.
"""

from __future__ import annotations

import operator
from collections import Counter

from convert.ir import (
    ConversionError,
    ConvertError,
    GapCollector,
    GraphBuilder,
    InternalError,
    ModelFormatError,
    Options,
    Unsupported,
    Value,
)

from .controlflow import ControlFlowLowering
from .facts import (
    COND,
    FOLD_MAX_BYTES,
    SUBGRAPH_ARGS,
    WHILE_LOOP,
    get_attr_of,
    is_view,
    nbytes,
    op_key,
    valueless,
    view_source,
    written_args,
    written_bases,
)
from .irvalues import annotate, meta_of, place_of, wrap
from .ops import LowerContext, OpCall, functional_key, resolve
from .ops.spectral import COMPLEX_FORMS

__all__ = ["Lowering", "all_nodes", "is_complex"]

class Lowering(ControlFlowLowering):
    """State of one lowering: the FX-node -> IR environment and the constants torch can evaluate."""

    def __init__(self, program: object, builder: GraphBuilder, options: Options, source: str) -> None:
        from torch.export.graph_signature import InputKind

        self.ep = program
        self.builder = builder
        self.options = options
        self.source = source
        self.ctx = LowerContext(builder, options)
        self.env: dict[object, object] = {}
        self.consts: dict[object, object] = {}  # fx node -> real torch value (params, folded results)
        self.const_names: dict[object, str] = {}
        self.user_inputs: list[object] = []
        sig = program.graph_signature  # type: ignore[attr-defined]
        kinds = {spec.arg.name: spec for spec in sig.input_specs}
        state = program.state_dict  # type: ignore[attr-defined]
        constants = getattr(program, "constants", {}) or {}
        for node in program.graph.nodes:  # type: ignore[attr-defined]
            if node.op != "placeholder":
                continue
            spec = kinds.get(node.name)
            if spec is None or spec.kind == InputKind.USER_INPUT:
                self.user_inputs.append(node)
                continue
            if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
                target = spec.target
                value = state.get(target) if target in state else constants.get(target)
                if value is None:
                    raise ModelFormatError(f"{source}: the program has no value for '{target}'")
                self.consts[node] = value
                self.const_names[node] = target
            else:
                raise ModelFormatError(f"{source}: inputs of kind {spec.kind.name} ('{node.name}') are not supported")
        self._protect_written_state()
        self.foldable = self._find_foldable()
        self.seen: Counter[str] = Counter()  # ATen ops met, converted or folded
        self.sym_names: dict[str, str] = {}  # symbolic dims: torch's symbol -> our name ('batch')
        # In-place ops: a written tensor and every in-place result aliasing it share one class;
        # after a write, every member of the class stands for the written result.
        self.alias_root: dict[object, object] = {}
        self.alias_members: dict[object, list[object]] = {}

    # -- analysis ---------------------------------------------------------------------
    def _protect_written_state(self) -> None:
        """Copy the parameters and buffers the graph writes to (``self.buf.add_(1)``), so that
        folding runs those writes on the copy and never changes the user's module."""
        for base in written_bases(self.ep.graph.nodes):  # type: ignore[attr-defined]
            real = self.consts.get(base)
            if real is not None and getattr(base, "op", None) == "placeholder" and hasattr(real, "clone"):
                self.consts[base] = real.clone()  # type: ignore[attr-defined]

    def _find_foldable(self) -> set[object]:
        foldable: set[object] = {n for n, v in self.consts.items() if not valueless(v)}
        # A tensor made by new_zeros & co. and then written in place (Swin's shifted-window mask,
        # `x.new_zeros(size)` filled region by region) folds when what is written is constant; one
        # that is not written is left to its converter, as before.
        bases = set(written_bases(list(self.ep.graph.nodes)))  # type: ignore[attr-defined]
        for node in self.ep.graph.nodes:  # type: ignore[attr-defined]
            if node.op != "call_function":
                continue
            deps = node.all_input_nodes
            if node in bases and _reads_only_metadata(node):
                deps = [d for d in deps if d is not node.args[0]]
            if not all(d in foldable for d in deps):
                # A constant written by a computed value is no longer constant from here on.
                for w in written_args(node):
                    foldable.discard(w)
                continue
            if _draws_random(node):  # folding would freeze one draw into the file
                continue
            if not deps or nbytes(node.meta.get("val")) <= FOLD_MAX_BYTES:
                foldable.add(node)
        return foldable

    def missing(self) -> list[Unsupported]:
        gaps = GapCollector()
        for node in all_nodes(self.ep.graph_module):  # type: ignore[attr-defined]
            if node.op != "call_function" or node in self.foldable:
                continue
            key = op_key(node.target)
            if key in SUBGRAPH_ARGS:
                continue
            if _touches_complex(node) and key not in COMPLEX_FORMS and resolve(key) is not None:
                gaps.add(f"{key} on a complex tensor", place_of(key, node, self.source)[0].split(" in ", 1)[1])
                continue
            if _touches_complex(node) and key in COMPLEX_FORMS:
                continue
            if resolve(key) is not None:
                continue
            # Python arithmetic folds when its result is a plain number; on symbolic sizes it needs a converter
            if key.startswith("operator.") and hasattr(operator, key.split(".", 1)[1]) \
                    and type(node.meta.get("val")) in (int, float, bool):
                continue
            gaps.add(key, place_of(key, node, self.source)[0].split(" in ", 1)[1])
        return gaps.items()

    def _root(self, node: object) -> object:
        while node in self.alias_root:
            node = self.alias_root[node]
        return node

    def alias_hazards(self) -> list[object]:
        """Return the in-place calls that rebinding their result cannot express.

        Rebinding (every later use of a written tensor reads the op's result) is exact unless the
        write goes through a view of another tensor, or a view taken of the tensor before the
        write is still used after it. Such programs are functionalized by torch first. A write
        folded here (constants only) runs on real tensors, whose folded views see it as eager's
        do; a converted view of a constant taken before such a write and used after it does not.
        """
        nodes = list(self.ep.graph.nodes)  # type: ignore[attr-defined]
        order = {n: i for i, n in enumerate(nodes)}
        root: dict[object, object] = {}

        def find(n: object) -> object:
            while n in root:
                n = root[n]
            return n

        hazards: list[object] = []
        writes: dict[object, list[object]] = {}
        through_views: list[tuple[object, object]] = []  # (write, the view it writes through)
        for node in nodes:
            if node.op != "call_function":
                continue
            for w in written_args(node):
                r = find(w)
                if is_view(r) and node not in self.foldable:
                    through_views.append((node, r))
                writes.setdefault(r, []).append(node)
                root[node] = r
        groups: dict[object, list[object]] = {}  # each root's members, in graph order (one pass: W x N before)
        for n in nodes:
            groups.setdefault(find(n), []).append(n)

        def sharing(start: object) -> list[object]:
            """``start``'s class and every view taken of it, transitively, with the classes of those."""
            found = list(groups.get(start, [start]))
            seen = set(found)
            frontier = list(found)
            while frontier:
                n = frontier.pop()
                for u in n.users:  # type: ignore[attr-defined]
                    if is_view(u):
                        for v in groups.get(find(u), [u]):
                            if v not in seen:
                                seen.add(v)
                                found.append(v)
                                frontier.append(v)
            return found

        # A write through a view changes its base's memory: rebinding the view is exact only when nothing
        # reads that memory after the write except through the view itself (GhostNet's `x += shortcut` on
        # `cat(...)[:, :c]`, whose concatenation is not read again).
        for m, r in through_views:
            base = r
            while is_view(base):
                base = find(view_source(base))
            own = set(sharing(r))
            if any(order.get(u, -1) > order[m] for s in sharing(base) if s not in own
                   for u in s.users) and m not in hazards:  # type: ignore[attr-defined]
                hazards.append(m)
        for r, muts in writes.items():
            members = groups.get(r, [])
            views: list[object] = []
            frontier = list(members)
            while frontier:
                n = frontier.pop()
                for u in n.users:  # type: ignore[attr-defined]
                    if is_view(u) and u not in views:
                        views.append(u)
                        frontier.append(u)
            for m in muts:
                late = [v for v in views if order[v] < order[m] and not (m in self.foldable and v in self.foldable)
                        and any(order.get(u, -1) > order[m] for u in v.users)]  # type: ignore[attr-defined]
                if late and m not in hazards:
                    hazards.append(m)
        return hazards

    # -- conversion -------------------------------------------------------------------
    def value(self, node: object) -> object:
        if node in self.env:
            return self.env[node]
        if node in self.consts:
            real = self.consts[node]
            name = self.const_names.get(node) or str(getattr(node, "name", "const"))
            value = self._const_value(real, name)
            self.env[node] = value
            return value
        raise ConversionError(str(getattr(node, "name", node)), "used before it is defined")

    def _const_value(self, real: object, name: str) -> object:
        import torch

        if isinstance(real, torch.Tensor):
            tensor = wrap(real, name, self.options, self.source)
            return self.builder.initializer(tensor, name)  # type: ignore[arg-type]
        if isinstance(real, (list, tuple)):
            return type(real)(self._const_value(r, f"{name}_{i}") for i, r in enumerate(real))
        return real

    def _bind(self, node: object) -> tuple[dict[str, object], dict[str, object]]:
        import torch.fx

        def conv(a: object) -> object:
            if isinstance(a, torch.fx.Node):
                return self.value(a)
            if isinstance(a, (list, tuple)):
                return type(a)(conv(x) for x in a)
            return a

        def meta(a: object) -> object:
            if isinstance(a, torch.fx.Node):
                return meta_of(a.meta.get("val"), self.sym_names)
            if isinstance(a, (list, tuple)):
                return [meta(x) for x in a]
            return None

        target = node.target  # type: ignore[attr-defined]
        args, kwargs = node.args, node.kwargs  # type: ignore[attr-defined]
        schema = getattr(target, "_schema", None)
        bound: dict[str, object] = {}
        metas: dict[str, object] = {}
        if schema is None:  # operator.getitem and friends
            names = ["self", "index", "other"][: len(args)]
            for n, a in zip(names, args, strict=False):
                bound[n] = conv(a)
                metas[n] = meta(a)
            return bound, metas
        for i, arg in enumerate(schema.arguments):
            if i < len(args) and not arg.kwarg_only:
                a = args[i]
            elif arg.name in kwargs:
                a = kwargs[arg.name]
            elif arg.has_default_value():
                a = arg.default_value
            else:
                a = None
            bound[arg.name] = conv(a)
            metas[arg.name] = meta(a)
        return bound, metas

    def _fold(self, node: object) -> None:
        import torch.fx

        def real(a: object) -> object:
            if isinstance(a, torch.fx.Node):
                return self.consts[a]
            if isinstance(a, (list, tuple)):
                return type(a)(real(x) for x in a)
            return a

        self._snapshot_before_write(node)
        args: list[object] = list(real(node.args[1:]))  # type: ignore[attr-defined, call-overload]
        if _reads_only_metadata(node) and node.args[0] not in self.consts:  # type: ignore[attr-defined]
            # its first argument's values are never read: an empty stand-in of its dtype (and shape)
            like = node.meta["val"].shape if op_key(node.target).endswith("_like") else ()  # type: ignore[attr-defined]
            args.insert(0, torch.empty(like, dtype=node.args[0].meta["val"].dtype))  # type: ignore[attr-defined]
        elif node.args:  # type: ignore[attr-defined]
            args.insert(0, real(node.args[0]))  # type: ignore[attr-defined]
        kwargs = {k: real(v) for k, v in node.kwargs.items()}  # type: ignore[attr-defined]
        result = node.target(*args, **kwargs)  # type: ignore[attr-defined]
        self.consts[node] = result
        self.const_names[node] = str(node.name)  # type: ignore[attr-defined]

    def _snapshot_before_write(self, node: object) -> None:
        """Before a folded in-place op writes a constant (``offset += n``), give every initializer
        already made from that memory a copy of its current values (earlier users read those), and
        let later users make a new one from the written memory."""
        import torch

        memory = {self.consts[w].untyped_storage().data_ptr() for w in written_args(node)  # type: ignore[attr-defined]
                  if isinstance(self.consts.get(w), torch.Tensor)}
        if not memory:
            return
        for member, value in list(self.env.items()):
            tensor = self.consts.get(member)
            if isinstance(tensor, torch.Tensor) and isinstance(value, Value) and value.const_value is not None \
                    and tensor.untyped_storage().data_ptr() in memory:
                value.const_value = wrap(tensor.clone(), value.name or "const", self.options)
                del self.env[member]

    def run_node(self, node: object) -> None:
        key = op_key(node.target)  # type: ignore[attr-defined]
        self.seen[key] += 1
        if key == COND:
            self._cond(node)
            return
        if key == WHILE_LOOP:
            self._while(node)
            return
        if node in self.foldable:
            self._fold(node)
            return
        where, prov = place_of(key, node, self.source)
        bound, metas = self._bind(node)
        if key.startswith("operator.") and not any(isinstance(v, Value) for v in bound.values()):
            self.env[node] = getattr(operator, key.split(".", 1)[1])(*bound.values())
            return
        converter = COMPLEX_FORMS.get(key) if _touches_complex(node) else resolve(key)
        if converter is None:  # missing() was checked first; this is a bug
            raise InternalError(where, LookupError("no converter"))
        call = OpCall(op=key, overload=str(getattr(node.target, "_overloadname", "")), args=bound, metas=metas,  # type: ignore[attr-defined]
                      out=meta_of(node.meta.get("val"), self.sym_names), where=where, module=prov.layer, prov=prov,  # type: ignore[attr-defined]
                      used=_used_results(node))
        self.ctx.call = call
        try:
            result = converter(call, self.ctx)
        except ConvertError as exc:
            exc.aten_op = functional_key(key)  # type: ignore[attr-defined]  # for lower_program's retry
            raise
        except Exception as exc:  # a bug in the converter, not the user's model (see convert.ir.driver)
            raise InternalError(where, exc) from exc
        annotate(result, call.out)
        self.env[node] = result
        for w in written_args(node):  # in-place and out= variants: later uses read the result
            r = self._root(w)
            members = self.alias_members.setdefault(r, [r])
            members.append(node)
            self.alias_root[node] = r
            for m in members:
                self.env[m] = result


def _used_results(node: object) -> frozenset[int] | None:
    """Return which results of a multi-result op later nodes read (``operator.getitem`` indices),
    or None when a user takes the whole result."""
    used: set[int] = set()
    for user in node.users:  # type: ignore[attr-defined]
        if user.op == "call_function" and user.target is operator.getitem and isinstance(user.args[1], int):
            used.add(user.args[1])
        else:
            return None
    return frozenset(used)


# Ops whose result depends on their first argument's dtype and device (the ``_like`` ones also on its
# shape) and never on its values.
_METADATA_ONLY = frozenset({"aten.new_zeros", "aten.new_ones", "aten.new_full", "aten.zeros_like", "aten.ones_like",
                            "aten.full_like"})


def _reads_only_metadata(node: object) -> bool:
    """Return True for a ``_METADATA_ONLY`` op of fixed result shape: folded without the values of
    its first argument (an empty stand-in of its dtype)."""
    import torch

    if op_key(node.target) not in _METADATA_ONLY or not node.args:  # type: ignore[attr-defined]
        return False
    first, val = getattr(node.args[0], "meta", {}).get("val"), node.meta.get("val")  # type: ignore[attr-defined]
    return (isinstance(first, torch.Tensor) and isinstance(val, torch.Tensor)
            and all(isinstance(d, int) for d in val.shape))


def _draws_random(node: object) -> bool:
    """Return True for an op torch tags as drawing from its generator (rand, randn, dropout...)."""
    import torch

    return torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())  # type: ignore[attr-defined]


def is_complex(val: object) -> bool:
    if isinstance(val, (list, tuple)):
        return any(is_complex(v) for v in val)
    return bool(getattr(val, "is_complex", lambda: False)())


def _touches_complex(node: object) -> bool:
    """Return True when ``node`` reads or makes a complex tensor (only ``COMPLEX_FORMS`` may)."""
    if is_complex(node.meta.get("val")):  # type: ignore[attr-defined]
        return True
    return any(is_complex(d.meta.get("val")) for d in node.all_input_nodes)  # type: ignore[attr-defined]


def all_nodes(module: object) -> list[object]:
    """Return the nodes of ``module``'s graph and of every graph its torch.cond and while_loop calls hold."""
    import torch.fx

    nodes: list[object] = []
    for node in module.graph.nodes:  # type: ignore[attr-defined]
        nodes.append(node)
        if node.op == "call_function" and op_key(node.target) in SUBGRAPH_ARGS:
            lo, hi = SUBGRAPH_ARGS[op_key(node.target)]
            for ref in node.args[lo:hi]:
                if isinstance(ref, torch.fx.Node) and ref.op == "get_attr":
                    branch = all_nodes(get_attr_of(module, ref.target))
                    for inner in branch:  # a branch node without a place of its own is at the torch.cond call
                        meta = inner.meta  # type: ignore[attr-defined]
                        if not meta.get("nn_module_stack") and node.meta.get("nn_module_stack"):
                            meta["nn_module_stack"] = node.meta["nn_module_stack"]
                        if "eval_with_key" in (meta.get("stack_trace") or "<eval_with_key>"):
                            meta["stack_trace"] = node.meta.get("stack_trace")
                    nodes.extend(branch)
    return nodes
