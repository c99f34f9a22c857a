"""Capture a few decoder layers and replicate them in the lowered graph to the config's depth.

torch.export and the lowering cost about a second per decoder layer at 7B widths (32 layers: a
minute), while every layer of a decoder is the same graph on other weights. So the model is
captured with ``C`` layers and the layers ``C..N-1`` are cloned from captured ones in the IR.

The period ``P`` of the layers is found on the full model (built on the meta device, no weights):
each layer's signature is its ``config.layer_types`` entry and, for every submodule, its class, its
plain attributes (``sliding_window``, ``scaling``, ``is_sliding``; not ``layer_idx``, which only
picks the cache entry) and its parameter and buffer shapes. ``P`` is the smallest period of the
signatures (1 for Llama, 2 for Gemma 2, 6 for Gemma 3). ``C = 2P + (N - 2P) mod P``: two periods,
and the last captured layer of the same kind as the last layer (the final norm reads it).

In the lowered graph a node belongs to layer ``j`` by its provenance (``lm.model.layers.j...``).
Layer ``j`` (``j >= P``) must be node for node layer ``j - P`` with other names: same ops and
attributes, its own weights and cache entry, values of the same layers at the same distance, and
the same shared values (masks, rotary angles, constants) — except where layer ``j - P`` reads what
came before layer 0 (the embeddings) and layer ``j`` the layer before it. Layer ``i >= C`` is then a
copy of template ``t = P + i mod P`` in which a value of layer ``t - d`` becomes that of layer
``i - d``, the weights ``layers.t.*`` become ``layers.i.*`` (slices of the shards from the weight
supply: nothing is read), ``past_key_values.t.*`` become new inputs ``past_key_values.i.*`` and the
cache outputs new outputs; the final norm reads layer ``N - 1``. Names, node order and initializer
order are those of a capture of all ``N`` layers, but for the few names torch.export numbers by its
own counters (``sym_size_int_30``).

Where anything differs from that (a per-layer list other than ``layer_types``, layers that are not
periodic, a per-layer constant the capture computed, a value of the model read between layers),
``NotReplicable`` says what, and the caller captures all layers instead: slower, never wrong.
Only architectures whose code was read for uses of the layer index (``Architecture.replicable``)
are replicated.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from convert import ir

from .architectures import Architecture

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["NotReplicable", "Plan", "plan_replication", "replicate", "shallow_config"]

_PAST = re.compile(r"past_key_values\.(\d+)\.(key|value)")
#: Attributes of a layer's modules that differ from layer to layer without changing what it computes.
_INDEX_ATTRS = frozenset({"layer_idx", "training"})
_PLAIN = (bool, int, float, str, type(None))


class NotReplicable(Exception):  # noqa: N818 (a reason to capture every layer, not an error)
    """The captured layers cannot be replicated; the message says why."""


@dataclass(frozen=True, slots=True)
class Plan:
    """How a model of ``layers`` decoder layers is captured: ``captured`` layers, period ``period``."""

    period: int
    captured: int
    layers: int
    #: the decoder layers' module path in the captured wrapper ("lm.model.layers").
    prefix: str


def _text(config: object) -> object:
    return config.get_text_config() if hasattr(config, "get_text_config") else config  # type: ignore[attr-defined]


def _layer_list(model: torch.nn.Module, count: int) -> str:
    import torch

    found = [name for name, m in model.named_modules() if isinstance(m, torch.nn.ModuleList) and len(m) == count]
    if len(found) != 1:
        raise NotReplicable(f"{len(found)} module lists of {count} layers (one is the decoder's)")
    return found[0]


def _signature(layer: torch.nn.Module) -> tuple[object, ...]:
    """What a layer computes, but for its weights' values and its index."""
    sig: list[object] = []
    for name, module in layer.named_modules():
        attrs = sorted((k, repr(v)) for k, v in vars(module).items()
                       if not k.startswith("_") and k not in _INDEX_ATTRS
                       and (isinstance(v, _PLAIN) or (isinstance(v, tuple) and all(isinstance(x, _PLAIN) for x in v))))
        params = [(n, tuple(p.shape), str(p.dtype)) for n, p in module.named_parameters(recurse=False)]
        buffers = [(n, tuple(b.shape), str(b.dtype), n in module._non_persistent_buffers_set)
                   for n, b in module.named_buffers(recurse=False)]
        sig.append((name, type(module).__qualname__, tuple(attrs), tuple(params), tuple(buffers)))
    return tuple(sig)


