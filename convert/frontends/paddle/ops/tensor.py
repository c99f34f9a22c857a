"""Shape and data-movement ops: reshape/flatten/squeeze/unsqueeze/transpose (XShape outputs
ignored), concat, split, slice, strided_slice, constants (fill_constant/full/full_int_array/
assign_value), shape, cast.
"""

from __future__ import annotations

import numpy as np

from convert.frontends.paddle.context import PaddleContext
from convert.frontends.paddle.legacy import VARTYPE_DTYPES
from convert.frontends.paddle.ops import register
from convert.frontends.paddle.program import Op
from convert.ir import RefusedError, Value

__all__: list[str] = []


def _np_dtype(value: object, default: str = "float32") -> np.dtype:
    """Paddle dtype (VarType enum int, 'float32', 'paddle.float32') -> numpy dtype."""
    if value is None or value == -1:
        return np.dtype(default)
    if isinstance(value, int):
        name = VARTYPE_DTYPES.get(value)
        if name is None or name == "bfloat16":
            raise RefusedError(f"dtype {value} is not supported")
        return np.dtype(name)
    text = str(value).replace("paddle.", "")
    try:
        return np.dtype({"float": "float32", "double": "float64", "bool": "bool"}.get(text, text))
    except (TypeError, ValueError) as exc:  # 'i/t64': a damaged file
        raise RefusedError(f"dtype '{value}' is not a data type. Is the model file damaged?") from exc


def _int64(ctx: PaddleContext, v: Value, dtype: np.dtype | None) -> Value:
    return v if dtype == np.dtype(np.int64) else ctx.emit("Cast", [v], {"to": 7})


def _int_list_input(op: Op, ctx: PaddleContext, tensor_slot: str, list_slot: str | None,
                    attr: str) -> np.ndarray | Value:
    """Return an int list given as an attribute, a constant input, a tensor or a list of scalars."""
    for slot in (tensor_slot, list_slot):
        if slot is None or not ctx.has(op, slot):
            continue
        static = ctx.static(op, slot)
        if static is not None:
            return static.reshape(-1).astype(np.int64)
        parts = []
        for name in op.inputs[slot]:
            v = ctx.value(name)
            v = ctx.emit("Reshape", [v, ctx.const(np.array([-1], np.int64))])
            parts.append(_int64(ctx, v, ctx.program.var(name).dtype))
        return parts[0] if len(parts) == 1 else ctx.emit("Concat", parts, {"axis": 0})
    return np.asarray(op.ints(attr), dtype=np.int64).reshape(-1)


@register("reshape2", "reshape", "reshape_", maps_to="Reshape",
          notes="shape attribute, Shape tensor or ShapeTensor list; 0 copies a dim, -1 infers")
def reshape(op: Op, ctx: PaddleContext) -> None:
    """reshape2 -> Reshape (Paddle's 0 and -1 mean what ONNX's do with allowzero=0)."""
    shape = _int_list_input(op, ctx, "Shape", "ShapeTensor", "shape")
    target = ctx.const(shape) if isinstance(shape, np.ndarray) else shape
    ctx.bind(op, "Out", ctx.emit("Reshape", [ctx.input(op, "X"), target]))


@register("flatten_contiguous_range", "flatten", "flatten_", maps_to="Reshape|Flatten",
          notes="start_axis..stop_axis")
def flatten(op: Op, ctx: PaddleContext) -> None:
    """flatten(start_axis, stop_axis) -> Reshape merging those dims."""
    x = ctx.input(op, "X")
    rank = ctx.rank(op, "X")
    if rank is None:
        raise RefusedError("flatten needs the input rank")
    if rank == 0:
        ctx.bind(op, "Out", ctx.emit("Reshape", [x, ctx.const(np.array([1], np.int64))]))
        return
    start = op.int_("start_axis", default=1) % rank
    stop = op.int_("stop_axis", default=-1) % rank
    shape = ctx.shape(op, "X") or ()
    trailing = list(shape[stop + 1:])
    if any(d < 0 for d in trailing):
        raise RefusedError("flatten with free trailing dims is not supported")
    target = [0] * start + [-1] + trailing
    ctx.bind(op, "Out", ctx.emit("Reshape", [x, ctx.const(np.array(target, np.int64))]))


@register("flatten2", maps_to="Flatten", notes="axis")
def flatten2(op: Op, ctx: PaddleContext) -> None:
    """flatten2(axis) -> Flatten(axis) (2-D result, as in Paddle)."""
    ctx.bind(op, "Out", ctx.emit("Flatten", [ctx.input(op, "X")], {"axis": op.int_("axis", default=1)}))


