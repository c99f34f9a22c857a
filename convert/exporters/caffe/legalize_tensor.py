"""Rewrite reductions, tiling and mean-variance normalisation into Caffe's own layers.

Rules (registered after ``legalize.RULES``; MVN's before the spatial-reduce rule of ``legalize``),
each preserving the graph's values exactly:

* ``ReduceMean(x, A) -> Sub(x, .)`` [``-> Mul(c, c) -> ReduceMean(., A) -> Sqrt -> Add(., eps) ->
  Div(c, .)``], ``A`` the axes from 2 (per channel) or from 1 (``across_channels``) to the end,
  kept -> ``convert.caffe::MVN(x)`` (``normalize_variance`` when the variance part is there).
  Caffe divides by ``sqrt(variance) + eps``: eps is added to the standard deviation, as here.
* ``ReduceSum / ReduceL1 / ReduceSumSquare / ReduceMean`` over the trailing axes ``k .. r-1`` (of
  ``x``, or of ``x`` before a ``Reshape`` that only merged those axes into the last one)
  [``-> Mul`` by a scalar constant] -> ``convert.caffe::Reduction(x, axis=k, coeff)``: Caffe's
  Reduction (SUM, ASUM, SUMSQ, MEAN) reduces every axis from ``axis`` on and keeps the ones before;
  ``keepdims=1`` adds a ``Reshape`` to the kept shape.
* ``ReduceMax`` over one axis with ``keepdims=0`` -> ``ReduceMax`` (kept) -> ``Reshape``: the kept
  form is Caffe's ArgMax with ``out_max_val``.
* ``Tile`` repeating several axes -> one ``Tile`` per repeated axis (Caffe's Tile repeats one).
* ``Reshape(x, (N, -1)) -> ArgMax(axis 1, kept) -> Cast(float) -> Reshape(N, 1, 1[, 1])`` [with
  ``Concat(., ReduceMax(flat, 1))`` before the last Reshape] -> ``convert.caffe::ArgMax(x)``:
  Caffe's ArgMax without ``axis`` (over each item's values; ``out_max_val`` gives [index, max]).

Preconditions: static shapes on the values involved (the exporter runs shape inference first).
"""

from __future__ import annotations

from convert.ir import DataType, Node, Shape, TensorType, Value, convenience
from convert.ir.passes.rewrite import Match, Rewriter, Rule

from .layers import CAFFE_DOMAIN
from .legalize import _axes, _const, _i64, _only_use, _onnx, _out, _static

__all__ = ["MVN_RULES", "TENSOR_RULES", "reduction_reason"]

# Caffe's ReductionParameter.ReductionOp: SUM = 1, ASUM = 2, SUMSQ = 3, MEAN = 4.
REDUCTION_OPS = {"ReduceSum": 1, "ReduceL1": 2, "ReduceSumSquare": 3, "ReduceMean": 4}


def _float(value: Value | None) -> bool:
    return value is not None and value.dtype in (None, DataType.FLOAT)


def reduce_axes(node: Node, rank: int) -> list[int] | str:
    """Return the node's reduced axes, sorted and non-negative (all of them when none are given)."""
    given = node.inputs[1] if len(node.inputs) > 1 else None
    axes = _axes(node)
    if axes is None and given is not None:
        return "its axes are computed"
    if not axes:
        if node.attributes.get_int("noop_with_empty_axes", 0):
            return "it reduces nothing (noop_with_empty_axes)"
        return list(range(rank))
    return sorted({a + rank if a < 0 else a for a in axes})


def _kept(node: Node) -> bool:
    return bool(node.attributes.get_int("keepdims", 1))


def _scalar_mul(value: Value) -> tuple[Node, float] | None:
    """Return ``(Mul, c)`` when ``value`` feeds only a Mul by a scalar constant that keeps its shape."""
    mul = _only_use(value)
    if mul is None or mul.op_type != "Mul" or not _onnx(mul) or len(mul.inputs) != 2:
        return None
    other = mul.inputs[1] if mul.inputs[0] is value else mul.inputs[0]
    c = _const(other)
    shape = _static(value)
    if c is None or c.size != 1 or shape is None or c.ndim > len(shape) or mul.inputs[0] is mul.inputs[1]:
        return None
    return mul, float(c.reshape(-1)[0])


