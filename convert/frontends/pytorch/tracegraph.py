"""One traced TorchScript graph -> one FX graph: the fast capture's reader (``traced.py``).

``TraceBuilder`` walks the graph torch's tracer recorded (of a module traced in this process, or
of a TorchScript file) node by node: constants, attribute reads of weights, lists and tuples, and
ATen ops, each op an FX node with its meta value (``tracevals.py``: the trace's record, torch's meta
kernels, or its fake kernels with a symbol for each size that depends on data, ``facts.py``'s
rule). Constants are computed here as eager computed them (``_ours_to_write``), size arithmetic on
symbolic sizes is recorded as torch.export records it (``_number_op``), and the forms of
torchvision's post-processing (``tvpost.py``) are expanded into their graphs (``_form``). Anything
it cannot stand for raises ``NotTraceableError``; the capture then goes to torch.export.
"""

from __future__ import annotations

import contextlib
import operator
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from .facts import FOLD_MAX_BYTES, nbytes, script_index_dtypes, size_depends_on_data
from .tracevals import (
    NotTraceableError,
    agrees,
    elementwise_val,
    fake_kernels_quiet,
    flat,
    has_node,
    identity_of,
    int_operand,
    is_int_node,
    is_number_node,
    is_symbolic,
    mask_dtypes,
    meta_value,
    metas_of,
    python_dispatcher,
    recorded_vals,
    storage_of,
    torch_frames_skipped,
)

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["TraceBuilder"]


# c10::ScalarType, MemoryFormat and Layout as TorchScript constants carry them (ints); the codes
# of ScalarType were read from traced graphs (x.to(dtype) for each dtype).
_SCALAR_TYPES = ("uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", None,
                 "complex64", "complex128", "bool", None, None, None, "bfloat16")


_MEMORY_FORMATS = ("contiguous_format", "preserve_format", "channels_last", "channels_last_3d")


_LAYOUTS = ("strided", "sparse_coo")


# dropout(input, p, train) and its variants: with train False they return the input itself.
_DROPOUTS = frozenset({"dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout"})


_NUMBER_DTYPES = ("float64", "int64", "bool")  # the dtypes the tracer gives Python numbers


class _Module:
    """A module reached by ``prim::GetAttr`` from ``self``, with its dotted path."""

    def __init__(self, obj: object, path: str) -> None:
        self.obj = obj
        self.path = path


def _enum(table: Sequence[str | None], code: object, kind: str) -> object:
    import torch

    if not isinstance(code, int) or not 0 <= code < len(table) or table[code] is None:
        raise NotTraceableError(f"unknown {kind} code {code!r}")
    return getattr(torch, table[code])  # type: ignore[arg-type]


def _typed(value: object, real_type: str) -> object:
    """A TorchScript constant as the op's Python binding takes it (ScalarType codes -> dtypes...)."""
    base = real_type.removeprefix("Optional[").removesuffix("]")
    if value is None or isinstance(value, bool) or not isinstance(value, int):
        return value
    if base == "ScalarType":
        return _enum(_SCALAR_TYPES, value, "dtype")
    if base == "MemoryFormat":
        return _enum(_MEMORY_FORMATS, value, "memory format")
    if base == "Layout":
        return _enum(_LAYOUTS, value, "layout")
    return value


_FRAME = re.compile(r"^(.*)\((\d+)\): (.*)$")


def _stack_trace(source_range: str) -> str:
    """The Python stack a trace recorded for a node ('file(line): function' lines, innermost first)
    as torch.export writes it (outermost first), so errors and provenance name the model's line."""
    frames = [m.groups() for m in map(_FRAME.match, source_range.splitlines()) if m]
    return "\n".join(f'  File "{file}", line {line}, in {func}' for file, line, func in reversed(frames))


def _identifier(path: str) -> str:
    """A weight's dotted path as a Python name (the generated code's argument): 'block1-0.w' -> 'block1_0_w'."""
    name = re.sub(r"\W", "_", path)
    return f"p_{name}" if not name or name[0].isdigit() else name


def _module_path(scope: str) -> str:
    """'__module.layer1/__module.layer1.0/__module.layer1.0.conv1' -> 'layer1.0.conv1'."""
    last = scope.rsplit("/", 1)[-1]
    return last.removeprefix("__module").lstrip(".")


