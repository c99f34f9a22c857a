"""Convolutions: aten conv1d/2d/3d, convolution and conv_transpose -> Conv / ConvTranspose."""

from __future__ import annotations

from convert.ir import Value

from ._base import LowerContext, OpCall, as_list, lowers

__all__ = ["conv", "conv_transpose", "convolution"]


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
        return ctx.op("ConvTranspose", inputs, attrs)
    return ctx.op("Conv", inputs, attrs)


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
