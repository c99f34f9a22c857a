"""A traced TorchScript graph lowered without ``torch.export``: the fast capture of plain modules.

``torch.export`` costs a plain module 0.5-1.5 s before our lowering starts: importing dynamo and
functorch (1.3 s in a process that has not, which torchvision and transformers do on import) and
tracing every op through Python dispatch modes on fake tensors. Torch's tracer records the same
ATen ops in C++ in a tenth of the time, so the TorchScript exporter starts sooner (ResNet-18:
0.23 s against 0.72 s for our capture through torch.export, docs/performance.md). Here a traced
graph becomes an FX graph the op table lowers as it lowers an ExportedProgram: the same ATen ops,
the same converters, no second table.

The graph is only used when it is as trustworthy as torch.export's:

- tracing warned of nothing but tensors made Python numbers (a branch, ``math.sqrt``, a split
  size) or constants (``torch.tensor``), and each was computed from input sizes and constants
  alone, which a trace at fixed input shapes freezes correctly (torch.export specialises them the
  same way); a number read from data, from weights or from a random op, and any other
  ``TracerWarning``, refuse the trace (``_watched_numbers``);
- shapes and dtypes are those the trace recorded (a file records none: torch's meta kernels compute
  them), except downstream of an op whose result's size depends on data (torch's
  ``dynamic_output_shape`` tag, nonzero, nms, a boolean mask): there torch's fake kernels compute
  them, with a symbol for each such size (``_Builder._symbolic_val``), as torch.export does; a size
  read from such a tensor stays a node of the graph (``sym_size``), integer arithmetic on it is
  recorded as torch.export records it, and the number the trace passed on as an int argument is
  read at run time; a Python number made of such a size refuses the trace (the trace would freeze
  the example's), and a branch on one (``if boxes.numel() > 0``) is taken as the example took it
  and named in a note, as torch.export's draft capture does;
- the trace wrote to none of the module's parameters and buffers (it runs ``forward`` on real
  tensors; buffers it wrote are put back), every op has a converter, and no in-place write goes
  through a view (``prepare_program`` would need torch's functionalization); an in-place op of
  constants runs here as eager ran it, on a tensor the builder computed (``_Builder._ours_to_write``;
  a graph op that read it earlier reads a copy taken then), and any other write to a constant
  refuses the trace;
- only the ops, list and tuple constructs, attribute reads and size arithmetic of a trace appear
  (no scripted control flow, no Python ops), and the outputs are tensors in tuples, lists and
  dicts (a Hugging Face ``ModelOutput``), flattened in the order torch.export's pytree flattens;
- a number the trace turned into a 0-d tensor never decides a result's dtype (eager torch used it
  as a number, which does not);
- the module holds at most ``TRACE_MAX_BYTES`` of weights, all on the CPU. torchvision's detectors
  are traced with their post-processing in the forms of ``tvpost``; Keypoint R-CNN's keypoint
  decoding, a ``while_loop`` the tracer would run rather than record, is recorded as one operator
  of ours and expanded into the loop's graph here (``_Builder._form``).

Anything else returns None and the caller captures with torch.export as before; nothing is lost
but the time of the attempt. The parity check's reference is the module itself (or the
TorchScript file), never this graph.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import operator
import os
import re
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from convert.ir import GraphBuilder, Options

from .facts import (
    FOLD_MAX_BYTES,
    nbytes,
    script_index_dtypes,
    script_size_depends_on_data,
    size_depends_on_data,
)
from .torchenv import PACKAGE, torch_folder

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["TRACE_MAX_BYTES", "TracedProgram", "program_from_script", "trace_module"]

logger = logging.getLogger(__name__)

#: Modules with more parameter and buffer bytes than this go straight to torch.export: the trace
#: runs ``forward`` on real tensors, which on a multi-GB model costs more than it saves, and a
#: failed attempt (a dict output, say) would waste that forward.
TRACE_MAX_BYTES = 1 << 30

#: Buffers are copied before the trace (to be put back if ``forward`` writes them) up to this size.
_BUFFER_COPY_MAX_BYTES = 64 << 20

# c10::ScalarType, MemoryFormat and Layout as TorchScript constants carry them (ints); the codes
# of ScalarType were read from traced graphs (x.to(dtype) for each dtype).
_SCALAR_TYPES = ("uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", None,
                 "complex64", "complex128", "bool", None, None, None, "bfloat16")
_MEMORY_FORMATS = ("contiguous_format", "preserve_format", "channels_last", "channels_last_3d")
_LAYOUTS = ("strided", "sparse_coo")

# dropout(input, p, train) and its variants: with train False they return the input itself.
_DROPOUTS = frozenset({"dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout"})


_NUMBER_DTYPES = ("float64", "int64", "bool")  # the dtypes the tracer gives Python numbers

# The Tensor methods that make a Python number of a tensor. Under tracing they warn (TracerWarning), except
# for a slice bound, whose data flow the tracer records.
_TO_NUMBER = ("__bool__", "__float__", "__int__", "__index__", "item")
# The traced ops a number made from sizes passes through: scalar wrapping and arithmetic. Any other
# op between a size and the number (a graph input, a weight, rand, empty) makes it data.
_SIZE_LEAVES = frozenset({"aten::dim", "prim::Constant"})  # and aten::size, numel, _shape_as_tensor: see _from_sizes
_SIZE_ARITHMETIC = frozenset({"prim::NumToTensor", "prim::ListConstruct", "prim::TupleConstruct"}) | frozenset(
    f"aten::{name}" for name in (
        "Int", "Float", "Bool", "ScalarImplicit", "detach", "to", "add", "sub", "mul", "div", "floor_divide",
        "floordiv", "remainder", "neg", "abs", "sqrt", "pow", "floor", "ceil", "round", "log2", "log", "exp",
        "reciprocal", "slice", "select", "unsqueeze", "squeeze", "cat", "stack", "view", "reshape",
        "eq", "ne", "lt", "le",
        "gt", "ge", "__and__", "__or__", "__not__", "logical_and", "logical_or", "logical_not", "min", "max",
        "mul_", "add_", "sub_", "div_", "floor_divide_",
    ))


class NotTraceableError(Exception):
    """The trace cannot stand in for torch.export here (the message says why); capture with export."""


class TracedProgram:
    """What the lowering reads of an ExportedProgram, made from a traced graph.

    ``fallback`` captures the same module with torch.export: ``lower_program`` calls it when a
    converter refuses a call of this graph, so that torch's decompositions get their retry.
    """

    def __init__(self, graph: object, signature: object, state_dict: dict[str, object],
                 constants: dict[str, object], fallback: Callable[[], object] | None,
                 submodules: Mapping[str, object] | None = None) -> None:
        import torch.fx

        try:  # generates the Python code when it is run or read: 5-25 ms a conversion does not spend
            from torch.fx._lazy_graph_module import _LazyGraphModule as module_class
        except ImportError:  # pragma: no cover - torch before 2.3
            module_class = torch.fx.GraphModule
        self.graph = graph
        root = torch.nn.Module()
        for name, sub in (submodules or {}).items():  # the graphs its loops run (get_attr)
            root.add_module(name, sub)  # type: ignore[arg-type]
        # runnable (the parity check's --locate runs it layer by layer)
        self.graph_module = module_class(root, graph)
        self.graph_signature = signature
        self.state_dict = state_dict
        self.constants = constants
        self.fallback = fallback
        self.notes: list[str] = []  # what the summary says of this graph, once it is lowered (lower_program)


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


def _has_node(value: object) -> bool:
    import torch.fx

    if isinstance(value, torch.fx.Node):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_node(v) for v in value)
    return False


def _flat(value: object) -> Iterator[object]:
    if isinstance(value, (list, tuple)):
        for v in value:
            yield from _flat(v)
    else:
        yield value


def _meta(value: object) -> object:
    """The meta-device stand-in of a real value (tensors), kept as it is otherwise."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.to("meta")
    if isinstance(value, (list, tuple)):
        return type(value)(_meta(v) for v in value)
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