def _axes(op: Op, ctx: PaddleContext) -> list[int]:
    static = ctx.static(op, "axes")
    if static is None and ctx.has(op, "AxesTensor"):
        static = ctx.static(op, "AxesTensor")
    if static is not None:
        return [int(a) for a in static.reshape(-1)]
    if ctx.has(op, "axes") or ctx.has(op, "AxesTensor"):
        raise RefusedError("axes must be constant")
    return op.ints("axes")


@register("squeeze2", "squeeze", "squeeze_", maps_to="Squeeze",
          notes="axes whose size is not 1 are ignored, as in Paddle (needs static dims)")
def squeeze(op: Op, ctx: PaddleContext) -> None:
    """squeeze2(axes) -> Squeeze; Paddle skips listed axes whose size is not 1."""
    x = ctx.input(op, "X")
    axes = _axes(op, ctx)
    shape = ctx.shape(op, "X")
    if axes and shape is not None:
        rank = len(shape)
        axes = [a % rank for a in axes if shape[a % rank] in (1, -1)]
        if not axes:
            ctx.bind(op, "Out", ctx.emit("Identity", [x]))
            return
    inputs = [x, ctx.const(np.array(axes, np.int64))] if axes else [x]
    ctx.bind(op, "Out", ctx.emit("Squeeze", inputs))


@register("unsqueeze2", "unsqueeze", "unsqueeze_", maps_to="Unsqueeze",
          notes="axes attribute or constant input")
def unsqueeze(op: Op, ctx: PaddleContext) -> None:
    """unsqueeze2(axes) -> Unsqueeze."""
    axes = _axes(op, ctx)
    y = ctx.emit("Unsqueeze", [ctx.input(op, "X"), ctx.const(np.array(axes, np.int64))])
    ctx.bind(op, "Out", y)


@register("transpose2", "transpose", "transpose_", maps_to="Transpose")
def transpose(op: Op, ctx: PaddleContext) -> None:
    """transpose2(axis) / transpose(perm) -> Transpose(perm)."""
    perm = op.ints("axis", "perm")
    ctx.bind(op, "Out", ctx.emit("Transpose", [ctx.input(op, "X")], {"perm": perm}))


def _axis(op: Op, ctx: PaddleContext, default: int = 0) -> int:
    static = ctx.static(op, "AxisTensor")
    if static is not None:
        return int(static.reshape(-1)[0])
    if ctx.has(op, "AxisTensor"):
        raise RefusedError("the axis must be a constant")
    return op.int_("axis", default=default)


@register("concat", maps_to="Concat", notes="axis attribute or constant AxisTensor")
def concat(op: Op, ctx: PaddleContext) -> None:
    """concat(axis) -> Concat."""
    ctx.bind(op, "Out", ctx.emit("Concat", ctx.inputs(op, "X"), {"axis": _axis(op, ctx)}))


@register("stack", maps_to="Unsqueeze+Concat")
def stack(op: Op, ctx: PaddleContext) -> None:
    """stack(axis) -> Unsqueeze each input, then Concat."""
    axis = op.int_("axis")
    axes = ctx.const(np.array([axis], np.int64))
    parts = [ctx.emit("Unsqueeze", [v, axes]) for v in ctx.inputs(op, "X")]
    ctx.bind(op, "Y", ctx.emit("Concat", parts, {"axis": axis}))