def plan_replication(config: object, arch: Architecture, model: torch.nn.Module) -> Plan:
    """Return how to capture ``model`` (the config's whole model, on the meta device) with fewer layers.

    Raises:
        NotReplicable: the layers are not periodic, or not known to be (the message says why).
    """
    if not arch.replicable:
        raise NotReplicable(f"the layers of '{arch.model_type}' were not checked for uses of their index")
    text = _text(config)
    count = int(text.num_hidden_layers)  # type: ignore[attr-defined]
    types = getattr(text, "layer_types", None)
    for key, value in vars(text).items():
        if key != "layer_types" and isinstance(value, (list, tuple)) and len(value) == count:
            raise NotReplicable(f"config.{key} has one entry per layer, which the layers may read")
    if types is not None and len(types) != count:
        raise NotReplicable(f"config.layer_types has {len(types)} entries for {count} layers")
    path = _layer_list(model, count)
    layers = model.get_submodule(path)
    aliases: dict[int, int] = {}
    for _, tensor in model.named_parameters(remove_duplicate=False):
        aliases[id(tensor)] = aliases.get(id(tensor), 0) + 1
    if any(aliases[id(p)] > 1 for p in layers.parameters()):
        raise NotReplicable("a layer's weight is shared with another module")
    sigs = [(types[j] if types is not None else None, _signature(layer)) for j, layer in enumerate(layers)]
    period = next(p for p in range(1, count + 1) if all(sigs[j] == sigs[j % p] for j in range(count)))
    if count > 2 and period > count // 2:
        raise NotReplicable(f"the {count} layers have no period of at most {count // 2} (their "
                            "config.layer_types entries or their modules' attributes differ)")
    captured = 2 * period + (count - 2 * period) % period
    if captured >= count:
        raise NotReplicable(f"{count} layers of period {period}: nothing to replicate")
    return Plan(period, captured, count, f"lm.{path}")


def shallow_config(config: object, plan: Plan) -> object:
    """Return a copy of ``config`` with ``plan.captured`` layers (``layer_types`` cut to them)."""
    small = copy.deepcopy(config)
    text = _text(small)
    text.num_hidden_layers = plan.captured  # type: ignore[attr-defined]
    types = getattr(text, "layer_types", None)
    if types is not None:
        text.layer_types = list(types[:plan.captured])  # type: ignore[attr-defined]
    return small


# -- the lowered graph -------------------------------------------------------------------------------

Key = tuple[object, ...]