def _storage(tensor: torch.Tensor) -> int:
    """Where ``tensor``'s memory starts (shared by its views); 0 for one without memory."""
    return int(tensor.untyped_storage().data_ptr())


def _identity(tensor: torch.Tensor) -> tuple[object, ...]:
    """Which memory a tensor shows, as what: a TorchScript module hands out a new Python object for
    the same parameter on each attribute read, so object ids would split one weight in two."""
    return (tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tuple(tensor.stride()))


def _module_path(scope: str) -> str:
    """'__module.layer1/__module.layer1.0/__module.layer1.0.conv1' -> 'layer1.0.conv1'."""
    last = scope.rsplit("/", 1)[-1]
    return last.removeprefix("__module").lstrip(".")


class _Builder:
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
        self.tensors: dict[tuple[object, ...], object] = {}  # _identity(real tensor) -> its placeholder
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
        # the first such op; see _Builder._symbolic_val)
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
        node = self.tensors.get(_identity(tensor))
        if node is None:
            kind = self.kinds.PARAMETER if path in self.parameter_names else self.kinds.BUFFER
            node = self._placeholder(_identifier(path), _meta(tensor))
            self.tensors[_identity(tensor)] = node
            self.specs.append((kind, node, path))
            self.state[path] = tensor
        return node

    def _lift(self, value: object) -> object:
        """A real tensor (a constant of the trace, or a folded result) as a constant placeholder."""
        import torch

        if isinstance(value, torch.Tensor):
            key = _identity(value)
            if _storage(value) in self.ours:  # may be written later, as eager did: the graph reads it as it is now
                key, value = (*key, value._version), value.clone()
            node = self.tensors.get(key)
            if node is None:
                target = f"_tensor_constant{len(self.constants)}"
                node = self._placeholder(target, _meta(value))
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
            self.env[v] = self._placeholder(f"input_{i}", _meta(x))
            self.specs.append((self.kinds.USER_INPUT, self.env[v], None))
        for v, (name, tensor) in zip(inputs[own + len(self.example):], self.state_inputs, strict=True):
            self.env[v] = self._state_tensor(tensor, name)
        for node in graph.nodes():
            self._node(node)
        returned = [self._get(v) for v in graph.return_node().inputs()]  # type: ignore[attr-defined]
        outputs = list(_flat(returned))
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
            if _is_number_node(value):  # a symbolic size stays a number: arithmetic on it is _number_op's
                self.env[outs[0]] = value
                return
            if _has_node(value) or not isinstance(value, (int, float, bool)):
                raise NotTraceableError("prim::NumToTensor of a value computed from data")
            dtype = torch.bool if isinstance(value, bool) else torch.int64 if isinstance(value, int) else torch.float64
            number = torch.scalar_tensor(value, dtype=dtype)
            self.scalar_born.add(id(number))
            self.ours.add(_storage(number))  # made here: an in-place op of constants may write it
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
        if any(_is_number_node(v) for v in values):
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
            _agrees(name, o, r.meta["val"], symbolic=True)
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
            _agrees(name, o, r.meta["val"], symbolic=True)  # type: ignore[attr-defined]
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
                return [env[r] for r in _flat(n.args[0])]
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

        if not _is_number_node(number):
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
        if not any(_has_node(v) for v in values) and not random:
            if not all(self._ours_to_write(values[i]) for i in written):
                raise NotTraceableError(f"aten::{name} writes to a constant")
            result = self._call(op, arguments, values)
            before = {_storage(t) for t in _flat(values) if isinstance(t, torch.Tensor)}
            self.ours.update(p for p in (_storage(t) for t in _flat(result) if isinstance(t, torch.Tensor))
                             if p and p not in before)
            if written:  # done in place, as eager did it, on a tensor of ours: what its views see too
                self._bind_result(outs, result)
                return
            if name in ("Int", "Float", "Bool", "ScalarImplicit") or nbytes(result) <= FOLD_MAX_BYTES:
                if isinstance(result, torch.Tensor) and result.dim() == 0 and any(
                        id(v) in self.scalar_born for v in _flat(values)):
                    self.scalar_born.add(id(result))  # size arithmetic: still a number to eager torch
                self._bind_result(outs, result)
                return
        if any(_is_number_node(v) for v in _flat(values)):
            number = self._number_op(name, values, next(v for v in _flat(values) if _is_number_node(v)))
            if number is not None:
                self._bind_result(outs, number)
                return
            values = [self._tensors_of_numbers(v, str(a.real_type)) for v, a in zip(values, arguments, strict=True)]
        # the one rule (facts.py), the masks by their recorded types and by their meta values (a file
        # records no types)
        symbolic = (size_depends_on_data(namespace, name, inputs=len(ins),
                                         masks=lambda: [*script_index_dtypes(node), *_mask_dtypes(values)])
                    or (self.fake is not None and any(_is_symbolic(v) for v in _flat(values))))
        if name in ("Int", "Float", "Bool", "ScalarImplicit", "item", "_local_scalar_dense"):
            if not symbolic:
                raise NotTraceableError(f"aten::{name} turns a tensor computed from data into a number")
            # a traced number the program passed on (an int argument): read at run time, as it was
            op = torch.ops.aten._local_scalar_dense.default
            arguments = op._schema.arguments
            values = values[:1]
        self._numbers_promote_alike(name, values)
        self.viewed.update(_storage(t) for v, a in zip(values, arguments, strict=True)
                           if a.alias_info is not None and not a.alias_info.is_write
                           for t in _flat(v) if isinstance(t, torch.Tensor))
        lifted = [self._lift(v) for v in values]
        if any(isinstance(lifted[i], torch.fx.Node) and lifted[i].target in self.constants for i in written):
            # a constant the trace computed (views of which were computed here too) written by the graph
            raise NotTraceableError(f"aten::{name} writes to a tensor the trace computed from constants")
        args = tuple(v for v, a in zip(lifted, arguments, strict=True) if not a.kwarg_only)
        kwargs = {a.name: v for v, a in zip(lifted, arguments, strict=True) if a.kwarg_only}
        # sizes that depend on data: symbols of the fake mode, not the example's
        val = self._symbolic_val(name, op, args, kwargs, outs) if symbolic else _recorded(outs) if self.live else None
        if val is None:  # a file records no types; a live trace none for lists
            val = _input_alike(name, _metas(args))
        if val is None:
            try:
                val = op(*_metas(args), **_metas(kwargs))
            except Exception as exc:
                raise NotTraceableError(f"aten::{name}: no meta kernel ({type(exc).__name__})") from exc
            for o, v in zip(outs, val if len(outs) > 1 else (val,), strict=True):
                _agrees(name, o, v)
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
        if name in ("Int", "ScalarImplicit", "detach", "clone", "alias") and _is_number_node(first):
            return first
        if name == "to" and _is_number_node(first):
            dtypes = [v for v in values[1:] if isinstance(v, torch.dtype)]
            return first if all(d == torch.int64 for d in dtypes) and _is_int_node(first) else None
        function = _NUMBER_OPS.get(name)
        if function is None or len(values) < 2 or (len(values) > 2 and values[2] != 1):  # add/sub's alpha
            return None
        operands = [_int_operand(v) for v in values[:2]]
        if any(o is None for o in operands) or not any(_is_number_node(o) for o in operands):
            return None
        result = function(*(o.meta["val"] if _is_number_node(o) else o for o in operands))  # type: ignore[union-attr]
        return self._placed_node(function, tuple(operands), result, near)

    def _tensors_of_numbers(self, value: object, real_type: str) -> object:
        """A symbolic number passed where the op takes a tensor, as a 0-d tensor of the graph."""
        if not real_type.startswith(("Tensor", "Optional[Tensor")):
            return value
        if isinstance(value, (list, tuple)):
            return type(value)(self._tensors_of_numbers(v, real_type) for v in value)
        return self._as_tensor(value, value) if _is_number_node(value) else value

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
        with self._fake_mode(), _python_dispatcher(), _torch_frames_skipped(), _fake_kernels_quiet(), \
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
        if _is_symbolic(value) or not isinstance(val, torch.Tensor):
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
                val = _elementwise_val(name, [*fake_args, *fake_kwargs.values()], outs)
                if val is None:
                    val = op(*fake_args, **fake_kwargs)  # type: ignore[operator]
        except Exception as exc:
            raise NotTraceableError(f"{name}: no symbolic sizes ({type(exc).__name__}: {str(exc)[:200]})") from exc
        for o, v in zip(outs or (), val if outs and len(outs) > 1 else (val,), strict=False):
            _agrees(name, o, v, symbolic=True)
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

        born = [v for v in _flat(values) if isinstance(v, torch.Tensor) and id(v) in self.scalar_born]
        if not born:
            return
        dims = [n.meta["val"] for n in _flat(values) if isinstance(n, torch.fx.Node)
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
        where = _storage(value)
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


def _is_number_node(value: object) -> bool:
    """Whether ``value`` is a graph node computing a symbolic number (a size that depends on data)."""
    import torch
    import torch.fx

    return isinstance(value, torch.fx.Node) and isinstance(value.meta.get("val"), (torch.SymInt, torch.SymBool,
                                                                                  torch.SymFloat))


def _is_int_node(value: object) -> bool:
    import torch

    return _is_number_node(value) and isinstance(value.meta["val"], torch.SymInt)  # type: ignore[attr-defined]


# Elementwise ops. On tensors of one shape (beside 0-d tensors and numbers) the result has that shape;
# torch's fake kernels of these are Python references that prove each broadcast and stride on the
# symbolic sizes, 1-4 ms a call (RetinaNet's post-processing has about 160: 0.2 s). Out of place only.
_ELEMENTWISE = frozenset({
    "abs", "add", "atan2", "bitwise_and", "bitwise_not", "bitwise_or", "bitwise_xor", "ceil", "clamp", "clamp_max",
    "clamp_min", "cos", "div", "eq", "erf", "exp", "floor", "fmod", "ge", "gt", "le", "log", "log1p", "log2",
    "logical_and", "logical_not", "logical_or", "logical_xor", "lt", "masked_fill", "maximum", "minimum", "mul", "ne",
    "neg", "pow", "reciprocal", "relu", "remainder", "round", "rsqrt", "rsub", "sigmoid", "sign", "sin", "sqrt",
    "sub", "tanh", "trunc", "where",
})


def _elementwise_val(name: str, operands: Sequence[object], outs: list[object] | None) -> object | None:
    """The fake result of elementwise op ``name`` written out, or None (torch's kernel then computes it).

    Where every operand of one or more dimensions has the same sizes (the same symbols) and its
    dimensions in row-major order (contiguous, or constant strides decreasing over the dimensions not
    of size 1: a column of boxes), the result is that shape, contiguous, as torch's TensorIterator
    lays it out, of the dtype the live trace recorded (type promotion, as eager did it). Anything
    else, a file's op (no recorded dtype) included, is torch's.
    """
    import sympy
    import torch

    kind = outs[0].type() if outs and len(outs) == 1 else None  # type: ignore[attr-defined]
    dtype = kind.dtype() if isinstance(kind, torch._C.TensorType) else None
    if name not in _ELEMENTWISE or dtype is None or (name == "where" and len(operands) != 3):
        return None
    tensors = [t for t in _flat(operands) if isinstance(t, torch.Tensor)]
    full = [t for t in tensors if t.dim() > 0]
    if not full or any(t.device != full[0].device for t in tensors):
        return None

    def expr(n: object) -> object:
        return n.node.expr if isinstance(n, torch.SymInt) else sympy.Integer(n)  # type: ignore[arg-type]

    try:  # the Max of torch's size expressions (a contiguous stride is made of max(1, size) of each size)
        from torch.utils._sympy.functions import Max
    except ImportError:  # pragma: no cover - another torch: its strides may not match, and torch decides
        Max = sympy.Max  # noqa: N806

    def row_major(t: torch.Tensor) -> bool:
        plain = clamped = sympy.Integer(1)  # contiguous: each stride the product of the sizes after it
        for size, stride in zip(reversed(t.shape), reversed(t.stride()), strict=True):
            if expr(stride) not in (plain, clamped):
                break
            plain, clamped = plain * expr(size), clamped * Max(1, expr(size))
        else:
            return True
        strides = [st for n, st in zip(t.shape, t.stride(), strict=True) if not (isinstance(n, int) and n == 1)]
        return all(isinstance(st, int) and st > 0 for st in strides) and all(
            a > b for a, b in itertools.pairwise(strides))

    shape = [expr(n) for n in full[0].shape]
    if any([expr(n) for n in t.shape] != shape for t in full[1:]) or not all(row_major(t) for t in full):
        return None
    return torch.empty(full[0].shape, dtype=dtype, device=full[0].device)


def _is_symbolic(value: object) -> bool:
    """Whether ``value`` is a graph node whose meta value belongs to the fake mode (a symbolic number,
    or a tensor computed from one whose size depends on data)."""
    import torch.fx
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(value, torch.fx.Node) and (isinstance(value.meta.get("val"), FakeTensor)
                                                 or _is_number_node(value))


def _int_operand(value: object) -> object | None:
    """An operand of integer size arithmetic: a symbolic int node, an int, or a 0-d integer constant
    tensor as its int; None otherwise (a float, a tensor of data)."""
    import torch

    if _is_int_node(value) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.dtype.is_floating_point \
            and value.dtype != torch.bool and not value.is_complex():
        return int(value.item())
    return None


def _mask_dtypes(values: list[object]) -> list[str]:
    """The dtype names of the graph tensors among an index op's indices (its second argument), by
    their meta values."""
    import torch
    import torch.fx

    return [str(i.meta["val"].dtype).removeprefix("torch.")
            for i in _flat(values[1] if len(values) > 1 else []) if isinstance(i, torch.fx.Node)]


def _recorded(outs: Sequence[object]) -> object:
    """The results' shapes and dtypes as a live trace recorded them from the real run (meta tensors),
    or None where one is not a tensor of known size and dtype.

    Used instead of running each op's meta kernel: some of those are Python decompositions whose
    first call imports dynamo (batch_norm's: 1 s), which is the cost this capture exists to avoid.
    The recorded sizes are the example's; that they depend on input sizes only is what the refusals
    of ``_aten`` (torch's ``dynamic_output_shape`` tag, boolean masks, numbers read from data) and of
    ``trace_module`` (any tracer warning but a number made from fixed sizes) establish.
    """
    import torch

    vals = []
    for o in outs:
        kind = o.type()  # type: ignore[attr-defined]
        if not isinstance(kind, torch._C.TensorType) or kind.dtype() is None or kind.sizes() is None:
            return None
        vals.append(torch.empty(kind.sizes(), dtype=kind.dtype(), device="meta"))
    return vals[0] if len(vals) == 1 else tuple(vals)


# Our operators of the keypoint decoding, lowered as one node each rather than expanded into their
# form -> whether the keypoints are [N, 3, K] (torchvision's scripted loop) rather than [N, K, 3]
_DECODINGS = {"decode_heatmaps": False, "heatmaps_to_keypoints_loop": True}


def _agrees(name: str, recorded: object, val: object, *, symbolic: bool = False) -> None:
    """The dtype and shape a live trace recorded for a result (a TorchScript file records none) must
    be those computed here; otherwise this graph would compute something else. ``symbolic``: ``val``'s
    sizes may be symbols, of which the recorded sizes are the example's values: rank and fixed sizes
    must agree."""
    import torch

    kind = recorded.type()  # type: ignore[attr-defined]
    if not isinstance(kind, torch._C.TensorType):
        return
    dtype, sizes = kind.dtype(), kind.sizes()
    if not isinstance(val, torch.Tensor):
        if dtype is not None or sizes is not None:
            raise NotTraceableError(f"aten::{name}: the trace recorded a tensor, here it is a {type(val).__name__}")
        return
    if symbolic and sizes is not None:
        sizes = [r if isinstance(d, int) else d for r, d in zip(sizes, val.shape, strict=False)] \
            if len(sizes) == val.dim() else sizes
    if (dtype is not None and dtype != val.dtype) or (sizes is not None and list(sizes) != list(val.shape)):
        raise NotTraceableError(f"aten::{name}: the trace recorded {dtype} {sizes}, here {val.dtype} {list(val.shape)}")


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


def _metas(value: object) -> object:
    import torch.fx

    if isinstance(value, torch.fx.Node):
        return value.meta["val"]
    if isinstance(value, dict):
        return {k: _metas(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_metas(v) for v in value)
    return value


def _signature(builder: _Builder, outputs: list[object]) -> object:
    from torch.export.graph_signature import (
        ExportGraphSignature,
        InputSpec,
        OutputKind,
        OutputSpec,
        TensorArgument,
    )

    inputs = [InputSpec(kind=kind, arg=TensorArgument(name=node.name), target=target,  # type: ignore[arg-type, attr-defined]
                        persistent=True if kind == builder.kinds.BUFFER else None)
              for kind, node, target in builder.specs]
    outs = [OutputSpec(kind=OutputKind.USER_OUTPUT, arg=TensorArgument(name=n.name), target=None)  # type: ignore[attr-defined]
            for n in outputs]
    return ExportGraphSignature(input_specs=inputs, output_specs=outs)


def program_from_script(script: object, example: Sequence[torch.Tensor], options: Options, source: str,
                        fallback: Callable[[], object] | None = None) -> TracedProgram | None:
    """The graph of TorchScript module ``script`` (a file) as a TracedProgram, or None where torch's
    TorchScript converter must read it instead (the module docstring lists when)."""
    try:
        builder = _Builder(script.inlined_graph, example, script=script,  # type: ignore[attr-defined]
                           parameter_names=[n for n, _ in script.named_parameters()])  # type: ignore[attr-defined]
    except Exception as exc:  # a damaged file's module: its usual reader reports it
        logger.debug("%s: traced graph not used: %s: %s", source, type(exc).__name__, exc)
        return None
    return _program(builder, options, source, fallback)


def _program(builder: _Builder, options: Options, source: str, fallback: Callable[[], object] | None,
             returned: int | None = None) -> TracedProgram | None:
    """The built graph as a TracedProgram, or None; ``returned``: the tensors the module returned,
    which the graph's flat outputs must number."""
    from .lowering import Lowering

    try:
        graph, outputs = builder.build()
        if returned is not None and len(outputs) != returned:
            raise NotTraceableError(f"{len(outputs)} graph outputs for {returned} returned tensors")
        program = TracedProgram(graph, _signature(builder, outputs), builder.state, builder.constants, fallback,
                                builder.submodules)
        probe = Lowering(program, GraphBuilder("check"), options, source)
        if probe.missing() or probe.alias_hazards():
            raise NotTraceableError("an op without a converter, or an in-place write through a view")
    except Exception as exc:  # any surprise (a damaged file's graph too): the usual capture decides
        logger.debug("%s: traced graph not used: %s: %s", source, type(exc).__name__, exc)
        return None
    return program


def _state_bytes(module: torch.nn.Module) -> int:
    total = 0
    for t in (*module.parameters(), *module.buffers()):
        total += t.numel() * t.element_size()
    return total


def trace_module(module: torch.nn.Module, example: Sequence[torch.Tensor], options: Options, source: str,
                 fallback: Callable[[], object] | None = None) -> TracedProgram | None:
    """Trace ``module`` on ``example`` and return its graph as a TracedProgram, or None (see above).

    The trace runs ``forward`` once on real tensors. Buffers it wrote (a counter, running
    statistics) are put back from a copy taken before, and the module is then captured by
    torch.export, which starts from their values as they were. A parameter it wrote stays
    written, as after any eager call of that module (parameters are not copied: that would double
    the memory of every conversion for a case no inference code has).
    """
    import torch

    if any(t.device.type != "cpu" for t in example) or any(t.device.type != "cpu" for t in module.parameters()):
        return None
    if _state_bytes(module) > TRACE_MAX_BYTES:
        return None
    buffers = list(module.buffers())
    if sum(b.numel() * b.element_size() for b in buffers) > _BUFFER_COPY_MAX_BYTES:
        return None
    saved = [(b, b._version, b.detach().clone()) for b in buffers]
    params = [(p, p._version) for p in module.parameters()]
    traced = None
    numbers = _Numbers()
    try:
        # one trace at a time: the warnings' recording is the process's, not the thread's, and a
        # warning of another thread's trace would land in this one's list
        with _trace_lock, torch.no_grad(), warnings.catch_warnings(record=True) as said, \
                _watched_numbers(said) as numbers:
            warnings.simplefilter("always")
            traced = _trace(module, example)
    except Exception as exc:
        logger.debug("%s: tracing failed: %s", source, exc)
    finally:
        wrote = [b for b, version, copy in saved if b._version != version]
        with torch.no_grad():
            for b, version, copy in saved:
                if b._version != version:
                    b.copy_(copy)
    if traced is None:
        return None
    if wrote or any(p._version != version for p, version in params):
        logger.debug("%s: forward writes to the module's parameters or buffers; captured by torch.export", source)
        return None
    tracer_warning = getattr(torch.jit, "TracerWarning", ())
    noted = [w for w in said if issubclass(w.category, tracer_warning)]
    if numbers.from_data:
        logger.debug("%s: %d tensors read as Python numbers depend on data; captured by torch.export",
                     source, numbers.from_data)
        return None
    unexplained = [w for w in noted if id(w) not in numbers.explained]
    if unexplained:
        logger.debug("%s: tracing warned (%s); captured by torch.export", source, str(unexplained[0].message)[:200])
        return None
    graph, state, returned = traced
    from .frozen import decision_at, freezing, frozen, keep_example

    if numbers.branches and not freezing(options):
        # a branch on a count, taken as the example took it: torch.export decides whether it can be
        # captured for every input (and names it if not)
        logger.debug("%s: %d test(s) of a data-dependent count; captured by torch.export", source,
                     len(numbers.branches))
        return None
    builder = _Builder(graph, example, state=state, parameter_names=[n for n, _ in module.named_parameters()])
    program = _program(builder, options, source, fallback, returned=returned)
    if program is not None and numbers.branches:
        frozen(options, source, [decision_at(file, line, taken) for (file, line), taken in numbers.branches],
               "the trace")
        keep_example(options, example)
    return program


class _Numbers:
    """What ``_watched_numbers`` saw: conversions not made from fixed sizes, the warnings of those
    that were, and where a branch tested a size that may depend on data (the model's file:line)."""

    def __init__(self) -> None:
        self.from_data = 0
        self.explained: set[int] = set()  # id() of the recorded warnings a size-only conversion raised
        self.branches: list[tuple[tuple[str, int], object]] = []  # ((file, line), what the example decided)


class _Watch(threading.local):
    """This thread's trace in progress: (what it saw, the recorded warnings, values of fixed size)."""

    current: tuple[_Numbers, list[object], set[int]] | None = None


_watch = _Watch()
_trace_lock = threading.Lock()  # see trace_module
_watch_lock = threading.Lock()
_watchers = 0  # traces in progress, all threads: the wrappers stay installed while there is one
_unwatched: dict[tuple[object, str], object] = {}  # (owner, name) -> its own entry, put back by the last one out


def _watched_places() -> list[tuple[object, str, Callable[[tuple[object, ...], dict[str, object]], list[object]],
                                  Callable[[torch.Tensor, set[int], list[object]], bool]]]:
    """Where a tensor's value or size leaves the graph, the tensors each call hands over, and what
    makes the call sound: the number methods of torch.Tensor (the tensor itself, computed from fixed
    sizes), ``torch.tensor`` and ``torch.as_tensor`` (the tensors in their data: a tensor made of
    Python numbers and constants is a constant, which the tracer warns of too), iterating over a
    tensor or taking its length (the tensor, whose sizes must be fixed: ``for image in batch``), and
    ``Tensor.data``, which the tracer records as a constant of the example's values, silently (the
    tensor, computed from fixed sizes: even a weight's goes to torch.export, as its numbers do)."""
    import torch

    def own(args: tuple[object, ...], kwargs: dict[str, object]) -> list[object]:
        return [args[0]]

    def data(args: tuple[object, ...], kwargs: dict[str, object]) -> list[object]:
        return [t for t in _flat(args[0] if args else kwargs.get("data")) if isinstance(t, torch.Tensor)]

    # the ATen ops behind Tensor.item, called by name (torch.ops.aten.X): no warning at all, so a
    # number read from data there would otherwise go unseen (``.default`` and other overloads are not
    # wrapped: reading one from the wrapper fails, and the module goes to torch.export)
    by_name = [(torch.ops.aten, name, own, _from_sizes) for name in ("_local_scalar_dense", "item")]
    return [*((torch.Tensor, name, own, _from_sizes) for name in _TO_NUMBER),
            *((torch, name, data, _from_sizes) for name in ("tensor", "as_tensor")),
            *by_name, *((torch.Tensor, name, own, _shape_fixed) for name in ("__iter__", "__len__")),
            (torch.Tensor, "data", own, _from_sizes)]


def _wrapped(owner: object, name: str, watch: Callable[[Callable[..., object]], Callable[..., object]]) -> object:
    """``owner.name`` with ``watch`` around it: a function wrapped, a data descriptor (``Tensor.data``)
    as a property whose getter is wrapped and whose setter is the descriptor's."""
    entry = getattr(owner, name)
    if callable(entry):
        return watch(entry)

    def get(tensor: object) -> object:
        return entry.__get__(tensor, type(tensor))

    get.__name__ = name
    return property(watch(get), entry.__set__)


@contextlib.contextmanager
def _watched_numbers(said: list[object]) -> Iterator[_Numbers]:
    """While tracing, note for each tensor made a Python number whether it was computed from sizes alone.

    Torch's tracer only warns that such a number becomes a constant of the graph; whether that is
    sound depends on where the tensor came from, which the finished graph no longer shows (its dead
    code is removed). So ``torch.Tensor``'s number methods and ``torch.tensor`` are wrapped for the
    trace (``_watched_places``): on this thread, while it traces, each call looks up the graph
    value of the tensors it hands over and walks back to see whether only sizes, constants and
    scalar arithmetic lead to them. The warnings the call adds to ``said`` (the recording of
    ``warnings.catch_warnings``) are tied to that verdict, so a warning raised anywhere else stays
    unexplained. Other threads pay one check; the wrappers are installed by the first trace in
    progress and removed by the last, always.

    Why wrappers on a third-party class, which this project otherwise never touches: no hook of
    torch's sees the tensor a number is made of. A ``TorchFunctionMode`` is switched off inside the
    functions it intercepts (InstanceNorm's size checks run inside ``F.instance_norm``), and the
    warning itself carries no tensor. The wrappers live only while a trace runs, keep their state
    per thread, and call torch's own function in every case. (Code that bound ``torch.tensor`` to
    another name at import calls it unwatched: its warning stays unexplained, and torch.export decides.)
    """
    global _watchers

    seen = _Numbers()
    with _watch_lock:
        if _watchers == 0:
            _unwatched.clear()
            for owner, name, handed, sound in _watched_places():
                _unwatched[(owner, name)] = vars(owner).get(name)
                setattr(owner, name, _wrapped(owner, name, functools.partial(_watcher, handed=handed, sound=sound)))
        _watchers += 1
    _watch.current = (seen, said, set())
    try:
        yield seen
    finally:
        _watch.current = None
        with _watch_lock:
            _watchers -= 1
            if _watchers == 0:
                for (owner, name), entry in _unwatched.items():
                    if entry is None:
                        with contextlib.suppress(AttributeError):
                            delattr(owner, name)
                    else:
                        setattr(owner, name, entry)


def _watcher(function: Callable[..., object],
             handed: Callable[[tuple[object, ...], dict[str, object]], list[object]],
             sound: Callable[[torch.Tensor, set[int], list[object]], bool]) -> Callable[..., object]:
    """``function``, noting in this thread's trace whether the tensors ``handed`` picks from its
    arguments are ``sound`` (computed from fixed sizes alone; of a fixed size), and tying the
    warnings it raises to that verdict."""
    import torch

    def watched(*args: object, **kwargs: object) -> object:
        current = _watch.current
        if current is None or torch._C._get_tracing_state() is None:
            return function(*args, **kwargs)
        seen, said, fixed = current
        counts: list[object] = []  # the traced values whose sizes, read here, may depend on data
        sizes = all(sound(t, fixed, counts) for t in handed(args, kwargs))  # type: ignore[arg-type]
        if counts and getattr(function, "__name__", "") != "__bool__":
            sizes = False  # a count made a number: the trace would freeze the example's
        before = len(said)
        result: object = None
        try:
            result = function(*args, **kwargs)
            return result
        finally:
            if sizes:
                seen.explained.update(id(w) for w in said[before:])
                if counts:  # a branch on a count: taken as the example took it, and named
                    seen.branches.append((_model_frame(), result))
            else:
                seen.from_data += 1

    return watched


def _from_sizes(tensor: torch.Tensor, fixed: set[int], counts: list[object]) -> bool:
    """Whether the traced value of ``tensor`` is computed from sizes and constants only.

    Only scalar arithmetic (``_SIZE_ARITHMETIC``) may lead from sizes to it. A size read from a
    tensor whose shape the input shapes fix is fixed; a tensor downstream of an op whose result's
    size depends on data (``nonzero(x).size(0)`` is a count) is added to ``counts`` (all its sizes:
    which of them depend on the data, the trace does not show). ``fixed``: values already seen to
    have fixed shapes. A tensor the trace does not follow (``x.data``) may hold anything: not sound.
    """
    import torch

    try:
        value = torch._C._get_value_trace(tensor)
    except RuntimeError:  # not followed by the trace: a .data, say, which may hold anything
        return False
    todo, seen = [value.node()], set()
    while todo:
        node = todo.pop()
        kind = node.kind()
        if kind in ("aten::size", "aten::numel", "aten::_shape_as_tensor"):
            ins = list(node.inputs())
            if not _size_fixed(ins[0], fixed):
                counts.append(ins[0])
            continue
        if kind in _SIZE_LEAVES:
            continue
        if kind not in _SIZE_ARITHMETIC:
            return False
        for value in node.inputs():
            if value.unique() not in seen:
                seen.add(value.unique())
                todo.append(value.node())
    return True


def _shape_fixed(tensor: torch.Tensor, fixed: set[int], counts: list[object]) -> bool:
    """Whether the traced value of ``tensor`` has sizes the input shapes fix (iterating over it and
    ``len`` read its first), or is added to ``counts`` where they may depend on data."""
    import torch

    try:
        value = torch._C._get_value_trace(tensor)
    except RuntimeError:  # not followed by the trace: a .data, say, which may hold anything
        return False
    if not _size_fixed(value, fixed):
        counts.append(value)
    return True


def _model_frame() -> tuple[str, int]:
    """(file, line) of the innermost frame of the model's code (not torch's, not this package's)."""
    import traceback

    skipped = (torch_folder(), PACKAGE + os.sep)
    for frame in reversed(traceback.extract_stack()[:-2]):
        if not frame.filename.startswith(skipped) and frame.filename != contextlib.__file__:
            return frame.filename, frame.lineno or 0
    return "?", 0


def _python_dispatcher() -> contextlib.AbstractContextManager[None]:
    """torch's Python dispatcher, as torch.export runs its fake kernels: composite ops (``pad``)
    decompose in Python, with no guard on a size that depends on data (the C++ ones specialise it)."""
    from torch._dispatch.python import enable_python_dispatcher

    return enable_python_dispatcher()  # type: ignore[no-any-return]


@contextlib.contextmanager
def _fake_kernels_quiet() -> Iterator[None]:
    """Keep torch's fake tensors from logging a kernel's failure with its traceback (at ERROR, to
    stderr): a fake kernel that fails refuses the trace, which the caller reports as it reports any."""
    log = logging.getLogger("torch._subclasses.fake_tensor")
    disabled = log.disabled
    log.disabled = True
    try:
        yield
    finally:
        log.disabled = disabled


class _TorchFiles:
    """The files of torch's package, as a container (``in``): what a ShapeEnv skips to find the
    frame that made a symbol or a guard."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def __contains__(self, filename: object) -> bool:
        return isinstance(filename, str) and (filename.startswith(self.folder) or filename == "<string>")


_skipped_lock = threading.Lock()
_skipping = 0  # fake calls in progress, all threads, with symbolic_shapes.uninteresting_files replaced
_torch_uninteresting: list[object] = []  # torch's own, put back by the last one out


@contextlib.contextmanager
def _torch_frames_skipped() -> Iterator[None]:
    """Have torch's ShapeEnv name the frame that made a symbol without importing torch.export.

    On a process's first unbacked symbol (an NMS's count) torch's structured-trace logging and the
    ShapeEnv's source locations call ``symbolic_shapes.uninteresting_files()``, whose first call
    imports ``torch.export._trace`` and AOTAutograd to list their files: 0.2 s of a 0.9 s capture
    of SSDlite, for a frame name no one reads here. While this package's fake calls run it is
    replaced by every file of torch's package (the frames it lists all are: a frame of a module not
    yet imported cannot be on the stack); torch's own is put back when the last call ends. Its
    callers only test membership (``in``; read in torch 2.14).
    """
    global _skipping
    from torch.fx.experimental import symbolic_shapes

    with _skipped_lock:
        if _skipping == 0:
            _torch_uninteresting[:] = [symbolic_shapes.uninteresting_files]
            files = _TorchFiles(torch_folder())
            symbolic_shapes.uninteresting_files = lambda: files  # type: ignore[assignment,return-value]
        _skipping += 1
    try:
        yield
    finally:
        with _skipped_lock:
            _skipping -= 1
            if _skipping == 0:
                symbolic_shapes.uninteresting_files = _torch_uninteresting.pop()  # type: ignore[assignment]


def _size_fixed(value: object, fixed: set[int]) -> bool:
    """Whether no op upstream of traced ``value`` makes a size from data (``facts.size_depends_on_data``)."""
    todo, walked = [value], {value.unique()}  # type: ignore[attr-defined]
    while todo:
        node = todo.pop().node()  # type: ignore[attr-defined]
        if script_size_depends_on_data(node):
            return False
        for v in node.inputs():
            if v.unique() not in fixed and v.unique() not in walked:
                walked.add(v.unique())
                todo.append(v)
    fixed.update(walked)
    return True


def _trace(module: torch.nn.Module, example: Sequence[torch.Tensor],
           ) -> tuple[object, list[tuple[str, object]], int] | None:
    """Trace ``module`` into a flat TorchScript graph: (graph, the weights it takes after the example,
    the number of tensors the module returned).

    ``torch.jit._get_trace_graph`` (what torch.onnx's TorchScript exporter traces with) records the
    ops without making a script module per submodule, which ``torch.jit.trace`` does: EfficientNet-B0
    0.07-0.10 s against 0.50 s. Scope names (the module paths of errors and ``--locate``) are recorded
    from the same table ``torch.jit.trace`` fills. Not strict (as torch.onnx traces): a dict output
    (a Hugging Face ``ModelOutput``) is recorded, flattened in insertion order, the order of
    torch.export's pytree and of the parity check's reference. None when the output holds anything
    but tensors in tuples, lists and dicts (a number, None, a cache object).
    """
    import torch
    from torch.jit import _trace as jit_trace

    scopes = {m: f"__module.{name}" if name else "__module" for name, m in module.named_modules()}
    before = jit_trace._trace_module_map
    jit_trace._trace_module_map = scopes
    try:
        graph, result = torch.jit._get_trace_graph(module, tuple(example), strict=False)  # type: ignore[attr-defined]
    finally:
        jit_trace._trace_module_map = before
    returned = _returned_tensors(result)
    if returned is None:
        return None
    # the weights follow the example in the graph's inputs, in this order (deduplicated by object)
    state = list(torch.jit._unique_state_dict(module, keep_vars=True).items())  # type: ignore[attr-defined]
    return graph, state, returned


def _returned_tensors(value: object) -> int | None:
    """How many tensors ``value`` holds, or None unless it is tensors in tuples, lists and dicts with
    string keys."""
    import torch

    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            return None
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        counts = [_returned_tensors(v) for v in value]
        return None if None in counts else sum(counts)  # type: ignore[arg-type]
    return 1 if isinstance(value, torch.Tensor) else None
