"""Elementwise ops, reductions and matrix products. Elementwise ops keep their inputs' layout.

A binary op runs in NCHW when one of its rank-4 inputs is held in NCHW and every other input is
either rank 4 or a constant (broadcast to rank 4 in TF's axes, then transposed); otherwise it runs
in TensorFlow's layout.
"""

from __future__ import annotations

import numpy as np

from convert.frontends.tensorflow.context import NCHW, NCL, TF, TO_NCHW, TFContext, nchw_axis
from convert.frontends.tensorflow.graph import TFNode
from convert.frontends.tensorflow.ops import Converter, register
from convert.ir import DataType, RefusedError, Value

__all__ = ["binary_inputs"]

_UNARY = {
    "Relu": "Relu", "Sigmoid": "Sigmoid", "Tanh": "Tanh", "Elu": "Elu", "Selu": "Selu", "Softplus": "Softplus",
    "Exp": "Exp", "Log": "Log", "Sqrt": "Sqrt", "Neg": "Neg", "Abs": "Abs", "Erf": "Erf", "Floor": "Floor",
    "Ceil": "Ceil", "Reciprocal": "Reciprocal", "Sin": "Sin", "Cos": "Cos", "Sign": "Sign", "Round": "Round",
}


def _unary(onnx_op: str) -> Converter:
    def convert(node: TFNode, ctx: TFContext) -> None:
        x, layout = ctx.get_any_ncl(node.inputs[0])
        ctx.bind(ctx.emit(onnx_op, [x]), layout)

    convert.__doc__ = f"-> {onnx_op}, in the input's layout."
    return convert


for _tf, _onnx in _UNARY.items():
    register(_tf, maps_to=_onnx)(_unary(_onnx))


@register("Relu6", maps_to="Clip(0, 6)")
def relu6(node: TFNode, ctx: TFContext) -> None:
    """Relu6 -> Clip(min=0, max=6)."""
    x, layout = ctx.get_any_ncl(node.inputs[0])
    lo = ctx.builder.const(np.array(0, np.float32))
    hi = ctx.builder.const(np.array(6, np.float32))
    ctx.bind(ctx.emit("Clip", [x, lo, hi]), layout)


@register("LeakyRelu", maps_to="LeakyRelu")
def leaky_relu(node: TFNode, ctx: TFContext) -> None:
    """LeakyRelu -> LeakyRelu(alpha)."""
    x, layout = ctx.get_any_ncl(node.inputs[0])
    ctx.bind(ctx.emit("LeakyRelu", [x], {"alpha": float(node.attrs.get("alpha", 0.2))}), layout)  # type: ignore[arg-type]


@register("Rsqrt", maps_to="Reciprocal(Sqrt)")
def rsqrt(node: TFNode, ctx: TFContext) -> None:
    """Rsqrt -> Reciprocal(Sqrt(x))."""
    x, layout = ctx.get_any(node.inputs[0])
    ctx.bind(ctx.emit("Reciprocal", [ctx.emit("Sqrt", [x])]), layout)


@register("Square", maps_to="Mul(x, x)")
def square(node: TFNode, ctx: TFContext) -> None:
    """Square -> Mul(x, x)."""
    x, layout = ctx.get_any(node.inputs[0])
    ctx.bind(ctx.emit("Mul", [x, x]), layout)


def binary_inputs(node: TFNode, ctx: TFContext, names: list[str]) -> tuple[list[Value], str]:
    """Return the inputs of an elementwise op in one common layout, and that layout."""
    ncl = any(ctx.layouts(n) == {NCL} for n in names) and all(
        ctx.rank(n) == 3 or (ctx.const(n) is not None and ctx.const(n).ndim <= 3) for n in names)  # type: ignore[union-attr]
    if ncl:  # rank-3 [N, C, L] (between Conv1Ds): constants broadcast to rank 3 in TF's axes, then transposed
        values = []
        for n in names:
            arr = ctx.const(n)
            if arr is not None:
                full = arr.reshape((1,) * (3 - arr.ndim) + arr.shape).transpose(0, 2, 1)
                values.append(ctx.builder.const(np.ascontiguousarray(full), name=f"{node.name}/const"))
            else:
                values.append(ctx.get(n, NCL))
        return values, NCL
    nchw = any(ctx.is_nchw(n) for n in names) and all(
        ctx.rank(n) == 4 or (ctx.const(n) is not None and ctx.const(n).ndim <= 4) for n in names)  # type: ignore[union-attr]
    if not nchw:
        return [ctx.get(n, TF) for n in names], TF
    values = []
    for n in names:
        arr = ctx.const(n)
        if arr is not None and arr.ndim < 4:
            full = arr.reshape((1,) * (4 - arr.ndim) + arr.shape).transpose(TO_NCHW)
            values.append(ctx.builder.const(np.ascontiguousarray(full), name=f"{node.name}/const"))
        else:
            values.append(ctx.get(n, NCHW))
    return values, NCHW


