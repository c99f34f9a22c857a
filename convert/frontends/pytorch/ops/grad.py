"""The gradient ops of Core ATen (``*_backward``): what a captured training step or a hand-written
gradient (saliency maps, input gradients for adversarial checks) holds.

Each is written from its definition, on static shapes:

* ``convolution_backward``: the input's gradient is the transposed convolution of the output's
  gradient; the weight's is a convolution of the input by the output's gradient with the roles of
  batch and channels exchanged (stride and dilation swapped), group by group; the bias's a sum.
* ``max_pool2d_with_indices_backward``: each output gradient is added at the input element its
  index names (``ScatterElements`` with ``reduction="add"``).
* ``avg_pool2d_backward``: each output gradient, divided by its window's divisor, is spread over
  the window (a transposed convolution by a kernel of ones, on padded coordinates).
* ``_adaptive_avg_pool2d_backward``: adaptive windows are separable, so the gradient is
  ``Ph^T @ grad @ Pw`` with ``P[o, i] = 1 / len(o)`` on window ``o``.
* ``embedding_dense_backward``: rows added at their indices (``ScatterND``, ``reduction="add"``),
  the padding index's left out, each row divided by its index's count with ``scale_grad_by_freq``.
* ``native_layer_norm_backward`` / ``native_group_norm_backward``: with ``x^ = (x - mean) * rstd``
  and ``g = grad * weight``, ``dx = rstd * (g - mean(g) - x^ * mean(g * x^))`` over each
  normalised group; ``dweight = sum(grad * x^)``, ``dbias = sum(grad)`` over the rest.
"""

from __future__ import annotations

import numpy as np

from convert.ir import Value

from ._base import LowerContext, OpCall, TensorMeta, lowers

__all__ = ["adaptive_avg_pool2d_backward", "avg_pool2d_backward", "convolution_backward",
           "embedding_dense_backward", "group_norm_backward", "layer_norm_backward", "max_pool2d_backward"]


def _mask(call: OpCall) -> list[bool]:
    return [bool(m) for m in call.get("output_mask", [True, True, True])]  # type: ignore[union-attr]


def _pair(value: object, n: int) -> list[int]:
    items = [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]  # type: ignore[call-overload]
    return items * n if len(items) == 1 else items


@lowers("aten.convolution_backward", to="ConvTranspose / Conv / ReduceSum",
        notes="a forward convolution's gradients (not a transposed one's)")
def convolution_backward(call: OpCall, ctx: LowerContext) -> tuple[Value | None, ...]:
    """Gradients of ``conv(x, w) + b`` with respect to x, w and b."""
    if call.get("transposed", False):
        raise call.unsupported("the gradient of a transposed convolution")
    go, x, w = call.tensor("grad_output"), call.tensor("input"), call.tensor("weight")
    x_meta, w_meta, go_meta = call.meta("input"), call.meta("weight"), call.meta("grad_output")
    spatial = x_meta.rank - 2
    stride, pad = _pair(call["stride"], spatial), _pair(call["padding"], spatial)
    dilation, groups = _pair(call["dilation"], spatial), int(call.get("groups", 1))  # type: ignore[call-overload]
    kernel = w_meta.dims(2)
    want = _mask(call)
    grad_input = grad_weight = grad_bias = None
    if want[0]:  # x's gradient: conv_transpose(go, w) back to x's size
        produced = [(o - 1) * s - 2 * p + d * (k - 1) + 1
                    for o, s, p, d, k in zip(go_meta.dims(2), stride, pad, dilation, kernel, strict=True)]
        extra = [i - n for i, n in zip(x_meta.dims(2), produced, strict=True)]
        grad_input = ctx.emit("ConvTranspose", [go, w], {
            "strides": stride, "pads": pad + pad, "dilations": dilation, "group": groups,
            "kernel_shape": kernel, "output_padding": extra})
    if want[1]:  # w's gradient: for each group, conv of x (channels as batch) by go (channels as batch)
        n, cin = x_meta.dim(0), x_meta.dim(1)
        ci = cin // groups
        xs = x_meta.dims(2)
        # x [N, g*ci, *S] -> [ci, g*N, *S], channel index (group, sample)
        xg = ctx.emit("Reshape", [x, ctx.ints([n, groups, ci, *xs])])
        xg = ctx.emit("Transpose", [xg], {"perm": [2, 1, 0, *range(3, 3 + spatial)]})
        xg = ctx.emit("Reshape", [xg, ctx.ints([ci, groups * n, *xs])])
        # go [N, g*co, *O] -> [g*co, N, *O]: group j's kernels read channels j*N .. j*N+N-1
        os_ = go_meta.dims(2)
        kg = ctx.emit("Transpose", [go], {"perm": [1, 0, *range(2, 2 + spatial)]})
        full = ctx.emit("Conv", [xg, kg], {"strides": dilation, "dilations": stride, "pads": pad + pad,
                                           "group": groups, "kernel_shape": os_})  # [ci, g*co, *K']
        full = ctx.emit("Slice", [full, ctx.ints([0] * spatial), ctx.ints(kernel),
                                  ctx.ints(list(range(2, 2 + spatial)))])
        grad_weight = ctx.emit("Transpose", [full], {"perm": [1, 0, *range(2, 2 + spatial)]})  # [g*co, ci, *K]
    if want[2]:
        grad_bias = ctx.emit("ReduceSum", [go, ctx.ints([0, *range(2, 2 + spatial)])], {"keepdims": 0})
    return grad_input, grad_weight, grad_bias


