"""Write a caffemodel of seeded random weights for a deploy prototxt.

``python models/caffe/fill_weights.py NET.prototxt OUT.caffemodel [SEED]``. The blob shapes come
from propagating the input shape through the layers (Caffe's own size rules: convolution, ceil
pooling, InnerProduct from ``axis`` on, Concat, Flatten, Interp...). Values keep activations of
order one: He-scaled weights; BatchNorm statistics near the identity with a moving-average factor
of 1; Scale gammas in [0.5, 1] and in [0.1, 0.3] where the Scale feeds a residual sum (so deep
residual nets do not grow without bound and their softmax outputs keep a spread).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from convert._proto import caffe_pb2
from convert.frontends.caffe.reader import LayerDef, read_prototxt

__all__ = ["fill"]

Shape = tuple[int, ...] | None


def _hw(p: object, name: str, default: int) -> tuple[int, int]:
    h, w = getattr(p, f"{name}_h", 0), getattr(p, f"{name}_w", 0)
    if h or w:
        return int(h), int(w)
    vals = getattr(p, "kernel_size" if name == "kernel" else name)
    if isinstance(vals, int):
        return (vals, vals) if vals else (default, default)
    vals = list(vals)
    return (vals[0], vals[-1]) if vals else (default, default)


def _out_shape(layer: LayerDef, ins: list[Shape]) -> list[Shape]:
    """Return the shapes of ``layer``'s tops (None where not needed for any blob)."""
    x = ins[0] if ins else None
    t, p = layer.type, layer.param
    if x is None:
        return [None] * len(layer.tops)
    if t in ("Convolution", "Deconvolution"):
        cp = p.convolution_param
        (kh, kw), (sh, sw), (ph, pw) = _hw(cp, "kernel", 1), _hw(cp, "stride", 1), _hw(cp, "pad", 0)
        d = next(iter(cp.dilation)) if list(cp.dilation) else 1
        if t == "Convolution":
            size = [(x[2] + 2 * ph - (d * (kh - 1) + 1)) // sh + 1, (x[3] + 2 * pw - (d * (kw - 1) + 1)) // sw + 1]
        else:
            size = [sh * (x[2] - 1) + d * (kh - 1) + 1 - 2 * ph, sw * (x[3] - 1) + d * (kw - 1) + 1 - 2 * pw]
        return [(x[0], int(cp.num_output), *size)]
    if t == "Pooling":
        pp = p.pooling_param
        if pp.global_pooling:
            return [(x[0], x[1], 1, 1)]
        (kh, kw), (sh, sw), (ph, pw) = _hw(pp, "kernel", 1), _hw(pp, "stride", 1), _hw(pp, "pad", 0)
        size = []
        for n, k, s, pad in ((x[2], kh, sh, ph), (x[3], kw, sw, pw)):
            out = math.ceil((n + 2 * pad - k) / s) + 1
            if pad and (out - 1) * s >= n + pad:
                out -= 1
            size.append(out)
        return [(x[0], x[1], *size)]
    if t == "InnerProduct":
        return [(x[0], int(p.inner_product_param.num_output))]
    if t == "Concat":
        axis = int(p.concat_param.axis) if p.HasField("concat_param") else 1
        if any(s is None for s in ins):
            return [None]
        axis %= len(x)
        return [(*x[:axis], sum(s[axis] for s in ins if s is not None), *x[axis + 1:])]
    if t == "Flatten":
        return [(x[0], int(np.prod(x[1:])))]
    if t == "Interp":
        ip = p.interp_param
        if ip.height and ip.width:
            return [(x[0], x[1], int(ip.height), int(ip.width))]
        z = int(ip.zoom_factor)
        return [(x[0], x[1], x[2] + (x[2] - 1) * (z - 1), x[3] + (x[3] - 1) * (z - 1))]
    if t in ("ReLU", "Sigmoid", "TanH", "LRN", "Dropout", "BatchNorm", "BN", "Scale", "Softmax", "Eltwise", "PReLU",
             "Normalize", "Power", "ELU", "ReLU6"):
        return [x]
    if t == "Split":
        return [x] * len(layer.tops)
    return [None] * len(layer.tops)  # PriorBox, Permute, Reshape, DetectionOutput: no blob layer reads them here


def _blobs(layer: LayerDef, x: Shape, rng: np.random.Generator, residual: bool) -> list[np.ndarray]:
    t, p = layer.type, layer.param
    if t not in ("Convolution", "Deconvolution", "InnerProduct", "BatchNorm", "BN", "Scale", "PReLU", "Normalize"):
        return []
    if x is None:
        raise ValueError(f"layer '{layer.name}' ({t}): the shape of its bottom is not known here")
    if t in ("Convolution", "Deconvolution"):
        cp = p.convolution_param
        kh, kw = _hw(cp, "kernel", 1)
        g, n, c = int(cp.group), int(cp.num_output), x[1]  # type: ignore[index]
        shape = (n, c // g, kh, kw) if t == "Convolution" else (c, n // g, kh, kw)
        fan = shape[1] * kh * kw
        out = [rng.normal(0, math.sqrt(2.0 / fan), shape)]
        if cp.bias_term:
            out.append(rng.normal(0, 0.05, n))
        return out
    if t == "InnerProduct":
        ipp = p.inner_product_param
        fan = int(np.prod(x[int(ipp.axis):]))  # type: ignore[index]
        out = [rng.normal(0, math.sqrt(2.0 / fan), (int(ipp.num_output), fan))]
        if ipp.bias_term:
            out.append(rng.normal(0, 0.05, int(ipp.num_output)))
        return out
    c = x[1]  # type: ignore[index]
    if t == "BatchNorm":
        return [rng.normal(0, 0.1, c), rng.uniform(0.8, 1.25, c), np.ones(1)]
    if t == "BN":  # PSPNet: slope, bias, mean, variance, each 1 x C x 1 x 1
        lo, hi = (0.1, 0.3) if residual else (0.5, 1.0)
        return [a.reshape(1, c, 1, 1) for a in (rng.uniform(lo, hi, c), rng.normal(0, 0.05, c),
                                                rng.normal(0, 0.1, c), rng.uniform(0.8, 1.25, c))]
    if t == "Scale":
        lo, hi = (0.1, 0.3) if residual else (0.5, 1.0)
        out = [rng.uniform(lo, hi, c)]
        if p.scale_param.bias_term:
            out.append(rng.normal(0, 0.05, c))
        return out
    if t == "PReLU":  # a shared slope or scale is a 0-axis blob in Caffe
        return [rng.uniform(0.1, 0.3, () if p.prelu_param.channel_shared else c)]
    if t == "Normalize":
        return [rng.uniform(10, 20, () if p.norm_param.channel_shared else c)]
    return []


def fill(prototxt: Path, caffemodel: Path, seed: int = 0) -> Path:
    """Write ``caffemodel`` with seeded random weights for ``prototxt``; return its path."""
    netdef = read_prototxt(Path(prototxt))
    rng = np.random.default_rng(seed)
    shapes: dict[str, Shape] = {name: tuple(shape) for name, shape in netdef.inputs}
    consumers: dict[str, list[str]] = {}
    for layer in netdef.layers:
        for b in layer.bottoms:
            consumers.setdefault(b, []).append(layer.type)
    chunks = [caffe_pb2.NetParameter(name=netdef.name).SerializeToString()]
    for i, layer in enumerate(netdef.layers):
        if layer.type == "Input":
            for top, s in zip(layer.tops, layer.param.input_param.shape, strict=False):
                shapes[top] = tuple(int(d) for d in s.dim)
            continue
        ins = [shapes.get(b) for b in layer.bottoms]
        later = [ly for ly in netdef.layers[i + 1:] if any(t in ly.bottoms for t in layer.tops)]
        residual = bool(later) and later[0].type == "Eltwise"
        blobs = _blobs(layer, ins[0] if ins else None, rng, residual)
        for top, s in zip(layer.tops, _out_shape(layer, ins), strict=True):
            shapes[top] = s
        if blobs:
            body = [caffe_pb2.LayerParameter(name=layer.name, type=layer.type).SerializeToString()]
            for arr in blobs:  # BlobProto: shape (field 7), packed float data (field 5), framed by hand
                dims = caffe_pb2.BlobShape(dim=list(arr.shape)).SerializeToString()
                data = np.ascontiguousarray(arr, "<f4").tobytes()
                blob = _key(7, len(dims)) + dims + _key(5, len(data)) + data
                body.append(_key(7, len(blob)) + blob)
            layer_bytes = b"".join(body)
            chunks.append(_key(100, len(layer_bytes)) + layer_bytes)
    caffemodel = Path(caffemodel)
    caffemodel.parent.mkdir(parents=True, exist_ok=True)
    caffemodel.write_bytes(b"".join(chunks))
    return caffemodel


def _key(field: int, length: int) -> bytes:
    """Return a length-delimited field's key and length as varints."""
    out = bytearray()
    for value in (field << 3 | 2, length):
        while True:
            byte = value & 0x7F
            value >>= 7
            out.append(byte | (0x80 if value else 0))
            if not value:
                break
    return bytes(out)


if __name__ == "__main__":
    fill(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 0)
