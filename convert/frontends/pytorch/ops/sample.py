"""Sampling: grid_sampler -> GridSample (opset 16; 4-D input and grid)."""

from __future__ import annotations

from convert.ir import Value

from ._base import LowerContext, OpCall, lowers

__all__ = ["grid_sampler"]

_MODES = {0: "bilinear", 1: "nearest", 2: "bicubic"}
_PADDING = {0: "zeros", 1: "border", 2: "reflection"}


@lowers("aten.grid_sampler", "aten.grid_sampler_2d", to="GridSample",
        notes="4-D input only; modes bilinear/nearest/bicubic, padding zeros/border/reflection")
def grid_sampler(call: OpCall, ctx: LowerContext) -> Value:
    """Lower grid_sampler (F.grid_sample) to GridSample with the same mode, padding and corners."""
    if call.meta("input").rank != 4:
        raise call.unsupported("grid_sample of a 5-D input", "ONNX GridSample at opset 17 is 2-D only")
    mode = _MODES.get(int(call["interpolation_mode"]))  # type: ignore[call-overload]
    padding = _PADDING.get(int(call["padding_mode"]))  # type: ignore[call-overload]
    if mode is None or padding is None:
        raise call.unsupported(f"grid_sample mode {call['interpolation_mode']} / padding {call['padding_mode']}")
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": int(bool(call["align_corners"]))}
    return ctx.emit("GridSample", [call.tensor("input"), call.tensor("grid")], attrs)