def _binary(onnx_op: str) -> Converter:
    def convert(node: TFNode, ctx: TFContext) -> None:
        values, layout = binary_inputs(node, ctx, node.inputs[:2])
        ctx.bind(ctx.emit(onnx_op, values), layout)

    convert.__doc__ = f"-> {onnx_op} (numpy broadcasting), in NCHW when an input is held so."
    return convert


for _names, _onnx in ((("Sub",), "Sub"), (("RealDiv",), "Div"), (("Maximum",), "Max"),
                      (("Minimum",), "Min"), (("Pow",), "Pow")):
    register(*_names, maps_to=_onnx)(_binary(_onnx))


def _conv_channel_const(node: TFNode, ctx: TFContext) -> tuple[str, np.ndarray] | None:
    """Return (conv output, vector) when ``node``'s other input is a constant per-channel vector and
    its first a Conv's output that only ``node`` reads."""
    for i in (0, 1):
        x, b = node.inputs[i], node.inputs[1 - i]
        bias = ctx.const(b)
        conv = ctx.convs.get(x)
        if conv is None or bias is None or len(ctx.consumers.get(x, [])) != 1:
            continue
        channels = conv[3]
        if bias.size == channels and bias.shape[-1:] == (channels,) and bias.dtype in (np.float32, np.float64):
            return x, bias.reshape(channels)
    return None


@register("Add", "AddV2", "BiasAdd",
          maps_to="Add (a Conv's or ConvTranspose's bias when it adds a constant per-channel vector)",
          notes="BiasAdd: NHWC")
def add(node: TFNode, ctx: TFContext) -> None:
    """Add/AddV2/BiasAdd -> Add (numpy broadcasting), in NCHW when an input is held so.

    A constant per-channel vector added to a convolution's output that nothing else reads
    becomes that Conv's bias: the Conv is emitted again with it (the first one is left dead).
    """
    fused = _conv_channel_const(node, ctx)
    if fused is not None:
        x, w, attrs, channels, oihw, bias, op_type = ctx.convs[fused[0]]
        total = fused[1].astype(np.float64) if bias is None else bias + fused[1]
        b = ctx.builder.const(total.astype(np.float32), name=f"{node.name}/bias")
        ctx.bind(ctx.emit(op_type, [x, w, b], attrs), NCHW)
        ctx.convs[f"{node.name}:0"] = (x, w, attrs, channels, oihw, total, op_type)
        return
    values, layout = binary_inputs(node, ctx, node.inputs[:2])
    ctx.bind(ctx.emit("Add", values), layout)


@register("Mul", maps_to="Mul (a Conv's weight scale when it multiplies by a constant per-channel vector)")
def mul(node: TFNode, ctx: TFContext) -> None:
    """Mul -> Mul (numpy broadcasting), in NCHW when an input is held so.

    A constant per-channel vector multiplying a convolution's output that nothing else reads (a
    batch norm's scale) scales that Conv's weight and bias: the Conv is emitted again with them
    (the first one is left dead), and a following per-channel Add can still join its bias. The
    products are taken in float64 and rounded once (folded vectors are float64, see ``fold.py``).
    """
    fused = _conv_channel_const(node, ctx)
    if fused is not None:
        x, _, attrs, channels, oihw, bias, op_type = ctx.convs[fused[0]]
        scale = fused[1].astype(np.float64)
        scaled = oihw.scaled(scale)
        weight = ctx.weight(scaled, f"{node.name}/weight")
        inputs = [x, weight]
        if bias is not None:
            bias = bias * scale
            inputs.append(ctx.builder.const(bias.astype(np.float32), name=f"{node.name}/bias"))
        ctx.bind(ctx.emit(op_type, inputs, attrs), NCHW)
        ctx.convs[f"{node.name}:0"] = (x, weight, attrs, channels, scaled, bias, op_type)
        return
    values, layout = binary_inputs(node, ctx, node.inputs[:2])
    ctx.bind(ctx.emit("Mul", values), layout)


@register("SquaredDifference", maps_to="Mul(Sub, Sub)")
def squared_difference(node: TFNode, ctx: TFContext) -> None:
    """SquaredDifference -> (a - b) * (a - b)."""
    values, layout = binary_inputs(node, ctx, node.inputs[:2])
    d = ctx.emit("Sub", values)
    ctx.bind(ctx.emit("Mul", [d, d]), layout)


@register("AddN", maps_to="Sum")
def add_n(node: TFNode, ctx: TFContext) -> None:
    """AddN -> Sum."""
    values, layout = binary_inputs(node, ctx, list(node.inputs))
    ctx.bind(ctx.emit("Sum", values), layout)


