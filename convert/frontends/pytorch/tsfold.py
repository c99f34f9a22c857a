"""TorchScript to ExportedProgram through torch's converter, with the traced sizes folded.

A traced graph records size arithmetic as tensor arithmetic: torchvision's detectors read the
image size with ``_shape_as_tensor``, scale it as a float tensor and turn it back into an int
(``aten::Int``) for ``interpolate``; their RPN takes ``min(k, anchors)`` the same way. torch's
TorchScript converter turns each tensor-to-number conversion into ``_local_scalar_dense``, which
``torch.export`` can only give a data-dependent symbol, and the capture then fails on the first
guard on it (a batch norm of an image whose size is such a symbol).

The input shapes of a converted TorchScript graph are fixed (the example's), so a number computed
only from constants, weights and the sizes of tensors whose shape does not depend on the data is a
constant. ``fold_static_scalars`` runs the converted FX graph once on the example and replaces every
tensor-to-number conversion that is such a constant by its value. Which sizes do not depend on the
data is decided without trusting a list of ops: a node's result has a static shape when torch's
meta kernel computes it from its inputs' shapes alone (a meta tensor holds no data, so an op whose
result length depends on the data, nonzero, ``x[mask]``, nms, cannot run on one). A number
computed from a detection count (after nms) is left as it is, and the graph keeps that count
dynamic.

Part of the capture layer (``__init__``'s "the path a model takes"): ``capture.script_to_program``
runs it; it reads the program through ``facts.py`` (writes, the data-dependent size rule).
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from .facts import fx_size_depends_on_data, get_attr_of, written_args, written_bases

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["concretize", "fold_static_scalars", "script_to_exported"]

# result values kept by the probe: numbers, and tensors up to this many elements (sizes, scales)
_SMALL = 64
_NONDETERMINISTIC = ("rand", "normal", "bernoulli", "dropout", "empty", "uniform", "multinomial", "poisson")


def _conversions(gm: object) -> list[object]:
    """The nodes of ``gm`` that turn a tensor into a Python number."""
    import torch

    scalar = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.item.default,
              torch.ops.aten.ScalarImplicit.default}
    return [n for n in gm.graph.nodes  # type: ignore[attr-defined]
            if n.op == "call_function"
            and (n.target in scalar or getattr(n.target, "__name__", "") == "to_float_tensor")]


@contextlib.contextmanager
def _written_attributes_copied(gm: torch.fx.GraphModule) -> Iterator[None]:
    """Give ``gm`` copies of the attributes (weights, constants) its in-place ops write to, directly
    or through a view, while it runs; put the originals back afterwards."""
    written = {str(base.target) for base in written_bases(gm.graph.nodes)  # type: ignore[attr-defined]
               if base.op == "get_attr"}  # type: ignore[attr-defined]
    originals = {name: get_attr_of(gm, name) for name in written}
    try:
        for name, value in originals.items():
            _set_attribute(gm, name, value.clone())  # type: ignore[attr-defined]
        yield
    finally:
        for name, value in originals.items():
            _set_attribute(gm, name, value)


def _set_attribute(gm: object, name: str, value: object) -> None:
    parent, _, last = name.rpartition(".")
    setattr(get_attr_of(gm, parent) if parent else gm, last, value)


def fold_static_scalars(gm: torch.fx.GraphModule, args: Sequence[object]) -> int:
    """Replace each tensor-to-number conversion of ``gm`` whose value depends only on constants,
    weights and data-independent sizes by that value (one run on ``args``); return how many."""
    import torch
    import torch.fx
    from torch.fx.node import map_aggregate, map_arg

    conversions = _conversions(gm)
    if not conversions:
        return 0
    from .tvpost import shape_as_tensor

    aten = torch.ops.aten  # torch's converter calls aten::size and aten::numel as the packets
    size_ops = {aten.sym_size, aten.sym_size.int, aten.sym_numel, aten.sym_numel.default, aten.dim.default,
                aten._shape_as_tensor.default, shape_as_tensor}
    static_value: set[torch.fx.Node] = set()  # the node's value does not depend on the input data
    static_shape: set[torch.fx.Node] = set()  # its shape does not (the input shapes are fixed)
    meta: dict[torch.fx.Node, object] = {}  # tensor results as meta tensors: shape, strides, dtype, no data
    kept: dict[torch.fx.Node, object] = {}  # small results (numbers, sizes), for the folding
    storage: dict[torch.fx.Node, int] = {}  # where each tensor result lives, to follow in-place writes

    def as_meta(value: object) -> object:
        if isinstance(value, torch.Tensor):
            return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
        return value

    def has_static_shape(node: torch.fx.Node) -> bool:
        target = node.target
        if target is operator.getitem:
            return node.all_input_nodes[0] in static_shape
        if not isinstance(target, torch._ops.OpOverload):
            return False  # a subgraph or a Python function: not looked into
        for arg in node.all_input_nodes:
            if isinstance(meta.get(arg), (torch.Tensor, list, tuple)):
                if arg not in static_shape:
                    return False
            elif arg not in static_value or arg not in kept:
                return False
        try:  # meta holds numbers as they are and tensors as meta tensors
            target(*map_arg(node.args, lambda m: meta[m]), **map_arg(node.kwargs, lambda m: meta[m]))
        except Exception:  # no meta kernel, or a result length that depends on the data
            return False
        return True

    class _Probe(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> object:
            result = super().run_node(n)
            meta[n] = map_aggregate(result, as_meta)
            if not isinstance(result, torch.Tensor) or result.numel() <= _SMALL:
                kept[n] = result
            if isinstance(result, torch.Tensor):
                storage[n] = result.untyped_storage().data_ptr()
            self._classify(n)
            return result

        def _classify(self, n: torch.fx.Node) -> None:
            inputs = n.all_input_nodes
            if n.op == "placeholder":
                static_shape.add(n)
                return
            if n.op == "get_attr":  # a weight or a constant
                static_shape.add(n)
                static_value.add(n)
                return
            if n.op != "call_function":
                return
            target = n.target
            if target in size_ops:
                if inputs and inputs[0] in static_shape and all(i in static_value for i in inputs[1:]):
                    static_value.add(n)
                    static_shape.add(n)
                return
            mutable = isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable
            if mutable:  # what it writes, and every tensor sharing that storage, now holds other values
                wrote = {storage[a] for a in written_args(n) if a in storage}
                for other, where in storage.items():
                    if where in wrote:
                        static_value.discard(other)
            deterministic = not any(word in str(target) for word in _NONDETERMINISTIC)
            if not mutable and deterministic and all(i in static_value for i in inputs):
                static_value.add(n)
                static_shape.add(n)
            elif has_static_shape(n):
                static_shape.add(n)

    with torch.no_grad(), _written_attributes_copied(gm):
        _Probe(gm).run(*args)
    folded = 0
    for node in conversions:
        if node in static_value and node in kept:
            value = kept[node]
            node.replace_all_uses_with(value.item() if isinstance(value, torch.Tensor) else value)
            gm.graph.erase_node(node)
            folded += 1
    if folded:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return folded


def script_to_exported(script: torch.jit.ScriptModule, example: Sequence[torch.Tensor]) -> object:
    """Convert ``script`` with torch's TorchScript converter (``TS2EPConverter.convert``, whose
    steps this follows), torchvision's scripted post-processing replaced first
    (``tvpost.replace_torchvision_scripted``) and the traced sizes folded before the capture."""
    from torch._export import converter

    from .tvpost import converter_handlers, replace_torchvision_scripted

    replace_torchvision_scripted(script)
    with converter_handlers():
        ts = converter.TS2EPConverter(script, tuple(example))
        blocks, fqns = converter.get_block_to_lifted_attrs(ts.ts_graph)
        graph_converter = converter.TS2FXGraphConverter(
            ts.ts_graph, ts.name_to_param, ts.name_to_buffer, blocks, ts.name_to_non_tensor_attributes,
            ts.name_to_constant, fqns)
        gm = graph_converter.convert()
    converter.replace_quantized_ops_with_standard_ops(gm)
    fold_static_scalars(gm, example)
    program = ts.retrace_as_exported_program(gm, graph_converter.name_to_constant)
    for key, tensor in script.state_dict().items():  # as torch's converter: weights the graph does not use
        if key not in program.state_dict:
            program.state_dict[key] = tensor
    return program


def _is_static(val: object) -> bool:
    import torch

    if isinstance(val, torch.Tensor):
        return all(isinstance(d, int) for d in val.shape)
    if isinstance(val, (list, tuple)):
        return all(_is_static(v) for v in val)
    return not isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool))


def concretize(program: object, example: Sequence[object]) -> None:
    """Replace symbolic (unbacked) shapes in ``program``'s metadata by those of a run on ``example``.

    torch's TorchScript converter turns traced size arithmetic into data-dependent symbols; one
    run of the graph on the example inputs gives every node its actual, static value. Nodes
    downstream of an op whose result length depends on the data (nonzero, ``x[mask]``,
    torchvision's nms) keep their symbolic sizes: a detector's count differs from input to input.
    """
    import torch
    import torch.fx

    nodes = list(program.graph.nodes)  # type: ignore[attr-defined]
    if all(_is_static(n.meta.get("val")) for n in nodes if n.op in ("placeholder", "call_function")):
        return
    lowering_consts: list[object] = []
    sig = program.graph_signature  # type: ignore[attr-defined]
    state = program.state_dict  # type: ignore[attr-defined]
    constants = getattr(program, "constants", {}) or {}
    users = iter(example)
    for spec in sig.input_specs:
        if spec.kind.name == "USER_INPUT":
            lowering_consts.append(next(users))
        else:
            lowering_consts.append(state[spec.target] if spec.target in state else constants[spec.target])

    dynamic: set[torch.fx.Node] = set()

    class _Record(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> object:
            result = super().run_node(n)
            if n.op != "call_function":
                if n.op == "placeholder":
                    n.meta["val"] = result
                return result
            if fx_size_depends_on_data(n, self.env.get) or any(a in dynamic for a in n.all_input_nodes):
                dynamic.add(n)
                if not _is_static(n.meta.get("val")):
                    return result  # a size that depends on the data stays symbolic
            n.meta["val"] = result
            return result

    with torch.no_grad():
        _Record(program.graph_module).run(*lowering_consts)  # type: ignore[attr-defined]
