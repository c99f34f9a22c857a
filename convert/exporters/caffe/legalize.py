"""Rewrite IR patterns into the shapes the one-node-one-layer emitters expect.

Rules, in order (each preserves the graph's values exactly):

* ``Pad(x, zeros, symmetric spatial p) -> AveragePool(count_include_pad=0, end pads only)`` ->
  ``convert.caffe::AveragePool(x)`` with pads p: Caffe's AVE divisor counts the pad but not the
  ceil overhang, which is exactly this pair (the Caffe frontend lowers such pooling to it).
* ``AveragePool(count_include_pad=0)`` with begin pads p (TF's SAME) -> ``convert.caffe::AveragePool``
  with pads p on both sides -> ``convert.caffe::Scale`` by a constant (OH, OW) map of Caffe's divisor
  over the count of input pixels in each window (see ``_check_avg_pool_divisor``).
* ``MaxPool`` with end pad e > begin pad b that no Caffe rounding reproduces with pad b (TF SAME
  stride 1, even kernel) -> ``MaxPool`` with pad e on both sides -> ``Slice`` dropping the first
  (e - b) / stride windows (written as a Crop).
* ``ReduceMean`` / ``ReduceMax`` over the spatial axes of an (N, C, H, W) tensor ->
  ``GlobalAveragePool`` / ``GlobalMaxPool`` [``-> Reshape`` to (N, C) when ``keepdims=0``].
* ``MatMul(x, W) -> Add(., b)`` with constant 2-D ``W`` and 1-D ``b`` -> ``Gemm(x, W, b)``.
* ``BatchNormalization(x, gamma, beta, mean, var)`` with gamma != 1 or beta != 0 ->
  ``BatchNormalization(x, 1, 0, mean, var) -> convert.caffe::Scale(., gamma, beta)``
  (Caffe's BatchNorm has no affine part; BVLC pairs it with a Scale layer).
* ``Mul/Div/Add/Sub(x, c)`` with a constant ``c`` that varies over a contiguous block of ``x``'s
  axes (per-channel (C, 1, 1), per-feature (F,), ...) -> ``convert.caffe::Scale(x, gamma[, beta])``
  with Caffe's ``axis``/``num_axes`` (``Sub(c, x)`` is the Scale -1 with bias c); a ``Mul`` followed only by an ``Add``
  of that kind becomes one Scale with a bias.
* ``Mul(x, y)`` with ``x`` (N, C, H, W) and a computed ``y`` (N, C, 1, 1) (squeeze-excitation) ->
  ``Flatten(y) -> convert.caffe::Scale(x, ., axis=0)``: Caffe's two-bottom Scale.
* ``Div(x, Sqrt(Add(ReduceSumSquare(x, axes=[1] or [1, 2, 3]), eps)))`` [``-> Mul(., s)`` with a
  per-channel or scalar constant ``s``] -> ``convert.caffe::Normalize(x, s)`` (SSD's Normalize).
* ``Transpose(u, perm=(0, 2, 1, 3)) -> Softmax(axis=1) -> Conv(1x1, weight (1, R, 1, 1))`` on ``u``
  of shape (N, A, R, P) (YOLOv8's DFL box decoding: a softmax over R bins and their expectation)
  -> ``Softmax(u, axis=2) -> Reshape(N, A*R, P, 1) -> Conv(group=A, the weight per group) ->
  Reshape(N, 1, A, P)``: the same sums with no Permute, which BVLC and PSPNet lack.
* ``Slice`` (step 1) that cuts several axes, when no earlier blob has the target's dims from the
  first cut axis on (Caffe's ``Crop`` copies its sizes from such a reference blob; the Caffe
  frontend's lowering of a ``Crop`` whose reference fed nothing else leaves none) -> one
  ``Slice`` per cut axis, each written as Caffe's ``Slice`` (or a ``Crop`` when a reference exists).

Reductions, tiling, arg-max and mean-variance normalisation have their rules in ``legalize_tensor.py``.

Preconditions: static shapes on the values involved (the exporter runs shape inference first).
"""

from __future__ import annotations

import logging

import numpy as np

from convert.ir import DataType, Model, Node, Shape, TensorType, Value, convenience, replace_value
from convert.ir.passes import PassResult
from convert.ir.passes.rewrite import Match, Rewriter, RewriteRules, Rule

from .layers import CAFFE_DOMAIN, caffe_pool_size

__all__ = ["RULES", "LegalizeForCaffe"]

logger = logging.getLogger(__name__)


