"""Gather TF control flow lowered to TF1 frames into single nodes: while loops for ONNX ``Loop``,
conditionals for ONNX ``If`` (converted by ``ops/controlflow.py``).

Freezing lowers ``tf.while_loop`` (functional ``While``) and ``tf.cond`` (``If``) into frames of
``Enter``/``Merge``/``Switch``/``NextIteration``/``Exit``/``LoopCond`` (loops) and
``Switch``/``Merge`` on one predicate (conditionals). Each is replaced here by one node holding its
body as a list of ``TFNode``s:

- ``LoweredWhile``: one loop. Its inputs are the initial values of the loop variables that change
  (carried by ONNX ``Loop``), then the values that enter the loop unchanged (a variable whose next
  value is itself, an ``Enter`` marked constant, the tensor a read-only ``TensorList`` was made
  from): the body reads those from the enclosing scope. The condition (the nodes between the
  ``Merge``s and ``LoopCond``) is computed once on the initial values and again at the end of each
  iteration on the next ones, ONNX ``Loop``'s condition input and output. Tensor lists:
  ``TensorListGetItem(TensorListFromTensor(x), i)`` is ``Gather(x, i)``; a list made by
  ``TensorListReserve`` and written once per iteration at the step counter (a variable starting at
  0 and stepping by 1) is a scan output, stacked by ``Loop`` (``TensorListStack`` after the loop),
  padded with zeros to the list's length; one written at index 0 of a one-element list (Keras'
  last output) is the last row of that scan output. Outputs: the carried variables' final values,
  then one per written list.
- ``LoweredCond``: one conditional: input 0 the predicate, then the values the branches read (the
  data inputs of its ``Switch``es); one output per ``Merge``. The nodes reached from ``Switch:1``
  are the then branch, from ``Switch:0`` the else branch (``Merge(then, else)`` where a branch
  output is a constant or an outer value).

Innermost constructs are gathered first, so a loop in a branch or a conditional in a loop body is
one node of the enclosing body. What cannot be gathered is left as it is, with its reason in
``TFGraph.loops`` / ``TFGraph.conds``, and refused in one line by the support check.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from .graph import TFGraph, TFNode
from .recurrent import _Graph, _is_counter, _loop_vars, _NoMatchError, _norm, _Var

__all__ = ["COND_OP", "LOOP_OP", "CondPlan", "LoopPlan", "lower_control_flow"]

logger = logging.getLogger(__name__)

LOOP_OP = "LoweredWhile"
COND_OP = "LoweredCond"
_FRAME_OPS = frozenset({"Enter", "Exit", "Merge", "Switch", "NextIteration", "LoopCond"})


class _NestedError(Exception):
    """The construct contains another one not gathered yet: try again after it."""


@dataclass(slots=True)
class LoopPlan:
    """How one lowered loop becomes ONNX ``Loop`` (tensor names are TensorFlow's)."""

    carried: list[tuple[str, str, str]]  # (body value: Switch:1, next value, Merge:0) per carried variable
    invariants: dict[str, int]  # tensor inside the loop -> index in the node's inputs of its outer value
    reads: dict[str, int]  # read-only list inside the loop (and its Identities) -> input index of its tensor
    writes: dict[str, int]  # written list inside the loop (and its Identities) -> scan output slot
    scans: list[tuple[str, int]]  # per slot: "all" (stack every step, padded to n) or "last", n (-1: unknown)
    cond: str  # the LoopCond's input
    body: list[TFNode]
    cond_nodes: list[TFNode]
    shapes: dict[str, tuple[int | None, ...] | None] = field(default_factory=dict)  # of the body's inputs


@dataclass(slots=True)
class CondPlan:
    """How one lowered conditional becomes ONNX ``If``."""

    branches: list[tuple[dict[str, int], list[TFNode], list[str]]]  # then, else: (Switch output -> input
    # index, nodes, output tensors)


def _topo(nodes: list[TFNode]) -> list[TFNode]:
    """Return ``nodes`` ordered so that producers come before consumers (among themselves)."""
    return _topo_graph(nodes)


def _walk_back(g: _Graph, targets: list[str], stops: set[str], bad: dict[str, str]) -> list[TFNode]:
    """Return the nodes ``targets`` depend on, stopping at ``stops`` (tensors); raise on a tensor of ``bad``."""
    seen: set[str] = set()
    found: list[TFNode] = []
    stack = list(targets)
    while stack:
        tensor = _norm(stack.pop())
        if tensor in stops:
            continue
        if tensor in bad:
            raise _NoMatchError(bad[tensor])
        node = g.by_name.get(tensor.split(":")[0])
        if node is None:
            raise _NoMatchError(f"'{tensor}' has no producer")
        if node.name in seen:
            continue
        seen.add(node.name)
        if node.op in _FRAME_OPS:
            raise _NestedError(node.name)
        found.append(node)
        stack.extend(node.inputs)
    return found


def _list_aliases(g: _Graph, tensor: str) -> list[str]:
    """``tensor`` and the outputs of the Identity chains reading it."""
    out, stack = [], [tensor]
    while stack:
        t = stack.pop()
        out.append(t)
        stack.extend(f"{n.name}:0" for n in g.consumers.get(t, []) if n.op == "Identity")
    return out


def _loop_plan(g: _Graph, cond: TFNode) -> tuple[TFNode, dict[str, str], set[str]]:
    """Return the ``LoweredWhile`` node for the loop of ``cond``, the renames of its results, and the
    nodes it replaces. Raises ``_NoMatchError`` (why not) or ``_NestedError`` (not yet)."""
    variables = _loop_vars(g, cond)
    enters = [g.node(v.merge.inputs[0]) for v in variables]
    frame = enters[0].attrs.get("frame_name") if enters else None
    const_enters = [n for n in g.by_name.values() if n.op == "Enter" and n.attrs.get("is_constant")
                    and n.attrs.get("frame_name") == frame]
    inputs: list[str] = []
    carried: list[_Var] = []
    invariants: dict[str, int] = {}
    reads: dict[str, int] = {}
    writes: dict[str, int] = {}
    scans: list[tuple[str, int]] = []
    write_vars: list[tuple[_Var, int]] = []
    counters = [v for v in variables if _is_counter(g, v)]
    for enter in const_enters:
        invariants[f"{enter.name}:0"] = len(inputs)
        inputs.append(_norm(enter.inputs[0]))
    lists = [v for v in variables if g.op(v.init, "TensorListFromTensor", "TensorListReserve", "EmptyTensorList")]
    for v in variables:
        if v in lists or g.root(v.next) == v.body:
            continue
        init = g.node(v.init)
        if init.dtypes and init.dtypes[int(v.init.split(":")[1])] == np.dtype(object):
            raise _NoMatchError(f"it carries '{v.init}', a tensor list or resource that is not made before it")
        carried.append(v)
    plain = [v for v in variables if v not in lists and g.root(v.next) == v.body]
    # the carried values' initial values come first in the node's inputs
    inputs[:0] = [v.init for v in carried]
    invariants = {k: i + len(carried) for k, i in invariants.items()}
    for v in plain:
        invariants[v.body] = invariants[f"{v.merge.name}:0"] = len(inputs)
        inputs.append(v.init)
    for v in lists:
        origin = g.op(v.init, "TensorListFromTensor", "TensorListReserve", "EmptyTensorList")
        assert origin is not None
        aliases = _list_aliases(g, v.body)
        users = [n for t in aliases for n in g.consumers.get(t, []) if n.op not in ("Identity", "NextIteration")]
        if origin.op == "TensorListFromTensor":
            if g.root(v.next) != v.body:
                raise _NoMatchError(f"it changes the tensor list made from '{origin.inputs[0]}'")
            if any(n.op != "TensorListGetItem" for n in users):
                raise _NoMatchError(f"'{next(n for n in users if n.op != 'TensorListGetItem').name}' reads a "
                                    "tensor list by another op than TensorListGetItem")
            for t in aliases:
                reads[t] = len(inputs)
            inputs.append(_norm(origin.inputs[0]))
            continue
        if origin.op != "TensorListReserve":
            raise _NoMatchError(f"its tensor list '{origin.name}' is an {origin.op}")
        sets = [n for n in users if n.op == "TensorListSetItem"]
        if len(users) != 1 or len(sets) != 1 or g.root(v.next) != f"{sets[0].name}:0":
            raise _NoMatchError(f"its tensor list '{origin.name}' is not written once per step")
        index = g.root(sets[0].inputs[1])
        size = g.const(origin.inputs[1])
        n = int(size.reshape(-1)[0]) if size is not None and size.size == 1 else -1
        const_index = g.const(index)
        if any(index == g.root(c.body) for c in counters if c in carried):
            scans.append(("all", n))
        elif const_index is not None and const_index.size == 1 and int(const_index.reshape(-1)[0]) == 0 and n == 1:
            scans.append(("last", n))
        else:
            raise _NoMatchError(f"'{sets[0].name}' writes at an index that is neither the step counter nor 0 "
                                "of a one-element list")
        for t in aliases:
            writes[t] = len(write_vars)
        write_vars.append((v, len(write_vars)))
    # the body: what the carried values' next values and the written items depend on
    body_inputs = {v.body for v in variables} | set(invariants) | set(reads) | set(writes)
    merges = {f"{v.merge.name}:0": v for v in variables}
    # a written list's next value is its TensorListSetItem: the walk from it finds the item
    targets = [v.next for v in carried] + [v.next for v, _ in write_vars]
    bad = {m: f"its body reads loop variable '{m}' before the condition" for m in merges}
    body = _walk_back(g, targets, body_inputs, bad)
    cond_nodes = _walk_back(g, [cond.inputs[0]], set(merges) | set(invariants),
                            {t: f"its condition reads '{t}' of the body" for t in body_inputs})
    if {n.name for n in body} & {n.name for n in cond_nodes} - {n.name for n in body if n.op == "Const"}:
        raise _NoMatchError("its condition and body share nodes")
    for node in cond_nodes:
        for t in node.inputs:
            m = merges.get(_norm(t))
            if m is not None and m in lists:
                raise _NoMatchError("its condition reads a tensor list")
    # results: carried exits, then the stacks of written lists
    renames: dict[str, str] = {}
    name = f"{cond.name}/Loop"
    replaced = {cond.name, *(n.name for n in body if n.op != "Const"), *(n.name for n in cond_nodes if n.op != "Const")}
    for v in variables:  # Enter -> Merge <- NextIteration, Switch
        replaced.update({v.merge.name, v.body.split(":")[0], *(t.split(":")[0] for t in v.merge.inputs)})
        if v.exit is not None:
            replaced.add(v.exit.name)
    replaced.update(n.name for n in const_enters)
    out_shapes: list[tuple[int | None, ...] | None] = []
    out_dtypes: list[np.dtype] = []
    shapes: dict[str, tuple[int | None, ...] | None] = {}
    for k, v in enumerate(carried):
        init_node = g.node(v.init)
        shape = init_node.shapes[int(v.init.split(":")[1])] if init_node.shapes else None
        next_node = g.node(g.root(v.next))
        nshape = next_node.shapes[int(g.root(v.next).split(":")[1])] if next_node.shapes else None
        if shape is not None and nshape is not None and len(shape) == len(nshape):
            shape = tuple(a if a == b else None for a, b in zip(shape, nshape, strict=True))
        elif shape is not None and nshape is not None:
            shape = None
        shapes[v.body] = shapes[f"{v.merge.name}:0"] = shape
        out_shapes.append(shape)
        out_dtypes.append(init_node.dtypes[int(v.init.split(":")[1])])
        if v.exit is not None:
            renames[f"{v.exit.name}:0"] = f"{name}:{k}"
    for v in plain:
        init_node = g.node(v.init)
        shapes[v.body] = shapes[f"{v.merge.name}:0"] = init_node.shapes[int(v.init.split(":")[1])]
        if v.exit is not None:
            renames[f"{v.exit.name}:0"] = v.init
    for t, i in invariants.items():
        if t not in shapes:
            src = g.node(inputs[i])
            shapes[t] = src.shapes[int(inputs[i].split(":")[1])] if src.shapes else None
    for v in lists:
        users = g.consumers.get(f"{v.exit.name}:0", []) if v.exit is not None else []
        if v.exit is not None:
            replaced.add(v.exit.name)
        if v in [w for w, _ in write_vars]:
            slot = next(s for w, s in write_vars if w is v)
            if any(n.op != "TensorListStack" for n in users):
                raise _NoMatchError("a tensor list it writes is read after the loop by another op than "
                                    "TensorListStack")
            for stack in users:
                renames[f"{stack.name}:0"] = f"{name}:{len(carried) + slot}"
                replaced.add(stack.name)
            if users:
                out_shapes.append(users[0].shapes[0])
                out_dtypes.append(users[0].dtypes[0])
            else:
                out_shapes.append(None)
                out_dtypes.append(np.dtype(np.float32))
        elif users:
            raise _NoMatchError(f"the tensor list it reads is used after the loop by '{users[0].name}'")
    while len(out_shapes) < len(carried) + len(write_vars):
        out_shapes.append(None)
        out_dtypes.append(np.dtype(np.float32))
    plan = LoopPlan(carried=[(v.body, _norm(v.next), f"{v.merge.name}:0") for v in carried], invariants=invariants,
                    reads=reads, writes=writes, scans=scans, cond=_norm(cond.inputs[0]), body=_topo(body),
                    cond_nodes=_topo(cond_nodes), shapes=shapes)
    node = TFNode(name=name, op=LOOP_OP, inputs=inputs, attrs={"plan": plan, "loop": cond.name},
                  shapes=out_shapes, dtypes=out_dtypes)
    return node, renames, replaced


def _forward(g: _Graph, starts: list[str]) -> list[TFNode]:
    """Return the nodes reached from ``starts`` up to (not through) ``Merge``s."""
    seen: set[str] = set()
    found: list[TFNode] = []
    stack = list(starts)
    while stack:
        for node in g.consumers.get(stack.pop(), []):
            if node.name in seen or node.op == "Merge":
                continue
            seen.add(node.name)
            if node.op in _FRAME_OPS:
                raise _NestedError(node.name)
            found.append(node)
            stack.extend(f"{node.name}:{i}" for i in range(max(1, len(node.shapes))))
    return found


def _cond_plan(g: _Graph, pred: str, switches: list[TFNode]) -> tuple[TFNode, dict[str, str], set[str]]:
    """Return the ``LoweredCond`` node for the conditional on ``pred``, its renames and the nodes it replaces."""
    inputs = [pred]
    sides: list[dict[str, int]] = [{}, {}]
    for s in switches:
        index = len(inputs)
        inputs.append(_norm(s.inputs[0]))
        sides[0][f"{s.name}:1"] = index
        sides[1][f"{s.name}:0"] = index
    regions = [_forward(g, list(side)) for side in sides]
    names = [{n.name for n in r} for r in regions]
    if names[0] & names[1]:
        raise _NoMatchError(f"'{sorted(names[0] & names[1])[0]}' reads both branches")
    merges: list[TFNode] = []
    for region, side in zip(regions, sides, strict=True):
        for t in [*side, *(f"{n.name}:{i}" for n in region for i in range(max(1, len(n.shapes))))]:
            for user in g.consumers.get(t, []):
                if user.op == "Merge":
                    if user not in merges:
                        merges.append(user)
                elif user.name not in names[0] | names[1]:
                    raise _NoMatchError(f"'{user.name}' reads a branch's value outside the conditional")
    if not merges:
        raise _NoMatchError("it has no Merge: its result is not used")
    outs: list[list[str]] = [[], []]
    for m in merges:
        if len(m.inputs) != 2:
            raise _NoMatchError(f"Merge '{m.name}' joins {len(m.inputs)} values")
        a, b = (_norm(t) for t in m.inputs)

        def side_of(t: str) -> int | None:
            src = t.split(":")[0]
            for k in (0, 1):
                if t in sides[k] or src in names[k]:
                    return k
            return None

        sa, sb = side_of(a), side_of(b)
        if sa == 1 or sb == 0:
            a, b = b, a
        elif sa is None and sb is None and (g.const(a) is None or g.const(b) is None):
            raise _NoMatchError(f"Merge '{m.name}' joins values of neither branch")
        outs[0].append(a)
        outs[1].append(b)
        if g.consumers.get(f"{m.name}:1"):
            raise _NoMatchError(f"the branch index of Merge '{m.name}' is read")
    name = f"{merges[0].name}/If"
    branches = []
    for k in (0, 1):
        nodes = list(regions[k])
        # constants a branch reads (they carry the branch only as a control input)
        extra = {t.split(":")[0] for n in nodes for t in n.inputs} | {t.split(":")[0] for t in outs[k]}
        nodes += [g.by_name[e] for e in sorted(extra) if e in g.by_name and g.by_name[e].op == "Const"
                  and e not in names[k]]
        branches.append((sides[k], _topo(nodes), outs[k]))
    node = TFNode(name=name, op=COND_OP, inputs=inputs, attrs={"plan": CondPlan(branches), "pred": pred},
                  shapes=[m.shapes[0] if m.shapes else None for m in merges],
                  dtypes=[m.dtypes[0] if m.dtypes else np.dtype(np.float32) for m in merges])
    renames = {f"{m.name}:0": f"{name}:{i}" for i, m in enumerate(merges)}
    replaced = {*(s.name for s in switches), *(m.name for m in merges), *names[0], *names[1]}
    return node, renames, replaced


def _used(g: _Graph, tensors: list[str]) -> bool:
    return any(g.consumers.get(t) for t in tensors)


def _step(graph: TFGraph, done: set[str]) -> bool:
    """Gather one innermost loop or conditional; return whether one was (or was refused for good)."""
    g = _Graph(graph)
    outputs = set(graph.outputs.values())
    for cond in [n for n in graph.nodes if n.op == "LoopCond" and n.name not in done]:
        try:
            variables = _loop_vars(g, cond)
            if not any(v.exit is not None and (_used(g, [f"{v.exit.name}:0"]) or f"{v.exit.name}:0" in outputs)
                       for v in variables):
                done.add(cond.name)  # nothing reads its results (a loop replaced by a recurrent op)
                continue
            node, renames, replaced = _loop_plan(g, cond)
        except _NestedError:
            continue
        except _NoMatchError as why:
            done.add(cond.name)
            earlier = graph.loops.get(cond.name)
            graph.loops[cond.name] = f"{why}" if not earlier else f"{why} (as a Keras cell: {earlier})"
            continue
        graph.loops.pop(cond.name, None)
        _replace(graph, node, renames, replaced)
        return True
    preds: dict[str, list[TFNode]] = {}
    loop_conds = {f"{n.name}:0" for n in graph.nodes if n.op == "LoopCond"}
    for n in graph.nodes:
        if n.op == "Switch" and len(n.inputs) == 2 and _norm(n.inputs[1]) not in loop_conds:
            preds.setdefault(_norm(n.inputs[1]), []).append(n)
    for pred, switches in preds.items():
        if pred in done:
            continue
        try:
            node, renames, replaced = _cond_plan(g, pred, switches)
        except _NestedError:
            continue
        except _NoMatchError as why:
            done.add(pred)
            graph.conds[switches[0].name] = str(why)
            continue
        _replace(graph, node, renames, replaced)
        return True
    return False


def _replace(graph: TFGraph, node: TFNode, renames: dict[str, str], replaced: set[str]) -> None:
    nodes = [n for n in graph.nodes if n.name not in replaced or n.op == "Const"]
    for n in nodes:
        if any(_norm(t) in renames for t in n.inputs):
            n.inputs = [renames.get(_norm(t), t) for t in n.inputs]
    nodes.append(node)
    graph.nodes[:] = _topo_graph(nodes)
    graph.outputs.update({k: renames.get(_norm(v), v) for k, v in graph.outputs.items()})


def _topo_graph(nodes: list[TFNode]) -> list[TFNode]:
    """``_topo`` over a whole graph, where ``NextIteration`` closes cycles through ``Merge``."""
    by_name = {n.name: n for n in nodes}
    done: set[str] = set()
    visiting: set[str] = set()
    out: list[TFNode] = []
    for start in nodes:
        stack: list[tuple[TFNode, bool]] = [(start, False)]
        while stack:
            node, expanded = stack.pop()
            if node.name in done:
                continue
            if expanded:
                done.add(node.name)
                out.append(node)
                continue
            if node.name in visiting:
                continue  # a cycle (a frame left as it is): keep the graph's order
            visiting.add(node.name)
            stack.append((node, True))
            for t in node.inputs:
                src = by_name.get(t.split(":")[0])
                if src is not None and src.name not in done and src.op != "NextIteration":
                    stack.append((src, False))
    return out


def lower_control_flow(graph: TFGraph) -> int:
    """Replace each lowered loop and conditional that can be gathered (``LoweredWhile`` /
    ``LoweredCond``); record why the others cannot. Return how many were replaced."""
    if not any(n.op in ("LoopCond", "Switch") for n in graph.nodes):
        return 0
    done: set[str] = set()
    count = 0
    while _step(graph, done):
        count += 1
    return count
