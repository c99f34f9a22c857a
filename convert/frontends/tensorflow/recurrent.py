"""Recognise Keras' recurrent layers (LSTM, GRU, SimpleRNN) in a frozen graph's lowered while loops.

Keras 3 runs a recurrent layer as ``tf.while_loop`` over the time-major sequence; freezing and
grappler lower the loop to a TF1 frame (``Enter -> Merge -> Switch -> ... -> NextIteration``, the
exit values through ``Exit``), with the sequence in a ``TensorList``. ONNX's ``LSTM``/``GRU``/``RNN``
compute the same recurrences, so each loop whose body is exactly one Keras cell is replaced by one
``KerasRecurrent`` node (converted by ``ops/recurrent.py``) that reads the time-major sequence and the
initial states and yields what the loop's consumers read:

- output 0: the stacked outputs ``[T, N, U]`` (``return_sequences``) or the last one ``[1, N, U]``
  (Keras keeps a one-element list and overwrites it at every step), read by ``TensorListStack``;
- outputs 1 and 2: the final ``h`` and ``c`` (``Exit`` of the state variables).

Each piece is checked, nothing is assumed from names:

- the loop: an index starting at 0 and stepping by 1 reads element ``t`` of the input list
  (``TensorListFromTensor`` of the sequence) and writes element ``t`` (or 0) of the output list;
  the loop runs while each counter is below its bound, the least bound being the sequence's
  static length;
- the cell, as Keras writes it (``keras/src/layers/rnn/*.py``), with ``z = x W + h R + b`` (a sum of
  ``MatMul``s by constants and constant biases, any order):
  LSTM ``i, f, g, o = split(z, 4)``, ``c' = a(f) c + a(i) b(g)``, ``h' = a(o) b(c')`` (ONNX gate
  order i, o, f, c); GRU with ``reset_after`` (ONNX ``linear_before_reset=1``): ``xz, xr, xh =
  split(x W + b_x)``, ``hz, hr, hh`` the thirds of ``h R + b_h``, ``z = a(xz + hz)``, ``r = a(xr + hr)``,
  ``h' = z h + (1 - z) b(xh + r hh)``; SimpleRNN ``h' = b(x W + b + h R)``; ``a``/``b`` one of
  Sigmoid, Tanh, Relu.

A loop that is anything else (masking's ``Select``s, a custom cell, a GRU without ``reset_after``)
is left as it is, with the reason its body did not match (``TFGraph.loops``), for ``controlflow.py``
to make a general ONNX ``Loop`` of.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from .graph import TFGraph, TFNode

__all__ = ["CONTROL_FLOW", "RECURRENT_OP", "recognise_recurrent"]

logger = logging.getLogger(__name__)

RECURRENT_OP = "KerasRecurrent"
# Ops of TF control flow (lowered frames, functional loops and conditionals, tensor lists).
CONTROL_FLOW = frozenset({
    "Enter", "Exit", "Merge", "Switch", "NextIteration", "LoopCond", "While", "StatelessWhile", "If",
    "StatelessIf", "TensorListFromTensor", "TensorListGetItem", "TensorListSetItem", "TensorListStack",
    "TensorListReserve", "TensorListLength", "TensorListElementShape",
})
_ACTIVATIONS = {"Sigmoid": "Sigmoid", "Tanh": "Tanh", "Relu": "Relu"}


class _NoMatchError(Exception):
    """Why a loop is not a Keras recurrent layer."""


@dataclass(slots=True)
class _Var:
    merge: TFNode
    init: str  # the tensor entering the loop
    body: str  # the value inside the body (Switch:1)
    next: str  # the value for the next iteration
    exit: TFNode | None


class _Graph:
    def __init__(self, graph: TFGraph) -> None:
        self.by_name = {n.name: n for n in graph.nodes}
        self.consumers: dict[str, list[TFNode]] = {}
        for node in graph.nodes:
            for tensor in node.inputs:
                self.consumers.setdefault(_norm(tensor), []).append(node)

    def node(self, tensor: str) -> TFNode:
        return self.by_name[tensor.split(":")[0]]

    def root(self, tensor: str) -> str:
        """``tensor`` with the Identity ops in front of it skipped."""
        tensor = _norm(tensor)
        while (node := self.by_name.get(tensor.split(":")[0])) is not None and node.op == "Identity":
            tensor = _norm(node.inputs[0])
        return tensor

    def op(self, tensor: str, *ops: str) -> TFNode | None:
        node = self.by_name.get(self.root(tensor).split(":")[0])
        return node if node is not None and node.op in ops else None

    def const(self, tensor: str) -> np.ndarray | None:
        """The value of ``tensor`` when it is a constant, or a Split/Squeeze/Unpack/Reshape of one
        (a GRU's two bias rows, ``split(bias, 2)`` and squeezed, when its weights are not folded)."""
        tensor = self.root(tensor)
        node = self.by_name.get(tensor.split(":")[0])
        if node is None:
            return None
        index = int(tensor.split(":")[1])
        if node.op == "Const":
            value = node.attrs.get("value")
            return value if isinstance(value, np.ndarray) else None
        if node.op == "Split" and len(node.inputs) == 2:
            dim, value = self.const(node.inputs[0]), self.const(node.inputs[1])
            parts = int(node.attrs.get("num_split", 0))  # type: ignore[call-overload]
            if dim is None or value is None or parts < 1 or value.shape[int(dim)] % parts:
                return None
            return np.split(value, parts, axis=int(dim))[index]
        if node.op == "Unpack" and node.inputs:
            value = self.const(node.inputs[0])
            axis = int(node.attrs.get("axis", 0))  # type: ignore[call-overload]
            return None if value is None else np.take(value, index, axis=axis)
        if node.op == "Squeeze" and node.inputs:
            value = self.const(node.inputs[0])
            dims = [int(d) for d in node.attrs.get("squeeze_dims", []) or []]  # type: ignore[union-attr]
            if value is None:
                return None
            return np.squeeze(value, axis=tuple(dims)) if dims else np.squeeze(value)
        if node.op == "Reshape" and len(node.inputs) == 2:
            value, shape = self.const(node.inputs[0]), self.const(node.inputs[1])
            return None if value is None or shape is None else value.reshape([int(d) for d in shape.reshape(-1)])
        return None


def _norm(tensor: str) -> str:
    return tensor if ":" in tensor else f"{tensor}:0"


def _loop_vars(g: _Graph, cond: TFNode) -> list[_Var]:
    out = []
    for switch in g.consumers.get(f"{cond.name}:0", []):
        if switch.op != "Switch":
            raise _NoMatchError(f"'{switch.name}' ({switch.op}) reads the loop condition")
        merge = g.node(switch.inputs[0])
        enter = g.node(merge.inputs[0]) if merge.op == "Merge" and len(merge.inputs) == 2 else None
        nxt = g.node(merge.inputs[1]) if enter is not None else None
        if enter is None or enter.op != "Enter" or nxt is None or nxt.op != "NextIteration":
            raise _NoMatchError(f"loop variable '{merge.name}' is not Enter -> Merge <- NextIteration")
        exits = [n for n in g.consumers.get(f"{switch.name}:0", []) if n.op == "Exit"]
        out.append(_Var(merge, _norm(enter.inputs[0]), f"{switch.name}:1", _norm(nxt.inputs[0]),
                        exits[0] if exits else None))
    return out


def _is_counter(g: _Graph, var: _Var) -> bool:
    init = g.const(var.init)
    step = g.op(var.next, "AddV2", "Add")
    if init is None or init.size != 1 or int(init.reshape(-1)[0]) != 0 or step is None:
        return False
    a, b = (g.root(t) for t in step.inputs)
    one = g.const(b) if a == var.body else g.const(a) if b == var.body else None
    return one is not None and one.size == 1 and int(one.reshape(-1)[0]) == 1


def _iterations(g: _Graph, cond: TFNode, counters: dict[str, _Var], bounds: dict[str, _Var]) -> int:
    """Return how many times the loop runs: the least bound of its ``counter < bound`` tests."""
    less: list[TFNode] = []
    stack = [cond.inputs[0]]
    while stack:
        node = g.op(stack.pop(), "LogicalAnd", "Less")
        if node is None:
            raise _NoMatchError("its condition is not a conjunction of Less tests")
        if node.op == "LogicalAnd":
            stack.extend(node.inputs)
        else:
            less.append(node)
    limits = []
    for node in less:
        counter, bound = (g.root(t) for t in node.inputs)
        if counter.split(":")[0] not in counters:
            raise _NoMatchError(f"'{node.name}' tests something other than a step counter")
        value = g.const(bound)
        if value is None and bound.split(":")[0] in bounds:
            value = g.const(bounds[bound.split(":")[0]].init)
        if value is None or value.size != 1:
            raise _NoMatchError(f"'{node.name}' compares with a bound computed at run time")
        limits.append(int(value.reshape(-1)[0]))
    if not limits:
        raise _NoMatchError("its condition tests no counter")
    return min(limits)


@dataclass(slots=True)
class _Affine:
    """``x W + h R + b`` as read from a sum of MatMuls and constant biases."""

    w: np.ndarray | None = None
    r: np.ndarray | None = None
    b: np.ndarray | None = None


def _affine(g: _Graph, tensor: str, x: str, h: str | None) -> _Affine:
    out = _Affine()
    stack = [tensor]
    while stack:
        t = g.root(stack.pop())
        node = g.node(t)
        if node.op in ("AddV2", "Add", "BiasAdd"):
            if node.op == "BiasAdd" and node.attrs.get("data_format", "NHWC") != "NHWC":
                raise _NoMatchError(f"'{node.name}' adds its bias along another axis")
            stack.extend(node.inputs)
            continue
        value = g.const(t)
        if value is not None and value.ndim == 1:
            out.b = value.astype(np.float64) if out.b is None else out.b + value
            continue
        if node.op == "MatMul" and not node.attrs.get("transpose_a") and not node.attrs.get("transpose_b"):
            a, weight = g.root(node.inputs[0]), g.const(node.inputs[1])
            if weight is not None and a == x and out.w is None:
                out.w = weight
                continue
            if weight is not None and h is not None and a == h and out.r is None:
                out.r = weight
                continue
        raise _NoMatchError(f"'{node.name}' ({node.op}) is not part of x W + h R + b")
    return out


def _act(g: _Graph, tensor: str) -> tuple[str, str]:
    """Return (the activation's ONNX name, its input) when ``tensor`` is Sigmoid/Tanh/Relu of something."""
    node = g.op(tensor, *_ACTIVATIONS)
    if node is None:
        raise _NoMatchError(f"'{g.root(tensor)}' is not a Sigmoid, Tanh or Relu")
    return _ACTIVATIONS[node.op], g.root(node.inputs[0])


def _pair(g: _Graph, tensor: str, op: str | tuple[str, ...]) -> tuple[str, str]:
    node = g.op(tensor, *((op,) if isinstance(op, str) else op))
    if node is None or len(node.inputs) != 2:
        raise _NoMatchError(f"'{g.root(tensor)}' is not a {op}")
    return g.root(node.inputs[0]), g.root(node.inputs[1])


def _split(g: _Graph, tensor: str, parts: int) -> tuple[TFNode, int]:
    """Return the Split ``tensor`` is an output of (along the last axis, into ``parts``) and which."""
    node = g.op(tensor, "Split")
    dim = g.const(node.inputs[0]) if node is not None else None
    if node is None or int(node.attrs.get("num_split", 0)) != parts or dim is None or int(dim) not in (1, -1):  # type: ignore[call-overload]
        raise _NoMatchError(f"'{g.root(tensor)}' is not one of {parts} parts of a Split along the units")
    index = int(g.root(tensor).split(":")[1])
    return node, index


def _mul_with(g: _Graph, candidates: tuple[str, str], member: str) -> tuple[tuple[str, str], str]:
    """Return (the operands of the candidate that is ``Mul(member, .)``, the other candidate)."""
    for first, second in (candidates, candidates[::-1]):
        node = g.op(first, "Mul")
        if node is not None and member in (g.root(node.inputs[0]), g.root(node.inputs[1])):
            return (g.root(node.inputs[0]), g.root(node.inputs[1])), second
    raise _NoMatchError(f"neither '{candidates[0]}' nor '{candidates[1]}' multiplies '{member}'")


def _either(first: tuple[str, str], test: str) -> str:
    """Return the member of ``first`` that is not ``test`` (one of them must be)."""
    if first[0] == test:
        return first[1]
    if first[1] == test:
        return first[0]
    raise _NoMatchError(f"neither '{first[0]}' nor '{first[1]}' is '{test}'")


def _gates(w: np.ndarray, order: list[int], parts: int) -> np.ndarray:
    """Keras' ``[in, parts*U]`` matrix (or ``[parts*U]`` vector) as ONNX's ``[parts*U, in]`` in ``order``."""
    chunks = np.split(np.asarray(w), parts, axis=-1)
    return np.concatenate([chunks[i] for i in order], axis=-1).T


def _lstm(g: _Graph, y: str, x: str, states: list[_Var]) -> dict[str, object]:
    if len(states) != 2:
        raise _NoMatchError(f"an LSTM carries 2 states, this loop {len(states)}")
    h = next((s for s in states if g.root(s.next) == y), None)
    if h is None:
        raise _NoMatchError("the output written is not a state")
    c = next(s for s in states if s is not h)
    c_next = g.root(c.next)
    a, b = _pair(g, y, "Mul")
    try:
        (rec, o_in), (act, c_in) = _act(g, a), _act(g, b)
        if c_in != c_next:
            raise _NoMatchError("")
    except _NoMatchError:
        (rec, o_in), (act, c_in) = _act(g, b), _act(g, a)
    if c_in != c_next:
        raise _NoMatchError("h' is not a(o) * b(c')")
    forget, inner = _mul_with(g, _pair(g, c_next, ("AddV2", "Add")), c.body)
    f_act, f_in = _act(g, _either(forget, c.body))
    ia, ib = _pair(g, inner, "Mul")
    (i_act, i_in), (g_act, g_in) = _act(g, ia), _act(g, ib)
    split, o_index = _split(g, o_in, 4)
    indexes = {}
    for tensor, act_name in ((i_in, i_act), (g_in, g_act)):
        part, index = _split(g, tensor, 4)
        if part is not split:
            raise _NoMatchError("the gates come from different Splits")
        indexes[index] = act_name
    if set(indexes) != {0, 2}:
        raise _NoMatchError("i and g are not the first and third gates")
    if _split(g, f_in, 4) != (split, 1) or o_index != 3:
        raise _NoMatchError("f and o are not the second and fourth gates")
    if not (indexes[0] == f_act == rec) or indexes[2] != act:
        raise _NoMatchError("the gates' activations differ")
    z = _affine(g, split.inputs[1], x, h.body)
    if z.w is None or z.r is None:
        raise _NoMatchError("the gates are not x W + h R (+ b)")
    units = z.r.shape[0]
    bias = np.zeros(4 * units) if z.b is None else z.b
    order = [0, 3, 1, 2]  # Keras i, f, c, o -> ONNX i, o, f, c
    return {"kind": "LSTM", "units": units, "W": _gates(z.w, order, 4), "R": _gates(z.r, order, 4),
            "B": np.concatenate([_gates(bias, order, 4), np.zeros(4 * units)]).astype(z.w.dtype),
            "activations": [rec, act, act], "states": [h, c]}


def _third(g: _Graph, tensor: str) -> tuple[str, int | None, tuple[int, int | None] | None]:
    """A third of the recurrent term: (its source, the Split's index or None, a StridedSlice's columns)."""
    node = g.op(tensor, "Split", "StridedSlice")
    if node is None:
        raise _NoMatchError(f"'{g.root(tensor)}' is not a third of h R + b")
    if node.op == "Split":
        part, index = _split(g, tensor, 3)
        return g.root(part.inputs[1]), index, None
    begin, end, strides = (g.const(t) for t in node.inputs[1:4])
    if begin is None or end is None or strides is None or begin.shape != (2,) or strides.tolist() != [1, 1]:
        raise _NoMatchError(f"'{node.name}' is not a slice of columns")
    masks = {k: int(node.attrs.get(k, 0)) for k in ("begin_mask", "end_mask", "shrink_axis_mask",  # type: ignore[call-overload]
                                                       "new_axis_mask", "ellipsis_mask")}
    if masks["begin_mask"] & 1 != 1 or masks["end_mask"] & 1 != 1:
        raise _NoMatchError(f"'{node.name}' slices the batch")
    if masks["shrink_axis_mask"] or masks["new_axis_mask"] or masks["ellipsis_mask"]:
        raise _NoMatchError(f"'{node.name}' changes the rank")
    lo = 0 if masks["begin_mask"] & 2 else int(begin[1])
    hi = None if masks["end_mask"] & 2 else int(end[1])
    return g.root(node.inputs[0]), None, (lo, hi)


def _thirds(g: _Graph, tensors: list[str], x: str, h: str) -> _Affine:
    """The recurrent term of a GRU, ``h R + b_h``, cut in the thirds z, r, h (a Split or StridedSlices)."""
    found = [_third(g, t) for t in tensors]
    if len({f[0] for f in found}) != 1:
        raise _NoMatchError("the recurrent thirds come from different tensors")
    inner = _affine(g, found[0][0], x, h)
    if inner.r is None or inner.w is not None:
        raise _NoMatchError("the recurrent term is not h R (+ b)")
    units = inner.r.shape[0]
    for want, (_, index, cols) in enumerate(found):
        if index is not None and index != want:
            raise _NoMatchError("the recurrent thirds are not z, r, h in order")
        if cols is not None:
            lo, hi = cols[0], 3 * units if cols[1] is None else cols[1]
            if (lo, hi) != (want * units, (want + 1) * units):
                raise _NoMatchError(f"columns {lo}:{hi} are not the third {want} of {3 * units}")
    return inner


def _gru(g: _Graph, y: str, x: str, states: list[_Var]) -> dict[str, object]:
    if len(states) != 1 or g.root(states[0].next) != y:
        raise _NoMatchError("a GRU carries its output as its one state")
    h = states[0]
    keep, new = _mul_with(g, _pair(g, y, ("AddV2", "Add")), h.body)
    z = _either(keep, h.body)
    cand = None
    for one_minus, other in (_pair(g, new, "Mul"), _pair(g, new, "Mul")[::-1]):
        sub = g.op(one_minus, "Sub")
        one = g.const(sub.inputs[0]) if sub is not None else None
        if sub is not None and g.root(sub.inputs[1]) == z and one is not None and one.size == 1 \
                and float(one.reshape(-1)[0]) == 1.0:
            cand = other
    if cand is None:
        raise _NoMatchError("h' is not z * h + (1 - z) * hh")
    act, hh_in = _act(g, cand)
    rec, z_in = _act(g, z)
    p, q = _pair(g, hh_in, ("AddV2", "Add"))
    xh, rh = (q, p) if g.op(p, "Mul") is not None else (p, q)
    r, inner_h = _pair(g, rh, "Mul")
    if g.op(r, *_ACTIVATIONS) is None:
        r, inner_h = inner_h, r
    rec_r, r_in = _act(g, r)
    xsplit, xh_index = _split(g, xh, 3)
    if xh_index != 2 or rec_r != rec:
        raise _NoMatchError("hh does not read the input's third third, or z and r differ in activation")
    inner_parts = []
    for want, pre in enumerate((z_in, r_in)):
        p, q = _pair(g, pre, ("AddV2", "Add"))
        node_p = g.op(p, "Split")
        xpart, other = (p, q) if node_p is xsplit else (q, p)
        if _split(g, xpart, 3) != (xsplit, want):
            raise _NoMatchError("z and r do not read the input's first and second thirds")
        inner_parts.append(other)
    xw = _affine(g, xsplit.inputs[1], x, None)
    inner = _thirds(g, [*inner_parts, inner_h], x, h.body)
    if xw.w is None or xw.r is not None or inner.r is None:
        raise _NoMatchError("the input term is not x W (+ b)")
    units = inner.r.shape[0]
    bx = np.zeros(3 * units) if xw.b is None else xw.b
    bh = np.zeros(3 * units) if inner.b is None else inner.b
    order = [0, 1, 2]  # Keras z, r, h = ONNX z, r, h
    return {"kind": "GRU", "units": units, "W": _gates(xw.w, order, 3), "R": _gates(inner.r, order, 3),
            "B": np.concatenate([bx, bh]).astype(xw.w.dtype), "activations": [rec, act],
            "linear_before_reset": 1, "states": [h]}


def _simple(g: _Graph, y: str, x: str, states: list[_Var]) -> dict[str, object]:
    if len(states) != 1 or g.root(states[0].next) != y:
        raise _NoMatchError("a SimpleRNN carries its output as its one state")
    h = states[0]
    act, pre = _act(g, y)
    z = _affine(g, pre, x, h.body)
    if z.w is None or z.r is None:
        raise _NoMatchError("the cell is not b(x W + h R + b)")
    units = z.r.shape[0]
    bias = np.zeros(units) if z.b is None else z.b
    return {"kind": "RNN", "units": units, "W": z.w.T, "R": z.r.T,
            "B": np.concatenate([bias, np.zeros(units)]).astype(z.w.dtype), "activations": [act], "states": [h]}


def _zeros(g: _Graph, tensor: str) -> bool:
    """Return True when ``tensor`` is all zeros (a constant, or Keras' ``Fill(shape, 0)``)."""
    value = g.const(tensor)
    if value is None:
        fill = g.op(tensor, "Fill")
        value = g.const(fill.inputs[1]) if fill is not None else None
    return value is not None and not np.any(value)


def _match(g: _Graph, cond: TFNode) -> tuple[TFNode, list[TFNode], dict[str, object]]:
    """Return the recurrent node standing for the loop of ``cond``, the nodes to replace, and the
    consumers' renames; raise ``_NoMatchError`` with the reason otherwise."""
    variables = _loop_vars(g, cond)
    lists = [v for v in variables if g.op(v.init, "TensorListFromTensor", "TensorListReserve")]
    xs = [v for v in lists if g.op(v.init, "TensorListFromTensor")]
    ys = [v for v in lists if g.op(v.init, "TensorListReserve")]
    if len(xs) != 1 or len(ys) != 1 or len(lists) != 2:
        raise _NoMatchError("it does not read one sequence and write one")
    xv, yv = xs[0], ys[0]
    if g.root(xv.next) != xv.body:
        raise _NoMatchError("it changes its input sequence")
    counters = {v.merge.name: v for v in variables if _is_counter(g, v)}
    passthrough = {v.merge.name: v for v in variables if g.root(v.next) == v.body and v not in lists}
    states = [v for v in variables if v.merge.name not in counters and v.merge.name not in passthrough
              and v not in lists]
    steps = _iterations(g, cond, counters, passthrough)
    sequence = g.root(g.node(xv.init).inputs[0])
    seq_shape = g.node(sequence).shapes[int(sequence.split(":")[1])]
    if seq_shape is None or len(seq_shape) != 3 or seq_shape[0] is None:
        raise _NoMatchError("its sequence has no static length (time-major [T, N, C])")
    if steps != seq_shape[0]:
        raise _NoMatchError(f"it runs {steps} steps over a sequence of {seq_shape[0]}")
    write = g.op(yv.next, "TensorListSetItem")
    if write is None or g.root(write.inputs[0]) != yv.body:
        raise _NoMatchError("it does not write its output list element by element")
    direct = [n for n in g.consumers.get(xv.body, []) if n.op != "NextIteration"]
    read = [n for n in direct if n.op != "Identity"] + [
        n for i in direct if i.op == "Identity" for n in g.consumers.get(f"{i.name}:0", [])]
    if len(read) != 1 or read[0].op != "TensorListGetItem":
        raise _NoMatchError("it does not read its input sequence element by element")
    time = g.root(read[0].inputs[1]).split(":")[0]
    counter = next((v for v in counters.values() if v.body.split(":")[0] == time.split(":")[0]
                    or g.root(v.body) == g.root(read[0].inputs[1])), None)
    if counter is None:
        raise _NoMatchError("it reads its input at another index than its step")
    index = g.root(write.inputs[1])
    reserve = g.op(yv.init, "TensorListReserve")
    assert reserve is not None
    length = g.const(reserve.inputs[1])
    if index == g.root(counter.body) and length is not None and int(length) in (steps, -1):
        all_steps = True
    elif g.const(index) is not None and int(g.const(index)) == 0 and length is not None and int(length) == 1:  # type: ignore[arg-type]
        all_steps = False
    else:
        raise _NoMatchError("its output list is neither every step nor the last one")
    x_t = f"{read[0].name}:0"
    y_t = g.root(write.inputs[2])
    reasons = []
    for matcher in (_lstm, _gru, _simple):
        try:
            found = matcher(g, y_t, x_t, states)
            break
        except _NoMatchError as why:
            reasons.append(f"{matcher.__name__.strip('_')}: {why}")
    else:
        raise _NoMatchError("its body is not a Keras LSTM, GRU (reset_after) or SimpleRNN cell ("
                            + "; ".join(reasons) + ")")
    if yv.exit is None:
        raise _NoMatchError("its output list does not leave the loop")
    stacks = g.consumers.get(f"{yv.exit.name}:0", [])
    if not stacks or any(n.op != "TensorListStack" for n in stacks):
        raise _NoMatchError("its output list is read by another op than TensorListStack")
    state_vars: list[_Var] = found.pop("states")  # type: ignore[assignment]
    inits = [g.root(v.init) for v in state_vars]
    given = [not _zeros(g, t) for t in inits]
    units = int(found["units"])  # type: ignore[call-overload]
    stack = stacks[0]
    dtype = stack.dtypes[0]
    given_inits = [t for t, k in zip(inits, given, strict=True) if k]
    node = TFNode(name=stack.name, op=RECURRENT_OP, inputs=[sequence, *given_inits],
                  attrs={**found, "all_steps": all_steps, "init_given": given, "loop": cond.name},
                  shapes=[stack.shapes[0] or (steps if all_steps else 1, seq_shape[1], units)]
                  + [(seq_shape[1], units)] * len(state_vars),
                  dtypes=[dtype] * (1 + len(state_vars)))
    renames: dict[str, object] = {f"{s.name}:0": f"{node.name}:0" for s in stacks[1:]}
    for i, var in enumerate(state_vars, start=1):
        if var.exit is not None:
            renames[f"{var.exit.name}:0"] = f"{node.name}:{i}"
    used_exits = {f"{v.exit.name}:0" for v in variables if v.exit is not None and g.consumers.get(f"{v.exit.name}:0")}
    stray = used_exits - set(renames) - {f"{yv.exit.name}:0"}
    if stray:
        raise _NoMatchError(f"its result '{sorted(stray)[0]}' is read after the loop")
    return node, stacks, renames


def recognise_recurrent(graph: TFGraph) -> int:
    """Replace each lowered while loop that is a Keras LSTM/GRU/SimpleRNN by one ``KerasRecurrent``
    node; record why the others are not (``graph.loops``). Return how many were replaced."""
    conds = [n for n in graph.nodes if n.op == "LoopCond"]
    if not conds:
        return 0
    g = _Graph(graph)
    replaced: dict[str, TFNode] = {}
    renames: dict[str, object] = {}
    for cond in conds:
        try:
            node, stacks, names = _match(g, cond)
        except _NoMatchError as why:
            graph.loops[cond.name] = str(why)
            logger.debug("tensorflow: loop '%s' not recognised: %s", cond.name, why)
            continue
        replaced[stacks[0].name] = node
        for extra in stacks[1:]:
            replaced[extra.name] = None  # type: ignore[assignment]
        renames.update(names)
    if not replaced:
        return 0
    nodes = []
    for node in graph.nodes:
        if node.name in replaced:
            if replaced[node.name] is not None:
                nodes.append(replaced[node.name])
            continue
        if any(_norm(t) in renames for t in node.inputs):
            node.inputs = [str(renames.get(_norm(t), t)) for t in node.inputs]
        nodes.append(node)
    graph.nodes[:] = nodes
    graph.outputs.update({k: str(renames.get(_norm(v), v)) for k, v in graph.outputs.items()})
    return sum(1 for v in replaced.values() if v is not None)