def _const(value: Value | None) -> np.ndarray | None:
    if value is None or value.const_value is None:
        return None
    return np.asarray(value.const_value.numpy())


def _static(value: Value | None) -> tuple[int, ...] | None:
    if value is None or value.shape is None or not all(isinstance(d, int) for d in value.shape):
        return None
    return tuple(d for d in value.shape if isinstance(d, int))


def _ints_attr(node: Node, name: str) -> list[int]:
    attr = node.attributes.get(name)
    return [int(v) for v in attr.value] if attr is not None else []


def _per_channel(x: Value, c: np.ndarray) -> np.ndarray | None:
    """Return ``c`` as a (C,) vector when it broadcasts along axis 1 of ``x`` only."""
    shape = _static(x)
    if shape is None or len(shape) < 2 or c.size <= 1:
        return None
    dims = list(c.shape)
    while dims and dims[0] == 1 and len(dims) > len(shape) - 1:
        dims.pop(0)
    want = [shape[1]] + [1] * (len(shape) - 2)
    if dims != want:
        return None
    return c.reshape(-1).astype(np.float32)


def _span(x: Value, c: np.ndarray) -> tuple[int, tuple[int, ...]] | None:
    """Return ``(axis, dims)`` when ``c`` varies over a contiguous block of ``x``'s axes only.

    That is what Caffe's Scale (``axis``, ``num_axes``) applies: ``dims == x.shape[axis:axis+k]``.
    """
    shape = _static(x)
    if shape is None or c.size <= 1 or c.ndim > len(shape):
        return None
    dims = (1,) * (len(shape) - c.ndim) + tuple(int(d) for d in c.shape)
    varying = [i for i, d in enumerate(dims) if d != 1]
    first, last = varying[0], varying[-1]
    if any(dims[k] != shape[k] for k in range(first, last + 1)):
        return None
    return first, shape[first : last + 1]


def _onnx(node: Node) -> bool:
    return node.domain in ("", "ai.onnx")


def _only_use(value: Value) -> Node | None:
    """Return the one node that reads ``value`` when nothing else does (nor the graph's outputs)."""
    if value.is_graph_output() or len(value.uses()) != 1:
        return None
    return next(iter(value.uses())).node


def _f32(rw: Rewriter, base: str, arr: np.ndarray) -> Value:
    return rw.const(np.asarray(arr, dtype=np.float32), base)


def _i64(rw: Rewriter, base: str, values: list[int]) -> Value:
    return rw.const(np.asarray(values, dtype=np.int64), base)


def _out(rw: Rewriter, base: str) -> Value:
    return Value(name=rw.fresh(base))


# -- MatMul(x, W) -> Add(., b): Gemm, or InnerProduct over the trailing axes ----------------------
def _check_matmul_add(node: Node) -> Match | str:
    w = _const(node.inputs[1])
    if w is None or w.ndim != 2:
        return "the weight is not a constant matrix"
    add = _only_use(node.outputs[0])
    if add is None or add.op_type != "Add" or not _onnx(add):
        return "its output does not feed one Add only"
    out = node.outputs[0]
    b = _const(add.inputs[1] if add.inputs[0] is out else add.inputs[0])
    if b is None or b.size != w.shape[1] or any(d != 1 for d in b.shape[:-1]):
        return "the Add's other operand is not a bias vector"
    shape = _static(node.inputs[0])
    return Match(node, {"add": add, "bias": b.reshape(-1), "inner": shape is not None and len(shape) > 2})


def _matmul_add(rw: Rewriter, m: Match) -> None:
    node, add = m.node, m["add"]
    bias = _f32(rw, f"{node.name or 'matmul'}.bias", m["bias"])
    if m["inner"]:
        ip = Node(CAFFE_DOMAIN, "InnerProduct", [node.inputs[0], node.inputs[1], bias],
                  outputs=[_out(rw, add.outputs[0].name or "ip")], name=node.name)
        rw.substitute(add, ip, source=node)
        rw.remove(node)
        return
    gemm = Node("", "Gemm", [node.inputs[0], node.inputs[1], bias],
                outputs=[_out(rw, add.outputs[0].name or "gemm")], name=node.name)
    rw.insert(node, gemm)
    add_out = add.outputs[0]
    gemm.outputs[0].shape, gemm.outputs[0].type = add_out.shape, add_out.type
    replace_value(rw.graph, add_out, gemm.outputs[0])
    rw.remove(add, node)