# -- Reduce* over trailing axes: Caffe's Reduction ---------------------------------------------------
def _check_reduction(node: Node) -> Match | str:
    x = node.inputs[0]
    shape = _static(x)
    if shape is None or not _float(x):
        return "its input is not a static float tensor"
    rank = len(shape)
    axes = reduce_axes(node, rank)
    if isinstance(axes, str):
        return axes
    k = axes[0] if axes else rank
    if not axes or axes != list(range(k, rank)):
        return (f"it reduces axes {axes} of a rank-{rank} input: Caffe's Reduction reduces every axis from one "
                "axis to the last")
    src, axis, absorbed = x, k, None
    flat = x.producer()
    if (k == rank - 1 and flat is not None and flat.op_type == "Reshape" and _onnx(flat)
            and _only_use(x) is node):
        before = _static(flat.inputs[0])
        if before is not None and len(before) >= rank and before[: rank - 1] == shape[: rank - 1]:
            src, axis, absorbed = flat.inputs[0], rank - 1, flat  # the Reshape only merged the reduced axes
    found: dict[str, object] = {"src": src, "axis": axis, "absorbed": absorbed, "coeff": 1.0, "last": node,
                                "lead": list(shape[:k]), "kept": _kept(node), "rank": rank}
    if not _kept(node):
        scaled = _scalar_mul(node.outputs[0])
        if scaled is not None:
            found.update(last=scaled[0], coeff=scaled[1])
    return Match(node, found)


def reduction_reason(node: Node) -> str:
    """Say why a Reduce* node has no Caffe Reduction form ('' when legalisation should have found one)."""
    found = _check_reduction(node)
    return found if isinstance(found, str) else ""


def _reduction(rw: Rewriter, m: Match) -> None:
    node, last, absorbed = m.node, m["last"], m["absorbed"]
    base = node.name or "reduction"
    attrs = {"operation": REDUCTION_OPS[node.op_type], "axis": m["axis"], "coeff": m["coeff"]}
    red = Node(CAFFE_DOMAIN, "Reduction", [m["src"]], convenience.convert_attributes(attrs),
               outputs=[_out(rw, f"{base}_reduced" if m["kept"] else base)], name=node.name)
    if m["kept"]:
        red.outputs[0].shape, red.outputs[0].type = Shape(m["lead"]), TensorType(DataType.FLOAT)
        rw.insert(node, red)
        target = _i64(rw, f"{base}.kept_shape", [*m["lead"], *([1] * (m["rank"] - len(m["lead"])))])
        back = Node("", "Reshape", [red.outputs[0], target], outputs=[_out(rw, base)], name=f"{base}_keepdims")
        rw.substitute(node, back)
    else:
        rw.substitute(last, red, source=node)
        if last is not node:
            rw.remove(node)
    if absorbed is not None and not absorbed.outputs[0].uses() and not absorbed.outputs[0].is_graph_output():
        rw.remove(absorbed)


# -- ReduceMax over one axis, not kept: kept (Caffe's ArgMax out_max_val) + Reshape -----------------
def _check_reduce_max_drop(node: Node) -> Match | str:
    shape = _static(node.inputs[0])
    if shape is None or _kept(node):
        return "not a static ReduceMax that drops its axis"
    axes = reduce_axes(node, len(shape))
    if isinstance(axes, str) or len(axes) != 1:
        return "it does not reduce one axis"
    return Match(node, {"axis": axes[0], "shape": shape})


def _reduce_max_drop(rw: Rewriter, m: Match) -> None:
    node, axis, shape = m.node, m["axis"], m["shape"]
    base = node.name or "max"
    kept = [1 if i == axis else d for i, d in enumerate(shape)]
    out = Value(name=rw.fresh(f"{base}_kept"), shape=Shape(kept), type=TensorType(DataType.FLOAT))
    rw.insert(node, Node("", "ReduceMax", [node.inputs[0]],
                         convenience.convert_attributes({"axes": [axis], "keepdims": 1}), outputs=[out],
                         name=rw.fresh(base)))
    target = _i64(rw, f"{base}.shape", [d for i, d in enumerate(shape) if i != axis])
    rw.substitute(node, Node("", "Reshape", [out, target], outputs=[_out(rw, base)], name=node.name))