def _flat_spatial(ctx: LowerContext, value: Value, meta: TensorMeta) -> Value:
    return ctx.emit("Reshape", [value, ctx.ints([*meta.dims()[:-2], -1])])


@lowers("aten.max_pool2d_with_indices_backward", to="ScatterElements(add)")
def max_pool2d_backward(call: OpCall, ctx: LowerContext) -> Value:
    """Add each output gradient at the input element its index (into H*W) names."""
    x_meta, go_meta = call.meta("self"), call.meta("grad_output")
    dims = x_meta.dims()
    zeros = ctx.emit("Expand", [ctx.const(0.0, go_meta.dtype), ctx.ints([*dims[:-2], dims[-2] * dims[-1]])])
    grads = _flat_spatial(ctx, call.tensor("grad_output"), go_meta)
    index = _flat_spatial(ctx, call.tensor("indices"), call.meta("indices"))
    summed = ctx.emit("ScatterElements", [zeros, index, grads], {"axis": -1, "reduction": "add"})
    return ctx.emit("Reshape", [summed, ctx.ints(dims)])


def _avg_divisors(size: int, out: int, k: int, s: int, p: int, include_pad: bool) -> np.ndarray:
    """Each output position's window: its start and end on the padded axis, and its element count."""
    starts = np.arange(out) * s - p
    ends = np.minimum(starts + k, size + p)
    counted = ends - starts  # with padding, as torch counts it under count_include_pad
    if not include_pad:
        counted = np.minimum(ends, size) - np.maximum(starts, 0)
    return counted


@lowers("aten.avg_pool2d_backward", to="Div+ConvTranspose+Slice")
def avg_pool2d_backward(call: OpCall, ctx: LowerContext) -> Value:
    """Spread each output gradient, divided by its window's divisor, over the window."""
    x_meta, go_meta = call.meta("self"), call.meta("grad_output")
    k, s, p = _pair(call["kernel_size"], 2), _pair(call.get("stride") or call["kernel_size"], 2), \
        _pair(call["padding"], 2)
    (h, w), (oh, ow) = x_meta.dims()[-2:], go_meta.dims()[-2:]
    override = call.get("divisor_override")
    if override:
        divisor = np.full((oh, ow), float(override))  # type: ignore[arg-type]
    else:
        include = bool(call.get("count_include_pad", True))
        divisor = np.outer(_avg_divisors(h, oh, k[0], s[0], p[0], include),
                           _avg_divisors(w, ow, k[1], s[1], p[1], include)).astype(np.float64)
    lead = x_meta.dims()[:-2]
    planes = int(np.prod(lead)) if lead else 1
    grads = ctx.emit("Div", [call.tensor("grad_output"), ctx.const(divisor, go_meta.dtype)])
    grads = ctx.emit("Reshape", [grads, ctx.ints([planes, 1, oh, ow])])
    ones = ctx.const(np.ones((1, 1, *k)), go_meta.dtype)
    spread = ctx.emit("ConvTranspose", [grads, ones], {"strides": s, "kernel_shape": k})  # padded coordinates
    covered = [(oh - 1) * s[0] + k[0], (ow - 1) * s[1] + k[1]]
    short = [max(0, p[0] + h - covered[0]), max(0, p[1] + w - covered[1])]
    if any(short):  # windows that stop before the input's end (floor mode): zeros there
        spread = ctx.emit("Pad", [spread, ctx.ints([0, 0, 0, 0, 0, 0, short[0], short[1]])])
    spread = ctx.emit("Slice", [spread, ctx.ints(p), ctx.ints([p[0] + h, p[1] + w]), ctx.ints([2, 3])])
    return ctx.emit("Reshape", [spread, ctx.ints(x_meta.dims())])


