"""IR ops -> Caffe layers, one emitter per IR ``op_type`` (one node in, one layer out).

Multi-node patterns are first rewritten by ``legalize.py`` (BatchNormalization -> BatchNorm +
``convert.caffe::Scale``; Mul/Add by per-channel constants -> ``convert.caffe::Scale``; MatMul +
Add -> Gemm). An emitter raises ``NotExpressible`` with the reason when Caffe cannot express
its node; the exporter collects every such node before writing anything.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from convert._proto.rules import caffe_pool_size
from convert.ir import DataType, Node, Registry, TensorProtocol, Value

from .context import Blob, EmitContext, Emitted, NotExpressible

__all__ = ["CAFFE_DOMAIN", "EMITTERS", "caffe_pool_size"]

CAFFE_DOMAIN = "convert.caffe"
Emitter = Callable[[Node, EmitContext], "Emitted | None"]
EMITTERS: Registry[Emitter] = Registry("caffe emitters")


def _note(op: str, layer: str, limits: str = "") -> None:
    """Describe ``op``'s support-table row (the Caffe layer it becomes, its limits)."""
    EMITTERS.describe(op, layer, limits)


def _ints(node: Node, name: str, default: list[int]) -> list[int]:
    attr = node.attributes.get(name)
    return list(attr.value) if attr is not None else list(default)


def _int(node: Node, name: str, default: int) -> int:
    return int(node.attributes.get_int(name, default))


def _float(node: Node, name: str, default: float) -> float:
    return float(node.attributes.get_float(name, default))


def _hw(msg: object, name: str, vals: tuple[int, int], *, repeated: bool) -> None:
    """Write a (h, w) pair as the scalar field when equal, else as name_h / name_w."""
    h, w = vals
    field = "kernel_size" if name == "kernel" else name
    if h == w:
        if repeated:
            getattr(msg, field).append(h)
        else:
            setattr(msg, field, h)
    else:
        setattr(msg, f"{name}_h", h)
        setattr(msg, f"{name}_w", w)


def _dims(tensor: TensorProtocol) -> tuple[int, ...]:
    """Return a constant's (always static) shape as ints."""
    return tuple(d if isinstance(d, int) else -1 for d in tensor.shape)


def _weight(ctx: EmitContext, node: Node, index: int, what: str) -> TensorProtocol:
    t = ctx.const(node.inputs[index] if len(node.inputs) > index else None)
    if t is None:
        raise NotExpressible(f"its {what} is not a constant; Caffe layers hold weights as blobs")
    return t