# -- Tile over several axes: one Tile per axis -----------------------------------------------------
def _check_tile_axes(node: Node) -> Match | str:
    reps = _const(node.inputs[1]) if len(node.inputs) > 1 else None
    shape = _static(node.inputs[0])
    if reps is None or shape is None:
        return "computed repeats or a dynamic shape"
    repeats = [int(r) for r in reps.reshape(-1)]
    if sum(r != 1 for r in repeats) < 2:
        return "it repeats one axis at most"
    return Match(node, {"repeats": repeats, "shape": shape})


def _tile_axes(rw: Rewriter, m: Match) -> None:
    node, repeats = m.node, m["repeats"]
    base = node.name or "tile"
    cur, shape = node.inputs[0], list(m["shape"])
    axes = [a for a, r in enumerate(repeats) if r != 1]
    for i, a in enumerate(axes):
        shape[a] *= repeats[a]
        one = _i64(rw, f"{base}.repeats{a}", [repeats[a] if j == a else 1 for j in range(len(repeats))])
        if i == len(axes) - 1:
            rw.substitute(node, Node("", "Tile", [cur, one], outputs=[_out(rw, base)], name=node.name))
            return
        out = Value(name=rw.fresh(f"{base}_axis{a}"), shape=Shape(list(shape)), type=node.outputs[0].type)
        rw.insert(node, Node("", "Tile", [cur, one], outputs=[out], name=rw.fresh(f"{base}_axis{a}")))
        cur = out


# -- mean-variance normalisation: Caffe's MVN -------------------------------------------------------
def _variance_chain(c: Value, axes: list[int]) -> tuple[list[Node], float] | None:
    """Return ``([Div, Add, Sqrt, ReduceMean, Mul], eps)`` when ``c`` is divided by its own
    ``sqrt(mean(c * c over axes)) + eps`` and read by nothing else."""
    if c.is_graph_output():
        return None
    users = {id(u.node): u.node for u in c.uses()}
    muls = [n for n in users.values() if n.op_type == "Mul" and list(n.inputs) == [c, c]]
    divs = [n for n in users.values() if n.op_type == "Div" and n.inputs[0] is c and n.inputs[1] is not c]
    if len(users) != 2 or len(muls) != 1 or len(divs) != 1:
        return None
    mul, div = muls[0], divs[0]
    var = _only_use(mul.outputs[0])
    if var is None or var.op_type != "ReduceMean" or not _kept(var) or var.inputs[0] is not mul.outputs[0]:
        return None
    shape = _static(c)
    if shape is None or reduce_axes(var, len(shape)) != axes:
        return None
    sqrt = _only_use(var.outputs[0])
    add = _only_use(sqrt.outputs[0]) if sqrt is not None and sqrt.op_type == "Sqrt" else None
    if add is None or add.op_type != "Add" or _only_use(add.outputs[0]) is not div:
        return None
    if sqrt is None or div.inputs[1] is not add.outputs[0]:
        return None
    eps = _const(add.inputs[1] if add.inputs[0] is sqrt.outputs[0] else add.inputs[0])
    if eps is None or eps.size != 1:
        return None
    nodes = [div, add, sqrt, var, mul]
    if not all(_onnx(n) for n in nodes):
        return None
    return nodes, float(eps.reshape(-1)[0])


def _check_mvn(node: Node) -> Match | str:
    x = node.inputs[0]
    shape = _static(x)
    if shape is None or not 2 <= len(shape) <= 4 or not _kept(node) or not _float(x):
        return "not a kept mean of a static float tensor of rank 2 to 4 (Caffe's MVN reads N, C, H, W)"
    rank = len(shape)
    axes = reduce_axes(node, rank)
    across = axes == list(range(1, rank))
    if not across and not (rank > 2 and axes == list(range(2, rank))):
        return "it does not average over the axes from 1 or from 2 to the end"
    sub = _only_use(node.outputs[0])
    if sub is None or sub.op_type != "Sub" or not _onnx(sub) or list(sub.inputs) != [x, node.outputs[0]]:
        return "the mean is not subtracted from its own input, alone"
    chain = _variance_chain(sub.outputs[0], axes)
    attrs: dict[str, object] = {"across_channels": int(across), "normalize_variance": int(chain is not None)}
    if chain is not None:
        attrs["eps"] = chain[1]
    return Match(node, {"sub": sub, "chain": chain[0] if chain is not None else [], "attrs": attrs})


