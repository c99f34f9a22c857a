"""Rewrite IR patterns into the shapes the one-node-one-layer emitters expect.

Rules, in order (each preserves the graph's values exactly):

* ``Pad(x, zeros, symmetric spatial p) -> AveragePool(count_include_pad=0, end pads only)`` ->
  ``convert.caffe::AveragePool(x)`` with pads p: Caffe's AVE divisor counts the pad but not the
  ceil overhang, which is exactly this pair (the Caffe frontend lowers such pooling to it).
* ``AveragePool(count_include_pad=0)`` with begin pads p (TF's SAME) -> ``convert.caffe::AveragePool``
  with pads p on both sides -> ``convert.caffe::Scale`` by a constant (OH, OW) map of Caffe's divisor
  over the count of input pixels in each window (see ``_avg_pool_divisor``).
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

Preconditions: static shapes on the values involved (the exporter runs shape inference first).
"""

from __future__ import annotations

import logging

import numpy as np

from convert.ir import (
    DataType,
    Graph,
    GraphEditor,
    Model,
    Node,
    Shape,
    TensorType,
    Value,
    convenience,
    from_array,
    get_provenance,
    replace_value,
    set_provenance,
)
from convert.ir.passes import Pass, PassResult

from .layers import CAFFE_DOMAIN, caffe_pool_size

__all__ = ["LegalizeForCaffe"]

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


