"""Pooling and resizing: max/avg pool, adaptive pools -> GlobalAveragePool / AveragePool,
mean over H,W -> GlobalAveragePool, upsample_* / interpolate -> Resize.
"""

from __future__ import annotations

import numpy as np

from convert.ir import Value

from ._base import LowerContext, OpCall, as_list, lowers

__all__ = ["adaptive_avg_pool", "avg_pool", "max_pool", "upsample"]


def _max_pool(call: OpCall, ctx: LowerContext, indices: bool = False) -> tuple[Value, ...]:
    kernel = as_list(call["kernel_size"], call.meta("self").rank - 2)
    nd = len(kernel)
    stride = call.get("stride") or kernel
    pads = as_list(call.get("padding", 0), nd)
    attrs: dict[str, object] = {
        "kernel_shape": kernel, "strides": as_list(stride, nd), "pads": pads + pads,
        "dilations": as_list(call.get("dilation", 1), nd), "ceil_mode": int(bool(call.get("ceil_mode", False))),
    }
    return ctx.emit_multi("MaxPool", [call.tensor("self")], attrs, outputs=2 if indices else 1)


@lowers("aten.max_pool1d", "aten.max_pool2d", "aten.max_pool3d", to="MaxPool")
def max_pool(call: OpCall, ctx: LowerContext) -> Value:
    """Lower max_pool{1,2,3}d to MaxPool (an empty stride means stride = kernel)."""
    return _max_pool(call, ctx)[0]


@lowers("aten.max_pool2d_with_indices", "aten.max_pool3d_with_indices", to="MaxPool (+Mod for the indices)",
        notes="indices into each plane, as torch (ONNX's run over the whole tensor)")
def max_pool_with_indices(call: OpCall, ctx: LowerContext) -> tuple[Value, Value | None]:
    """Lower max_pool*_with_indices to MaxPool. ONNX indexes the flattened tensor, torch each
    (N, C) plane: torch's index is ONNX's modulo the plane's size."""
    if not call.uses(1):
        return _max_pool(call, ctx)[0], None
    meta = call.meta("self")
    y, flat = _max_pool(call, ctx, indices=True)
    plane = int(np.prod(meta.dims(2)))
    return y, ctx.emit("Mod", [flat, ctx.ints(plane)])


@lowers("aten.avg_pool1d", "aten.avg_pool2d", "aten.avg_pool3d", to="AveragePool (+Mul)",
        notes="divisor_override scales the window sum (not with ceil_mode)")
def avg_pool(call: OpCall, ctx: LowerContext) -> Value:
    """Lower avg_pool{1,2,3}d to AveragePool (count_include_pad kept).

    With ``divisor_override`` d the result is the window sum over d: the padded average times
    kernel-area / d.
    """
    divisor = call.get("divisor_override")
    if divisor is not None:
        if call.get("ceil_mode", False):
            raise call.unsupported("avg_pool with divisor_override and ceil_mode")
        call.args["count_include_pad"] = True
        y = _avg_pool(call, ctx)
        area = int(np.prod(as_list(call["kernel_size"], call.meta("self").rank - 2)))
        return ctx.emit("Mul", [y, ctx.scalar_like(area / float(divisor), call.meta("self"))])  # type: ignore[arg-type]
    return _avg_pool(call, ctx)


def _avg_pool(call: OpCall, ctx: LowerContext) -> Value:
    kernel = as_list(call["kernel_size"], call.meta("self").rank - 2)
    nd = len(kernel)
    stride = call.get("stride") or kernel
    pads = as_list(call.get("padding", 0), nd)
    attrs = {
        "kernel_shape": kernel, "strides": as_list(stride, nd), "pads": pads + pads,
        "ceil_mode": int(bool(call.get("ceil_mode", False))),
        "count_include_pad": int(bool(call.get("count_include_pad", True))),
    }
    return ctx.emit("AveragePool", [call.tensor("self")], attrs)