class _Layers:
    """The captured graph's nodes by decoder layer, and how each layer node's inputs are read."""

    def __init__(self, graph: ir.Graph, plan: Plan) -> None:
        self.graph = graph
        self.plan = plan
        self.layer = re.compile(re.escape(plan.prefix) + r"\.(\d+)(?=[._]|$)")
        count = plan.captured
        self.nodes: list[list[ir.Node]] = [[] for _ in range(count)]
        self.where: dict[ir.Value, tuple[int, int, int]] = {}  # value -> (layer, node, output)
        self.post: list[ir.Node] = []
        post_values: set[ir.Value] = set()
        self.last = -1
        order = list(graph)
        self.anchor: ir.Node | None = None
        for index, node in enumerate(order):
            j = self._layer_of(ir.get_provenance(node).layer)
            if j is not None:
                if j >= count:
                    raise NotReplicable(f"node {node.name!r} is of layer {j}, of {count} captured")
                if any(v in post_values for v in node.inputs):
                    raise NotReplicable(f"layer {j} reads a value computed after the layers ({node.name!r})")
                for o, v in enumerate(node.outputs):
                    self.where[v] = (j, len(self.nodes[j]), o)
                self.nodes[j].append(node)
                self.anchor, self.last = node, index
            elif any(v in self.where or v in post_values for v in node.inputs):
                read = {self.where[v][0] for v in node.inputs if v in self.where}
                if read - {count - 1}:
                    raise NotReplicable(f"node {node.name!r} reads layer {min(read)}, not only the last layer")
                self.post.append(node)
                post_values.update(node.outputs)
                if index < self.last:
                    raise NotReplicable(f"node {node.name!r} reads the last layer before its end")
        if any(not nodes for nodes in self.nodes):
            raise NotReplicable("a captured layer has no node")

    def _layer_of(self, name: str) -> int | None:
        match = self.layer.match(name)
        return int(match.group(1)) if match else None

    def prefix(self, j: int) -> str:
        return f"{self.plan.prefix}.{j}"

    def weight_of(self, name: str) -> tuple[int, str] | None:
        """(layer, rest of the name) of a layer's initializer ``lm.model.layers.3.mlp.up_proj.weight``."""
        match = self.layer.match(name)
        if match is None or not name[match.end():].startswith("."):
            return None
        return int(match.group(1)), name[match.end():]

    def key(self, value: ir.Value | None, j: int) -> Key:
        """How layer ``j`` reads ``value``: relative to itself, so that layers of one kind read alike."""
        if value is None:
            return ("none",)
        if value in self.where:
            src, p, o = self.where[value]
            return ("layer", j - src, p, o)
        if value.is_graph_input():
            match = _PAST.fullmatch(value.name or "")
            if match is None:
                return ("shared", id(value))
            if int(match.group(1)) != j:
                raise NotReplicable(f"layer {j} reads the cache of layer {match.group(1)}")
            return ("past", match.group(2))
        if value.is_initializer():
            owner = self.weight_of(value.name or "")
            if owner is None:
                return ("shared", id(value))
            if owner[0] != j:
                raise NotReplicable(f"layer {j} reads {value.name!r}")
            return ("weight", owner[1])
        return ("shared", id(value))


def _attr_key(attr: ir.Attr) -> tuple[object, ...]:
    kind = attr.type
    if kind in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
        raise NotReplicable(f"an attribute '{attr.name}' holds a graph")
    if kind == ir.AttributeType.TENSOR:
        tensor = attr.value
        return (attr.name, kind, str(tensor.dtype), tuple(tensor.shape), tensor.numpy().tobytes())
    return (attr.name, kind, repr(attr.value), attr.ref_attr_name)


def _node_key(node: ir.Node, layers: _Layers, j: int) -> tuple[object, ...]:
    layer = ir.get_provenance(node).layer
    within = layer[len(layers.prefix(j)):]
    attrs = tuple(_attr_key(a) for a in node.attributes.values())
    return (node.domain, node.op_type, node.overload, len(node.outputs), within, attrs)


