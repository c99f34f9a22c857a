"""Convolutions: aten conv1d/2d/3d, convolution and conv_transpose -> Conv / ConvTranspose; col2im
(F.fold) -> ConvTranspose with a one-hot kernel.
"""

from __future__ import annotations

import numpy as np

from convert.ir import Value

from ._base import LowerContext, OpCall, as_list, lowers

__all__ = ["col2im", "conv", "conv_transpose", "convolution"]


def _pads(call: OpCall, padding: object, kernel: list[int], dilation: list[int]) -> list[int]:
    nd = len(kernel)
    if isinstance(padding, str):
        if padding == "valid":
            return [0] * (2 * nd)
        if padding == "same":
            total = [d * (k - 1) for k, d in zip(kernel, dilation, strict=True)]
            return [t // 2 for t in total] + [t - t // 2 for t in total]
        raise call.unsupported(f"padding '{padding}' is not supported")
    pads = as_list(padding, nd)
    return pads + pads


def _emit(call: OpCall, ctx: LowerContext, *, transposed: bool, stride: object, padding: object,
          dilation: object, groups: int, output_padding: object = 0) -> Value:
    x = call.tensor("input")
    w = call.tensor("weight")
    bias = call.get("bias")
    kernel = call.meta("weight").dims(2)
    nd = len(kernel)
    dil = as_list(dilation, nd)
    attrs: dict[str, object] = {
        "kernel_shape": kernel,
        "strides": as_list(stride, nd),
        "pads": _pads(call, padding, kernel, dil),
        "dilations": dil,
        "group": int(groups),
    }
    inputs: list[Value | None] = [x, w]
    if isinstance(bias, Value):
        inputs.append(bias)
    if transposed:
        outp = as_list(output_padding, nd)
        if any(outp):
            attrs["output_padding"] = outp
        return ctx.emit("ConvTranspose", inputs, attrs)
    return ctx.emit("Conv", inputs, attrs)


@lowers("aten.conv1d", "aten.conv2d", "aten.conv3d", to="Conv",
        notes="padding 'same'/'valid' become explicit pads")
def conv(call: OpCall, ctx: LowerContext) -> Value:
    """Lower conv{1,2,3}d (both the int-list and the string-padding overloads) to Conv."""
    return _emit(call, ctx, transposed=False, stride=call["stride"], padding=call["padding"],
                 dilation=call["dilation"], groups=int(call["groups"]))  # type: ignore[call-overload]


@lowers("aten.conv_transpose1d", "aten.conv_transpose2d", "aten.conv_transpose3d", to="ConvTranspose")
def conv_transpose(call: OpCall, ctx: LowerContext) -> Value:
    """Lower conv_transpose{1,2,3}d to ConvTranspose (weight layout is the same as ONNX's)."""
    return _emit(call, ctx, transposed=True, stride=call["stride"], padding=call["padding"],
                 dilation=call["dilation"], groups=int(call["groups"]),  # type: ignore[call-overload]
                 output_padding=call["output_padding"])


@lowers("aten.convolution", "aten._convolution", to="Conv / ConvTranspose")
def convolution(call: OpCall, ctx: LowerContext) -> Value:
    """Lower the generic convolution (core ATen, traced TorchScript) to Conv or ConvTranspose."""
    return _emit(call, ctx, transposed=bool(call["transposed"]), stride=call["stride"],
                 padding=call["padding"], dilation=call["dilation"],
                 groups=int(call["groups"]), output_padding=call["output_padding"])  # type: ignore[call-overload]


@lowers("aten.col2im", to="Reshape+ConvTranspose (one-hot kernel)", notes="F.fold; 4-D output only")
def col2im(call: OpCall, ctx: LowerContext) -> Value:
    """Lower col2im (F.fold): a grouped ConvTranspose whose one-hot kernel puts each column entry
    back at its kernel offset, summing overlaps; padding crops the border as torch does.
    """
    meta = call.meta("self")
    if meta.rank != 3:
        raise call.unsupported("col2im of an unbatched input")
    kh, kw = as_list(call["kernel_size"], 2)
    dh, dw = as_list(call["dilation"], 2)
    ph, pw = as_list(call["padding"], 2)
    sh, sw = as_list(call["stride"], 2)
    oh, ow = as_list(call["output_size"], 2)
    k = kh * kw
    channels = meta.dim(1) // k
    blocks_h = (oh + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    blocks_w = (ow + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    x = ctx.emit("Reshape", [call.tensor("self"), ctx.ints([meta.dim(0), channels * k, blocks_h, blocks_w])])
    weight = np.zeros((channels * k, 1, kh, kw), dtype=meta.dtype.numpy())
    for c in range(channels):
        for j in range(k):
            weight[c * k + j, 0, j // kw, j % kw] = 1
    # ConvTranspose's natural output is (blocks - 1) * stride + dilated kernel; output_padding adds
    # what output_size + 2 * padding has beyond it (less than a stride), pads crop the padding.
    extra_h = oh + 2 * ph - ((blocks_h - 1) * sh + dh * (kh - 1) + 1)
    extra_w = ow + 2 * pw - ((blocks_w - 1) * sw + dw * (kw - 1) + 1)
    attrs: dict[str, object] = {"kernel_shape": [kh, kw], "strides": [sh, sw], "dilations": [dh, dw],
                                "group": channels, "pads": [ph, pw, ph, pw]}
    if extra_h or extra_w:
        attrs["output_padding"] = [extra_h, extra_w]
    return ctx.emit("ConvTranspose", [x, ctx.const(weight)], attrs)