# -- ReduceMean / ReduceMax over H, W: GlobalAveragePool / GlobalMaxPool [-> Reshape] ------------
def _axes(node: Node) -> list[int] | None:
    """The node's reduction axes (attribute, or a constant second input)."""
    attr = node.attributes.get("axes")
    if attr is not None:
        return [int(a) for a in attr.value]
    given = _const(node.inputs[1]) if len(node.inputs) > 1 else None
    return None if given is None else [int(a) for a in given.reshape(-1)]


def _check_global_reduce(node: Node) -> Match | str:
    shape = _static(node.inputs[0])
    if shape is None or len(shape) != 4:
        return "its input is not a static 4-D tensor"
    axes = _axes(node)
    if axes is None:
        return "its axes are computed"
    if sorted(a + 4 if a < 0 else a for a in axes) != [2, 3]:
        return "it does not reduce exactly the spatial axes"
    return Match(node, {"shape": shape})


def _global_reduce(rw: Rewriter, m: Match) -> None:
    node, shape = m.node, m["shape"]
    op = "GlobalAveragePool" if node.op_type == "ReduceMean" else "GlobalMaxPool"
    base = node.name or op
    pool = Node("", op, [node.inputs[0]], outputs=[_out(rw, f"{base}_pool")], name=base)
    pool.outputs[0].shape = Shape([shape[0], shape[1], 1, 1])
    pool.outputs[0].type = TensorType(DataType.FLOAT)
    if node.attributes.get_int("keepdims", 1):
        rw.substitute(node, pool)
        return
    rw.insert(node, pool)
    target = _i64(rw, f"{base}.shape", [shape[0], shape[1]])
    reshape = Node("", "Reshape", [pool.outputs[0], target], outputs=[_out(rw, base)], name=f"{base}_flatten")
    rw.substitute(node, reshape)


# -- Pad(zeros, symmetric H/W) -> AveragePool(count_include_pad=0): Caffe's AVE pooling ----------
def _check_pad_avg_pool(node: Node) -> Match | str:
    pad = node.inputs[0].producer() if node.inputs[0] is not None else None
    if pad is None or pad.op_type != "Pad" or not _onnx(pad):
        return "its input is not a Pad's"
    if node.attributes.get_int("count_include_pad", 0):
        return "it counts the pad already"
    if pad.attributes.get_string("mode", "constant") != "constant":
        return "the Pad is not constant"
    if _only_use(pad.outputs[0]) is None or len(pad.inputs) > 3:
        return "the Pad's output has other readers"
    pads = _const(pad.inputs[1])
    value = _const(pad.inputs[2]) if len(pad.inputs) > 2 else None
    if pads is None or pads.size != 8 or (value is not None and np.any(value != 0)):
        return "the Pad is not a constant zero 4-D pad"
    p = [int(v) for v in pads]
    if p[0] or p[1] or p[4] or p[5] or p[2] != p[6] or p[3] != p[7]:
        return "the Pad is not symmetric on H and W only"
    own = [int(v) for v in node.attributes["pads"].value] if "pads" in node.attributes else [0, 0, 0, 0]
    if own[0] or own[1]:
        return "the pooling pads its start itself"
    return Match(node, {"pad": pad, "p": p, "own": own})


def _pad_avg_pool(rw: Rewriter, m: Match) -> None:
    node, pad, p, own = m.node, m["pad"], m["p"], m["own"]
    strides = list(node.attributes["strides"].value) if "strides" in node.attributes else [1, 1]
    attrs = {
        "kernel_shape": list(node.attributes["kernel_shape"].value),
        "strides": strides,
        "pads": [p[2], p[3], p[2] + own[2], p[3] + own[3]],
    }
    new = Node(CAFFE_DOMAIN, "AveragePool", [pad.inputs[0]], convenience.convert_attributes(attrs),
               outputs=[_out(rw, node.outputs[0].name or "pool")], name=node.name)
    rw.substitute(node, new)
    rw.remove(pad)


# -- BatchNormalization with an affine part: BatchNormalization(1, 0) -> Scale -------------------
def _check_batch_norm(node: Node) -> Match | str:
    gamma, beta = _const(node.inputs[1]), _const(node.inputs[2])
    if gamma is None or beta is None or len(node.outputs) != 1:
        return "its scale or bias is computed, or it has training outputs"
    if np.all(gamma == 1) and np.all(beta == 0):
        return "it has no affine part"
    return Match(node, {"gamma": gamma, "beta": beta})