class LegalizeForCaffe(Pass):
    """Apply the rewrites above in place; idempotent."""

    def call(self, model: Model) -> PassResult:
        """Rewrite ``model.graph``; return whether anything changed."""
        graph = model.graph
        self._edit = GraphEditor(graph)
        changed = 0
        for node in list(graph):
            if node.graph is None:
                continue  # removed by an earlier rewrite
            if node.domain in ("", "ai.onnx"):
                rule = {
                    "MatMul": self._matmul_add,
                    "AveragePool": self._avg_pool,
                    "MaxPool": self._max_pool_shift,
                    "ReduceMean": self._global_reduce,
                    "ReduceMax": self._global_reduce,
                    "BatchNormalization": self._batch_norm,
                    "Mul": self._scale,
                    "Div": self._div,
                    "Add": self._scale,
                    "Sub": self._scale,
                    "Slice": self._per_axis_slices,
                    "Transpose": self._dfl,
                }.get(node.op_type)
                if rule is not None and rule(graph, node):
                    changed += 1
        if changed:
            graph.opset_imports.setdefault(CAFFE_DOMAIN, 1)
        logger.debug("legalised %d patterns for Caffe", changed)
        return PassResult(model, changed > 0)

    # -- helpers ------------------------------------------------------------------------------
    def _fresh(self, base: str) -> str:
        return self._edit.fresh(base)

    def _init(self, graph: Graph, base: str, arr: np.ndarray) -> Value:
        return self._edit.const(np.asarray(arr, dtype=np.float32), base)

    @staticmethod
    def _replace(graph: Graph, old: Node, new: Node, old_out: Value) -> None:
        """Insert ``new`` before ``old``; move uses (and graph outputs) of ``old_out`` to ``new``."""
        new_out = new.outputs[0]
        new_out.shape = old_out.shape
        new_out.type = old_out.type
        graph.insert_before(old, new)
        replace_value(graph, old_out, new_out)
        graph.remove(old, safe=True)

    # -- rules --------------------------------------------------------------------------------
    def _matmul_add(self, graph: Graph, node: Node) -> bool:
        w = _const(node.inputs[1])
        out = node.outputs[0]
        if w is None or w.ndim != 2 or out.is_graph_output() or len(out.uses()) != 1:
            return False
        add = next(iter(out.uses())).node
        if add.op_type != "Add" or add.domain not in ("", "ai.onnx"):
            return False
        other = add.inputs[1] if add.inputs[0] is out else add.inputs[0]
        b = _const(other)
        if b is None or b.size != w.shape[1] or any(d != 1 for d in b.shape[:-1]):
            return False
        shape = _static(node.inputs[0])
        if shape is not None and len(shape) > 2:
            return self._inner_product(graph, node, add, b.reshape(-1))
        bias = self._init(graph, f"{node.name or 'matmul'}.bias", b.reshape(-1))
        gemm = Node(
            "",
            "Gemm",
            [node.inputs[0], node.inputs[1], bias],
            outputs=[Value(name=self._fresh(add.outputs[0].name or "gemm"))],
            name=node.name,
        )
        set_provenance(gemm, get_provenance(node))
        add_out = add.outputs[0]
        graph.insert_before(node, gemm)
        gemm.outputs[0].shape, gemm.outputs[0].type = add_out.shape, add_out.type
        replace_value(graph, add_out, gemm.outputs[0])
        graph.remove([add, node], safe=True)
        return True

    def _global_reduce(self, graph: Graph, node: Node) -> bool:
        x = node.inputs[0]
        shape = _static(x)
        if shape is None or len(shape) != 4:
            return False
        attr = node.attributes.get("axes")
        if attr is not None:
            axes = [int(a) for a in attr.value]
        else:
            given = _const(node.inputs[1]) if len(node.inputs) > 1 else None
            if given is None:
                return False
            axes = [int(a) for a in given.reshape(-1)]
        if sorted(a + 4 if a < 0 else a for a in axes) != [2, 3]:
            return False
        op = "GlobalAveragePool" if node.op_type == "ReduceMean" else "GlobalMaxPool"
        base = node.name or op
        pool = Node("", op, [x], outputs=[Value(name=self._fresh(f"{base}_pool"))], name=base)
        pool.outputs[0].shape = Shape([shape[0], shape[1], 1, 1])
        pool.outputs[0].type = TensorType(DataType.FLOAT)
        set_provenance(pool, get_provenance(node))
        if node.attributes.get_int("keepdims", 1):
            self._replace(graph, node, pool, node.outputs[0])
            return True
        graph.insert_before(node, pool)
        target = self._init_int(graph, f"{base}.shape", [shape[0], shape[1]])
        reshape = Node(
            "", "Reshape", [pool.outputs[0], target], outputs=[Value(name=self._fresh(base))], name=f"{base}_flatten"
        )
        set_provenance(reshape, get_provenance(node))
        self._replace(graph, node, reshape, node.outputs[0])
        return True

    def _init_int(self, graph: Graph, base: str, values: list[int]) -> Value:
        name = self._fresh(base)
        arr = np.asarray(values, dtype=np.int64)
        value = Value(
            name=name, shape=Shape(arr.shape), type=TensorType(DataType.INT64), const_value=from_array(arr, name=name)
        )
        graph.register_initializer(value)
        return value

    def _max_pool_shift(self, graph: Graph, node: Node) -> bool:
        """MaxPool whose end pad e exceeds its begin pad b by a multiple of the stride, where Caffe's
        pad b gives too few windows (TF SAME, stride 1, even kernel: yolov3-tiny's 2x2 pool) ->
        MaxPool with pad e on both sides -> Slice dropping the first (e - b) / stride windows.

        With pad e every window starts e - b earlier; window j + (e - b) / s is ONNX's window j,
        and padding is -inf in both, so the slice is exact. The Slice becomes a Crop against a
        blob of the output's shape (for stride 1 SAME, the input itself).
        """
        x, y = node.inputs[0], node.outputs[0]
        xs, ys = _static(x), _static(y)
        if xs is None or ys is None or len(xs) != 4 or (len(node.outputs) > 1 and node.outputs[1] is not None):
            return False
        if node.attributes.get_string("auto_pad", "NOTSET") != "NOTSET" or any(
                d != 1 for d in _ints_attr(node, "dilations")):
            return False
        pads = _ints_attr(node, "pads") or [0, 0, 0, 0]
        kernel = _ints_attr(node, "kernel_shape")
        strides = _ints_attr(node, "strides") or [1, 1]
        if len(pads) != 4 or len(kernel) != 2 or len(strides) != 2 or min(pads) < 0 or min(strides) < 1:
            return False  # malformed: the emitter reports it
        any_pad = bool(pads[0] or pads[1])
        if any(all(caffe_pool_size(xs[2 + i], kernel[i], strides[i], pads[i], ceil, any_pad) == ys[2 + i]
                   for i in range(2)) for ceil in (True, False)):
            return False  # ceil or floor with the begin pads is enough (the emitter decides)
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
                return False
        sizes = [(xs[2 + i] + 2 * new_pads[i] - kernel[i]) // strides[i] + 1 for i in range(2)]
        if any(sizes[i] < shifts[i] + ys[2 + i] for i in range(2)):
            return False
        attrs = {"kernel_shape": kernel, "strides": strides, "pads": [*new_pads, *new_pads]}
        mid = self._edit.node_before(node, "MaxPool", [x], attrs, base=f"{y.name or 'pool'}_padded")
        mid.shape, mid.type = Shape([*ys[:2], *sizes]), y.type
        base = node.name or "pool"
        starts = self._edit.const(np.asarray(shifts, np.int64), f"{base}.starts")
        ends = self._edit.const(np.asarray([shifts[i] + ys[2 + i] for i in range(2)], np.int64), f"{base}.ends")
        axes = self._edit.const(np.asarray([2, 3], np.int64), f"{base}.axes")
        out = self._edit.node_before(node, "Slice", [mid, starts, ends, axes], base=y.name or "pool", like=y)
        self._edit.replace(node, out)
        return True

    def _avg_pool(self, graph: Graph, node: Node) -> bool:
        return self._pad_avg_pool(graph, node) or self._avg_pool_divisor(graph, node)

    def _avg_pool_divisor(self, graph: Graph, node: Node) -> bool:
        """AveragePool(count_include_pad=0) with begin pads -> convert.caffe::AveragePool -> Scale.

        Caffe's AVE divides window j (start ``t = j*s - p``, pad p on both sides) by
        ``min(t + k, H + p) - t`` per axis, counting the pads; ONNX without count_include_pad by
        ``min(t + k, H) - max(t, 0)``, the input pixels only. Windows and sums agree (zero pads),
        so a constant (OH, OW) map of divisor ratios corrects the average: a Caffe Scale on axes 2-3.
        """
        x, y = node.inputs[0], node.outputs[0]
        xs, ys = _static(x), _static(y)
        if xs is None or ys is None or len(xs) != 4 or node.attributes.get_int("count_include_pad", 0):
            return False
        if node.attributes.get_string("auto_pad", "NOTSET") != "NOTSET" or any(
                d != 1 for d in _ints_attr(node, "dilations")):
            return False
        pads = _ints_attr(node, "pads") or [0, 0, 0, 0]
        kernel = _ints_attr(node, "kernel_shape")
        strides = _ints_attr(node, "strides") or [1, 1]
        if len(pads) != 4 or len(kernel) != 2 or len(strides) != 2 or min(pads) < 0 or min(strides) < 1:
            return False  # malformed: the emitter reports it
        if not (pads[0] or pads[1]):
            return False  # no begin pads: Caffe's divisor already counts input pixels only
        ratios = []
        for i in range(2):
            start = np.arange(ys[2 + i]) * strides[i] - pads[i]
            caffe = np.minimum(start + kernel[i], xs[2 + i] + pads[i]) - start
            inside = np.minimum(start + kernel[i], xs[2 + i]) - np.maximum(start, 0)
            if np.any(inside <= 0):
                return False  # a window of padding only: no divisor to match (the emitter says so)
            ratios.append(caffe / inside)
        attrs = {"kernel_shape": kernel, "strides": strides, "pads": [pads[0], pads[1], pads[0], pads[1]]}
        pool = Node(CAFFE_DOMAIN, "AveragePool", [x], convenience.convert_attributes(attrs),
                    outputs=[Value(name=self._fresh(f"{y.name or 'pool'}_sum"))], name=self._fresh(node.name or "pool"))
        set_provenance(pool, get_provenance(node))
        pool.outputs[0].shape, pool.outputs[0].type = y.shape, y.type
        graph.insert_before(node, pool)
        factor = self._init(graph, f"{node.name or 'pool'}.divisor", np.outer(ratios[0], ratios[1]))
        scale = Node(CAFFE_DOMAIN, "Scale", [pool.outputs[0], factor], convenience.convert_attributes({"axis": 2}),
                     outputs=[Value(name=self._fresh(y.name or "pool"))], name=node.name)
        set_provenance(scale, get_provenance(node))
        self._replace(graph, node, scale, y)
        return True

    def _pad_avg_pool(self, graph: Graph, node: Node) -> bool:
        pad = node.inputs[0].producer() if node.inputs[0] is not None else None
        if pad is None or pad.op_type != "Pad" or pad.domain not in ("", "ai.onnx"):
            return False
        if node.attributes.get_int("count_include_pad", 0):
            return False
        if pad.attributes.get_string("mode", "constant") != "constant":
            return False
        mid = pad.outputs[0]
        if mid.is_graph_output() or len(mid.uses()) != 1 or len(pad.inputs) > 3:
            return False
        pads = _const(pad.inputs[1])
        value = _const(pad.inputs[2]) if len(pad.inputs) > 2 else None
        if pads is None or pads.size != 8 or (value is not None and np.any(value != 0)):
            return False
        p = [int(v) for v in pads]
        if p[0] or p[1] or p[4] or p[5] or p[2] != p[6] or p[3] != p[7]:
            return False
        own = [int(v) for v in node.attributes["pads"].value] if "pads" in node.attributes else [0, 0, 0, 0]
        if own[0] or own[1]:
            return False
        strides = list(node.attributes["strides"].value) if "strides" in node.attributes else [1, 1]
        attrs = {
            "kernel_shape": list(node.attributes["kernel_shape"].value),
            "strides": strides,
            "pads": [p[2], p[3], p[2] + own[2], p[3] + own[3]],
        }
        new = Node(
            CAFFE_DOMAIN,
            "AveragePool",
            [pad.inputs[0]],
            convenience.convert_attributes(attrs),
            outputs=[Value(name=self._fresh(node.outputs[0].name or "pool"))],
            name=node.name,
        )
        set_provenance(new, get_provenance(node))
        self._replace(graph, node, new, node.outputs[0])
        graph.remove(pad, safe=True)
        return True

    def _inner_product(self, graph: Graph, node: Node, add: Node, bias: np.ndarray) -> bool:
        b = self._init(graph, f"{node.name or 'matmul'}.bias", bias)
        ip = Node(
            CAFFE_DOMAIN,
            "InnerProduct",
            [node.inputs[0], node.inputs[1], b],
            outputs=[Value(name=self._fresh(add.outputs[0].name or "ip"))],
            name=node.name,
        )
        set_provenance(ip, get_provenance(node))
        self._replace(graph, add, ip, add.outputs[0])
        graph.remove(node, safe=True)
        return True

    def _batch_norm(self, graph: Graph, node: Node) -> bool:
        gamma, beta = _const(node.inputs[1]), _const(node.inputs[2])
        if gamma is None or beta is None or len(node.outputs) != 1:
            return False
        if np.all(gamma == 1) and np.all(beta == 0):
            return False
        c = gamma.size
        base = node.name or "bn"
        ones = self._init(graph, f"{base}.unit_scale", np.ones(c))
        zeros = self._init(graph, f"{base}.zero_bias", np.zeros(c))
        bn = Node(
            "",
            "BatchNormalization",
            [node.inputs[0], ones, zeros, node.inputs[3], node.inputs[4]],
            node.attributes.values(),
            outputs=[Value(name=self._fresh(f"{base}_norm"))],
            name=node.name,
        )
        prov = get_provenance(node)
        set_provenance(bn, prov)
        out = node.outputs[0]
        bn.outputs[0].shape, bn.outputs[0].type = out.shape, out.type
        graph.insert_before(node, bn)
        g = self._init(graph, f"{base}.gamma", gamma.reshape(-1))
        b = self._init(graph, f"{base}.beta", beta.reshape(-1))
        scale = Node(
            CAFFE_DOMAIN,
            "Scale",
            [bn.outputs[0], g, b],
            outputs=[Value(name=self._fresh(f"{base}_scale"))],
            name=f"{node.name}_scale",
        )
        set_provenance(scale, prov)
        self._replace(graph, node, scale, out)
        return True

    def _scale(self, graph: Graph, node: Node) -> bool:
        a, b = node.inputs[0], node.inputs[1]
        cb = _const(b)
        if node.op_type == "Mul" and cb is None and _const(a) is None:
            return self._two_bottom_scale(graph, node)
        negate = False
        if cb is None or _const(a) is not None:
            if node.op_type in ("Mul", "Add", "Sub") and _const(a) is not None and cb is None:
                a, b, cb = b, a, _const(a)
                negate = node.op_type == "Sub"  # c - x = (-1) * x + c (YOLOv8's anchor - lt)
            else:
                return False
        if a is None or cb is None:
            return False
        span = _span(a, cb)
        if span is None:
            return False
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
        out = node.outputs[0]
        if beta is None and not negate and not out.is_graph_output() and len(out.uses()) == 1:
            nxt = next(iter(out.uses())).node
            if nxt.op_type in ("Add", "Sub") and nxt.domain in ("", "ai.onnx") and nxt.inputs[0] is out:
                cn = _const(nxt.inputs[1])
                if cn is not None and _span(out, cn) == span:
                    vn = cn.reshape(dims).astype(np.float32)
                    beta = vn if nxt.op_type == "Add" else -vn
                    return self._fused(graph, node, nxt, a, gamma, beta, axis)
        base = node.name or "scale"
        inputs = [a, self._init(graph, f"{base}.gamma", gamma)]
        if beta is not None:
            inputs.append(self._init(graph, f"{base}.beta", beta))
        scale = Node(
            CAFFE_DOMAIN,
            "Scale",
            inputs,
            convenience.convert_attributes({"axis": axis}),
            outputs=[Value(name=self._fresh(f"{base}_scale"))],
            name=node.name,
        )
        set_provenance(scale, get_provenance(node))
        self._replace(graph, node, scale, out)
        return True

    def _div(self, graph: Graph, node: Node) -> bool:
        return self._normalize(graph, node) or self._scale(graph, node)

    def _normalize(self, graph: Graph, node: Node) -> bool:
        x, norm = node.inputs[0], node.inputs[1]
        chain = []
        value = norm
        for op in ("Sqrt", "Add", "ReduceSumSquare"):
            producer = value.producer() if value is not None else None
            if producer is None or producer.op_type != op or producer.domain not in ("", "ai.onnx"):
                return False
            chain.append(producer)
            value = producer.inputs[0]
        sqrt, add, rss = chain
        if rss.inputs[0] is not x or not rss.attributes.get_int("keepdims", 1):
            return False
        axes_attr = rss.attributes.get("axes")
        if axes_attr is not None:
            axes = [int(a) for a in axes_attr.value]
        else:
            given = _const(rss.inputs[1]) if len(rss.inputs) > 1 else None
            if given is None:
                return False
            axes = [int(a) for a in given]
        shape = _static(x)
        if shape is None or len(shape) != 4:
            return False
        axes = sorted(a + 4 if a < 0 else a for a in axes)
        if axes not in ([1], [1, 2, 3]):
            return False
        eps = _const(add.inputs[1])
        inner = (rss.outputs[0], add.outputs[0], sqrt.outputs[0])
        if eps is None or eps.size != 1 or any(len(v.uses()) != 1 for v in inner):
            return False
        out = node.outputs[0]
        scale = np.ones(1, np.float32)
        last = node
        if not out.is_graph_output() and len(out.uses()) == 1:
            mul = next(iter(out.uses())).node
            other = mul.inputs[1] if mul.inputs[0] is out else mul.inputs[0]
            c = _const(other) if mul.op_type == "Mul" and mul.domain in ("", "ai.onnx") else None
            if c is not None:
                vec = _per_channel(out, c)
                if vec is not None:
                    scale, last = vec, mul
                elif c.size == 1:
                    scale, last = c.reshape(1).astype(np.float32), mul
        base = node.name or "normalize"
        attrs = {"across_spatial": int(axes == [1, 2, 3]), "eps": float(eps.reshape(-1)[0])}
        new = Node(
            CAFFE_DOMAIN,
            "Normalize",
            [x, self._init(graph, f"{base}.scale", scale)],
            convenience.convert_attributes(attrs),
            outputs=[Value(name=self._fresh(f"{base}_norm"))],
            name=last.name or node.name,
        )
        set_provenance(new, get_provenance(last))
        self._replace(graph, last, new, last.outputs[0])
        for dead in ([node] if last is not node else []) + [sqrt, add, rss]:
            graph.remove(dead, safe=True)
        return True

    def _dfl(self, graph: Graph, node: Node) -> bool:
        u, t = node.inputs[0], node.outputs[0]
        us = _static(u)
        attr = node.attributes.get("perm")
        if u is None or us is None or len(us) != 4 or attr is None or list(attr.value) != [0, 2, 1, 3]:
            return False
        if t.is_graph_output() or len(t.uses()) != 1:
            return False
        soft = next(iter(t.uses())).node
        if soft.op_type != "Softmax" or soft.domain not in ("", "ai.onnx"):
            return False
        if soft.attributes.get_int("axis", -1) % 4 != 1:
            return False
        p = soft.outputs[0]
        if p.is_graph_output() or len(p.uses()) != 1:
            return False
        conv = next(iter(p.uses())).node
        w = _const(conv.inputs[1]) if conv.op_type == "Conv" and len(conv.inputs) > 1 else None
        n, a, r, cols = us
        if w is None or w.shape != (1, r, 1, 1) or conv.attributes.get_int("group", 1) != 1:
            return False
        if any(int(v) != 1 for key in ("strides", "dilations") for v in _ints_attr(conv, key)) or any(
                int(v) for v in _ints_attr(conv, "pads")) or conv.attributes.get_string("auto_pad", "NOTSET") not in (
                "NOTSET", "VALID"):
            return False
        bias = _const(conv.inputs[2]) if len(conv.inputs) > 2 and conv.inputs[2] is not None else None
        if len(conv.inputs) > 2 and conv.inputs[2] is not None and bias is None:
            return False
        base = conv.name or "dfl"
        prov = get_provenance(conv)

        def add(op: str, inputs: list[Value | None], shape: list[int], attrs: dict[str, object]) -> Value:
            out = Value(name=self._fresh(f"{base}_{op.lower()}"), shape=Shape(shape), type=TensorType(DataType.FLOAT))
            new = Node("", op, inputs, convenience.convert_attributes(attrs), outputs=[out], name=out.name)
            set_provenance(new, prov)
            graph.insert_before(conv, new)
            return out

        s2 = add("Softmax", [u], [n, a, r, cols], {"axis": 2})
        flat = add("Reshape", [s2, self._init_int(graph, f"{base}.bins", [n, a * r, cols, 1])], [n, a * r, cols, 1], {})
        weight = self._init(graph, f"{base}.grouped", np.tile(w.reshape(1, r, 1, 1), (a, 1, 1, 1)))
        inputs: list[Value | None] = [flat, weight]
        if bias is not None:
            inputs.append(self._init(graph, f"{base}.grouped_bias", np.tile(bias.reshape(1), a)))
        summed = add("Conv", inputs, [n, a, cols, 1], {"group": a, "kernel_shape": [1, 1]})
        back = Node("", "Reshape", [summed, self._init_int(graph, f"{base}.shape", [n, 1, a, cols])],
                    outputs=[Value(name=self._fresh(f"{base}_expect"))], name=conv.name)
        set_provenance(back, prov)
        self._replace(graph, conv, back, conv.outputs[0])
        graph.remove([soft, node], safe=True)
        return True

    def _per_axis_slices(self, graph: Graph, node: Node) -> bool:
        x, y = node.inputs[0], node.outputs[0]
        xs, ys = _static(x), _static(y)
        if x is None or xs is None or ys is None or len(xs) != len(ys) or len(node.inputs) < 3:
            return False
        starts, ends = _const(node.inputs[1]), _const(node.inputs[2])
        axes = _const(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] is not None else None
        steps = _const(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] is not None else None
        if starts is None or ends is None or (steps is not None and np.any(steps != 1)):
            return False
        rank = len(xs)
        ax = [int(a) % rank for a in (axes.reshape(-1) if axes is not None else range(starts.size))]
        begin = [0] * rank
        for a, st in zip(ax, starts.reshape(-1), strict=True):
            st = int(st) + xs[a] if int(st) < 0 else int(st)
            begin[a] = max(0, min(st, xs[a]))
        cut = [a for a in range(rank) if xs[a] != ys[a] or begin[a]]
        if len(cut) < 2:
            return False
        first = cut[0]
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
                return False  # the emitter crops against it
        cur, shape = x, list(xs)
        for i, a in enumerate(cut):
            shape[a] = ys[a]
            last = i == len(cut) - 1
            out = Value(name=self._fresh(f"{y.name or 'crop'}_axis{a}"), shape=Shape(list(shape)), type=y.type)
            piece = Node("", "Slice", [cur, self._init_int(graph, f"{node.name or 'crop'}.start{a}", [begin[a]]),
                                       self._init_int(graph, f"{node.name or 'crop'}.end{a}", [begin[a] + ys[a]]),
                                       self._init_int(graph, f"{node.name or 'crop'}.axis{a}", [a])],
                         outputs=[out], name=node.name if last else self._fresh(f"{node.name or 'crop'}_axis{a}"))
            set_provenance(piece, get_provenance(node))
            if last:
                self._replace(graph, node, piece, y)
            else:
                graph.insert_before(node, piece)
            cur = out
        return True

    def _two_bottom_scale(self, graph: Graph, node: Node) -> bool:
        a, b = node.inputs[0], node.inputs[1]
        sa, sb = _static(a), _static(b)
        if sa is None or sb is None or len(sa) != 4 or len(sb) != 4:
            return False
        if sa[2:] == (1, 1) and sb[2:] != (1, 1):
            a, b, sa, sb = b, a, sb, sa
        if sb != (sa[0], sa[1], 1, 1) or sa[2:] == (1, 1):
            return False
        base = node.name or "scale"
        flat = Node(
            "",
            "Flatten",
            [b],
            convenience.convert_attributes({"axis": 1}),
            outputs=[Value(name=self._fresh(f"{base}_factor"))],
            name=f"{base}_factor",
        )
        flat.outputs[0].shape = Shape([sb[0], sb[1]])
        flat.outputs[0].type = TensorType(DataType.FLOAT)
        set_provenance(flat, get_provenance(node))
        graph.insert_before(node, flat)
        scale = Node(
            CAFFE_DOMAIN,
            "Scale",
            [a, flat.outputs[0]],
            convenience.convert_attributes({"axis": 0}),
            outputs=[Value(name=self._fresh(f"{base}_scale"))],
            name=node.name,
        )
        set_provenance(scale, get_provenance(node))
        self._replace(graph, node, scale, node.outputs[0])
        return True

    def _fused(
        self, graph: Graph, mul: Node, add: Node, x: Value, gamma: np.ndarray, beta: np.ndarray, axis: int
    ) -> bool:
        base = mul.name or "scale"
        g = self._init(graph, f"{base}.gamma", gamma)
        b = self._init(graph, f"{base}.beta", beta)
        scale = Node(
            CAFFE_DOMAIN,
            "Scale",
            [x, g, b],
            convenience.convert_attributes({"axis": axis}),
            outputs=[Value(name=self._fresh(f"{base}_scale"))],
            name=mul.name,
        )
        set_provenance(scale, get_provenance(mul))
        out = add.outputs[0]
        self._replace(graph, add, scale, out)
        graph.remove(mul, safe=True)
        return True