def _reduce(onnx_op: str, axes_as_input: bool) -> Converter:
    def convert(node: TFNode, ctx: TFContext) -> None:
        x_name = node.inputs[0]
        axes = [int(a) for a in np.atleast_1d(ctx.need_const(node.inputs[1], "the reduction axes"))]
        keep = bool(node.attrs.get("keep_dims", False))
        rank = ctx.rank(x_name)
        layout = TF
        if rank == 4 and ctx.is_nchw(x_name):
            kept = [a for a in range(4) if a not in {x % 4 for x in axes}]
            # Without keep_dims the remaining axes must come out in TF's order.
            if keep or [nchw_axis(a) for a in kept] == sorted(nchw_axis(a) for a in kept):
                layout = NCHW
                axes = [nchw_axis(a) for a in axes]
        x = ctx.get(x_name, layout)
        attrs: dict[str, object] = {"keepdims": int(keep)}
        inputs = [x]
        if axes_as_input:
            inputs.append(ctx.builder.const(np.array(axes, np.int64)))
        else:
            attrs["axes"] = axes
        ctx.bind(ctx.emit(onnx_op, inputs, attrs), layout if keep else TF)

    convert.__doc__ = f"-> {onnx_op}; constant axes."
    return convert


register("Mean", maps_to="ReduceMean", notes="constant axes")(_reduce("ReduceMean", False))
register("Max", maps_to="ReduceMax", notes="constant axes")(_reduce("ReduceMax", False))
register("Min", maps_to="ReduceMin", notes="constant axes")(_reduce("ReduceMin", False))
register("Prod", maps_to="ReduceProd", notes="constant axes")(_reduce("ReduceProd", False))
register("Sum", maps_to="ReduceSum", notes="constant axes")(_reduce("ReduceSum", True))


@register("MatMul", "BatchMatMulV2", "BatchMatMulV3", maps_to="MatMul",
          notes="transpose_a/transpose_b and adj_x/adj_y honoured")
def mat_mul(node: TFNode, ctx: TFContext) -> None:
    """MatMul / BatchMatMul -> MatMul (constant operands are transposed in NumPy)."""
    values = []
    for name, flags in ((node.inputs[0], ("transpose_a", "adj_x")), (node.inputs[1], ("transpose_b", "adj_y"))):
        flip = any(bool(node.attrs.get(f, False)) for f in flags)
        arr = ctx.const(name)
        if arr is not None:
            if flip:
                arr = np.swapaxes(arr, -1, -2)
            values.append(ctx.builder.const(np.ascontiguousarray(arr), name=f"{node.name}/weight"))
            continue
        v = ctx.get(name, TF)
        if flip:
            rank = ctx.rank(name)
            if rank is None:
                raise RefusedError(f"a transposed operand of unknown rank ('{name}')")
            perm = [*range(rank - 2), rank - 1, rank - 2]
            v = ctx.emit("Transpose", [v], {"perm": perm})
        values.append(v)
    ctx.bind(ctx.emit("MatMul", values))


@register("Erfc", maps_to="1 - Erf")
def erfc(node: TFNode, ctx: TFContext) -> None:
    """Erfc -> 1 - Erf(x)."""
    x, layout = ctx.get_any(node.inputs[0])
    one = ctx.builder.const(np.array(1, np.float32))
    ctx.bind(ctx.emit("Sub", [one, ctx.emit("Erf", [x])]), layout)


@register("Einsum", maps_to="Einsum", notes="TF's axes; the equation as written")
def einsum(node: TFNode, ctx: TFContext) -> None:
    """Einsum -> Einsum (ONNX takes TF's equation syntax, without spaces)."""
    equation = str(node.attrs.get("equation", "")).replace(" ", "")
    if "." in equation:
        raise RefusedError(f"equation '{equation}' uses an ellipsis")
    ctx.bind(ctx.emit("Einsum", [ctx.get(n, TF) for n in node.inputs], {"equation": equation}))


_COMPARE = {"Less": "Less", "Greater": "Greater", "LessEqual": "LessOrEqual", "GreaterEqual": "GreaterOrEqual",
            "Equal": "Equal"}


def _compare(onnx_op: str) -> Converter:
    def convert(node: TFNode, ctx: TFContext) -> None:
        values, layout = binary_inputs(node, ctx, node.inputs[:2])
        ctx.bind(ctx.emit(onnx_op, values), layout)

    convert.__doc__ = f"-> {onnx_op} (numpy broadcasting), in the inputs' common layout."
    return convert


for _tf, _onnx in _COMPARE.items():
    register(_tf, maps_to=_onnx)(_compare(_onnx))