def _check(layers: _Layers) -> dict[int, list[tuple[int, int]]]:
    """Check that layer ``j`` is layer ``j - P`` with other names, for every captured ``j >= P``.

    Returns, for each captured layer, the (node, output) of its cache outputs (key, value).
    """
    plan = layers.plan
    graph = layers.graph
    period, count = plan.period, plan.captured
    if len(graph.inputs) != 3 + 2 * count or len(graph.outputs) != 1 + 2 * count:
        raise NotReplicable("the captured graph's inputs and outputs are not the deployed layout")
    cache: dict[int, list[tuple[int, int]]] = {}
    for j in range(count):
        pair = []
        for value in graph.outputs[1 + 2 * j: 3 + 2 * j]:
            owner = layers.where.get(value)
            if owner is None or owner[0] != j:
                raise NotReplicable(f"the cache output {value.name!r} is not computed by layer {j}")
            pair.append(owner[1:])
        cache[j] = pair
    for j in range(period, count):
        s = j - period
        a_nodes, b_nodes = layers.nodes[s], layers.nodes[j]
        if len(a_nodes) != len(b_nodes):
            raise NotReplicable(f"layer {j} has {len(b_nodes)} nodes, layer {s} {len(a_nodes)}")
        if cache[j] != cache[s]:
            raise NotReplicable(f"layers {s} and {j} give their cache from other nodes")
        for a, b in zip(a_nodes, b_nodes, strict=True):
            if _node_key(a, layers, s) != _node_key(b, layers, j) or len(a.inputs) != len(b.inputs):
                raise NotReplicable(f"node {b.name!r} of layer {j} is not node {a.name!r} of layer {s}")
            for va, vb in zip(a.inputs, b.inputs, strict=True):
                ka, kb = layers.key(va, s), layers.key(vb, j)
                if ka == kb:
                    if ka[0] == "weight" and (va.shape != vb.shape or va.dtype != vb.dtype):  # type: ignore[union-attr]
                        raise NotReplicable(f"weight {vb.name!r} is {vb.shape}, {va.name!r} {va.shape}")  # type: ignore[union-attr]
                    continue
                if ka[0] == "shared" and kb[0] == "layer" and int(kb[1]) > s:  # type: ignore[call-overload]
                    continue  # layer s reads what precedes layer 0 where layer j reads a layer before it
                raise NotReplicable(f"node {b.name!r} of layer {j} reads {vb.name if vb else None!r} where "
                                    f"node {a.name!r} of layer {s} reads {va.name if va else None!r}")
    return cache


class _Names:
    """Names of the clones: the template's with its layer number changed, else fresh."""

    def __init__(self, graph: ir.Graph) -> None:
        self.values = ir.GraphEditor(graph).names
        self.nodes = ir.builder.NameAuthority(sanitize=False)
        for node in graph:
            self.nodes.reserve(node.name or "")

    @staticmethod
    def moved(name: str, old: str, new: str) -> str | None:
        if name == old or (name.startswith(old) and name[len(old)] in "._"):
            return new + name[len(old):]
        return None

    def value(self, name: str | None, old: str, new: str) -> str:
        return self.values.fresh(self.moved(name or "v", old, new) or (name or "v"))

    def node(self, name: str | None, old: str, new: str) -> str:
        return self.nodes.fresh(self.moved(name or "n", old, new) or (name or "n"))


def _moved_meta(meta: dict[str, str], old: str, new: str) -> dict[str, str]:
    out = {}
    for k, v in meta.items():
        moved = _Names.moved(v, old, new) if k.startswith("convert:") else None
        out[k] = moved if moved is not None else v
    return out


def _copy_value(template: ir.Value, name: str, const: ir.TensorProtocol | None = None) -> ir.Value:
    shape = ir.Shape(list(template.shape.dims)) if template.shape is not None else None
    return ir.Value(name=name, shape=shape, type=template.type, doc_string=template.doc_string,
                    const_value=const, metadata_props=dict(template.metadata_props))