def _mvn(rw: Rewriter, m: Match) -> None:
    node, sub, chain = m.node, m["sub"], m["chain"]
    last = chain[0] if chain else sub
    mvn = Node(CAFFE_DOMAIN, "MVN", [node.inputs[0]], convenience.convert_attributes(m["attrs"]),
               outputs=[_out(rw, last.outputs[0].name or "mvn")], name=last.name or node.name)
    rw.substitute(last, mvn)
    rw.remove(*chain[1:], *([sub] if chain else []), node)


# -- ArgMax without an axis: over each item's flattened values -------------------------------------
def _flat_input(value: Value) -> tuple[Node, Value] | None:
    """Return ``(Reshape, x)`` when ``value`` is ``x`` (N, ...) reshaped to (N, everything else)."""
    flat = value.producer()
    if flat is None or flat.op_type != "Reshape" or not _onnx(flat):
        return None
    x = flat.inputs[0]
    xs, fs = _static(x), _static(value)
    if x is None or xs is None or fs is None or len(fs) != 2 or len(xs) < 2 or fs[0] != xs[0]:
        return None
    return flat, x


def _check_flat_argmax(node: Node) -> Match | str:
    found = _flat_input(node.inputs[0])
    if found is None or node.attributes.get_int("axis", 0) % 2 != 1 or not _kept(node):
        return "not an arg-max over axis 1, kept, of an input flattened to (N, -1)"
    flat, x = found
    cast = _only_use(node.outputs[0])
    if cast is None or cast.op_type != "Cast" or cast.attributes.get_int("to", 0) != DataType.FLOAT:
        return "its index is not read through one cast to float"
    rank = max(3, len(_static(x) or ()))
    n = (_static(x) or (0,))[0]
    nxt = _only_use(cast.outputs[0])
    reduce_max = None
    tail = cast
    if nxt is not None and nxt.op_type == "Concat" and len(nxt.inputs) == 2 and nxt.inputs[0] is cast.outputs[0]:
        reduce_max = nxt.inputs[1].producer() if nxt.inputs[1] is not None else None
        if (reduce_max is None or reduce_max.op_type != "ReduceMax" or reduce_max.inputs[0] is not node.inputs[0]
                or not _kept(reduce_max) or reduce_axes(reduce_max, 2) != [1]
                or _only_use(reduce_max.outputs[0]) is not nxt or nxt.attributes.get_int("axis", 0) % 2 != 1):
            return "the index is concatenated with something other than the maximum"
        tail = nxt
        nxt = _only_use(nxt.outputs[0])
    k = 2 if reduce_max is not None else 1
    if nxt is None or nxt.op_type != "Reshape" or _static(nxt.outputs[0]) != (n, k, 1, *([1] * (rank - 3))):
        return "the result is not reshaped to Caffe's (N, 1 or 2, 1, ...) top"
    if nxt.inputs[0] is not tail.outputs[0]:
        return "the reshape reads something else"
    users = {id(u.node) for u in flat.outputs[0].uses()}
    readers = {id(node)} | ({id(reduce_max)} if reduce_max is not None else set())
    dead = [nxt, tail, cast] if tail is not cast else [nxt, cast]
    dead += [reduce_max] if reduce_max is not None else []
    dead += [node]
    if users == readers and not flat.outputs[0].is_graph_output():
        dead.append(flat)
    return Match(node, {"x": x, "last": nxt, "dead": dead[1:], "max": reduce_max is not None})


def _flat_argmax(rw: Rewriter, m: Match) -> None:
    last = m["last"]
    am = Node(CAFFE_DOMAIN, "ArgMax", [m["x"]], convenience.convert_attributes({"out_max_val": int(m["max"])}),
              outputs=[_out(rw, last.outputs[0].name or "argmax")], name=last.name or m.node.name)
    rw.substitute(last, am)
    rw.remove(*m["dead"])


MVN_RULES: list[Rule] = [
    Rule("mean-variance normalisation -> MVN", ("ReduceMean",), _check_mvn, _mvn),
]

TENSOR_RULES: list[Rule] = [
    Rule("Reduce over trailing axes -> Reduction", tuple(REDUCTION_OPS), _check_reduction, _reduction),
    Rule("ReduceMax over one axis, dropped -> kept + Reshape", ("ReduceMax",), _check_reduce_max_drop,
         _reduce_max_drop),
    Rule("Tile over several axes -> Tile per axis", ("Tile",), _check_tile_axes, _tile_axes),
    Rule("ArgMax of a flattened input -> ArgMax without axis", ("ArgMax",), _check_flat_argmax, _flat_argmax),
]