def _adaptive_matrix(size: int, out: int) -> np.ndarray:
    """P[o, i] = 1 / len(o) for i in adaptive window o (torch's start/end rule)."""
    matrix = np.zeros((out, size))
    for o in range(out):
        start, end = (o * size) // out, -((-(o + 1) * size) // out)
        matrix[o, start:end] = 1.0 / (end - start)
    return matrix


@lowers("aten._adaptive_avg_pool2d_backward", to="MatMul x2", notes="windows are separable: Ph^T @ grad @ Pw")
def adaptive_avg_pool2d_backward(call: OpCall, ctx: LowerContext) -> Value:
    """The adjoint of adaptive average pooling."""
    x_meta, go_meta = call.meta("self"), call.meta("grad_output")
    (h, w), (oh, ow) = x_meta.dims()[-2:], go_meta.dims()[-2:]
    rows = ctx.const(_adaptive_matrix(h, oh).T, go_meta.dtype)  # [H, oH]
    cols = ctx.const(_adaptive_matrix(w, ow), go_meta.dtype)  # [oW, W]
    return ctx.emit("MatMul", [ctx.emit("MatMul", [rows, call.tensor("grad_output")]), cols])


@lowers("aten.embedding_dense_backward", to="ScatterND(add)")
def embedding_dense_backward(call: OpCall, ctx: LowerContext) -> Value:
    """Add each gradient row to the weight row its index names."""
    go_meta = call.meta("grad_output")
    rows, width = int(call["num_weights"]), go_meta.dim(go_meta.rank - 1)  # type: ignore[call-overload]
    index = ctx.emit("Reshape", [call.tensor("indices"), ctx.ints([-1, 1])])
    grads = ctx.emit("Reshape", [call.tensor("grad_output"), ctx.ints([-1, width])])
    padding = int(call.get("padding_idx", -1))  # type: ignore[call-overload]
    if padding >= 0:  # the padding row gets no gradient
        keep = ctx.emit("Not", [ctx.emit("Equal", [index, ctx.ints([[padding]])])])
        grads = ctx.emit("Mul", [grads, ctx.emit("Cast", [keep], {"to": go_meta.dtype})])
    zeros = ctx.emit("Expand", [ctx.const(0.0, go_meta.dtype), ctx.ints([rows, width])])
    summed = ctx.emit("ScatterND", [zeros, index, grads], {"reduction": "add"})
    if not call.get("scale_grad_by_freq", False):
        return summed
    ones = ctx.emit("Expand", [ctx.const(1.0, go_meta.dtype), ctx.emit("Shape", [index])])
    counts = ctx.emit("ScatterND", [ctx.emit("Expand", [ctx.const(0.0, go_meta.dtype), ctx.ints([rows, 1])]),
                                    index, ones], {"reduction": "add"})
    return ctx.emit("Div", [summed, ctx.emit("Max", [counts, ctx.const(1.0, go_meta.dtype)])])