def _batch_norm(rw: Rewriter, m: Match) -> None:
    node, gamma, beta = m.node, m["gamma"], m["beta"]
    c = gamma.size
    base = node.name or "bn"
    ones = _f32(rw, f"{base}.unit_scale", np.ones(c))
    zeros = _f32(rw, f"{base}.zero_bias", np.zeros(c))
    bn = Node("", "BatchNormalization", [node.inputs[0], ones, zeros, node.inputs[3], node.inputs[4]],
              node.attributes.values(), outputs=[_out(rw, f"{base}_norm")], name=node.name)
    out = node.outputs[0]
    bn.outputs[0].shape, bn.outputs[0].type = out.shape, out.type
    rw.insert(node, bn)
    g = _f32(rw, f"{base}.gamma", gamma.reshape(-1))
    b = _f32(rw, f"{base}.beta", beta.reshape(-1))
    scale = Node(CAFFE_DOMAIN, "Scale", [bn.outputs[0], g, b], outputs=[_out(rw, f"{base}_scale")],
                 name=f"{node.name}_scale")
    rw.substitute(node, scale)


# -- Mul/Div/Add/Sub by a constant over a block of axes: Scale (a following Add: its bias) --------
def _check_scale(node: Node) -> Match | str:
    a, b = node.inputs[0], node.inputs[1]
    cb = _const(b)
    negate = False
    if cb is None or _const(a) is not None:
        if node.op_type in ("Mul", "Add", "Sub") and _const(a) is not None and cb is None:
            a, b, cb = b, a, _const(a)
            negate = node.op_type == "Sub"  # c - x = (-1) * x + c (YOLOv8's anchor - lt)
        else:
            return "neither operand is a constant, or both are"
    if a is None or cb is None:
        return "an operand is missing"
    span = _span(a, cb)
    if span is None:
        return "the constant does not vary over one block of axes"
    axis, dims = span
    vec = cb.reshape(dims).astype(np.float32)
    gamma, beta = np.ones(dims, np.float32), None
    if node.op_type == "Mul":
        gamma = vec
    elif node.op_type == "Div":
        gamma = (1.0 / vec).astype(np.float32)
    elif node.op_type == "Add":
        beta = vec
    elif negate:
        gamma, beta = -np.ones(dims, np.float32), vec
    else:
        beta = -vec
    found = {"x": a, "gamma": gamma, "beta": beta, "axis": axis, "then": None}
    nxt = _only_use(node.outputs[0]) if beta is None and not negate else None
    if nxt is not None and nxt.op_type in ("Add", "Sub") and _onnx(nxt) and nxt.inputs[0] is node.outputs[0]:
        cn = _const(nxt.inputs[1])
        if cn is not None and _span(node.outputs[0], cn) == span:
            vn = cn.reshape(dims).astype(np.float32)
            found.update(beta=vn if nxt.op_type == "Add" else -vn, then=nxt)
    return Match(node, found)


def _scale(rw: Rewriter, m: Match) -> None:
    node, then, beta = m.node, m["then"], m["beta"]
    base = node.name or "scale"
    inputs = [m["x"], _f32(rw, f"{base}.gamma", m["gamma"])]
    if beta is not None:
        inputs.append(_f32(rw, f"{base}.beta", beta))
    scale = Node(CAFFE_DOMAIN, "Scale", inputs, convenience.convert_attributes({"axis": m["axis"]}),
                 outputs=[_out(rw, f"{base}_scale")], name=node.name)
    if then is None:
        rw.substitute(node, scale)
        return
    rw.substitute(then, scale, source=node)
    rw.remove(node)


# -- Mul(x (N, C, H, W), y (N, C, 1, 1)), both computed: Flatten(y) -> two-bottom Scale ----------
def _check_two_bottom_scale(node: Node) -> Match | str:
    a, b = node.inputs[0], node.inputs[1]
    if _const(a) is not None or _const(b) is not None:
        return "an operand is constant"
    sa, sb = _static(a), _static(b)
    if sa is None or sb is None or len(sa) != 4 or len(sb) != 4:
        return "its operands are not static 4-D tensors"
    if sa[2:] == (1, 1) and sb[2:] != (1, 1):
        a, b, sa, sb = b, a, sb, sa
    if sb != (sa[0], sa[1], 1, 1) or sa[2:] == (1, 1):
        return "it is not a (N, C, H, W) * (N, C, 1, 1) product"
    return Match(node, {"x": a, "factor": b, "shape": sb})


