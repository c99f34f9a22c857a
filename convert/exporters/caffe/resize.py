"""Bilinear resizing in layers every Caffe runs (half-pixel integer factors; other ratios as matrices).

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
so the result loads in every flavor, OpenCV included. Other ratios and coordinate modes use the
interpolation matrices (see ``LowerBilinearResize``); what they cannot express is left to the
``Resize`` emitter, which refuses it with the reason.
"""

from __future__ import annotations

import math

import numpy as np

from convert.ir import (
    DataType,
    Node,
    Shape,
    TensorType,
    Value,
    convenience,
)
from convert.ir.passes.rewrite import Match, Rewriter, RewriteRules, Rule

from .flavor import Flavor

__all__ = ["MAX_KRON_BYTES", "LowerBilinearResize", "half_pixel_kernel", "interpolation_matrix"]

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


# A Kronecker-factored H-axis weight (flavors without Permute) is written only up to this size.
MAX_KRON_BYTES = 16 * 2**20
_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")


def interpolation_matrix(n: int, m: int, mode: str, scale: float | None = None) -> np.ndarray:
    """Return the (m, n) matrix of 1-D linear resizing from ``n`` to ``m`` samples (ONNX ``Resize``).

    ``scale`` is the ONNX scale (``m / n`` unless the model gives another); the source coordinate
    of output ``o`` is clamped to ``[0, n - 1]`` and split between its two neighbours.
    """
    s = m / n if scale is None else scale
    a = np.zeros((m, n), np.float64)
    for o in range(m):
        if mode == "align_corners":
            x = o * (n - 1) / (m - 1) if m > 1 else 0.0
        elif mode == "asymmetric":
            x = o / s
        elif mode == "pytorch_half_pixel" and m == 1:
            x = 0.0
        else:
            x = (o + 0.5) / s - 0.5
        x = min(max(x, 0.0), n - 1.0)
        i0 = int(np.floor(x))
        i1 = min(i0 + 1, n - 1)
        a[o, i0] += 1.0 - (x - i0)
        a[o, i1] += x - i0
    return a


class LowerBilinearResize(RewriteRules):
    """Rewrite bilinear ``Resize`` as described in the module docstring.

    Half-pixel by integer factors: edge replication and a fixed-weight (de)convolution, any
    flavor. Other ratios and coordinate modes (``align_corners`` outside ``pspnet``, whose
    ``Interp`` has it): the separable interpolation matrices, ``MatMul`` on the last axis
    (InnerProduct, ``axis`` 3) for the width, and for the height either ``Transpose`` around one
    (``Permute``, flavors that have it) or a ``MatMul`` over the flattened (H, W') axes by
    ``kron(A_h, I)`` when that weight stays under 16 MiB.
    """

    def __init__(self, flav: Flavor | None = None) -> None:
        self.flavor = flav
        super().__init__([Rule("bilinear Resize -> (de)convolution or matrices", ("Resize",), self._check, _lower)])

    def _check(self, node: Node) -> Match | str:
        attrs = node.attributes
        if attrs.get_string("mode", "nearest") != "linear" or attrs.get_int("antialias", 0):
            return "not linear, or antialiased"
        mode = attrs.get_string("coordinate_transformation_mode", "half_pixel")
        if mode not in _MODES:
            return f"coordinate mode {mode!r}"
        x, y = node.inputs[0], node.outputs[0]
        xs, ys = _static(x), _static(y)
        if x is None or xs is None or ys is None or len(xs) != 4 or xs[:2] != ys[:2]:
            return "not a static 4-D resize of H and W only"
        scales = node.inputs[2] if len(node.inputs) > 2 else None
        given: list[float] | None = None
        if scales is not None and scales.const_value is not None and scales.const_value.size == 4:
            given = [float(g) for g in np.asarray(scales.const_value.numpy(), np.float64).reshape(-1)[2:]]
        exact = given is None or all(abs(g * i - o) <= 1e-6 * o for g, i, o in zip(given, xs[2:], ys[2:], strict=True))
        found = {"x": x, "xs": xs, "ys": ys, "mode": mode, "given": given}
        if mode in _HALF_PIXEL and exact:
            if all(o % i == 0 for i, o in zip(xs[2:], ys[2:], strict=True)):
                return Match(node, {**found, "how": "up"})
            if all(i % o == 0 for i, o in zip(xs[2:], ys[2:], strict=True)):
                return Match(node, {**found, "how": "down"})
        flavor = self.flavor
        if flavor is None or (mode == "align_corners" and flavor.interp):
            return "left to the Resize emitter (PSPNet's Interp writes align_corners as one layer)"
        h, ho, wo = xs[2], ys[2], ys[3]
        if not flavor.permute and (h, ho) != (1, 1) and ho * wo * h * wo * 4 > MAX_KRON_BYTES:
            return "the Kronecker weight would be too large (the emitter refuses it, with the reason)"
        return Match(node, {**found, "how": "matrices", "permute": flavor.permute})