class TraceBuilder:
    """One traced graph -> one FX graph, with every value's meta (shape and dtype) on the meta device."""

    def __init__(self, graph: object, example: Sequence[torch.Tensor], *, script: object = None,
                 state: Sequence[tuple[str, torch.Tensor]] = (), parameter_names: Iterable[str] = ()) -> None:
        """``graph`` takes ``script`` (its ``self``, read by ``prim::GetAttr``: a TorchScript file)
        and then the example; or the example and then ``state`` (a trace of this process, whose
        weights are inputs as ``torch.jit._get_trace_graph`` records them)."""
        import torch.fx
        from torch.export.graph_signature import InputKind

        self.graph = graph
        self.script = script
        self.state_inputs = list(state)
        self.live = script is None  # traced in this process: types and Python stacks recorded
        self.example = example
        self.fx = torch.fx.Graph()
        self.env: dict[object, object] = {}  # TorchScript Value -> fx.Node or a known Python value
        self.specs: list[tuple[object, object, str | None]] = []  # (kind, node, target)
        self.tensors: dict[tuple[object, ...], object] = {}  # identity_of(real tensor) -> its placeholder
        self.state: dict[str, object] = {}
        self.constants: dict[str, object] = {}
        self.last_placeholder: object = None
        # 0-d tensors the trace made from Python numbers (prim::NumToTensor, a Double or Long constant):
        # eager torch computed with them as numbers, which take no part in choosing a result's dtype
        self.scalar_born: set[int] = set()
        # storages of the tensors this builder computed (folded results): an in-place op of constants runs
        # here only on those, and not on one a graph op took as a view (its result would see the write);
        # a graph op reading one reads a copy (_lift), which a later write does not change, as in eager
        self.ours: set[int] = set()
        self.viewed: set[int] = set()
        self.kinds = InputKind
        self.parameter_names = set(parameter_names)
        # the fake-tensor mode that gives results whose size depends on data a symbolic size (made on
        # the first such op; see TraceBuilder._symbolic_val)
        self.fake: object = None
        self.fakes: dict[object, object] = {}  # fx.Node -> the fake tensor standing for its meta value
        self.submodules: dict[str, object] = {}  # the graphs of the graph's loops (see _form)

    # -- values ----------------------------------------------------------------------------
    def _placeholder(self, name: str, val: object) -> object:
        if self.last_placeholder is None:
            node = self.fx.placeholder(name)
        else:
            with self.fx.inserting_after(self.last_placeholder):
                node = self.fx.placeholder(name)
        node.meta["val"] = val  # type: ignore[attr-defined]
        self.last_placeholder = node
        return node

    def _state_tensor(self, tensor: torch.Tensor, path: str) -> object:
        node = self.tensors.get(identity_of(tensor))
        if node is None:
            kind = self.kinds.PARAMETER if path in self.parameter_names else self.kinds.BUFFER
            node = self._placeholder(_identifier(path), meta_value(tensor))
            self.tensors[identity_of(tensor)] = node
            self.specs.append((kind, node, path))
            self.state[path] = tensor
        return node

    def _lift(self, value: object) -> object:
        """A real tensor (a constant of the trace, or a folded result) as a constant placeholder."""
        import torch

        if isinstance(value, torch.Tensor):
            key = identity_of(value)
            if storage_of(value) in self.ours:  # may be written later, as eager did: the graph reads it as it is now
                key, value = (*key, value._version), value.clone()
            node = self.tensors.get(key)
            if node is None:
                target = f"_tensor_constant{len(self.constants)}"
                node = self._placeholder(target, meta_value(value))
                self.tensors[key] = node
                self.specs.append((self.kinds.CONSTANT_TENSOR, node, target))
                self.constants[target] = value
            return node
        if isinstance(value, (list, tuple)):
            return type(value)(self._lift(v) for v in value)
        return value

    def _get(self, v: object) -> object:
        if v not in self.env:
            raise NotTraceableError(f"value %{v.debugName()} used before it is defined")  # type: ignore[attr-defined]
        return self.env[v]

    # -- the graph -------------------------------------------------------------------------
    def build(self) -> tuple[object, list[object]]:
        import torch

        graph = self.graph
        inputs = list(graph.inputs())  # type: ignore[attr-defined]
        own = 1 if self.script is not None else 0
        if len(inputs) != own + len(self.example) + len(self.state_inputs):
            raise NotTraceableError(f"the graph takes {len(inputs)} inputs, not {own} + {len(self.example)} + "
                                    f"{len(self.state_inputs)}")
        if self.script is not None:
            self.env[inputs[0]] = _Module(self.script, "")
        users = inputs[own:own + len(self.example)]
        for i, (v, x) in enumerate(zip(users, self.example, strict=True)):
            if not isinstance(v.type(), torch._C.TensorType):
                raise NotTraceableError(f"input {i} is a {v.type()}, not a tensor")
            self.env[v] = self._placeholder(f"input_{i}", meta_value(x))
            self.specs.append((self.kinds.USER_INPUT, self.env[v], None))
        for v, (name, tensor) in zip(inputs[own + len(self.example):], self.state_inputs, strict=True):
            self.env[v] = self._state_tensor(tensor, name)
        for node in graph.nodes():
            self._node(node)
        returned = [self._get(v) for v in graph.return_node().inputs()]  # type: ignore[attr-defined]
        outputs = list(flat(returned))
        if not outputs or any(not isinstance(o, torch.fx.Node) for o in outputs):
            raise NotTraceableError("an output is not a tensor computed by the graph")
        self.fx.output(tuple(outputs))
        return self.fx, outputs

    def _node(self, node: object) -> None:  # one branch per kind of TorchScript node
        import torch

        kind = node.kind()  # type: ignore[attr-defined]
        ins = list(node.inputs())  # type: ignore[attr-defined]
        outs = list(node.outputs())  # type: ignore[attr-defined]
        if kind == "prim::Constant":
            value = outs[0].toIValue()
            if isinstance(value, torch.Tensor) and value.dim() == 0 \
                    and str(value.dtype).removeprefix("torch.") in _NUMBER_DTYPES:
                self.scalar_born.add(id(value))
            self.env[outs[0]] = value
        elif kind == "prim::GetAttr":
            owner = self._get(ins[0])
            if not isinstance(owner, _Module):
                raise NotTraceableError("an attribute read from something other than a module")
            name = node.s("name")  # type: ignore[attr-defined]
            path = f"{owner.path}.{name}" if owner.path else name
            attr = getattr(owner.obj, name)
            if isinstance(attr, torch.Tensor):
                self.env[outs[0]] = self._state_tensor(attr, path)
            elif isinstance(attr, torch.nn.Module):
                self.env[outs[0]] = _Module(attr, path)
            elif isinstance(attr, (int, float, bool, str)) or attr is None:
                self.env[outs[0]] = attr
            else:
                raise NotTraceableError(f"attribute '{path}' is a {type(attr).__name__}")
        elif kind == "prim::ListConstruct":
            self.env[outs[0]] = [self._get(v) for v in ins]
        elif kind == "prim::TupleConstruct":
            self.env[outs[0]] = tuple(self._get(v) for v in ins)
        elif kind in ("prim::ListUnpack", "prim::TupleUnpack"):
            self._unpack(self._get(ins[0]), outs)
        elif kind == "prim::NumToTensor":
            value = self._get(ins[0])
            if is_number_node(value):  # a symbolic size stays a number: arithmetic on it is _number_op's
                self.env[outs[0]] = value
                return
            if has_node(value) or not isinstance(value, (int, float, bool)):
                raise NotTraceableError("prim::NumToTensor of a value computed from data")
            dtype = torch.bool if isinstance(value, bool) else torch.int64 if isinstance(value, int) else torch.float64
            number = torch.scalar_tensor(value, dtype=dtype)
            self.scalar_born.add(id(number))
            self.ours.add(storage_of(number))  # made here: an in-place op of constants may write it
            self.env[outs[0]] = number
        elif kind.startswith("convert_tv::"):
            self._form(kind.partition("::")[2], ins, outs)
        elif kind.startswith(("aten::", "torchvision::")):
            namespace, _, name = kind.partition("::")
            self._aten(node, name, ins, outs, namespace)
        else:
            raise NotTraceableError(f"{kind} (not an op of a trace)")

    def _form(self, name: str, ins: list[object], outs: list[object]) -> None:
        """An operator of ours (``tvpost.traced_forms``: a loop torch's tracer ran rather than
        recorded, torchvision's scripted post-processing in a file) expanded into its form's graph,
        as torch's ``make_fx`` records it on the fake values of its tensors (its other arguments
        are constants of the form), a while_loop's functions as graphs of their own; the keypoint
        decoding of float32 heatmaps (``_DECODINGS``) as one node instead (``_decoding``)."""
        import torch
        import torch.fx
        from torch.fx.experimental.proxy_tensor import make_fx

        from .tvpost import traced_forms

        form = traced_forms().get(name)
        if form is None:
            raise NotTraceableError(f"convert_tv::{name} is not an operator of ours the trace expands")
        values = [self._lift(self._get(v)) for v in ins]
        if any(is_number_node(v) for v in values):
            raise NotTraceableError(f"convert_tv::{name} takes a number that depends on data")
        tensors = [v for v in values if isinstance(v, torch.fx.Node)]
        if not tensors:
            raise NotTraceableError(f"convert_tv::{name} of constants")
        if name in _DECODINGS and self._decoding(name, values, outs):
            return
        numbers = {i: v for i, v in enumerate(values) if not isinstance(v, torch.fx.Node)}  # an IoU, an image size

        def bound(*given: object) -> object:
            supplied = iter(given)
            return form(*(numbers[i] if i in numbers else next(supplied) for i in range(len(values))))

        fakes = [self._fake_of(v) for v in tensors]
        # the symbols this builder's own fake calls made are bound where they were made (the graph's
        # nodes); make_fx would take them for symbols of its first op that it failed to record
        self._fake_mode().shape_env.pending_fresh_unbacked_symbols.clear()  # type: ignore[attr-defined]
        try:
            with self._faking():
                module = make_fx(bound, tracing_mode="real")(*fakes)
        except Exception as exc:
            raise NotTraceableError(f"convert_tv::{name}: {type(exc).__name__}: {str(exc)[:200]}") from exc
        results = self._inline(module, tensors, tensors[0])
        for o, r in zip(outs, results, strict=True):
            agrees(name, o, r.meta["val"], symbolic=True)
            self.env[o] = r

    def _decoding(self, name: str, values: list[object], outs: list[object]) -> bool:
        """The keypoint decoding (``_DECODINGS``) of float32 heatmaps of a fixed height and width as
        one node of ``convert_tv::decode_heatmaps``, which the lowering writes as a Loop of its own
        (``ops.detection.decode_heatmaps``): its results' sizes follow from the heatmaps' shape, so
        no form is traced to find them (make_fx of the while_loop form proves each of its ops' sizes
        on two symbols from data: 0.6 s). False, and nothing added, for other heatmaps, which that
        Loop does not take (float64, sizes from data): the form is expanded then."""
        import torch
        import torch.fx

        from .tvpost import decode_operator, one_loop_decodes

        if len(values) != 2 or not all(isinstance(v, torch.fx.Node) for v in values):
            return False
        maps, rois = values
        if not one_loop_decodes(maps.meta["val"], rois.meta["val"]):  # type: ignore[union-attr]
            return False
        op = decode_operator()
        with self._faking():
            results = op(self._fake_of(maps), self._fake_of(rois))  # type: ignore[operator]
        call = self._placed_node(op, (maps, rois), results, maps)
        keypoints, scores = (self._placed_node(operator.getitem, (call, i), r, maps) for i, r in enumerate(results))
        if _DECODINGS[name]:  # torchvision's scripted loop returns [N, 3, K]
            keypoints = self._fx_call(torch.ops.aten.permute.default, (keypoints, [0, 2, 1]), {}, maps)
        for o, r in zip(outs, (keypoints, scores), strict=True):
            agrees(name, o, r.meta["val"], symbolic=True)  # type: ignore[attr-defined]
            self.env[o] = r
        return True

    def _inline(self, module: object, values: list[object], near: object) -> list[object]:
        """The nodes of ``module`` (a graph of make_fx) copied into this graph on ``values``, its
        graph attributes (a loop's functions) held by this graph's module; its outputs."""
        import torch
        import torch.fx

        env: dict[object, object] = {}
        placeholders = [n for n in module.graph.nodes if n.op == "placeholder"]  # type: ignore[attr-defined]
        if len(placeholders) != len(values):
            raise NotTraceableError(f"a form of {len(placeholders)} inputs given {len(values)}")
        env.update(zip(placeholders, values, strict=True))
        for n in module.graph.nodes:  # type: ignore[attr-defined]
            if n.op == "get_attr":
                attr = getattr(module, n.target)
                if not isinstance(attr, torch.fx.GraphModule):
                    raise NotTraceableError(f"a form holds a {type(attr).__name__} ({n.target})")
                target = f"{n.target}_{len(self.submodules)}"
                self.submodules[target] = attr
                env[n] = self.fx.get_attr(target)
            elif n.op == "call_function":
                env[n] = copied = self.fx.node_copy(n, lambda a: env[a])
                copied.meta["nn_module_stack"] = near.meta.get("nn_module_stack", {})  # type: ignore[attr-defined]
            elif n.op == "output":
                return [env[r] for r in flat(n.args[0])]
        raise NotTraceableError("a form without an output")

    def _unpack(self, value: object, outs: list[object]) -> None:
        import torch.fx

        if isinstance(value, (list, tuple)):
            if len(value) != len(outs):
                raise NotTraceableError("an unpack of the wrong length")
            for o, v in zip(outs, value, strict=True):
                self.env[o] = v
            return
        if not isinstance(value, torch.fx.Node):
            raise NotTraceableError("an unpack of a non-sequence")
        vals = value.meta["val"]
        for i, o in enumerate(outs):
            item = self.fx.call_function(operator.getitem, (value, i))
            item.meta["val"] = vals[i]
            item.meta["nn_module_stack"] = value.meta.get("nn_module_stack", {})
            self.env[o] = item

    def _size_query(self, name: str, args: list[object]) -> tuple[bool, object]:
        """aten::size/dim/numel/_shape_as_tensor of a graph tensor: read from its shape, a symbolic
        size (one that depends on data) as a ``sym_size`` node of the graph."""
        import torch
        import torch.fx

        if not args or not isinstance(args[0], torch.fx.Node):
            return False, None
        node = args[0]
        val = node.meta["val"]
        if not isinstance(val, torch.Tensor):
            return False, None
        if name == "dim":
            return True, val.dim()
        sizes = [self._dim_of(node, i) for i in range(val.dim())]
        if name == "size":
            return True, (sizes[args[1]] if len(args) > 1 else sizes)  # type: ignore[index]
        if name == "numel":
            if all(isinstance(d, int) for d in sizes):
                return True, val.numel()
            return True, self._placed_node(torch.ops.aten.sym_numel.default, (node,), val.numel(), node)
        if name == "_shape_as_tensor":
            if all(isinstance(d, int) for d in sizes):
                return True, torch.tensor(sizes, dtype=torch.int64)
            parts = [self._as_tensor(d, node) for d in sizes]
            return True, self._fx_call(torch.ops.aten.stack.default, (parts,), {}, node)
        return False, None

    def _dim_of(self, node: object, i: int) -> object:
        """Size ``i`` of ``node``'s tensor: an int, or a ``sym_size`` node where it depends on data."""
        import torch

        d = node.meta["val"].shape[i]  # type: ignore[attr-defined]
        if isinstance(d, int):
            return d
        return self._placed_node(torch.ops.aten.sym_size.int, (node, i), d, node)

    def _placed_node(self, target: object, args: tuple[object, ...], val: object, near: object,
                     kwargs: dict[str, object] | None = None) -> object:
        """A graph node of meta value ``val`` (a symbolic number, or a tensor the fake mode computed),
        placed like ``near``."""
        fx_node = self.fx.call_function(target, args, kwargs)
        fx_node.meta["val"] = val
        fx_node.meta["nn_module_stack"] = near.meta.get("nn_module_stack", {})  # type: ignore[attr-defined]
        return fx_node

    def _as_tensor(self, number: object, near: object) -> object:
        """A number (an int, or a symbolic number node) as a 0-d int64 tensor of the graph."""
        import torch

        if not is_number_node(number):
            return self._lift(torch.scalar_tensor(number, dtype=torch.int64))
        return self._fx_call(torch.ops.aten.scalar_tensor.default, (number,), {"dtype": torch.int64}, near)

    def _fx_call(self, op: object, args: tuple[object, ...], kwargs: dict[str, object], near: object) -> object:
        """``op`` on graph values, its meta value computed by the fake mode, placed like ``near``."""
        return self._placed_node(op, args, self._symbolic_val(str(op), op, args, kwargs, None), near, kwargs)

    def _aten(self, node: object, name: str, ins: list[object], outs: list[object], namespace: str = "aten") -> None:
        import torch
        import torch.fx

        schema_text = node.schema()  # type: ignore[attr-defined]
        if schema_text == "(no schema)":
            raise NotTraceableError(f"{namespace}::{name} has no schema")
        head = schema_text.split("(", 1)[0]
        overload = head.split(".", 1)[1] if "." in head else "default"
        packet = getattr(getattr(torch.ops, namespace), name, None)
        op = getattr(packet, overload, None) if packet is not None else None
        if op is None:
            raise NotTraceableError(f"{namespace}::{name}.{overload} is not a registered overload")
        arguments = op._schema.arguments
        if len(arguments) != len(ins):
            raise NotTraceableError(f"aten::{name}: {len(ins)} inputs for {len(arguments)} arguments")
        values = [_typed(self._get(v), str(a.real_type)) for v, a in zip(ins, arguments, strict=True)]
        if name in ("size", "dim", "numel", "_shape_as_tensor"):
            answered, result = self._size_query(name, values)
            if answered:
                self._bind_result(outs, result)
                return
        if name.rstrip("_") in _DROPOUTS and values[2] is False:  # eval mode: the input itself
            self.env[outs[0]] = values[0]
            return
        written = [i for i, a in enumerate(arguments) if a.alias_info is not None and a.alias_info.is_write]
        random = torch.Tag.nondeterministic_seeded in op.tags
        if not any(has_node(v) for v in values) and not random:
            if not all(self._ours_to_write(values[i]) for i in written):
                raise NotTraceableError(f"aten::{name} writes to a constant")
            result = self._call(op, arguments, values)
            before = {storage_of(t) for t in flat(values) if isinstance(t, torch.Tensor)}
            self.ours.update(p for p in (storage_of(t) for t in flat(result) if isinstance(t, torch.Tensor))
                             if p and p not in before)
            if written:  # done in place, as eager did it, on a tensor of ours: what its views see too
                self._bind_result(outs, result)
                return
            if name in ("Int", "Float", "Bool", "ScalarImplicit") or nbytes(result) <= FOLD_MAX_BYTES:
                if isinstance(result, torch.Tensor) and result.dim() == 0 and any(
                        id(v) in self.scalar_born for v in flat(values)):
                    self.scalar_born.add(id(result))  # size arithmetic: still a number to eager torch
                self._bind_result(outs, result)
                return
        if any(is_number_node(v) for v in flat(values)):
            number = self._number_op(name, values, next(v for v in flat(values) if is_number_node(v)))
            if number is not None:
                self._bind_result(outs, number)
                return
            values = [self._tensors_of_numbers(v, str(a.real_type)) for v, a in zip(values, arguments, strict=True)]
        # the one rule (facts.py), the masks by their recorded types and by their meta values (a file
        # records no types)
        symbolic = (size_depends_on_data(namespace, name, inputs=len(ins),
                                         masks=lambda: [*script_index_dtypes(node), *mask_dtypes(values)])
                    or (self.fake is not None and any(is_symbolic(v) for v in flat(values))))
        if name in ("Int", "Float", "Bool", "ScalarImplicit", "item", "_local_scalar_dense"):
            if not symbolic:
                raise NotTraceableError(f"aten::{name} turns a tensor computed from data into a number")
            # a traced number the program passed on (an int argument): read at run time, as it was
            op = torch.ops.aten._local_scalar_dense.default
            arguments = op._schema.arguments
            values = values[:1]
        self._numbers_promote_alike(name, values)
        self.viewed.update(storage_of(t) for v, a in zip(values, arguments, strict=True)
                           if a.alias_info is not None and not a.alias_info.is_write
                           for t in flat(v) if isinstance(t, torch.Tensor))
        lifted = [self._lift(v) for v in values]
        if any(isinstance(lifted[i], torch.fx.Node) and lifted[i].target in self.constants for i in written):
            # a constant the trace computed (views of which were computed here too) written by the graph
            raise NotTraceableError(f"aten::{name} writes to a tensor the trace computed from constants")
        args = tuple(v for v, a in zip(lifted, arguments, strict=True) if not a.kwarg_only)
        kwargs = {a.name: v for v, a in zip(lifted, arguments, strict=True) if a.kwarg_only}
        # sizes that depend on data: symbols of the fake mode, not the example's
        val = (self._symbolic_val(name, op, args, kwargs, outs) if symbolic
               else recorded_vals(outs) if self.live else None)
        if val is None:  # a file records no types; a live trace none for lists
            val = _input_alike(name, metas_of(args))
        if val is None:
            try:
                val = op(*metas_of(args), **metas_of(kwargs))
            except Exception as exc:
                raise NotTraceableError(f"aten::{name}: no meta kernel ({type(exc).__name__})") from exc
            for o, v in zip(outs, val if len(outs) > 1 else (val,), strict=True):
                agrees(name, o, v)
        fx_node = self.fx.call_function(op, args, kwargs)
        fx_node.meta["val"] = val
        path = _module_path(node.scopeName())  # type: ignore[attr-defined]
        fx_node.meta["nn_module_stack"] = {path: (path, "")} if path else {}
        if self.live:  # a file's recorded stack names sources the user may not have: the file is named
            fx_node.meta["stack_trace"] = _stack_trace(node.sourceRange())  # type: ignore[attr-defined]
        if len(outs) == 1:
            self.env[outs[0]] = fx_node
            return
        for i, o in enumerate(outs):
            item = self.fx.call_function(operator.getitem, (fx_node, i))
            item.meta["val"] = val[i]
            item.meta["nn_module_stack"] = fx_node.meta["nn_module_stack"]
            self.env[o] = item

    def _number_op(self, name: str, values: list[object], near: object) -> object | None:
        """Integer arithmetic of symbolic sizes (the trace's 0-d tensors of ``x.size(0) * 4``...) as
        the size arithmetic torch.export records (``operator.mul`` of SymInts); None for anything else,
        which then runs on the sizes as 0-d tensors."""
        import torch

        first = values[0] if values else None
        if name in ("Int", "ScalarImplicit", "detach", "clone", "alias") and is_number_node(first):
            return first
        if name == "to" and is_number_node(first):
            dtypes = [v for v in values[1:] if isinstance(v, torch.dtype)]
            return first if all(d == torch.int64 for d in dtypes) and is_int_node(first) else None
        function = _NUMBER_OPS.get(name)
        if function is None or len(values) < 2 or (len(values) > 2 and values[2] != 1):  # add/sub's alpha
            return None
        operands = [int_operand(v) for v in values[:2]]
        if any(o is None for o in operands) or not any(is_number_node(o) for o in operands):
            return None
        result = function(*(o.meta["val"] if is_number_node(o) else o for o in operands))  # type: ignore[union-attr]
        return self._placed_node(function, tuple(operands), result, near)

    def _tensors_of_numbers(self, value: object, real_type: str) -> object:
        """A symbolic number passed where the op takes a tensor, as a 0-d tensor of the graph."""
        if not real_type.startswith(("Tensor", "Optional[Tensor")):
            return value
        if isinstance(value, (list, tuple)):
            return type(value)(self._tensors_of_numbers(v, real_type) for v in value)
        return self._as_tensor(value, value) if is_number_node(value) else value

    def _fake_mode(self) -> object:
        if self.fake is None:
            from torch._subclasses.fake_tensor import FakeTensorMode
            from torch.fx.experimental.symbolic_shapes import ShapeEnv

            self.fake = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
            # no dispatch cache: hashing the arguments and rebuilding a cached result of symbolic
            # sizes costs more than the kernel here (RetinaNet's 446 fake calls: 0.49 s with it,
            # 0.36 s without), and a conversion's symbols are its own, so no other call would hit
            self.fake.cache_enabled = False  # type: ignore[attr-defined]
        return self.fake

    @contextlib.contextmanager
    def _faking(self) -> Iterator[None]:
        """Where torch's fake kernels run for this builder: its fake mode, under torch's Python
        dispatcher (as torch.export runs them), with torch's files skipped when a symbol's frame is
        named, their failure logs and warnings (torchvision's own deprecations) kept quiet."""
        with self._fake_mode(), python_dispatcher(), torch_frames_skipped(), fake_kernels_quiet(), \
                warnings.catch_warnings():  # type: ignore[attr-defined]
            warnings.simplefilter("ignore")
            yield

    def _fake_of(self, value: object) -> object:
        """The fake-mode stand-in of a graph value: its own where it is symbolic, otherwise an empty
        fake tensor of its recorded shape, dtype and strides (made once)."""
        import torch
        import torch.fx

        if not isinstance(value, torch.fx.Node):
            return value
        val = value.meta["val"]
        if is_symbolic(value) or not isinstance(val, torch.Tensor):
            return val
        fake = self.fakes.get(value)
        if fake is None:
            with self._fake_mode():  # type: ignore[attr-defined]
                fake = torch.empty_strided(val.shape, val.stride(), dtype=val.dtype, device="cpu")
            self.fakes[value] = fake
        return fake

    def _symbolic_val(self, name: str, op: object, args: tuple[object, ...], kwargs: dict[str, object],
                      outs: list[object] | None) -> object:
        """The result of ``op`` computed by torch's fake kernels, whose sizes that depend on data are
        symbols (an NMS's count ``u0``, then ``u0 * 4``...): what torch.export records for them. The
        trace's recorded dtype and rank must agree; its sizes are the example's."""
        from torch.fx.node import map_aggregate

        fake_args = map_aggregate(args, self._fake_of)
        fake_kwargs = map_aggregate(kwargs, self._fake_of)
        try:
            with self._faking():
                val = elementwise_val(name, [*fake_args, *fake_kwargs.values()], outs)
                if val is None:
                    val = op(*fake_args, **fake_kwargs)  # type: ignore[operator]
        except Exception as exc:
            raise NotTraceableError(f"{name}: no symbolic sizes ({type(exc).__name__}: {str(exc)[:200]})") from exc
        for o, v in zip(outs or (), val if outs and len(outs) > 1 else (val,), strict=False):
            agrees(name, o, v, symbolic=True)
        return val

    def _numbers_promote_alike(self, name: str, values: list[object]) -> None:
        """Refuse a number-born 0-d tensor beside graph tensors where its dtype would choose the result's.

        As a number (eager torch) it only counts by kind; as a 0-d tensor (this graph) it also
        counts when no tensor of one or more dimensions has its kind or a higher one (an int32
        tensor times a float64 0-d tensor is float64; times the number, float32). A TorchScript
        file records no result dtypes, so the meta kernel's would be taken; a live trace records
        eager's, so there this refusal is only caution.
        """
        import torch
        import torch.fx

        born = [v for v in flat(values) if isinstance(v, torch.Tensor) and id(v) in self.scalar_born]
        if not born:
            return
        dims = [n.meta["val"] for n in flat(values) if isinstance(n, torch.fx.Node)
                and isinstance(n.meta["val"], torch.Tensor) and n.meta["val"].dim() > 0]
        for b in born:
            if b.dtype.is_floating_point:
                alike = any(d.dtype.is_floating_point or d.dtype.is_complex for d in dims)
            elif b.dtype == torch.bool:
                alike = bool(dims)
            else:
                alike = any(d.dtype != torch.bool for d in dims)
            if not alike:
                raise NotTraceableError(f"aten::{name}: a number of the trace could set the result's dtype")

    def _ours_to_write(self, value: object) -> bool:
        """Whether an in-place op of constants may run on ``value`` here, as eager ran it: a tensor
        this builder computed (not one of the module's, not a graph constant), none of whose storage
        a graph op took as a view (its result, computed from a copy, would not see the write)."""
        import torch

        if not isinstance(value, torch.Tensor):
            return False
        where = storage_of(value)
        return bool(where) and where in self.ours and where not in self.viewed

    def _call(self, op: object, arguments: Sequence[object], values: list[object]) -> object:
        args = [v for v, a in zip(values, arguments, strict=True) if not a.kwarg_only]  # type: ignore[attr-defined]
        kwargs = {a.name: v for v, a in zip(values, arguments, strict=True) if a.kwarg_only}  # type: ignore[attr-defined]
        return op(*args, **kwargs)  # type: ignore[operator]

    def _bind_result(self, outs: list[object], result: object) -> None:
        if len(outs) == 1:
            self.env[outs[0]] = result
            return
        for o, r in zip(outs, result, strict=True):  # type: ignore[call-overload]
            self.env[o] = r