def _two_bottom_scale(rw: Rewriter, m: Match) -> None:
    node, sb = m.node, m["shape"]
    base = node.name or "scale"
    flat = Node("", "Flatten", [m["factor"]], convenience.convert_attributes({"axis": 1}),
                outputs=[_out(rw, f"{base}_factor")], name=f"{base}_factor")
    flat.outputs[0].shape = Shape([sb[0], sb[1]])
    flat.outputs[0].type = TensorType(DataType.FLOAT)
    rw.insert(node, flat)
    scale = Node(CAFFE_DOMAIN, "Scale", [m["x"], flat.outputs[0]], convenience.convert_attributes({"axis": 0}),
                 outputs=[_out(rw, f"{base}_scale")], name=node.name)
    rw.substitute(node, scale)


# -- Div(x, Sqrt(Add(ReduceSumSquare(x), eps))) [-> Mul(s)]: SSD's Normalize ---------------------
def _check_normalize(node: Node) -> Match | str:
    x, value = node.inputs[0], node.inputs[1]
    chain = []
    for op in ("Sqrt", "Add", "ReduceSumSquare"):
        producer = value.producer() if value is not None else None
        if producer is None or producer.op_type != op or not _onnx(producer):
            return "the divisor is not Sqrt(Add(ReduceSumSquare(x), eps))"
        chain.append(producer)
        value = producer.inputs[0]
    sqrt, add, rss = chain
    if rss.inputs[0] is not x or not rss.attributes.get_int("keepdims", 1):
        return "the sum of squares is not of the dividend, kept"
    axes = _axes(rss)
    shape = _static(x)
    if axes is None or shape is None or len(shape) != 4:
        return "computed axes, or not a static 4-D input"
    axes = sorted(a + 4 if a < 0 else a for a in axes)
    if axes not in ([1], [1, 2, 3]):
        return "it normalises over other axes than C or C, H, W"
    eps = _const(add.inputs[1])
    inner = (rss.outputs[0], add.outputs[0], sqrt.outputs[0])
    if eps is None or eps.size != 1 or any(len(v.uses()) != 1 for v in inner):
        return "the epsilon is not a constant scalar, or the chain has other readers"
    scale = np.ones(1, np.float32)
    last = node
    mul = _only_use(node.outputs[0])
    if mul is not None:
        other = mul.inputs[1] if mul.inputs[0] is node.outputs[0] else mul.inputs[0]
        c = _const(other) if mul.op_type == "Mul" and _onnx(mul) else None
        if c is not None:
            vec = _per_channel(node.outputs[0], c)
            if vec is not None:
                scale, last = vec, mul
            elif c.size == 1:
                scale, last = c.reshape(1).astype(np.float32), mul
    attrs = {"across_spatial": int(axes == [1, 2, 3]), "eps": float(eps.reshape(-1)[0])}
    return Match(node, {"chain": chain, "scale": scale, "last": last, "attrs": attrs})


def _normalize(rw: Rewriter, m: Match) -> None:
    node, last = m.node, m["last"]
    base = node.name or "normalize"
    new = Node(CAFFE_DOMAIN, "Normalize", [node.inputs[0], _f32(rw, f"{base}.scale", m["scale"])],
               convenience.convert_attributes(m["attrs"]), outputs=[_out(rw, f"{base}_norm")],
               name=last.name or node.name)
    rw.substitute(last, new)
    for dead in ([node] if last is not node else []) + m["chain"]:
        rw.remove(dead)


# -- YOLOv8's DFL: Transpose(0, 2, 1, 3) -> Softmax(1) -> Conv(1x1, (1, R, 1, 1)) without Permute --
def _check_dfl(node: Node) -> Match | str:
    u, t = node.inputs[0], node.outputs[0]
    us = _static(u)
    attr = node.attributes.get("perm")
    if u is None or us is None or len(us) != 4 or attr is None or list(attr.value) != [0, 2, 1, 3]:
        return "not a (0, 2, 1, 3) Transpose of a static 4-D tensor"
    soft = _only_use(t)
    if soft is None or soft.op_type != "Softmax" or not _onnx(soft) or soft.attributes.get_int("axis", -1) % 4 != 1:
        return "its output does not feed one Softmax over axis 1 only"
    conv = _only_use(soft.outputs[0])
    if conv is None:
        return "the Softmax's output has other readers"
    w = _const(conv.inputs[1]) if conv.op_type == "Conv" and len(conv.inputs) > 1 else None
    r = us[2]
    if w is None or w.shape != (1, r, 1, 1) or conv.attributes.get_int("group", 1) != 1:
        return "the Softmax does not feed a 1x1 Conv to one channel"
    if any(int(v) != 1 for key in ("strides", "dilations") for v in _ints_attr(conv, key)) or any(
            int(v) for v in _ints_attr(conv, "pads")) or conv.attributes.get_string("auto_pad", "NOTSET") not in (
            "NOTSET", "VALID"):
        return "the Conv strides, dilates or pads"
    bias = _const(conv.inputs[2]) if len(conv.inputs) > 2 and conv.inputs[2] is not None else None
    if len(conv.inputs) > 2 and conv.inputs[2] is not None and bias is None:
        return "the Conv's bias is computed"
    return Match(node, {"soft": soft, "conv": conv, "w": w, "bias": bias, "dims": us})