def _explicit_pads(node: Node, size: tuple[int, int], k_eff: tuple[int, int], s: tuple[int, int]) -> list[int]:
    """Return the node's pads [h_begin, w_begin, h_end, w_end], ``auto_pad`` worked out."""
    auto = node.attributes.get_string("auto_pad", "NOTSET")
    if auto == "NOTSET":
        return _ints(node, "pads", [0, 0, 0, 0])
    if auto == "VALID":
        return [0, 0, 0, 0]
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise NotExpressible(f"auto_pad={auto} is not supported; re-export with explicit pads")
    pads = [0, 0, 0, 0]
    for i in range(2):
        total = max((-(-size[i] // s[i]) - 1) * s[i] + k_eff[i] - size[i], 0)
        small, large = total // 2, total - total // 2
        pads[i], pads[i + 2] = (small, large) if auto == "SAME_UPPER" else (large, small)
    return pads


def _kernel_pads(begin: int, end: int, dilation: int, where: str) -> tuple[int, int, int]:
    """Return ``(caffe_pad, zero_taps_before, zero_taps_after)`` for pads ``(begin, end)`` on one axis.

    Caffe pads symmetrically. A convolution (or deconvolution) with pads (b, e), e > b, equals
    one with pad e on both sides and ``(e - b) / dilation`` zero taps added at the start of its
    kernel: every window starts ``e - b`` earlier, and the taps that see that extra stretch are
    zero; the output size is the same. b > e adds the zero taps at the end. Exact, one layer.
    """
    if begin == end:
        return begin, 0, 0
    gap = abs(end - begin)
    if gap % dilation:
        raise NotExpressible(
            f"its {where} pads ({begin}, {end}) differ by {gap}, not a multiple of its dilation {dilation}: "
            "Caffe pads symmetrically and zero kernel taps cannot shift the windows by that much")
    taps = gap // dilation
    return max(begin, end), (taps if end > begin else 0), (taps if begin > end else 0)


def _padded_kernel(w: TensorProtocol, taps: tuple[tuple[int, int], tuple[int, int]]) -> Blob:
    """Return the weight ``w`` (O, I, kh, kw) with zero taps added around its spatial axes."""
    if not any(taps[0]) and not any(taps[1]):
        return w
    o, i, kh, kw = _dims(w)
    shape = (o, i, kh + sum(taps[0]), kw + sum(taps[1]))
    return _Deferred(lambda: np.pad(np.asarray(w.numpy(), np.float32), ((0, 0), (0, 0), taps[0], taps[1])), shape)


# ---- convolution ----------------------------------------------------------------------------------
@EMITTERS.register("Conv")
def conv(node: Node, ctx: EmitContext) -> Emitted:
    """Conv(+bias) -> Convolution (group, dilation); asymmetric pads as zero kernel taps (see ``_kernel_pads``)."""
    w = _weight(ctx, node, 1, "weight")
    if len(_dims(w)) != 4:
        raise NotExpressible("only 2-D convolution is supported")
    x = ctx.shape(node.inputs[0])
    m, _, kh, kw = (int(d) for d in _dims(w))
    dh, dw = _ints(node, "dilations", [1, 1])
    sh, sw = _ints(node, "strides", [1, 1])
    if dh != dw:
        raise NotExpressible("unequal dilations are not expressible in Caffe")
    if min(sh, sw, dh) < 1:
        raise NotExpressible(f"strides {[sh, sw]} / dilation {dh} must be positive")
    k_eff = (dh * (kh - 1) + 1, dw * (kw - 1) + 1)
    pads = _explicit_pads(node, (x[2], x[3]), k_eff, (sh, sw))
    if len(pads) != 4 or min(pads) < 0:
        raise NotExpressible(f"pads {pads} are not four non-negative H/W pads")
    caffe_pads, taps = [], []
    for i, (size, k, s, d, axis) in enumerate(zip((x[2], x[3]), k_eff, (sh, sw), (dh, dw), ("H", "W"), strict=True)):
        pb, pe = pads[i], pads[i + 2]
        if (size + 2 * pb - k) // s == (size + pb + pe - k) // s:
            caffe_pads.append(pb)  # the unequal end pad is never reached: pad pb gives the same windows
            taps.append((0, 0))
        else:
            pad, before, after = _kernel_pads(pb, pe, d, axis)
            caffe_pads.append(pad)
            taps.append((before, after))
    kernel_taps = (taps[0], taps[1])
    blobs: list[Blob] = [_padded_kernel(w, kernel_taps)]
    b = node.inputs[2] if len(node.inputs) > 2 else None
    if b is not None:
        blobs.append(_weight(ctx, node, 2, "bias"))
    e = ctx.layer(node, "Convolution", [node.inputs[0]], blobs=blobs)
    cp = e.layer.convolution_param
    cp.num_output = m
    cp.bias_term = b is not None
    _hw(cp, "kernel", (kh + sum(taps[0]), kw + sum(taps[1])), repeated=True)
    if any(caffe_pads):
        _hw(cp, "pad", (caffe_pads[0], caffe_pads[1]), repeated=True)
    if (sh, sw) != (1, 1):
        _hw(cp, "stride", (sh, sw), repeated=True)
    if dh != 1:
        cp.dilation.append(dh)
    if _int(node, "group", 1) != 1:
        cp.group = _int(node, "group", 1)
    return e


_note("Conv", "Convolution", "2-D; asymmetric pads (TF SAME) as zero kernel taps")


@EMITTERS.register("ConvTranspose")
def conv_transpose(node: Node, ctx: EmitContext) -> Emitted:
    """ConvTranspose -> Deconvolution; asymmetric pads and output_padding as zero kernel taps.

    output_padding adds outputs at the end, which is a smaller end pad (e - output_padding);
    ``_kernel_pads`` then makes the pads symmetric (the proof there holds for the transpose too).
    """
    w = _weight(ctx, node, 1, "weight")
    if len(_dims(w)) != 4:
        raise NotExpressible("only 2-D deconvolution is supported")
    if node.attributes.get_string("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        raise NotExpressible("automatic pads are not expressible in Deconvolution; re-export with explicit pads")
    if node.attributes.get("output_shape") is not None:
        raise NotExpressible("output_shape is not expressible in Deconvolution; re-export with pads")
    pads = _ints(node, "pads", [0, 0, 0, 0])
    if node.attributes.get_string("auto_pad", "NOTSET") == "VALID":
        pads = [0, 0, 0, 0]
    extra = _ints(node, "output_padding", [0, 0])
    d = _ints(node, "dilations", [1, 1])
    if len(pads) != 4 or min(pads) < 0 or len(extra) != 2 or min(extra) < 0 or len(d) != 2:
        raise NotExpressible(f"pads {pads} / output_padding {extra} / dilations {d} are not 2-D and non-negative")
    if d[0] != d[1]:
        raise NotExpressible("unequal dilations are not expressible in Caffe")
    caffe_pads, taps = [], []
    for i, axis in enumerate(("H", "W")):
        pad, before, after = _kernel_pads(pads[i], pads[i + 2] - extra[i], d[i], axis)
        caffe_pads.append(pad)
        taps.append((before, after))
    g = _int(node, "group", 1)
    _, m_g, kh, kw = (int(v) for v in _dims(w))
    blobs: list[Blob] = [_padded_kernel(w, (taps[0], taps[1]))]
    b = node.inputs[2] if len(node.inputs) > 2 else None
    if b is not None:
        blobs.append(_weight(ctx, node, 2, "bias"))
    e = ctx.layer(node, "Deconvolution", [node.inputs[0]], blobs=blobs)
    cp = e.layer.convolution_param
    cp.num_output = m_g * g
    cp.bias_term = b is not None
    _hw(cp, "kernel", (kh + sum(taps[0]), kw + sum(taps[1])), repeated=True)
    if any(caffe_pads):
        _hw(cp, "pad", (caffe_pads[0], caffe_pads[1]), repeated=True)
    s = _ints(node, "strides", [1, 1])
    if s != [1, 1]:
        _hw(cp, "stride", (s[0], s[1]), repeated=True)
    if d != [1, 1]:
        cp.dilation.append(d[0])
    if g != 1:
        cp.group = g
    return e


_note("ConvTranspose", "Deconvolution", "2-D; asymmetric pads and output_padding as zero kernel taps")


# ---- pooling ----------------------------------------------------------------------------------------


def _pool(node: Node, ctx: EmitContext, method: int, *, caffe_divisor: bool = False) -> Emitted:
    x = ctx.shape(node.inputs[0])
    y = ctx.shape(node.outputs[0])
    if len(x) != 4:
        raise NotExpressible("only 2-D pooling is supported")
    if any(d != 1 for d in _ints(node, "dilations", [1, 1])):
        raise NotExpressible("dilated pooling is not expressible in Caffe")
    kh, kw = _ints(node, "kernel_shape", [])
    sh, sw = _ints(node, "strides", [1, 1])
    auto = node.attributes.get_string("auto_pad", "NOTSET")
    if auto not in ("NOTSET", "VALID"):
        raise NotExpressible(f"auto_pad={auto} is not supported; re-export with explicit pads")
    # Window positions depend only on the begin pads; the output size decides the rest.
    pads = _ints(node, "pads", [0, 0, 0, 0]) if auto == "NOTSET" else [0, 0, 0, 0]
    ph, pw = pads[0], pads[1]
    any_pad = bool(ph or pw)
    want = (y[2], y[3])
    if want == (1, 1) and _covers_input(node, x, (kh, kw), pads, method):
        return _global(method)(node, ctx)
    ceil_ok = all(
        caffe_pool_size(x[2 + i], (kh, kw)[i], (sh, sw)[i], (ph, pw)[i], True, any_pad) == want[i] for i in range(2)
    )
    floor_ok = all(
        caffe_pool_size(x[2 + i], (kh, kw)[i], (sh, sw)[i], (ph, pw)[i], False, any_pad) == want[i] for i in range(2)
    )
    if not (ceil_ok or floor_ok):
        sizes = {
            mode: [caffe_pool_size(x[2 + i], (kh, kw)[i], (sh, sw)[i], (ph, pw)[i], mode == "ceil", any_pad)
                   for i in range(2)]
            for mode in ("ceil", "floor")
        }
        raise NotExpressible(
            f"its output is {list(want)} from {list(x[2:])} (kernel {[kh, kw]}, stride {[sh, sw]}, pads {pads}), but "
            f"Caffe, which pads symmetrically (pad ({ph}, {pw})), gives {sizes['ceil']} rounding up and "
            f"{sizes['floor']} rounding down: no Caffe rounding reproduces it"
        )
    if method == 1 and not caffe_divisor:
        overhang = any((want[i] - 1) * (sh, sw)[i] + (kh, kw)[i] > x[2 + i] + 2 * (ph, pw)[i] for i in range(2))
        include = _int(node, "count_include_pad", 0)
        if any_pad and not include:
            raise NotExpressible("AveragePool with pads and count_include_pad=0: Caffe counts the pads")
        if any_pad and overhang:
            raise NotExpressible("AveragePool whose last window runs past the pads: Caffe's divisor differs")
        if not any_pad and include and overhang:
            raise NotExpressible("AveragePool with count_include_pad=1 past the input edge: Caffe's divisor differs")
    e = ctx.layer(node, "Pooling", [node.inputs[0]])
    pp = e.layer.pooling_param
    pp.pool = method  # type: ignore[assignment]
    _hw(pp, "kernel", (kh, kw), repeated=False)
    if (sh, sw) != (1, 1):
        _hw(pp, "stride", (sh, sw), repeated=False)
    if any_pad:
        _hw(pp, "pad", (ph, pw), repeated=False)
    if not ceil_ok:
        if not ctx.flavor.floor_pooling:
            raise NotExpressible(
                f"this pool needs floor rounding, which pads cannot give here, and the '{ctx.flavor.name}' "
                "dialect has no rounding field (Caffe always rounds up); use --caffe-flavor ssd or bvlc")
        if ctx.flavor.floor_pooling == "ceil_mode":
            pp.ceil_mode = False
        else:
            pp.round_mode = pp.FLOOR
    return e


def _covers_input(node: Node, x: tuple[int, ...], kernel: tuple[int, int], pads: list[int], method: int) -> bool:
    """Return True when the pool's single window sees the whole input and nothing else counts.

    Then it is global pooling whatever the pads (old files write Inception's last 7x7 pool over a
    6x6 map with bottom/right pads): max ignores padding, and an average that excludes pads
    (count_include_pad=0) divides by the input's size, as Caffe's global pooling does.
    """
    begin, end = pads[:2], pads[2:] if len(pads) == 4 else pads[:2]
    for i in range(2):
        if begin[i] < 0 or kernel[i] - begin[i] < x[2 + i]:
            return False
    if method == 1 and _int(node, "count_include_pad", 0):
        return kernel == (x[2], x[3]) and not any(begin) and not any(end)
    return True


@EMITTERS.register("MaxPool")
def max_pool(node: Node, ctx: EmitContext) -> Emitted:
    """MaxPool -> Pooling MAX; pads chosen so Caffe's ceil rounding gives the ONNX size, else FLOOR."""
    if len(node.outputs) > 1 and node.outputs[1] is not None and node.outputs[1].uses():
        raise NotExpressible("MaxPool indices output is not expressible in Caffe")
    return _pool(node, ctx, 0)


@EMITTERS.register(f"{CAFFE_DOMAIN}::AveragePool")
def caffe_average_pool(node: Node, ctx: EmitContext) -> Emitted:
    """convert.caffe::AveragePool (Pad + AveragePool, from legalisation) -> Pooling AVE with pad."""
    return _pool(node, ctx, 1, caffe_divisor=True)


_note(f"{CAFFE_DOMAIN}::AveragePool", "Pooling AVE with pad", "Pad + AveragePool(count_include_pad=0), fused")


@EMITTERS.register("AveragePool")
def average_pool(node: Node, ctx: EmitContext) -> Emitted:
    """AveragePool -> Pooling AVE when Caffe's divisor matches count_include_pad."""
    return _pool(node, ctx, 1)


def _global(method: int) -> Emitter:
    def emit(node: Node, ctx: EmitContext) -> Emitted:
        if len(ctx.shape(node.inputs[0])) != 4:
            raise NotExpressible("only 2-D global pooling is supported")
        e = ctx.layer(node, "Pooling", [node.inputs[0]])
        e.layer.pooling_param.pool = method  # type: ignore[assignment]
        e.layer.pooling_param.global_pooling = True
        return e

    return emit


EMITTERS.register("GlobalMaxPool")(_global(0))
EMITTERS.register("GlobalAveragePool")(_global(1))
_note("MaxPool", "Pooling MAX [+ Crop]",
      "ceil via pads; else round_mode FLOOR (bvlc) / ceil_mode false (ssd); else wider pad + Crop")
_note("AveragePool", "Pooling AVE", "when Caffe's divisor equals count_include_pad's")
_note("GlobalMaxPool", "Pooling MAX global_pooling")
_note("GlobalAveragePool", "Pooling AVE global_pooling")


# ---- fully connected ----------------------------------------------------------------------------------
@EMITTERS.register("Gemm")
def gemm(node: Node, ctx: EmitContext) -> Emitted:
    """Gemm on a 2-D input with constant B (and C) -> InnerProduct, weights stored untransposed."""
    if _int(node, "transA", 0):
        raise NotExpressible("transA=1 is not expressible in InnerProduct")
    if len(ctx.shape(node.inputs[0])) != 2:
        raise NotExpressible("InnerProduct input must be 2-D")
    b = _weight(ctx, node, 1, "weight (B)")
    alpha, beta = _float(node, "alpha", 1.0), _float(node, "beta", 1.0)
    trans_b = _int(node, "transB", 0)
    n = int(_dims(b)[0] if trans_b else _dims(b)[1])

    def weight() -> np.ndarray:
        w = np.asarray(b.numpy(), dtype=np.float32)
        w = w if trans_b else w.T
        return w * np.float32(alpha) if alpha != 1.0 else w

    blobs: list[Blob] = [_Deferred(weight, (n, int(_dims(b)[1] if trans_b else _dims(b)[0])))]
    c = node.inputs[2] if len(node.inputs) > 2 else None
    if c is not None:
        ct = _weight(ctx, node, 2, "bias (C)")
        if int(np.prod(_dims(ct))) not in (n, 1) or (len(_dims(ct)) == 2 and int(_dims(ct)[0]) != 1):
            raise NotExpressible(f"bias of shape {list(_dims(ct))} is not a per-output vector")
        blobs.append(
            _Deferred(
                lambda: np.broadcast_to(np.asarray(ct.numpy(), np.float32).reshape(-1) * beta, (n,)).copy(),
                (n,),
            )
        )
    e = ctx.layer(node, "InnerProduct", [node.inputs[0]], blobs=blobs)
    e.layer.inner_product_param.num_output = n
    e.layer.inner_product_param.bias_term = c is not None
    return e


@EMITTERS.register("MatMul", f"{CAFFE_DOMAIN}::InnerProduct")
def matmul(node: Node, ctx: EmitContext) -> Emitted:
    """MatMul by a constant 2-D matrix [+ bias, from legalisation] -> InnerProduct on the last axis.

    For inputs of rank > 2, ``axis`` is the last axis: Caffe keeps the leading axes, as MatMul does.
    """
    rank = len(ctx.shape(node.inputs[0]))
    b = _weight(ctx, node, 1, "weight")
    if len(_dims(b)) != 2 or rank < 2:
        raise NotExpressible("only a constant 2-D weight on an input of rank >= 2 maps to InnerProduct")
    n, k = int(_dims(b)[1]), int(_dims(b)[0])
    blobs: list[Blob] = [_Deferred(lambda: np.asarray(b.numpy(), np.float32).T.copy(), (n, k))]
    has_bias = len(node.inputs) > 2 and node.inputs[2] is not None
    if has_bias:
        c = _weight(ctx, node, 2, "bias")
        blobs.append(_Deferred(lambda: np.asarray(c.numpy(), np.float32).reshape(-1), (n,)))
    e = ctx.layer(node, "InnerProduct", [node.inputs[0]], blobs=blobs)
    e.layer.inner_product_param.num_output = n
    e.layer.inner_product_param.bias_term = has_bias
    if rank > 2:
        e.layer.inner_product_param.axis = rank - 1
    return e


_note("Gemm", "InnerProduct", "2-D input, constant B/C, transA=0")
_note("MatMul", "InnerProduct", "constant 2-D weight; axis = last axis; MatMul+Add fused")
_note(f"{CAFFE_DOMAIN}::InnerProduct", "InnerProduct with bias", "MatMul + Add on rank > 2, fused")


class _Deferred:
    """A blob computed when it is written (transposed or scaled weights)."""

    def __init__(self, func: Callable[[], np.ndarray], shape: tuple[int, ...]) -> None:
        self.func = func
        self.shape = shape
        self.nbytes = int(np.prod(shape, dtype=np.int64)) * 4

    def numpy(self) -> np.ndarray:
        return self.func()


# ---- activations ----------------------------------------------------------------------------------------
def _simple(type_: str, op: str) -> Emitter:
    def emit(node: Node, ctx: EmitContext) -> Emitted:
        return ctx.layer(node, type_, [node.inputs[0]])

    emit.__doc__ = f"{op} -> {type_}."
    _note(op, type_)
    return emit


for _op, _type in (
    ("Relu", "ReLU"),
    ("Sigmoid", "Sigmoid"),
    ("Tanh", "TanH"),
    ("Abs", "AbsVal"),
    ("Softplus", "BNLL"),
    ("Exp", "Exp"),
    ("Log", "Log"),
):
    EMITTERS.register(_op)(_simple(_type, _op))


@EMITTERS.register("LeakyRelu")
def leaky_relu(node: Node, ctx: EmitContext) -> Emitted:
    """LeakyRelu -> ReLU negative_slope."""
    e = ctx.layer(node, "ReLU", [node.inputs[0]])
    e.layer.relu_param.negative_slope = _float(node, "alpha", 0.01)
    return e


@EMITTERS.register("Elu")
def elu(node: Node, ctx: EmitContext) -> Emitted:
    """Elu -> ELU alpha."""
    e = ctx.layer(node, "ELU", [node.inputs[0]])
    e.layer.elu_param.alpha = _float(node, "alpha", 1.0)
    return e


@EMITTERS.register("PRelu")
def prelu(node: Node, ctx: EmitContext) -> Emitted:
    """PRelu with a constant per-channel (or single) slope -> PReLU."""
    slope = _weight(ctx, node, 1, "slope")
    x = ctx.shape(node.inputs[0])
    count = int(np.prod(_dims(slope), dtype=np.int64)) if _dims(slope) else 1
    dims = [int(d) for d in _dims(slope)]
    non1 = [i for i, d in enumerate(dims) if d != 1]
    shared = count == 1
    if not shared and (len(x) < 2 or count != x[1] or len(non1) != 1 or len(dims) - non1[0] != len(x) - 1):
        raise NotExpressible(f"slope of shape {dims} is not per-channel")
    if shared and len(x) < 2:
        raise NotExpressible("a shared slope needs a channel axis")
    # A shared slope is written per channel (repeated): Caffe wants a 0-axis blob for channel_shared
    # and aborts on a [1] blob, while OpenCV cannot load a 0-axis blob; C equal slopes load in both.
    channels = x[1] if shared else count
    e = ctx.layer(
        node,
        "PReLU",
        [node.inputs[0]],
        blobs=[_Deferred(lambda: np.broadcast_to(np.asarray(slope.numpy(), np.float32).reshape(-1), (channels,))
                         .copy(), (channels,))],
    )
    return e


@EMITTERS.register("Clip")
def clip(node: Node, ctx: EmitContext) -> Emitted:
    """Clip -> ReLU (min 0, no max) or ReLU6 (0..6, ssd); other constant bounds were decomposed before
    emission into ReLU/Power/Eltwise (``decompose.py``), so what reaches here otherwise has computed bounds."""
    lo = (
        float(ctx.small(node.inputs[1], "min").reshape(-1)[0])
        if len(node.inputs) > 1 and node.inputs[1] is not None
        else None
    )
    hi = (
        float(ctx.small(node.inputs[2], "max").reshape(-1)[0])
        if len(node.inputs) > 2 and node.inputs[2] is not None
        else None
    )
    if lo == 0.0 and hi is None:
        return ctx.layer(node, "ReLU", [node.inputs[0]])
    if lo == 0.0 and hi == 6.0 and ctx.flavor.relu6:
        return ctx.layer(node, "ReLU6", [node.inputs[0]])
    raise NotExpressible(f"Clip({lo}, {hi}) needs constant bounds to be written as ReLU/Power/Eltwise")


def _power(
    node: Node, ctx: EmitContext, power: float = 1.0, scale: float = 1.0, shift: float = 0.0, x: Value | None = None
) -> Emitted:
    e = ctx.layer(node, "Power", [x if x is not None else node.inputs[0]])
    pp = e.layer.power_param
    if power != 1.0:
        pp.power = power
    if scale != 1.0:
        pp.scale = scale
    if shift != 0.0:
        pp.shift = shift
    return e


EMITTERS.register("Sqrt")(lambda node, ctx: _power(node, ctx, power=0.5))
EMITTERS.register("Neg")(lambda node, ctx: _power(node, ctx, scale=-1.0))
EMITTERS.register("Reciprocal")(lambda node, ctx: _power(node, ctx, power=-1.0))


@EMITTERS.register("Pow")
def pow_(node: Node, ctx: EmitContext) -> Emitted:
    """Pow(x, constant scalar) -> Power."""
    p = ctx.small(node.inputs[1], "exponent")
    if p.size != 1:
        raise NotExpressible("the exponent must be a scalar constant")
    return _power(node, ctx, power=float(p.reshape(-1)[0]))


for _op, _t in (
    ("LeakyRelu", "ReLU negative_slope"),
    ("Elu", "ELU"),
    ("PRelu", "PReLU"),
    ("Clip", "ReLU / ReLU6 (ssd) / ReLU-Power-Eltwise (exact, any Caffe)"),
    ("Sqrt", "Power 0.5"),
    ("Neg", "Power scale -1"),
    ("Reciprocal", "Power -1"),
    ("Pow", "Power"),
):
    _note(_op, _t)


# ---- comparison ------------------------------------------------------------------------------------------
def _float_casts_only(value: Value) -> bool:
    users = [use.node for use in value.uses()]
    return bool(users) and not value.is_graph_output() and all(
        u.op_type == "Cast" and u.attributes.get_int("to", 0) == DataType.FLOAT for u in users)


@EMITTERS.register("Greater")
def greater(node: Node, ctx: EmitContext) -> Emitted:
    """Greater(x, scalar constant) read only as float -> Threshold (1 where x > t, else 0)."""
    t = ctx.small(node.inputs[1], "threshold")
    if t.size != 1:
        raise NotExpressible("Caffe's Threshold compares with one scalar")
    if not _float_casts_only(node.outputs[0]):
        raise NotExpressible("Caffe compares only in Threshold, whose 0/1 result is float: the comparison must "
                             "feed only casts to float")
    e = ctx.layer(node, "Threshold", [node.inputs[0]])
    e.layer.threshold_param.threshold = float(t.reshape(-1)[0])
    return e


@EMITTERS.register("Cast")
def cast(node: Node, ctx: EmitContext) -> None:
    """Cast to float of a float value, of a Threshold's 0/1 result or of an ArgMax's indices -> no layer."""
    src = node.inputs[0]
    if src is None or node.attributes.get_int("to", 0) != DataType.FLOAT:
        raise NotExpressible("Caffe blobs are float: only casts to float have a Caffe form")
    producer = src.producer()
    if src.dtype != DataType.FLOAT and (producer is None or producer.op_type not in ("Greater", "ArgMax")):
        raise NotExpressible(f"a cast from {src.dtype} has no Caffe layer")
    ctx.alias(node.outputs[0], src)


_note("Greater", "Threshold", "a scalar constant threshold; the result read only through Cast to float")
_note("Cast", "(no layer)", "to float, from float or from a Threshold or an ArgMax")