@register("SelectV2", maps_to="Where", notes="numpy broadcasting (Keras' Embedding wraps negative ids with it)")
def select_v2(node: TFNode, ctx: TFContext) -> None:
    """SelectV2(cond, a, b) -> Where(cond, a, b), in the inputs' common layout."""
    values, layout = binary_inputs(node, ctx, node.inputs[:3])
    ctx.bind(ctx.emit("Where", values), layout)


@register("LogicalAnd", "LogicalOr", maps_to="And / Or", notes="numpy broadcasting")
def logical(node: TFNode, ctx: TFContext) -> None:
    """LogicalAnd / LogicalOr -> And / Or, in the inputs' common layout."""
    values, layout = binary_inputs(node, ctx, node.inputs[:2])
    ctx.bind(ctx.emit("And" if node.op == "LogicalAnd" else "Or", values), layout)


@register("NotEqual", maps_to="Not(Equal)", notes="numpy broadcasting (Keras' Embedding(mask_zero=True) mask)")
def not_equal(node: TFNode, ctx: TFContext) -> None:
    """NotEqual -> Not(Equal(a, b)), in the inputs' common layout."""
    values, layout = binary_inputs(node, ctx, node.inputs[:2])
    ctx.bind(ctx.emit("Not", [ctx.emit("Equal", values)]), layout)


@register("FloorMod", maps_to="Mod(fmod=0) / Mod(fmod=1) + the divisor's sign",
          notes="integers: Mod (sign of the divisor); floats: C's fmod, plus y where it is non-zero and its "
                "sign differs from y's, as TF's kernel (exact at every multiple of y, any magnitude)")
def floor_mod(node: TFNode, ctx: TFContext) -> None:
    """FloorMod -> Mod(fmod=0) on integers; on floats TF's own rule, ``r = fmod(x, y)``, then ``r + y``
    where ``r != 0`` and ``r`` and ``y`` differ in sign.

    ``fmod`` is exact (IEEE): the remainder of the values as stored. ``x - floor(x / y) * y`` is not:
    the quotient is rounded, so at a multiple of a divisor float32 cannot hold (``floormod(0.3, 0.1)``:
    TF 0.1, the formula 0) and where ``x / y`` overflows (``floormod(3e38, 0.5)``: 0, the formula -inf)
    it is off by a whole divisor or more.
    """
    (x, y), layout = binary_inputs(node, ctx, node.inputs[:2])
    dtype = node.dtypes[0] if node.dtypes else None
    if dtype is not None and np.issubdtype(dtype, np.integer):
        ctx.bind(ctx.emit("Mod", [x, y], {"fmod": 0}), layout)
        return
    ctx.bind(_floored_remainder(ctx, x, y, dtype), layout)


def _floored_remainder(ctx: TFContext, x: Value, y: Value, dtype: np.dtype | None) -> Value:
    """``x mod y`` with the divisor's sign, for floats: ``fmod``, then ``+ y`` where the signs differ."""
    zero = ctx.builder.const(np.array(0, dtype if dtype is not None and dtype.kind == "f" else np.float32))
    r = ctx.emit("Mod", [x, y], {"fmod": 1})
    signs_differ = ctx.emit("Xor", [ctx.emit("Less", [r, zero]), ctx.emit("Less", [y, zero])])
    wrap = ctx.emit("And", [signs_differ, ctx.emit("Not", [ctx.emit("Equal", [r, zero])])])
    return ctx.emit("Where", [wrap, ctx.emit("Add", [r, y]), r])


@register("ZerosLike", "OnesLike", maps_to="Expand(0 or 1, Shape)", notes="in the input's layout")
def zeros_like(node: TFNode, ctx: TFContext) -> None:
    """ZerosLike / OnesLike -> a zero (one) of the input's type expanded to the input's shape."""
    x, layout = ctx.get_any(node.inputs[0])
    dtype = node.dtypes[0] if node.dtypes else np.dtype(np.float32)
    fill = ctx.builder.const(np.array(0 if node.op == "ZerosLike" else 1, dtype))
    ctx.bind(ctx.emit("Expand", [fill, ctx.emit("Shape", [x])]), layout)


@register("Any", "All", maps_to="ReduceMax / ReduceMin on int32", notes="constant axes; bool in, bool out")
def any_all(node: TFNode, ctx: TFContext) -> None:
    """Any / All -> ReduceMax / ReduceMin of the booleans as int32, cast back (opset 17 reduces no bool)."""
    axes = [int(a) for a in np.atleast_1d(ctx.need_const(node.inputs[1], "the reduction axes"))]
    x = ctx.emit("Cast", [ctx.get(node.inputs[0], TF)], {"to": DataType.INT32})
    op = "ReduceMax" if node.op == "Any" else "ReduceMin"
    y = ctx.emit(op, [x], {"axes": axes, "keepdims": int(bool(node.attrs.get("keep_dims", False)))})
    ctx.bind(ctx.emit("Cast", [y], {"to": DataType.BOOL}))