def _dfl(rw: Rewriter, m: Match) -> None:
    node, conv, w, bias = m.node, m["conv"], m["w"], m["bias"]
    n, a, r, cols = m["dims"]
    base = conv.name or "dfl"

    def add(op: str, inputs: list[Value | None], shape: list[int], attrs: dict[str, object]) -> Value:
        out = Value(name=rw.fresh(f"{base}_{op.lower()}"), shape=Shape(shape), type=TensorType(DataType.FLOAT))
        rw.insert(conv, Node("", op, inputs, convenience.convert_attributes(attrs), outputs=[out], name=out.name))
        return out

    s2 = add("Softmax", [node.inputs[0]], [n, a, r, cols], {"axis": 2})
    flat = add("Reshape", [s2, _i64(rw, f"{base}.bins", [n, a * r, cols, 1])], [n, a * r, cols, 1], {})
    weight = _f32(rw, f"{base}.grouped", np.tile(w.reshape(1, r, 1, 1), (a, 1, 1, 1)))
    inputs: list[Value | None] = [flat, weight]
    if bias is not None:
        inputs.append(_f32(rw, f"{base}.grouped_bias", np.tile(bias.reshape(1), a)))
    summed = add("Conv", inputs, [n, a, cols, 1], {"group": a, "kernel_shape": [1, 1]})
    back = Node("", "Reshape", [summed, _i64(rw, f"{base}.shape", [n, 1, a, cols])],
                outputs=[_out(rw, f"{base}_expect")], name=conv.name)
    rw.substitute(conv, back)
    rw.remove(m["soft"], node)


# -- a Slice cutting several axes, with no blob to Crop against: one Slice per axis ---------------
def _check_per_axis_slices(node: Node) -> Match | str:
    x, y = node.inputs[0], node.outputs[0]
    xs, ys = _static(x), _static(y)
    if x is None or xs is None or ys is None or len(xs) != len(ys) or len(node.inputs) < 3:
        return "shapes not static, or starts/ends missing"
    starts, ends = _const(node.inputs[1]), _const(node.inputs[2])
    axes = _const(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] is not None else None
    steps = _const(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] is not None else None
    if starts is None or ends is None or (steps is not None and np.any(steps != 1)):
        return "computed bounds, or a step other than 1"
    rank = len(xs)
    ax = [int(a) % rank for a in (axes.reshape(-1) if axes is not None else range(starts.size))]
    begin = [0] * rank
    for a, st in zip(ax, starts.reshape(-1), strict=True):
        st = int(st) + xs[a] if int(st) < 0 else int(st)
        begin[a] = max(0, min(st, xs[a]))
    cut = [a for a in range(rank) if xs[a] != ys[a] or begin[a]]
    if len(cut) < 2:
        return "it cuts one axis"
    first = cut[0]
    graph = node.graph
    assert graph is not None
    earlier: list[Value] = list(graph.inputs)
    for n in graph:
        if n is node:
            break
        earlier.extend(o for o in n.outputs if o is not None)
    for value in earlier:
        vs = _static(value)
        if value.is_graph_output() and not value.uses():
            continue  # the emitter does not crop against a net output (it would stop being one)
        if value is not x and vs is not None and len(vs) == rank and vs[first:] == ys[first:]:
            return f"the emitter crops against '{value.name}'"
    return Match(node, {"cut": cut, "begin": begin, "shapes": (xs, ys)})


def _per_axis_slices(rw: Rewriter, m: Match) -> None:
    node, cut, begin = m.node, m["cut"], m["begin"]
    xs, ys = m["shapes"]
    y = node.outputs[0]
    base = node.name or "crop"
    cur, shape = node.inputs[0], list(xs)
    for i, a in enumerate(cut):
        shape[a] = ys[a]
        last = i == len(cut) - 1
        out = Value(name=rw.fresh(f"{y.name or 'crop'}_axis{a}"), shape=Shape(list(shape)), type=y.type)
        piece = Node("", "Slice", [cur, _i64(rw, f"{base}.start{a}", [begin[a]]),
                                   _i64(rw, f"{base}.end{a}", [begin[a] + ys[a]]),
                                   _i64(rw, f"{base}.axis{a}", [a])],
                     outputs=[out], name=node.name if last else rw.fresh(f"{base}_axis{a}"))
        if last:
            rw.substitute(node, piece, value=y)
        else:
            rw.insert(node, piece)
        cur = out