def replicate(model: ir.Model, plan: Plan, weight: Callable[[str], ir.TensorProtocol | None]) -> int:
    """Clone the captured layers of ``model`` (inputs and outputs in the deployed order, before their
    renaming) up to ``plan.layers``; ``weight(name)`` gives a layer weight's tensor (None: not a weight).

    Returns:
        The number of nodes added.

    Raises:
        NotReplicable: the captured layers are not copies of one another (checked before any change).
    """
    graph = model.graph
    layers = _Layers(graph, plan)
    cache = _check(layers)
    period, count, total = plan.period, plan.captured, plan.layers
    names = _Names(graph)
    # Every clone's weights first (a weight the supply does not give refuses before the graph changes).
    inits = list(graph.initializers.values())
    owned: dict[int, list[ir.Value]] = {}
    for value in inits:
        owner = layers.weight_of(value.name or "")
        if owner is not None:
            owned.setdefault(owner[0], []).append(value)
    new_inits: dict[tuple[int, str], ir.Value] = {}
    for i in range(count, total):
        t = period + i % period
        for value in owned.get(t, []):
            rest = layers.weight_of(value.name or "")[1]  # type: ignore[index]
            name = layers.prefix(i) + rest
            tensor = weight(name)
            if tensor is None and name.endswith("_T") and (i, rest[:-2]) in new_inits:
                base = new_inits[(i, rest[:-2])].const_value
                tensor = ir.transposed(base, name=name)  # type: ignore[arg-type]
            if tensor is None:
                raise NotReplicable(f"{value.name!r} is a constant of layer {t} that is not a weight")
            template = value.const_value
            if template is None or tuple(tensor.shape) != tuple(template.shape) or tensor.dtype != template.dtype:
                raise NotReplicable(f"weight {name!r} is {tensor.shape} {tensor.dtype}, the captured layer's "
                                    f"{template.shape if template else None}")
            if name in graph.initializers:
                raise NotReplicable(f"{name!r} is already in the graph")
            names.values.reserve(name)
            new_inits[(i, rest)] = _copy_value(value, name, tensor)
    outs: list[list[list[ir.Value]]] = [[list(n.outputs) for n in nodes] for nodes in layers.nodes]
    past = {j: graph.inputs[3 + 2 * j: 5 + 2 * j] for j in range(count)}
    new_nodes: list[ir.Node] = []
    new_inputs: list[ir.Value] = []
    new_outputs: list[ir.Value] = []
    for i in range(count, total):
        t = period + i % period
        old, new = layers.prefix(t), layers.prefix(i)
        inputs = {}
        for kind, template in zip(("key", "value"), past[t], strict=True):
            inputs[kind] = _copy_value(template, f"past_key_values.{i}.{kind}")
            new_inputs.append(inputs[kind])
        mine: list[list[ir.Value]] = []
        for node in layers.nodes[t]:
            args: list[ir.Value | None] = []
            for value in node.inputs:
                key = layers.key(value, t)
                if key[0] == "none":
                    args.append(None)
                elif key[0] == "layer":
                    d, p, o = int(key[1]), int(key[2]), int(key[3])  # type: ignore[call-overload]
                    args.append(mine[p][o] if d == 0 else outs[i - d][p][o])
                elif key[0] == "past":
                    args.append(inputs[str(key[1])])
                elif key[0] == "weight":
                    args.append(new_inits[(i, str(key[1]))])
                else:
                    args.append(value)
            results = [_copy_value(v, names.value(v.name, old, new)) for v in node.outputs]
            attrs = [ir.Attr(a.name, a.type, a.value, a.ref_attr_name, doc_string=a.doc_string)
                     for a in node.attributes.values()]
            clone = ir.Node(node.domain, node.op_type, args, attrs, overload=node.overload, outputs=results,
                            version=node.version, name=names.node(node.name, old, new), doc_string=node.doc_string,
                            metadata_props=_moved_meta(dict(node.metadata_props), old, new))
            new_nodes.append(clone)
            mine.append(results)
        outs.append(mine)
        new_outputs += [mine[p][o] for p, o in cache[t]]
    # The graph changes from here on.
    for value in new_inits.values():
        graph.register_initializer(value)
    _reorder(graph, layers, list(new_inits.values()))
    graph.inputs.extend(new_inputs)
    assert layers.anchor is not None
    graph.insert_after(layers.anchor, new_nodes)
    last = count - 1
    for node in layers.post:
        for m, value in enumerate(node.inputs):
            owner = layers.where.get(value) if value is not None else None
            if owner is not None and owner[0] == last:
                node.replace_input_with(m, outs[total - 1][owner[1]][owner[2]])
    graph.outputs.extend(new_outputs)
    return len(new_nodes)


def _reorder(graph: ir.Graph, layers: _Layers, added: list[ir.Value]) -> None:
    """Put the clones' initializers after the captured layers' (as a capture of every layer has them)."""
    data = graph.initializers.data
    items = list(data.items())
    fresh = {id(v) for v in added}
    kept = [(k, v) for k, v in items if id(v) not in fresh]
    cut = max((n for n, (k, _) in enumerate(kept) if layers.weight_of(k) is not None), default=len(kept) - 1) + 1
    data.clear()
    data.update(kept[:cut])
    data.update((v.name, v) for v in added)
    data.update(kept[cut:])
