"""Bilinear resizing with half-pixel centres (``align_corners=False``) in layers every Caffe runs.

PyTorch's ``F.interpolate(mode='bilinear', align_corners=False)`` (ONNX ``Resize`` linear with
``half_pixel`` / ``pytorch_half_pixel``) reads output ``o`` from source ``s = (o + 0.5) / f - 0.5``
on each axis, clamped to the edge. No Caffe dialect has that layer (PSPNet's ``Interp`` aligns
corners, brocolli-caffe's ``BilinearInterpolate`` is unknown to OpenCV), but for an integer
factor ``f`` it is exactly a fixed-weight transposed convolution of the edge-replicated input:

* clamping at the edge equals interpolating against one replicated row/column on each side, so
  the input is padded with ``Split`` + ``Concat`` (``x0, x0, x1..x(n-2), x(n-1), x(n-1)``);
* input ``i`` (of the padded input) contributes ``w(u) = max(0, 1 - |u - (f - 1) / 2| / f)`` to
  output ``o = f * (i - 1) + u``: a ``ConvTranspose`` with stride ``f``, kernel ``w`` over
  ``u_min..u_max`` (``2f - f % 2`` taps) and pad ``f - u_min`` (the output is ``f * n``);
* the 2-D kernel is the outer product of the two axes' kernels (bilinear is separable), one per
  channel (``group = C``);
* an axis of size 1 is replicated: kernel ``ones(out)``, stride 1, no pad;
* integer downsampling by ``n`` reads ``x[n*o + (n-1)/2]``: a grouped ``Conv`` with kernel ``n``,
  stride ``n`` and weight 1 at the centre tap (odd ``n``) or 1/2 at the two centre taps (even).

The emitters write ``Slice``, ``Concat``, ``Deconvolution`` and ``Convolution`` (BVLC 1.0 layers),
so the result loads in every flavor, OpenCV included. Other ratios are left to the ``Resize``
emitter, which refuses them with the reason.
"""

from __future__ import annotations

import math

import numpy as np