# -- AveragePool(count_include_pad=0) with begin pads: Caffe's AVE pooling, then a divisor Scale --
def _pool_geometry(node: Node) -> tuple[list[int], list[int], list[int]] | str:
    """Return (pads, kernel, strides) of a plain 2-D pooling node, or why it is not one."""
    if node.attributes.get_string("auto_pad", "NOTSET") != "NOTSET" or any(
            d != 1 for d in _ints_attr(node, "dilations")):
        return "auto_pad or dilations"
    pads = _ints_attr(node, "pads") or [0, 0, 0, 0]
    kernel = _ints_attr(node, "kernel_shape")
    strides = _ints_attr(node, "strides") or [1, 1]
    if len(pads) != 4 or len(kernel) != 2 or len(strides) != 2 or min(pads) < 0 or min(strides) < 1:
        return "malformed pads, kernel or strides (the emitter reports them)"
    return pads, kernel, strides


def _check_avg_pool_divisor(node: Node) -> Match | str:
    """Caffe's AVE divides window j (start ``t = j*s - p``, pad p on both sides) by
    ``min(t + k, H + p) - t`` per axis, counting the pads; ONNX without count_include_pad by
    ``min(t + k, H) - max(t, 0)``, the input pixels only. Windows and sums agree (zero pads), so a
    constant (OH, OW) map of divisor ratios corrects the average: a Caffe Scale on axes 2-3."""
    x, y = node.inputs[0], node.outputs[0]
    xs, ys = _static(x), _static(y)
    if xs is None or ys is None or len(xs) != 4 or node.attributes.get_int("count_include_pad", 0):
        return "not a static 4-D pooling that excludes the pads"
    geometry = _pool_geometry(node)
    if isinstance(geometry, str):
        return geometry
    pads, kernel, strides = geometry
    if not (pads[0] or pads[1]):
        return "no begin pads: Caffe's divisor already counts input pixels only"
    ratios = []
    for i in range(2):
        start = np.arange(ys[2 + i]) * strides[i] - pads[i]
        caffe = np.minimum(start + kernel[i], xs[2 + i] + pads[i]) - start
        inside = np.minimum(start + kernel[i], xs[2 + i]) - np.maximum(start, 0)
        if np.any(inside <= 0):
            return "a window of padding only: no divisor to match (the emitter says so)"
        ratios.append(caffe / inside)
    return Match(node, {"attrs": {"kernel_shape": kernel, "strides": strides,
                                  "pads": [pads[0], pads[1], pads[0], pads[1]]},
                        "factor": np.outer(ratios[0], ratios[1])})


def _avg_pool_divisor(rw: Rewriter, m: Match) -> None:
    node = m.node
    y = node.outputs[0]
    pool = Node(CAFFE_DOMAIN, "AveragePool", [node.inputs[0]], convenience.convert_attributes(m["attrs"]),
                outputs=[_out(rw, f"{y.name or 'pool'}_sum")], name=rw.fresh(node.name or "pool"))
    pool.outputs[0].shape, pool.outputs[0].type = y.shape, y.type
    rw.insert(node, pool)
    factor = _f32(rw, f"{node.name or 'pool'}.divisor", m["factor"])
    scale = Node(CAFFE_DOMAIN, "Scale", [pool.outputs[0], factor], convenience.convert_attributes({"axis": 2}),
                 outputs=[_out(rw, y.name or "pool")], name=node.name)
    rw.substitute(node, scale)


