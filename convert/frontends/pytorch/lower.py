"""Lower a ``torch.export.ExportedProgram`` (ATen ops) to the IR.

Every ``call_function`` node is looked up in the op table (``ops.OPS``) by its ATen name; all
missing ops are listed at once, with the module path and source line of their first use, before
anything is converted. Nodes computed only from small constants (``arange``, ``zeros``, a class
token plus a position embedding) are evaluated by torch itself and become constants. Parameters
and buffers are wrapped without copying (``from_array(t.detach().numpy())``); only the ones a
converter actually uses become initializers.
"""

from __future__ import annotations

import functools
import logging
import operator
import os
import re
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from convert.ir import (
    ConversionError,
    ConvertError,
    DataType,
    GapCollector,
    GraphBuilder,
    InternalError,
    Model,
    ModelFormatError,
    Options,
    Provenance,
    Unsupported,
    UnsupportedOpsError,
    Value,
    from_array,
    shown,
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
from .ops import LowerContext, OpCall, TensorMeta, functional_key, resolve
from .ops.spectral import COMPLEX_FORMS, real_dtype

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["FOLD_MAX_BYTES", "META_WEIGHTS", "lower_program", "op_key", "output_names", "prepare_program",
           "unsupported_ops", "written_bases"]

logger = logging.getLogger(__name__)

#: ``options.extra`` key: for a program captured with weights that have no values (meta or fake
#: tensors, as the ``hf`` frontend captures a language model), a callable ``(name, tensor) -> ir
#: tensor`` that supplies each weight's values (a slice of the weights file). Such weights are never folded.
META_WEIGHTS = "convert:meta_weights"


_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def output_names(count: int) -> list[str]:
    """Return the graph output names used for ``count`` outputs: 'output' or 'output0', 'output1', ..."""
    return ["output"] if count == 1 else [f"output{i}" for i in range(count)]


@functools.lru_cache(maxsize=1)
def _torch_dir() -> str:
    import torch

    return os.path.dirname(os.path.dirname(torch.__file__))


def _module_path(node: object) -> str:
    stack = getattr(node, "meta", {}).get("nn_module_stack") or {}
    if not stack:
        return ""
    path = str(list(stack.values())[-1][0])
    if path.startswith("_empty"):  # placeholder stack of torch's TorchScript converter
        return ""
    path = re.sub(r"^L\['self'\]\.?", "", path)
    path = re.sub(r"\._modules\['([^']+)'\]", r".\1", path)
    path = re.sub(r"getattr\((.*?), '([^']+)'\)", r"\1.\2", path)
    return path.strip(".")


def _source_line(node: object) -> tuple[str, int | None]:
    trace = getattr(node, "meta", {}).get("stack_trace") or ""
    frames = _FRAME.findall(trace)
    if not frames:
        return "", None
    torch_dir = os.path.join(_torch_dir(), "torch")
    ours = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the convert package
    user = [f for f in frames if not f[0].startswith((torch_dir, ours + os.sep))]
    if not user:  # only torch's and convert's own frames (a TorchScript module run by our converter): no source
        return "", None
    file, line = user[-1]
    return os.path.basename(file), int(line)


def layer_key(node: object) -> str:
    """Return the source layer a node belongs to: its module path, or its own FX name outside any module.

    The parity check's localisation groups both sides' values by this key.
    """
    return _module_path(node) or str(getattr(node, "name", ""))


def _where(key: str, node: object, source: str) -> tuple[str, Provenance]:
    module = _module_path(node)
    file, line = _source_line(node)
    prov = Provenance(file=file or source, layer=layer_key(node), kind=key, line=line)
    place = f"'{module}'" if module else "the top-level module"
    loc = f" ({file}:{line})" if file and line is not None else ""
    return f"{key} in {place}{loc}", prov


_DTYPES: dict[str, DataType] = {
    "torch.float32": DataType.FLOAT, "torch.float16": DataType.FLOAT16, "torch.bfloat16": DataType.BFLOAT16,
    "torch.float64": DataType.DOUBLE, "torch.int64": DataType.INT64, "torch.int32": DataType.INT32,
    "torch.int16": DataType.INT16, "torch.int8": DataType.INT8, "torch.uint8": DataType.UINT8,
    "torch.bool": DataType.BOOL,
    "torch.complex64": DataType.COMPLEX64, "torch.complex128": DataType.COMPLEX128,  # carried as [..., 2]
}


def ir_dtype(dtype: object) -> DataType:
    """Return the IR data type of a torch dtype."""
    try:
        return _DTYPES[str(dtype)]
    except KeyError:
        raise ConvertError(f"tensors of dtype {dtype} are not supported") from None


def _dim(d: object, names: dict[str, str] | None) -> int | str:
    if isinstance(d, int):
        return d
    text = str(d)
    if text.isdigit():  # a SymInt torch specialised to a constant (a traced .pt's channels): a static size
        return int(text)
    return (names or {}).get(text, text)


def _meta_of(val: object, names: dict[str, str] | None = None) -> object:
    """Return the TensorMeta (or list of them) of a fake value; symbolic dims become strings."""
    import torch

    if isinstance(val, torch.Tensor):
        return TensorMeta(tuple(_dim(d, names) for d in val.shape), ir_dtype(val.dtype))
    if isinstance(val, (list, tuple)):
        return [_meta_of(v, names) for v in val]
    return val


def _wrap(tensor: torch.Tensor, name: str, options: Options, source: str = "") -> Value | None:
    """Return an IR tensor sharing ``tensor``'s memory (a copy only when torch's layout forces it)."""
    import torch

    t = tensor.detach()
    if valueless(t):  # captured without values: the frontend that captured it supplies them
        supply = options.extra.get(META_WEIGHTS)
        if not callable(supply):
            raise ConversionError(f"weight {shown(name)}", "it has no values (a meta or fake tensor)")
        return supply(name, t)  # type: ignore[no-any-return]
    if any(d > 2**40 for d in t.shape):  # no array holds such dims, even with no element (numpy refuses them)
        dims = " x ".join(f"{d:,}" for d in t.shape)
        where = f"{source}: " if source else ""
        raise ModelFormatError(f"{where}weight {shown(name)} has dims {dims}; no array can have such dims (the "
                               "file is damaged or forged)")
    if t.device.type != "cpu":
        t = t.cpu()
    if not t.is_contiguous():
        options.diagnostics.note(f"weight '{name}' is not contiguous in memory: copied")
        t = t.contiguous()
    if t.is_complex():  # carried as [..., 2] (see ops/spectral.py)
        t = torch.view_as_real(t.resolve_conj())
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        array = t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    else:
        array = t.numpy()
    return from_array(array, name=name)  # type: ignore[return-value]


class _Lowering(ControlFlowLowering):
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
        for node in _all_nodes(self.ep.graph_module):  # type: ignore[attr-defined]
            if node.op != "call_function" or node in self.foldable:
                continue
            key = op_key(node.target)
            if key in SUBGRAPH_ARGS:
                continue
            if _touches_complex(node) and key not in COMPLEX_FORMS and resolve(key) is not None:
                gaps.add(f"{key} on a complex tensor", _where(key, node, self.source)[0].split(" in ", 1)[1])
                continue
            if _touches_complex(node) and key in COMPLEX_FORMS:
                continue
            if resolve(key) is not None:
                continue
            # Python arithmetic folds when its result is a plain number; on symbolic sizes it needs a converter
            if key.startswith("operator.") and hasattr(operator, key.split(".", 1)[1]) \
                    and type(node.meta.get("val")) in (int, float, bool):
                continue
            gaps.add(key, _where(key, node, self.source)[0].split(" in ", 1)[1])
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
            tensor = _wrap(real, name, self.options, self.source)
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
                return _meta_of(a.meta.get("val"), self.sym_names)
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
                value.const_value = _wrap(tensor.clone(), value.name or "const", self.options)
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
        where, prov = _where(key, node, self.source)
        bound, metas = self._bind(node)
        if key.startswith("operator.") and not any(isinstance(v, Value) for v in bound.values()):
            self.env[node] = getattr(operator, key.split(".", 1)[1])(*bound.values())
            return
        converter = COMPLEX_FORMS.get(key) if _touches_complex(node) else resolve(key)
        if converter is None:  # missing() was checked first; this is a bug
            raise InternalError(where, LookupError("no converter"))
        call = OpCall(op=key, overload=str(getattr(node.target, "_overloadname", "")), args=bound, metas=metas,  # type: ignore[attr-defined]
                      out=_meta_of(node.meta.get("val"), self.sym_names), where=where, module=prov.layer, prov=prov,  # type: ignore[attr-defined]
                      used=_used_results(node))
        self.ctx.call = call
        try:
            result = converter(call, self.ctx)
        except ConvertError as exc:
            exc.aten_op = functional_key(key)  # type: ignore[attr-defined]  # for lower_program's retry
            raise
        except Exception as exc:  # a bug in the converter, not the user's model (see convert.ir.driver)
            raise InternalError(where, exc) from exc
        _annotate(result, call.out)
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


def _is_complex(val: object) -> bool:
    if isinstance(val, (list, tuple)):
        return any(_is_complex(v) for v in val)
    return bool(getattr(val, "is_complex", lambda: False)())


def _touches_complex(node: object) -> bool:
    """Return True when ``node`` reads or makes a complex tensor (only ``COMPLEX_FORMS`` may)."""
    if _is_complex(node.meta.get("val")):  # type: ignore[attr-defined]
        return True
    return any(_is_complex(d.meta.get("val")) for d in node.all_input_nodes)  # type: ignore[attr-defined]


def _annotate(result: object, meta: object) -> None:
    """Give converter outputs the static type and shape torch.export recorded."""
    from convert.ir import Shape, SymbolicDim, TensorType

    if isinstance(result, Value) and isinstance(meta, TensorMeta):
        if result.type is None and result.const_value is None:
            dims = [d if isinstance(d, int) else SymbolicDim(d) for d in meta.shape]
            if meta.dtype != real_dtype(meta.dtype):  # a complex tensor, carried as [..., 2]
                dims.append(2)
            result.type = TensorType(real_dtype(meta.dtype))
            result.shape = Shape(dims)
    elif isinstance(result, (list, tuple)) and isinstance(meta, (list, tuple)):
        for r, m in zip(result, meta, strict=False):
            _annotate(r, m)


def prepare_program(program: object, source: str, options: Options) -> object:
    """Return ``program``, functionalized and decomposed by torch when that is needed to lower it.

    A program every op of which has a converter, and whose in-place ops can all be rebound, is
    returned as it is. Otherwise torch functionalizes it and decomposes the ops without a
    converter into Core ATen (``decompose.py``); the summary notes which ops went that way.
    """
    probe = _Lowering(program, GraphBuilder("check"), options, source)
    missing = probe.missing()
    hazards = probe.alias_hazards()
    if not missing and not hazards:
        return program
    from .decompose import decompose

    try:
        decomposed = decompose(program)
    except Exception as exc:
        if hazards:
            key = op_key(hazards[0].target)  # type: ignore[attr-defined]
            where = _where(key, hazards[0], source)[0]
            raise ConversionError(where, f"an in-place write through a view, and torch could not functionalize "
                                  f"the program ({type(exc).__name__}: {str(exc).strip()[:200]})") from exc
        logger.debug("run_decompositions failed on %s: %s", source, exc)
        return program
    if missing:
        names = ", ".join(u.op for u in missing)
        options.diagnostics.note(f"{source}: no direct converter for {names}; lowered through torch's "
                                 "Core ATen decompositions")
    else:
        options.diagnostics.note(f"{source}: in-place writes to tensors that views share; the program was "
                                 "functionalized by torch before lowering")
    return decomposed


def unsupported_ops(program: object, source: str, options: Options | None = None) -> list[Unsupported]:
    """Return every op of ``program`` the op table cannot convert, even after torch's decompositions."""
    options = options or Options()
    program = prepare_program(program, source, options)
    return _Lowering(program, GraphBuilder("check"), options, source).missing()


def lower_program(program: object, *, source: str, options: Options,
                  input_names: Sequence[str] | None = None, name: str = "pytorch") -> Model:
    """Lower an ExportedProgram to an IR model at the canonical opset.

    Args:
        program: a ``torch.export.ExportedProgram`` (not decomposed, or core ATen).
        source: what to call the model in messages (its file name).
        options: conversion options; notes go to ``options.diagnostics``.
        input_names: names of the graph inputs (default: the program's placeholder names).
        name: the graph's name.

    Returns:
        The IR model, inputs and outputs in the program's order.

    A call its converter refuses (an argument the converter does not handle) is tried once more
    through torch's decomposition of that op, where torch has one.

    Raises:
        UnsupportedOpsError: listing every op without a converter.
        ConversionError: when one call cannot be converted (its op, module path and line).
    """
    from .decompose import decomposable, decompose

    fallback = getattr(program, "fallback", None)  # a traced graph (traced.py): torch.export on refusal
    if fallback is not None:
        said = len(options.diagnostics.notes), len(options.diagnostics.warnings)
        for note in getattr(program, "notes", ()):  # the trace's own (a branch it took as the example did)
            options.diagnostics.note(note)
        try:
            return _lower_once(program, source=source, options=options, input_names=input_names, name=name)
        except ConvertError as exc:
            logger.debug("%s: the traced graph did not lower (%s); captured by torch.export", source, exc)
            del options.diagnostics.notes[said[0]:], options.diagnostics.warnings[said[1]:]  # that attempt's
            program = fallback()
    original = program
    program = prepare_program(program, source, options)
    retried: list[str] = []
    first: ConvertError | None = None  # the refusal the user's own op met, reported if retrying fails
    while True:
        try:
            model = _lower_once(program, source=source, options=options, input_names=input_names, name=name)
        except ConvertError as exc:
            first = first or exc
            key = getattr(exc, "aten_op", None)
            if key is None or key in retried or not decomposable(key):
                if first is exc:
                    raise
                raise first from exc
            retried.append(key)
            try:
                program = decompose(original, also=retried)
            except Exception:
                raise first from None
            continue
        if first is not None:
            options.diagnostics.note(f"{first}; lowered through torch's decomposition of "
                                     f"{', '.join(retried)} instead")
        return model


def _lower_once(program: object, *, source: str, options: Options, input_names: Sequence[str] | None,
                name: str) -> Model:
    builder = GraphBuilder(name, source=source)
    lowering = _Lowering(program, builder, options, source)
    missing = lowering.missing()
    if missing:
        raise UnsupportedOpsError(source, missing, what="ATen op",
                                  hint="Run `convert ops pytorch` for the supported list.")
    users = lowering.user_inputs
    names = list(input_names) if input_names else [str(n.name) for n in users]  # type: ignore[attr-defined]
    if len(names) != len(users):
        raise ConversionError(source, f"the program has {len(users)} inputs, {len(names)} names were given")
    for node in users:
        val = node.meta.get("val")  # type: ignore[attr-defined]
        shape: Sequence[object] = getattr(val, "shape", ())
        if len(shape) and not isinstance(shape[0], int):
            lowering.sym_names[str(shape[0])] = "batch"
    for node, nm in zip(users, names, strict=True):
        meta = _meta_of(node.meta.get("val"), lowering.sym_names)  # type: ignore[attr-defined]
        if not isinstance(meta, TensorMeta):
            raise ConversionError(source, f"input '{nm}' is not a tensor ({type(meta).__name__})")
        if meta.dtype != real_dtype(meta.dtype):
            raise ConversionError(source, f"input '{nm}' is a complex tensor, which ONNX has no type for; "
                                  "pass torch.view_as_real(x) and call torch.view_as_complex on it in forward")
        lowering.env[node] = builder.input(nm, meta.dtype, meta.shape)
    out_node = None
    for node in program.graph.nodes:  # type: ignore[attr-defined]
        if node.op == "call_function":
            lowering.run_node(node)
        elif node.op == "output":
            out_node = node
        elif node.op == "get_attr":
            lowering.consts[node] = _get_attr(program, node.target)
            lowering.foldable.add(node)
    if out_node is None:
        raise ModelFormatError(f"{source}: the program has no output")
    _outputs(program, lowering, out_node, builder, source)
    model = builder.build(doc=f"converted from {os.path.basename(source)} by convert (pytorch frontend)")
    model.meta["convert:aten_ops"] = dict(lowering.seen)
    return model


def _get_attr(program: object, target: str) -> object:
    return get_attr_of(program.graph_module, target)  # type: ignore[attr-defined]


def _all_nodes(module: object) -> list[object]:
    """Return the nodes of ``module``'s graph and of every graph its torch.cond and while_loop calls hold."""
    import torch.fx

    nodes: list[object] = []
    for node in module.graph.nodes:  # type: ignore[attr-defined]
        nodes.append(node)
        if node.op == "call_function" and op_key(node.target) in SUBGRAPH_ARGS:
            lo, hi = SUBGRAPH_ARGS[op_key(node.target)]
            for ref in node.args[lo:hi]:
                if isinstance(ref, torch.fx.Node) and ref.op == "get_attr":
                    branch = _all_nodes(get_attr_of(module, ref.target))
                    for inner in branch:  # a branch node without a place of its own is at the torch.cond call
                        meta = inner.meta  # type: ignore[attr-defined]
                        if not meta.get("nn_module_stack") and node.meta.get("nn_module_stack"):
                            meta["nn_module_stack"] = node.meta["nn_module_stack"]
                        if "eval_with_key" in (meta.get("stack_trace") or "<eval_with_key>"):
                            meta["stack_trace"] = node.meta.get("stack_trace")
                    nodes.extend(branch)
    return nodes


def _outputs(program: object, lowering: _Lowering, out_node: object, builder: GraphBuilder, source: str) -> None:
    from torch.export.graph_signature import OutputKind

    specs = program.graph_signature.output_specs  # type: ignore[attr-defined]
    flat = list(out_node.args[0])  # type: ignore[attr-defined]
    users = [f for f, s in zip(flat, specs, strict=True) if s.kind == OutputKind.USER_OUTPUT]
    names = output_names(len(users))
    for node, nm in zip(users, names, strict=True):
        if node in lowering.consts and node not in lowering.env:
            value = lowering.value(node)
        else:
            value = lowering.env.get(node) if node is not None else None
        if not isinstance(value, Value):
            raise ConversionError(source, f"output '{nm}' is not a tensor ({type(value).__name__})")
        if _is_complex(node.meta.get("val")):  # type: ignore[union-attr]
            raise ConversionError(source, f"output '{nm}' is a complex tensor, which ONNX has no type for; "
                                  "return torch.view_as_real(y) (its real and imaginary parts) instead")
        builder.output(value, nm)