from convert.ir import (
    DataType,
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

__all__ = ["LowerHalfPixelBilinear", "half_pixel_kernel"]

_HALF_PIXEL = ("half_pixel", "pytorch_half_pixel")


def half_pixel_kernel(f: int) -> tuple[np.ndarray, int]:
    """Return ``(taps, u_min)``: the transposed-convolution kernel of half-pixel upsampling by ``f``."""
    c = (f - 1) / 2
    u_min = math.floor(c - f) + 1
    u_max = math.ceil(c + f) - 1
    u = np.arange(u_min, u_max + 1, dtype=np.float64)
    return np.maximum(0.0, 1.0 - np.abs(u - c) / f), u_min


def _static(value: Value | None) -> tuple[int, ...] | None:
    if value is None or value.shape is None or not all(isinstance(d, int) for d in value.shape):
        return None
    return tuple(int(d) for d in value.shape)


class LowerHalfPixelBilinear(Pass):
    """Rewrite half-pixel bilinear ``Resize`` by integer factors as described in the module docstring."""

    def call(self, model: Model) -> PassResult:
        """Rewrite in place; return whether anything changed."""
        graph = model.graph
        self._graph = graph
        self._names = set(graph.initializers) | {v.name for n in graph for v in n.outputs if v.name}
        changed = 0
        for node in list(graph):
            if node.domain in ("", "ai.onnx") and node.op_type == "Resize" and self._lower(node):
                changed += 1
        return PassResult(model, changed > 0)

    # -- helpers -------------------------------------------------------------------------------
    def _fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self._names:
            name, i = f"{base}_{i}", i + 1
        self._names.add(name)
        return name

    def _const(self, arr: np.ndarray) -> Value:
        name = self._fresh(f"{self._anchor.name or 'resize'}_k")
        v = Value(name=name, shape=Shape(arr.shape), type=TensorType(DataType.from_numpy(arr.dtype)),
                  const_value=from_array(arr, name=name))
        self._graph.register_initializer(v)
        return v

    def _op(self, op: str, inputs: list[Value], shapes: list[tuple[int, ...]], attrs: dict[str, object]) -> list[Value]:
        base = self._anchor.name or "resize"
        outs = [Value(name=self._fresh(f"{base}_{op.lower()}"), shape=Shape(s), type=TensorType(DataType.FLOAT))
                for s in shapes]
        node = Node("", op, inputs, convenience.convert_attributes(attrs), outputs=outs, name=outs[0].name)
        set_provenance(node, get_provenance(self._anchor))
        self._graph.insert_before(self._anchor, node)
        return outs

    def _replicate_edges(self, x: Value, shape: tuple[int, ...], axis: int) -> tuple[Value, tuple[int, ...]]:
        """Return ``x`` with one copy of its first and last slice added on ``axis``."""
        n = shape[axis]
        parts = [1, n - 2, 1] if n > 2 else [1, 1]
        piece = [(*shape[:axis], p, *shape[axis + 1:]) for p in parts]
        sizes = self._const(np.asarray(parts, np.int64))
        outs = self._op("Split", [x, sizes], piece, {"axis": axis})
        first, last = outs[0], outs[-1]
        padded = (*shape[:axis], n + 2, *shape[axis + 1:])
        (y,) = self._op("Concat", [first, *outs, last], [padded], {"axis": axis})
        return y, padded

    # -- the rewrite ---------------------------------------------------------------------------
    def _lower(self, node: Node) -> bool:
        attrs = node.attributes
        if attrs.get_string("mode", "nearest") != "linear" or attrs.get_int("antialias", 0):
            return False
        if attrs.get_string("coordinate_transformation_mode", "half_pixel") not in _HALF_PIXEL:
            return False
        x, y = node.inputs[0], node.outputs[0]
        xs, ys = _static(x), _static(y)
        if x is None or xs is None or ys is None or len(xs) != 4 or xs[:2] != ys[:2]:
            return False
        scales = node.inputs[2] if len(node.inputs) > 2 else None
        if scales is not None and scales.const_value is not None and scales.const_value.size == 4:
            given = np.asarray(scales.const_value.numpy(), np.float64).reshape(-1)[2:]
            if any(abs(g * i - o) > 1e-6 * o for g, i, o in zip(given, xs[2:], ys[2:], strict=True)):
                return False  # ONNX then uses the given scale, not out/in: leave it to the emitter's refusal
        ups = [o % i == 0 for i, o in zip(xs[2:], ys[2:], strict=True)]
        downs = [i % o == 0 for i, o in zip(xs[2:], ys[2:], strict=True)]
        self._anchor = node
        if all(ups):
            out = self._upsample(x, xs, ys)
        elif all(downs):
            out = self._downsample(x, xs, ys)
        else:
            return False
        replace_value(self._graph, y, out)
        self._graph.remove(node, safe=True)
        return True

    def _upsample(self, x: Value, xs: tuple[int, ...], ys: tuple[int, ...]) -> Value:
        kernels, strides, pads = [], [], []
        src, shape = x, xs
        for axis in (2, 3):
            n, m = xs[axis], ys[axis]
            f = m // n
            if n == 1:  # one source row: every output row copies it
                kernels.append(np.ones(m))
                strides.append(1)
                pads.append(0)
            elif f == 1:
                kernels.append(np.ones(1))
                strides.append(1)
                pads.append(0)
            else:
                src, shape = self._replicate_edges(src, shape, axis)
                taps, u_min = half_pixel_kernel(f)
                kernels.append(taps)
                strides.append(f)
                pads.append(f - u_min)
        c = xs[1]
        w = np.outer(kernels[0], kernels[1]).astype(np.float32)
        weight = self._const(np.ascontiguousarray(np.broadcast_to(w, (c, 1, *w.shape))))
        (out,) = self._op("ConvTranspose", [src, weight], [ys], {
            "group": c, "kernel_shape": list(w.shape), "strides": strides, "pads": [*pads, *pads]})
        return out

    def _downsample(self, x: Value, xs: tuple[int, ...], ys: tuple[int, ...]) -> Value:
        kernels = []
        for axis in (2, 3):
            n = xs[axis] // ys[axis]
            k = np.zeros(n)
            if n % 2:
                k[n // 2] = 1.0
            else:
                k[n // 2 - 1:n // 2 + 1] = 0.5
            kernels.append(k)
        c = xs[1]
        w = np.outer(kernels[0], kernels[1]).astype(np.float32)
        weight = self._const(np.ascontiguousarray(np.broadcast_to(w, (c, 1, *w.shape))))
        strides = [xs[2] // ys[2], xs[3] // ys[3]]
        (out,) = self._op("Conv", [x, weight], [ys], {"group": c, "kernel_shape": list(w.shape), "strides": strides})
        return out