# -- MaxPool whose end pad no Caffe rounding reproduces: pad e on both sides, then a Slice ---------
def _check_max_pool_shift(node: Node) -> Match | str:
    """With pad e every window starts e - b earlier; window j + (e - b) / s is ONNX's window j, and
    padding is -inf in both, so the slice is exact. The Slice becomes a Crop against a blob of the
    output's shape (for stride 1 SAME, the input itself). TF SAME, stride 1, even kernel:
    yolov3-tiny's 2x2 pool."""
    x, y = node.inputs[0], node.outputs[0]
    xs, ys = _static(x), _static(y)
    if xs is None or ys is None or len(xs) != 4 or (len(node.outputs) > 1 and node.outputs[1] is not None):
        return "not a static 4-D pooling with one output"
    geometry = _pool_geometry(node)
    if isinstance(geometry, str):
        return geometry
    pads, kernel, strides = geometry
    any_pad = bool(pads[0] or pads[1])
    if any(all(caffe_pool_size(xs[2 + i], kernel[i], strides[i], pads[i], ceil, any_pad) == ys[2 + i]
               for i in range(2)) for ceil in (True, False)):
        return "ceil or floor with the begin pads is enough (the emitter decides)"
    new_pads, shifts = [], []
    for i in range(2):
        b, e, s = pads[i], pads[i + 2], strides[i]
        if caffe_pool_size(xs[2 + i], kernel[i], s, b, True, any_pad) == ys[2 + i]:
            new_pads.append(b)
            shifts.append(0)
        elif e > b and (e - b) % s == 0:
            new_pads.append(e)
            shifts.append((e - b) // s)
        else:
            return "the pad difference is not a multiple of the stride"
    sizes = [(xs[2 + i] + 2 * new_pads[i] - kernel[i]) // strides[i] + 1 for i in range(2)]
    if any(sizes[i] < shifts[i] + ys[2 + i] for i in range(2)):
        return "the padded pooling has too few windows"
    return Match(node, {"attrs": {"kernel_shape": kernel, "strides": strides, "pads": [*new_pads, *new_pads]},
                        "shifts": shifts, "sizes": sizes, "ys": ys})


def _max_pool_shift(rw: Rewriter, m: Match) -> None:
    node, shifts, ys = m.node, m["shifts"], m["ys"]
    x, y = node.inputs[0], node.outputs[0]
    mid = rw.node_before(node, "MaxPool", [x], m["attrs"], base=f"{y.name or 'pool'}_padded")
    mid.shape, mid.type = Shape([*ys[:2], *m["sizes"]]), y.type
    base = node.name or "pool"
    starts = _i64(rw, f"{base}.starts", list(shifts))
    ends = _i64(rw, f"{base}.ends", [shifts[i] + ys[2 + i] for i in range(2)])
    axes = _i64(rw, f"{base}.axes", [2, 3])
    out = rw.node_before(node, "Slice", [mid, starts, ends, axes], base=y.name or "pool", like=y)
    rw.replace(node, out)


RULES: list[Rule] = [
    Rule("MatMul+Add -> Gemm/InnerProduct", ("MatMul",), _check_matmul_add, _matmul_add),
    Rule("Pad+AveragePool -> AVE pooling", ("AveragePool",), _check_pad_avg_pool, _pad_avg_pool),
    Rule("AveragePool with begin pads -> AVE pooling + divisor Scale", ("AveragePool",), _check_avg_pool_divisor,
         _avg_pool_divisor),
    Rule("MaxPool with an end pad Caffe cannot round to -> padded MaxPool + Slice", ("MaxPool",),
         _check_max_pool_shift, _max_pool_shift),
    Rule("spatial Reduce -> global pooling", ("ReduceMean", "ReduceMax"), _check_global_reduce, _global_reduce),
    Rule("affine BatchNormalization -> BatchNorm+Scale", ("BatchNormalization",), _check_batch_norm, _batch_norm),
    Rule("Mul of computed tensors -> two-bottom Scale", ("Mul",), _check_two_bottom_scale, _two_bottom_scale),
    Rule("Div by the L2 norm -> Normalize", ("Div",), _check_normalize, _normalize),
    Rule("arithmetic by a constant -> Scale", ("Mul", "Div", "Add", "Sub"), _check_scale, _scale),
    Rule("multi-axis Slice -> Slice per axis", ("Slice",), _check_per_axis_slices, _per_axis_slices),
    Rule("DFL softmax expectation -> grouped Conv", ("Transpose",), _check_dfl, _dfl),
]


class LegalizeForCaffe(RewriteRules):
    """Apply ``RULES`` (the rewrites above) and those of ``legalize_tensor`` in place; idempotent."""

    def __init__(self) -> None:
        from .legalize_tensor import MVN_RULES, TENSOR_RULES

        super().__init__([*MVN_RULES, *RULES, *TENSOR_RULES])  # MVN's mean before the spatial-mean rule

    def call(self, model: Model) -> PassResult:
        """Rewrite ``model.graph``; return whether anything changed."""
        result = super().call(model)
        if result.modified:
            model.graph.opset_imports.setdefault(CAFFE_DOMAIN, 1)
        return result