@register("split", "split_with_num", maps_to="Split", notes="num or sections (one -1 allowed); static dim")
def split(op: Op, ctx: PaddleContext) -> None:
    """split(num | sections, axis) -> Split with explicit sizes."""
    x = ctx.input(op, "X")
    axis = _axis(op, ctx)
    outs = op.outputs.get("Out") or []
    sections = op.ints("sections")
    static = ctx.static(op, "SectionsTensorList")
    if static is not None:
        sections = [int(s) for s in static]
    shape = ctx.shape(op, "X")
    dim = shape[axis] if shape is not None and -len(shape) <= axis < len(shape) else -1
    if not sections:
        num = op.int_("num") or len(outs)
        if dim > 0:
            sections = [dim // num] * num
    if -1 in sections and dim > 0:
        sections[sections.index(-1)] = dim - sum(s for s in sections if s != -1)
    inputs = [x]
    if sections and -1 not in sections:
        inputs.append(ctx.const(np.array(sections, np.int64)))
    values = ctx.emit_multi("Split", inputs, {"axis": axis}, outputs=len(outs))
    for i, v in enumerate(values):
        ctx.bind(op, "Out", v, i)


def _slice_arg(op: Op, ctx: PaddleContext, name: str) -> np.ndarray | Value:
    cap = name.capitalize()
    return _int_list_input(op, ctx, f"{cap}Tensor", f"{cap}TensorList", name)


def _as_value(ctx: PaddleContext, v: np.ndarray | Value) -> Value:
    return ctx.const(v.astype(np.int64)) if isinstance(v, np.ndarray) else v


@register("slice", maps_to="Slice(+Squeeze)", notes="starts/ends attributes or tensors; decrease_axis")
def slice_(op: Op, ctx: PaddleContext) -> None:
    """slice(axes, starts, ends, decrease_axis) -> Slice, then Squeeze the decreased axes."""
    axes = np.array(op.ints("axes"), np.int64)
    starts = _slice_arg(op, ctx, "starts")
    ends = _slice_arg(op, ctx, "ends")
    y = ctx.emit("Slice", [ctx.input(op, "Input"), _as_value(ctx, starts), _as_value(ctx, ends),
                           ctx.const(axes)])
    _finish_slice(op, ctx, y)


@register("strided_slice", maps_to="Slice(+Squeeze)", notes="strides; decrease_axis")
def strided_slice(op: Op, ctx: PaddleContext) -> None:
    """strided_slice(axes, starts, ends, strides) -> Slice with steps."""
    axes = np.array(op.ints("axes"), np.int64)
    args = [_as_value(ctx, _slice_arg(op, ctx, n)) for n in ("starts", "ends", "strides")]
    y = ctx.emit("Slice", [ctx.input(op, "Input"), args[0], args[1], ctx.const(axes), args[2]])
    _finish_slice(op, ctx, y)


def _finish_slice(op: Op, ctx: PaddleContext, y: Value) -> None:
    dec = op.ints("decrease_axis")
    if dec:
        rank = ctx.rank(op, "Input")
        out_shape = ctx.out_shape(op)
        if rank is not None and len(dec) == rank and out_shape is not None and len(out_shape) == 1:
            y = ctx.emit("Reshape", [y, ctx.const(np.array([1], np.int64))])
        else:
            y = ctx.emit("Squeeze", [y, ctx.const(np.array(dec, np.int64))])
    ctx.bind(op, "Out", y)


@register("fill_constant", "full", maps_to="(constant)", notes="static shape only")
def fill_constant(op: Op, ctx: PaddleContext) -> None:
    """fill_constant / full(shape, value, dtype) -> a constant."""
    if ctx.has(op, "ShapeTensor") or ctx.has(op, "ShapeTensorList") or ctx.has(op, "ValueTensor"):
        raise RefusedError("a shape or value given as a tensor is not supported")
    dtype = _np_dtype(op.attr("dtype"))
    text = op.str_("str_value")
    value = float(text) if text else op.float_("value")
    shape = op.ints("shape")
    ctx.bind_const(op, "Out", np.full(shape, value, dtype=dtype))


@register("full_int_array", maps_to="(constant)")
def full_int_array(op: Op, ctx: PaddleContext) -> None:
    """full_int_array(value, dtype) -> a 1-D constant."""
    dtype = _np_dtype(op.attr("dtype"), "int64")
    ctx.bind_const(op, "Out", np.asarray(op.ints("value"), dtype=np.int64).astype(dtype).reshape(-1))


@register("assign_value", "assign_value_", maps_to="(constant)")
def assign_value(op: Op, ctx: PaddleContext) -> None:
    """assign_value(shape, dtype, *_values) -> a constant."""
    dtype = _np_dtype(op.attr("dtype"))
    values = None
    for key in ("fp32_values", "int32_values", "int64_values", "bool_values", "fp64_values", "values"):
        if op.attrs.get(key):
            values = op.attrs[key]
            break
    shape = op.ints("shape")
    ctx.bind_const(op, "Out", np.asarray(values or [], dtype=dtype).reshape(shape))


@register("shape", "shape64", maps_to="Shape(+Cast)", notes="int32 result for 'shape', as in Paddle")
def shape(op: Op, ctx: PaddleContext) -> None:
    """shape -> Shape (cast to int32 where Paddle's result is int32)."""
    y = ctx.emit("Shape", [ctx.input(op, "Input")])
    dtype = ctx.program.var(op.outputs["Out"][0]).dtype
    if dtype is None and op.type == "shape":
        dtype = np.dtype(np.int32)
    if dtype is not None and dtype != np.dtype(np.int64):
        y = ctx.emit("Cast", [y], {"to": _onnx_dtype(dtype)})
    ctx.bind(op, "Out", y)


_ONNX_DTYPES = {"float32": 1, "uint8": 2, "int8": 3, "int16": 5, "int32": 6, "int64": 7, "bool": 9,
                "float16": 10, "float64": 11}


def _onnx_dtype(dtype: np.dtype) -> int:
    code = _ONNX_DTYPES.get(np.dtype(dtype).name)
    if code is None:
        raise RefusedError(f"dtype {dtype} is not supported")
    return code


@register("cast", "cast_", maps_to="Cast")
def cast(op: Op, ctx: PaddleContext) -> None:
    """cast(out_dtype | dtype) -> Cast."""
    dtype = _np_dtype(op.attr("out_dtype", op.attr("dtype")))
    ctx.bind(op, "Out", ctx.emit("Cast", [ctx.input(op, "X")], {"to": _onnx_dtype(dtype)}))


@register("arg_max", "argmax", maps_to="ArgMax(+Cast)", notes="axis, keepdims, flatten, int32/int64 result")
def arg_max(op: Op, ctx: PaddleContext) -> None:
    """arg_max(axis, keepdims, flatten, dtype) -> ArgMax (Cast to int32 when asked)."""
    x = ctx.input(op, "X")
    static = ctx.static(op, "axis")
    axis = int(static.reshape(-1)[0]) if static is not None else op.int_("axis")
    if op.bool_("flatten"):
        x = ctx.emit("Reshape", [x, ctx.const(np.array([-1], np.int64))])
        axis = 0
    y = ctx.emit("ArgMax", [x], {"axis": axis, "keepdims": int(op.bool_("keepdims"))})
    dtype = _np_dtype(op.attr("dtype"), "int64")
    if dtype != np.dtype(np.int64):
        y = ctx.emit("Cast", [y], {"to": _onnx_dtype(dtype)})
    ctx.bind(op, "Out", y)


@register("expand_v2", "expand", maps_to="Expand", notes="shape attribute or tensor; -1 keeps a dim")
def expand(op: Op, ctx: PaddleContext) -> None:
    """expand_v2(shape) -> Expand; Paddle's -1 (keep the dim) becomes 1 (broadcast keeps it)."""
    shape = _int_list_input(op, ctx, "Shape", "expand_shapes_tensor", "shape")
    if isinstance(shape, np.ndarray):
        target = ctx.const(np.where(shape == -1, 1, shape).astype(np.int64))
    else:
        minus = ctx.emit("Equal", [shape, ctx.const(np.array(-1, np.int64))])
        target = ctx.emit("Where", [minus, ctx.const(np.array(1, np.int64)), shape])
    ctx.bind(op, "Out", ctx.emit("Expand", [ctx.input(op, "X"), target]))


@register("tile", maps_to="Tile", notes="repeat_times attribute or constant; shorter/longer than the rank")
def tile(op: Op, ctx: PaddleContext) -> None:
    """tile(repeat_times) -> Tile, padding repeats with 1s or unsqueezing X to match ranks."""
    reps = _int_list_input(op, ctx, "RepeatTimes", "repeat_times_tensor", "repeat_times")
    if not isinstance(reps, np.ndarray):
        raise RefusedError("repeat_times must be constant")
    x = ctx.input(op, "X")
    rank = ctx.rank(op, "X")
    if rank is None:
        raise RefusedError("tile needs the input rank")
    if len(reps) < rank:
        reps = np.concatenate([np.ones(rank - len(reps), np.int64), reps])
    elif len(reps) > rank:
        x = ctx.emit("Unsqueeze", [x, ctx.const(np.arange(len(reps) - rank, dtype=np.int64))])
    ctx.bind(op, "Out", ctx.emit("Tile", [x, ctx.const(reps.astype(np.int64))]))


@register("gather", maps_to="Gather", notes="axis attribute or constant Axis input")
def gather(op: Op, ctx: PaddleContext) -> None:
    """gather(index, axis) -> Gather."""
    static = ctx.static(op, "Axis")
    axis = int(static.reshape(-1)[0]) if static is not None else op.int_("axis")
    ctx.bind(op, "Out", ctx.emit("Gather", [ctx.input(op, "X"), ctx.input(op, "Index")], {"axis": axis}))