# integer arithmetic of sizes, as torch.export records it (the lowering's size arithmetic)
_NUMBER_OPS: dict[str, Callable[[object, object], object]] = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "floor_divide": operator.floordiv,
    "remainder": operator.mod, "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
    "eq": operator.eq,
}


# Our operators of the keypoint decoding, lowered as one node each rather than expanded into their
# form -> whether the keypoints are [N, 3, K] (torchvision's scripted loop) rather than [N, K, 3]
_DECODINGS = {"decode_heatmaps": False, "heatmaps_to_keypoints_loop": True}


# Ops whose result is their float input's shape, dtype and strides, written out here for a file's
# ops (which record no types): torch's meta kernels of these are Python decompositions, 0.3-1 ms a call
# (a traced SSDlite file has 90: 0.09 s of its 0.9 s conversion). An in-place one returns its input.
_INPUT_ALIKE = {"batch_norm", "hardswish", "hardswish_", "hardsigmoid", "hardsigmoid_", "hardtanh", "hardtanh_"}


def _input_alike(name: str, args: tuple[object, ...]) -> object | None:
    """The meta result of op ``name`` on meta ``args`` when it is its first argument alike, else None
    (torch's own meta kernel then decides, and refuses what it refuses)."""
    import torch

    x = args[0] if args and name in _INPUT_ALIKE else None
    if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point or x.device.type != "meta":
        return None

    def per_channel(v: object) -> bool:
        return v is None or (isinstance(v, torch.Tensor) and v.dim() == 1 and v.shape[0] == x.shape[1]
                             and v.dtype.is_floating_point)

    # batch norm: (input, weight, bias, running_mean, running_var, ...), the four vectors per channel
    if name == "batch_norm" and (x.dim() < 2 or not all(per_channel(v) for v in args[1:5])):
        return None
    return x if name.endswith("_") else torch.empty_like(x)