def _norm_input_grad(ctx: LowerContext, g: Value, xhat: Value, rstd: Value, axes: list[int]) -> Value:
    """rstd * (g - mean(g) - x^ * mean(g * x^)) over ``axes``."""
    mean_g = ctx.emit("ReduceMean", [g], {"axes": axes, "keepdims": 1})
    mean_gx = ctx.emit("ReduceMean", [ctx.emit("Mul", [g, xhat])], {"axes": axes, "keepdims": 1})
    inner = ctx.emit("Sub", [ctx.emit("Sub", [g, mean_g]), ctx.emit("Mul", [xhat, mean_gx])])
    return ctx.emit("Mul", [rstd, inner])


@lowers("aten.native_layer_norm_backward", to="ReduceMean/ReduceSum/Mul/Sub")
def layer_norm_backward(call: OpCall, ctx: LowerContext) -> tuple[Value | None, ...]:
    """Gradients of layer_norm with respect to its input, weight and bias."""
    go, x = call.tensor("grad_out"), call.tensor("input")
    meta = call.meta("input")
    normed = len(call["normalized_shape"])  # type: ignore[arg-type]
    axes = list(range(meta.rank - normed, meta.rank))
    batch = ctx.ints(list(range(meta.rank - normed)))
    rstd = call.tensor("rstd")
    xhat = ctx.emit("Mul", [ctx.emit("Sub", [x, call.tensor("mean")]), rstd])
    weight = call.args.get("weight")
    want = _mask(call)
    grad_input = grad_weight = grad_bias = None
    if want[0]:
        g = ctx.emit("Mul", [go, weight]) if isinstance(weight, Value) else go
        grad_input = _norm_input_grad(ctx, g, xhat, rstd, axes)
    if want[1] and isinstance(weight, Value):
        grad_weight = ctx.emit("ReduceSum", [ctx.emit("Mul", [go, xhat]), batch], {"keepdims": 0})
    if want[2] and isinstance(call.args.get("bias"), Value):
        grad_bias = ctx.emit("ReduceSum", [go, batch], {"keepdims": 0})
    return grad_input, grad_weight, grad_bias


@lowers("aten.native_group_norm_backward", to="ReduceMean/ReduceSum/Mul/Sub")
def group_norm_backward(call: OpCall, ctx: LowerContext) -> tuple[Value | None, ...]:
    """Gradients of group_norm with respect to its input, weight and bias."""
    meta = call.meta("input")
    n, c, hw, groups = (int(call[k]) for k in ("N", "C", "HxW", "group"))  # type: ignore[call-overload]
    by_channel = ctx.ints([n, c, hw])
    by_group = ctx.ints([n, groups, (c // groups) * hw])
    go = ctx.emit("Reshape", [call.tensor("grad_out"), by_channel])
    x = ctx.emit("Reshape", [call.tensor("input"), by_group])
    mean = ctx.emit("Unsqueeze", [call.tensor("mean"), ctx.ints([2])])
    rstd = ctx.emit("Unsqueeze", [call.tensor("rstd"), ctx.ints([2])])
    xhat = ctx.emit("Mul", [ctx.emit("Sub", [x, mean]), rstd])  # [N, G, C/G * HxW]
    xhat_c = ctx.emit("Reshape", [xhat, by_channel])
    weight = call.args.get("weight")
    want = _mask(call)
    grad_input = grad_weight = grad_bias = None
    if want[0]:
        g = go
        if isinstance(weight, Value):
            g = ctx.emit("Mul", [go, ctx.emit("Reshape", [weight, ctx.ints([1, c, 1])])])
        g = ctx.emit("Reshape", [g, by_group])
        grad_input = _norm_input_grad(ctx, g, xhat, rstd, [2])
        grad_input = ctx.emit("Reshape", [grad_input, ctx.ints(meta.dims())])
    sum_axes = ctx.ints([0, 2])
    if want[1] and isinstance(weight, Value):
        grad_weight = ctx.emit("ReduceSum", [ctx.emit("Mul", [go, xhat_c]), sum_axes], {"keepdims": 0})
    if want[2]:
        grad_bias = ctx.emit("ReduceSum", [go, sum_axes], {"keepdims": 0})
    return grad_input, grad_weight, grad_bias