def _lower(rw: Rewriter, m: Match) -> None:
    b = _Builder(rw, m.node)
    x, xs, ys = m["x"], m["xs"], m["ys"]
    if m["how"] == "up":
        out = b.upsample(x, xs, ys)
    elif m["how"] == "down":
        out = b.downsample(x, xs, ys)
    else:
        out = b.matrices(x, xs, ys, m["mode"], m["given"], m["permute"])
    rw.replace(m.node, out)


class _Builder:
    """Nodes before the ``Resize`` being lowered, with its provenance and names after it."""

    def __init__(self, rw: Rewriter, anchor: Node) -> None:
        self.rw, self.anchor = rw, anchor

    def const(self, arr: np.ndarray) -> Value:
        return self.rw.const(arr, f"{self.anchor.name or 'resize'}_k")

    def op(self, op: str, inputs: list[Value], shapes: list[tuple[int, ...]], attrs: dict[str, object]) -> list[Value]:
        base = self.anchor.name or "resize"
        outs = [Value(name=self.rw.fresh(f"{base}_{op.lower()}"), shape=Shape(s), type=TensorType(DataType.FLOAT))
                for s in shapes]
        self.rw.insert(self.anchor, Node("", op, inputs, convenience.convert_attributes(attrs), outputs=outs,
                                         name=outs[0].name))
        return outs

    def replicate_edges(self, x: Value, shape: tuple[int, ...], axis: int) -> tuple[Value, tuple[int, ...]]:
        """Return ``x`` with one copy of its first and last slice added on ``axis``."""
        n = shape[axis]
        parts = [1, n - 2, 1] if n > 2 else [1, 1]
        piece = [(*shape[:axis], p, *shape[axis + 1:]) for p in parts]
        sizes = self.const(np.asarray(parts, np.int64))
        outs = self.op("Split", [x, sizes], piece, {"axis": axis})
        first, last = outs[0], outs[-1]
        padded = (*shape[:axis], n + 2, *shape[axis + 1:])
        (y,) = self.op("Concat", [first, *outs, last], [padded], {"axis": axis})
        return y, padded

    def matrices(self, x: Value, xs: tuple[int, ...], ys: tuple[int, ...], mode: str,
                 given: list[float] | None, permute: bool) -> Value:
        n, c, h, w = xs
        ho, wo = ys[2], ys[3]
        a_h = interpolation_matrix(h, ho, mode, given[0] if given else None)
        a_w = interpolation_matrix(w, wo, mode, given[1] if given else None)
        y = x
        if (w, wo) != (1, 1) or not np.array_equal(a_w, np.eye(w)):
            (y,) = self.op("MatMul", [y, self.const(a_w.T.astype(np.float32).copy())], [(n, c, h, wo)], {})
        if np.array_equal(a_h, np.eye(h)):
            return y
        if permute:
            (t,) = self.op("Transpose", [y], [(n, c, wo, h)], {"perm": [0, 1, 3, 2]})
            (t,) = self.op("MatMul", [t, self.const(a_h.T.astype(np.float32).copy())], [(n, c, wo, ho)], {})
            (out,) = self.op("Transpose", [t], [(n, c, ho, wo)], {"perm": [0, 1, 3, 2]})
            return out
        (t,) = self.op("Reshape", [y, self.const(np.asarray([n, c, h * wo], np.int64))], [(n, c, h * wo)], {})
        kron = np.kron(a_h, np.eye(wo)).T.astype(np.float32)
        (t,) = self.op("MatMul", [t, self.const(np.ascontiguousarray(kron))], [(n, c, ho * wo)], {})
        (out,) = self.op("Reshape", [t, self.const(np.asarray(ys, np.int64))], [ys], {})
        return out

    def upsample(self, x: Value, xs: tuple[int, ...], ys: tuple[int, ...]) -> Value:
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
                src, shape = self.replicate_edges(src, shape, axis)
                taps, u_min = half_pixel_kernel(f)
                kernels.append(taps)
                strides.append(f)
                pads.append(f - u_min)
        c = xs[1]
        w = np.outer(kernels[0], kernels[1]).astype(np.float32)
        weight = self.const(np.ascontiguousarray(np.broadcast_to(w, (c, 1, *w.shape))))
        (out,) = self.op("ConvTranspose", [src, weight], [ys], {
            "group": c, "kernel_shape": list(w.shape), "strides": strides, "pads": [*pads, *pads]})
        return out

    def downsample(self, x: Value, xs: tuple[int, ...], ys: tuple[int, ...]) -> Value:
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
        weight = self.const(np.ascontiguousarray(np.broadcast_to(w, (c, 1, *w.shape))))
        strides = [xs[2] // ys[2], xs[3] // ys[3]]
        (out,) = self.op("Conv", [x, weight], [ys], {"group": c, "kernel_shape": list(w.shape), "strides": strides})
        return out