def _adaptive(call: OpCall, ctx: LowerContext, kind: str) -> Value:
    meta = call.meta("self")
    spatial = meta.dims(2)
    out = as_list(call["output_size"], len(spatial))
    x = call.tensor("self")
    if all(o == 1 for o in out):
        return ctx.emit(f"Global{kind}Pool", [x])
    if all(o > 0 and s % o == 0 for s, o in zip(spatial, out, strict=True)):
        kernel = [s // o for s, o in zip(spatial, out, strict=True)]
        return ctx.emit(f"{kind}Pool", [x], {"kernel_shape": kernel, "strides": kernel})
    if kind == "Average" and len(spatial) <= 2 and all(s > 0 and o > 0 for s, o in zip(spatial, out, strict=True)):
        # Windows of different sizes (VGG's 7x7 pool on a 2x2 map, AlexNet's 6x6 on a 1x1 one): an
        # averaging matrix per axis, x @ A_w^T, then A_h @ (...) (MatMul broadcasts over N, C).
        dtype = meta.dtype.numpy()
        y = ctx.emit("MatMul", [x, ctx.const(_averaging(spatial[-1], out[-1]).T, dtype, name="adaptive_w")])
        if len(spatial) == 2:
            y = ctx.emit("MatMul", [ctx.const(_averaging(spatial[0], out[0]), dtype, name="adaptive_h"), y])
        return y
    raise call.unsupported(f"adaptive {kind.lower()} pooling from {tuple(spatial)} to {tuple(out)} (sizes not "
                           "divisible)", "use an input size that is a multiple of the output size")


def _averaging(size: int, out: int) -> np.ndarray:
    """The [out, size] matrix of adaptive average pooling along one axis: row i averages the inputs
    floor(i * size / out) .. ceil((i + 1) * size / out) - 1 (PyTorch's windows)."""
    matrix = np.zeros((out, size), dtype=np.float64)
    for i in range(out):
        start, end = (i * size) // out, -((-(i + 1) * size) // out)
        matrix[i, start:end] = 1.0 / (end - start)
    return matrix


@lowers("aten.adaptive_avg_pool1d", "aten.adaptive_avg_pool2d", "aten._adaptive_avg_pool2d",
        "aten.adaptive_avg_pool3d", "aten._adaptive_avg_pool3d", to="GlobalAveragePool / AveragePool / MatMul",
        notes="3-D: output size 1 or input size divisible by output size")
def adaptive_avg_pool(call: OpCall, ctx: LowerContext) -> Value:
    """Lower adaptive average pooling to GlobalAveragePool, an equivalent AveragePool, or (windows
    of different sizes, 1-D and 2-D) averaging matrices."""
    return _adaptive(call, ctx, "Average")


@lowers("aten.adaptive_max_pool2d", to="GlobalMaxPool / MaxPool", notes="only the values output")
def adaptive_max_pool(call: OpCall, ctx: LowerContext) -> tuple[Value, None]:
    """Lower adaptive max pooling to GlobalMaxPool or an equivalent MaxPool."""
    return _adaptive(call, ctx, "Max"), None


def _scales_or_sizes(call: OpCall, ctx: LowerContext, scales: object) -> tuple[Value | None, Value | None]:
    in_sp = call.meta("input" if "input" in call.metas else "self").dims(2)
    out_sp = call.out_meta.dims(2)
    factors = None
    if isinstance(scales, (list, tuple)) and all(s is not None for s in scales):
        factors = [float(s) for s in scales]
    elif all(i > 0 and o % i == 0 for i, o in zip(in_sp, out_sp, strict=True)):
        factors = [float(o // i) for i, o in zip(in_sp, out_sp, strict=True)]
    if factors is not None and all(int(i * f) == o for i, f, o in zip(in_sp, factors, out_sp, strict=True)):
        return ctx.const([1.0, 1.0, *factors], np.float32, name="scales"), None
    return None, ctx.ints(call.out_meta.dims(), name="sizes")


def _resize(call: OpCall, ctx: LowerContext, mode: str, scales: object, align_corners: bool) -> Value:
    x = call.tensor("input" if "input" in call.args else "self")
    scale_v, size_v = _scales_or_sizes(call, ctx, scales)
    attrs: dict[str, object] = {"mode": mode}
    if mode == "nearest":
        attrs["coordinate_transformation_mode"] = "asymmetric"
        attrs["nearest_mode"] = "floor"
    else:
        attrs["coordinate_transformation_mode"] = "align_corners" if align_corners else "half_pixel"
        if mode == "cubic":
            attrs["cubic_coeff_a"] = -0.75
    inputs: list[Value | None] = [x, None, scale_v] if size_v is None else [x, None, None, size_v]
    return ctx.emit("Resize", inputs, attrs)


def _scales_of(call: OpCall) -> object:
    if "scale_factors" in call.args:
        return call.args["scale_factors"]
    keys = [k for k in ("scales_d", "scales_h", "scales_w", "scales") if k in call.args]
    values = [call.args[k] for k in keys]
    return values if values and all(v is not None for v in values) else None


@lowers("aten.upsample_nearest1d", "aten.upsample_nearest2d", "aten.upsample_nearest3d", to="Resize(nearest)")
def upsample_nearest(call: OpCall, ctx: LowerContext) -> Value:
    """Lower nearest upsampling to Resize(nearest, asymmetric, floor): torch's 'nearest'."""
    return _resize(call, ctx, "nearest", _scales_of(call), False)


@lowers("aten.upsample_linear1d", "aten.upsample_bilinear2d", "aten.upsample_trilinear3d",
        to="Resize(linear)", notes="align_corners True -> 'align_corners', False -> 'half_pixel'")
def upsample(call: OpCall, ctx: LowerContext) -> Value:
    """Lower (bi/tri)linear upsampling to Resize(linear)."""
    return _resize(call, ctx, "linear", _scales_of(call), bool(call.get("align_corners", False)))


@lowers("aten.upsample_bicubic2d", to="Resize(cubic)", notes="cubic_coeff_a=-0.75 as torch")
def upsample_bicubic(call: OpCall, ctx: LowerContext) -> Value:
    """Lower bicubic upsampling to Resize(cubic, a=-0.75)."""
    return _resize(call, ctx, "cubic", _scales_of(call), bool(call.get("align_corners", False)))
