"""Opset version adapters: rewrite nodes whose signature changed between two opsets.

An op needs an adapter only when its *signature* changed (an attribute became an input, an op
appeared); ops whose new versions only widened their types pass through after a generic check
(every attribute still exists, the input count still fits). An op that cannot be expressed at the
target opset is reported, with its provenance, together with every other such op.

Adapters are registry entries keyed by the op and the opset where its signature changed
(``ADAPTERS.register(op, since=N)``); converting from opset ``s`` to ``t`` runs every change that
lies between them (``s < N <= t`` upwards, in ascending order; ``t < N <= s`` downwards, in
descending order), with ``ctx.up`` telling the direction.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx

from convert import ir

__all__ = ["ADAPTERS", "Ctx", "adapt_node", "adapt_opset"]

# adapter(ctx, node) -> None; rewrites in place the change at its ``since`` opset, in direction ctx.up.
Adapter = Callable[["Ctx", ir.Node], None]
ADAPTERS: ir.Registry[Adapter] = ir.Registry("onnx opset adapters")

# Ops whose 'axes' moved from an attribute to an optional second input, and the opset of that change.
_AXES_INPUT_SINCE = {
    "ReduceSum": 13, "Squeeze": 13, "Unsqueeze": 13,
    "ReduceMax": 18, "ReduceMean": 18, "ReduceMin": 18, "ReduceProd": 18, "ReduceL1": 18,
    "ReduceL2": 18, "ReduceLogSum": 18, "ReduceLogSumExp": 18, "ReduceSumSquare": 18,
}


class Ctx(ir.GraphEditor):
    """What an adapter needs: the graph editor and the two opsets."""

    def __init__(self, graph: ir.Graph, source: int, target: int) -> None:
        super().__init__(graph)
        self.source = source
        self.target = target
        self.up = target > source


def _axes_adapter(ctx: Ctx, node: ir.Node) -> None:
    if ctx.up:  # attribute -> input
        axes = node.attributes.pop("axes", None)
        if axes is not None:
            value = ctx.const(np.asarray(axes.as_ints(), dtype=np.int64), f"{node.name}_axes")
            if len(node.inputs) < 2:
                node.resize_inputs(2)
            node.replace_input_with(1, value)
        return
    # input -> attribute
    if len(node.inputs) < 2 or node.inputs[1] is None:
        return
    axes_v = node.inputs[1]
    if axes_v.const_value is None:
        raise _NotExpressibleError(f"its axes come from a computed tensor, which opset {ctx.target} "
                              f"cannot take (the attribute form needs constants)")
    node.attributes["axes"] = ir.Attr("axes", ir.AttributeType.INTS,
                                      [int(a) for a in axes_v.const_value.numpy().reshape(-1)])
    node.resize_inputs(1)


for _op, _since in _AXES_INPUT_SINCE.items():
    ADAPTERS.register(_op, since=_since)(_axes_adapter)


@ADAPTERS.register("Split", since=13)
def _split(ctx: Ctx, node: ir.Node) -> None:
    """Split: 'split' attribute <13, input >=13."""
    if ctx.up:
        split = node.attributes.pop("split", None)
        if split is not None:
            node.resize_inputs(2)
            node.replace_input_with(1, ctx.const(np.asarray(split.as_ints(), np.int64), f"{node.name}_split"))
    elif len(node.inputs) > 1 and node.inputs[1] is not None:
        sv = node.inputs[1]
        if sv.const_value is None:
            raise _NotExpressibleError("its split sizes are computed at run time")
        node.attributes["split"] = ir.Attr("split", ir.AttributeType.INTS,
                                           [int(v) for v in sv.const_value.numpy().reshape(-1)])
        node.resize_inputs(1)


@ADAPTERS.register("Split", since=18)
def _split_num_outputs(ctx: Ctx, node: ir.Node) -> None:
    """Split: 'num_outputs' attribute >=18 (down: the sizes as an input)."""
    if not ctx.up and "num_outputs" in node.attributes:
        node.attributes.pop("num_outputs")
        x = node.inputs[0]
        axis = node.attributes.get_int("axis", 0)
        if x is None or x.shape is None or not isinstance(x.shape[axis], int):
            raise _NotExpressibleError("it uses num_outputs on an axis of unknown size")
        size, n = int(x.shape[axis]), len(node.outputs)
        chunk = -(-size // n)
        sizes = [chunk] * (size // chunk) + ([size % chunk] if size % chunk else [])
        if len(sizes) != n:
            raise _NotExpressibleError(f"num_outputs={n} does not divide an axis of {size}")
        node.resize_inputs(2)
        node.replace_input_with(1, ctx.const(np.asarray(sizes, np.int64), f"{node.name}_split"))


@ADAPTERS.register("LayerNormalization", since=17)
def _layer_norm(ctx: Ctx, node: ir.Node) -> None:
    """LayerNormalization (opset 17) decomposed for older opsets into Reduce/Sub/Div arithmetic."""
    if ctx.up:
        return
    if len(node.outputs) > 1 and any(o.uses() or o.is_graph_output() for o in node.outputs[1:]):
        raise _NotExpressibleError("its Mean/InvStdDev outputs are used")
    x, scale = node.inputs[0], node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    axis = node.attributes.get_int("axis", -1)
    eps = node.attributes.get_float("epsilon", 1e-5)
    if x is None or x.shape is None:
        raise _NotExpressibleError("its input rank is unknown")
    rank = len(x.shape)
    axes = list(range(axis % rank, rank))
    mean = ctx.node_before(node, "ReduceMean", [x], {"axes": axes, "keepdims": 1})
    d = ctx.node_before(node, "Sub", [x, mean])
    var = ctx.node_before(node, "ReduceMean", [ctx.node_before(node, "Mul", [d, d])], {"axes": axes, "keepdims": 1})
    eps_v = _scalar(ctx, eps, x, f"{node.name}_eps")
    std = ctx.node_before(node, "Sqrt", [ctx.node_before(node, "Add", [var, eps_v])])
    y = ctx.node_before(node, "Mul", [ctx.node_before(node, "Div", [d, std]), scale])
    if bias is not None:
        y = ctx.node_before(node, "Add", [y, bias])
    _replace(ctx, node, y)


@ADAPTERS.register("Gelu", since=20)
def _gelu(ctx: Ctx, node: ir.Node) -> None:
    """Gelu (opset 20) decomposed for older opsets: exact (Erf) or tanh approximation."""
    if ctx.up:
        return
    x = node.inputs[0]
    approx = node.attributes.get_string("approximate", "none")
    half = _scalar(ctx, 0.5, x, f"{node.name}_half")
    one = _scalar(ctx, 1.0, x, f"{node.name}_one")
    if approx == "tanh":
        c = _scalar(ctx, np.sqrt(2 / np.pi), x, f"{node.name}_c")
        k = _scalar(ctx, 0.044715, x, f"{node.name}_k")
        x3 = ctx.node_before(node, "Mul", [ctx.node_before(node, "Mul", [x, x]), x])
        kx3 = ctx.node_before(node, "Mul", [k, x3])
        inner = ctx.node_before(node, "Mul", [c, ctx.node_before(node, "Add", [x, kx3])])
        t = ctx.node_before(node, "Tanh", [inner])
    else:
        r = _scalar(ctx, 1 / np.sqrt(2), x, f"{node.name}_rsqrt2")
        t = ctx.node_before(node, "Erf", [ctx.node_before(node, "Mul", [x, r])])
    y = ctx.node_before(node, "Mul", [ctx.node_before(node, "Mul", [x, half]), ctx.node_before(node, "Add", [t, one])])
    _replace(ctx, node, y)


def _scalar(ctx: Ctx, value: float, like: ir.Value | None, base: str) -> ir.Value:
    """A 0-d constant of ``like``'s float type (float32 when unknown)."""
    dtype = like.dtype.numpy() if like is not None and like.dtype is not None else np.float32
    return ctx.const(np.asarray(value, dtype=dtype), base)


@ADAPTERS.register("HardSwish", since=14)
def _hard_swish(ctx: Ctx, node: ir.Node) -> None:
    """HardSwish (opset 14) below it: x * HardSigmoid(x, alpha=1/6, beta=0.5), as torch.onnx writes it."""
    if ctx.up:
        return
    x = node.inputs[0]
    gate = ctx.node_before(node, "HardSigmoid", [x], {"alpha": 1 / 6, "beta": 0.5})
    _replace(ctx, node, ctx.node_before(node, "Mul", [x, gate]))


@ADAPTERS.register("Mish", since=18)
def _mish(ctx: Ctx, node: ir.Node) -> None:
    """Mish (opset 18) below it: x * Tanh(Softplus(x)), its definition."""
    if ctx.up:
        return
    x = node.inputs[0]
    t = ctx.node_before(node, "Tanh", [ctx.node_before(node, "Softplus", [x])])
    _replace(ctx, node, ctx.node_before(node, "Mul", [x, t]))


@ADAPTERS.register("Celu", since=12)
def _celu(ctx: Ctx, node: ir.Node) -> None:
    """Celu (opset 12) below it: Relu(x) + Min(0, alpha * (Exp(x / alpha) - 1)), its definition."""
    if ctx.up:
        return
    x = node.inputs[0]
    alpha = node.attributes.get_float("alpha", 1.0)
    a = _scalar(ctx, alpha, x, f"{node.name}_alpha")
    em1 = ctx.node_before(node, "Sub", [ctx.node_before(node, "Exp", [ctx.node_before(node, "Div", [x, a])]),
                                        _scalar(ctx, 1.0, x, f"{node.name}_one")])
    neg = ctx.node_before(node, "Min", [ctx.node_before(node, "Mul", [a, em1]), _scalar(ctx, 0.0, x, f"{node.name}_0")])
    _replace(ctx, node, ctx.node_before(node, "Add", [ctx.node_before(node, "Relu", [x]), neg]))


@ADAPTERS.register("Swish", since=24)
def _swish(ctx: Ctx, node: ir.Node) -> None:
    """Swish (opset 24) below it: x * Sigmoid(alpha * x)."""
    if ctx.up:
        return
    x = node.inputs[0]
    alpha = node.attributes.get_float("alpha", 1.0)
    ax = x if alpha == 1.0 else ctx.node_before(node, "Mul", [_scalar(ctx, alpha, x, f"{node.name}_alpha"), x])
    _replace(ctx, node, ctx.node_before(node, "Mul", [x, ctx.node_before(node, "Sigmoid", [ax])]))


def _or_equal(strict: str) -> Adapter:
    def adapter(ctx: Ctx, node: ir.Node) -> None:
        """GreaterOrEqual/LessOrEqual (opset 12) below it: Or(Greater/Less, Equal), NaN compares false in both."""
        if ctx.up:
            return
        a, b = node.inputs[0], node.inputs[1]
        if ctx.target < 11 and a is not None and a.dtype is not None and a.dtype.is_floating_point():
            raise _NotExpressibleError(f"opset {ctx.target}'s Equal takes no floats (opset 11 does)")
        cmp = ctx.node_before(node, strict, [a, b])
        _replace(ctx, node, ctx.node_before(node, "Or", [cmp, ctx.node_before(node, "Equal", [a, b])]))

    return adapter


ADAPTERS.register("GreaterOrEqual", since=12)(_or_equal("Greater"))
ADAPTERS.register("LessOrEqual", since=12)(_or_equal("Less"))


@ADAPTERS.register("CastLike", since=15)
def _cast_like(ctx: Ctx, node: ir.Node) -> None:
    """CastLike (opset 15) below it: Cast to the type of its second input, where that type is known."""
    if ctx.up:
        return
    like = node.inputs[1]
    if like is None or like.dtype is None:
        raise _NotExpressibleError("the type it casts to is unknown here")
    _replace(ctx, node, ctx.node_before(node, "Cast", [node.inputs[0]], {"to": int(like.dtype)}))


@ADAPTERS.register("Trilu", since=14)
def _trilu(ctx: Ctx, node: ir.Node) -> None:
    """Trilu (opset 14) below it: Where(mask, x, 0) with the constant triangle mask, where the last two
    sizes and k are constants (Where: opset 9)."""
    if ctx.up:
        return
    x = node.inputs[0]
    k_v = node.inputs[1] if len(node.inputs) > 1 else None
    if ctx.target < 9:
        raise _NotExpressibleError(f"opset {ctx.target} has no Where (opset 9)")
    if x is None or x.shape is None or len(x.shape) < 2 or not all(isinstance(d, int) for d in x.shape[-2:]):
        raise _NotExpressibleError("its last two sizes are not constants")
    if k_v is not None and k_v.const_value is None:
        raise _NotExpressibleError("its k is computed at run time")
    k = int(k_v.const_value.numpy().reshape(-1)[0]) if k_v is not None and k_v.const_value is not None else 0
    rows, cols = int(x.shape[-2]), int(x.shape[-1])
    mask = (np.triu if node.attributes.get_int("upper", 1) else np.tril)(np.ones((rows, cols), bool), k)
    zero = _scalar(ctx, 0, x, f"{node.name}_0") if x.dtype is None or x.dtype.is_floating_point() else \
        ctx.const(np.zeros((), x.dtype.numpy()), f"{node.name}_0")
    _replace(ctx, node, ctx.node_before(node, "Where", [ctx.const(mask, f"{node.name}_mask"), x, zero]))


@ADAPTERS.register("RMSNormalization", since=23)
def _rms_norm(ctx: Ctx, node: ir.Node) -> None:
    """RMSNormalization (opset 23) below it: x / Sqrt(ReduceMean(x * x) + epsilon) * scale over the axes
    from ``axis`` on (ReduceMean's axes an attribute before opset 18, an input from it)."""
    if ctx.up:
        return
    x, scale = node.inputs[0], node.inputs[1]
    if x is None or x.shape is None:
        raise _NotExpressibleError("its input rank is unknown")
    if x.dtype is not None and x.dtype != ir.DataType.FLOAT:
        raise _NotExpressibleError("it computes in float32 (stash_type) from another type")
    rank = len(x.shape)
    axes = list(range(node.attributes.get_int("axis", -1) % rank, rank))
    sq = ctx.node_before(node, "Mul", [x, x])
    if ctx.target >= 18:
        mean = ctx.node_before(node, "ReduceMean", [sq, ctx.const(np.asarray(axes, np.int64), f"{node.name}_axes")],
                               {"keepdims": 1})
    else:
        mean = ctx.node_before(node, "ReduceMean", [sq], {"axes": axes, "keepdims": 1})
    eps = _scalar(ctx, node.attributes.get_float("epsilon", 1e-5), x, f"{node.name}_eps")
    rms = ctx.node_before(node, "Sqrt", [ctx.node_before(node, "Add", [mean, eps])])
    _replace(ctx, node, ctx.node_before(node, "Mul", [ctx.node_before(node, "Div", [x, rms]), scale]))


# Operands that were attributes before an opset and inputs from it on: op -> (that opset,
# [(attribute, dtype, attribute type)] in input order after the data input).
_MOVED_TO_INPUTS: dict[str, tuple[int, list[tuple[str, type, ir.AttributeType]]]] = {
    "Clip": (11, [("min", np.float32, ir.AttributeType.FLOAT), ("max", np.float32, ir.AttributeType.FLOAT)]),
    "Pad": (11, [("pads", np.int64, ir.AttributeType.INTS), ("value", np.float32, ir.AttributeType.FLOAT)]),
    "Slice": (10, [("starts", np.int64, ir.AttributeType.INTS), ("ends", np.int64, ir.AttributeType.INTS),
                   ("axes", np.int64, ir.AttributeType.INTS)]),
}


def _moved_to_inputs(ctx: Ctx, node: ir.Node) -> None:
    """Clip min/max, Pad pads/value (opset 11), Slice starts/ends/axes (10): attributes <-> constant inputs."""
    _, moved = _MOVED_TO_INPUTS[node.op_type]
    if ctx.up:
        if len(node.inputs) != 1 or not any(a in node.attributes for a, _, _ in moved):
            return  # nothing to move (or already in input form)
        inputs: list[ir.Value | None] = []
        for attr, dtype, _ in moved:
            a = node.attributes.pop(attr, None)
            inputs.append(None if a is None else
                          _const(ctx, np.asarray(a.value, dtype=dtype), f"{node.name or node.op_type}_{attr}"))
        while inputs and inputs[-1] is None:
            inputs.pop()
        node.resize_inputs(1 + len(inputs))
        for i, v in enumerate(inputs, 1):
            if v is not None:
                node.replace_input_with(i, v)
        return
    extra = node.inputs[1 + len(moved):]
    if any(v is not None and (v.const_value is None or np.any(v.const_value.numpy() != 1)) for v in extra):
        raise _NotExpressibleError(f"opset {ctx.target} has no input after {moved[-1][0]!r} (steps, axes)")
    for (attr, _, kind), v in zip(moved, node.inputs[1:], strict=False):
        if v is None:
            continue
        if v.const_value is None:
            raise _NotExpressibleError(f"its {attr} is computed at run time; opset {ctx.target} needs a constant")
        arr = np.asarray(v.const_value.numpy()).reshape(-1)
        value = float(arr[0]) if kind == ir.AttributeType.FLOAT else [int(x) for x in arr]
        node.attributes[attr] = ir.Attr(attr, kind, value)
    node.resize_inputs(1)


def _const(ctx: Ctx, arr: np.ndarray, base: str) -> ir.Value:
    """An initializer of ``arr`` as it is: a scalar stays 0-d (Clip's bounds must be scalars)."""
    name = ctx.fresh(base)
    value = ir.Value(name=name, shape=ir.Shape(arr.shape), type=ir.TensorType(ir.DataType.from_numpy(arr.dtype)),
                     const_value=ir.from_array(arr, name=name))
    ctx.graph.register_initializer(value)
    return value


for _op, (_since, _) in _MOVED_TO_INPUTS.items():
    ADAPTERS.register(_op, since=_since)(_moved_to_inputs)


@ADAPTERS.register("DFT", since=20)
def _dft(ctx: Ctx, node: ir.Node) -> None:
    """DFT: 'axis' attribute <20, third input >=20 (a 0-d int64 tensor)."""
    if ctx.up:
        axis = node.attributes.pop("axis", None)
        value = 1 if axis is None else axis.as_int()
        node.resize_inputs(3)
        node.replace_input_with(2, _const(ctx, np.asarray(value, dtype=np.int64), f"{node.name or 'DFT'}_axis"))
        return
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        axis_v = node.inputs[2]
        if axis_v.const_value is None:
            raise _NotExpressibleError(f"its axis is computed at run time; opset {ctx.target} needs a constant")
        node.attributes["axis"] = ir.Attr("axis", ir.AttributeType.INT, int(axis_v.const_value.numpy().reshape(-1)[0]))
        node.resize_inputs(2)


def adapt_node(ctx: Ctx, node: ir.Node) -> bool:
    """Run the adapters of the changes ``node``'s op went through between ``ctx.source`` and
    ``ctx.target`` (in the order of the conversion); return whether there were any.
    """
    lo, hi = sorted((ctx.source, ctx.target))
    changes = [v for v in ADAPTERS.versions(node.op_type) if lo < v <= hi]
    for since in changes if ctx.up else reversed(changes):
        adapter = ADAPTERS.lookup(node.op_type, since)
        assert adapter is not None
        adapter(ctx, node)
    return bool(changes)


def _replace(ctx: Ctx, node: ir.Node, new: ir.Value) -> None:
    ctx.replace(node, new)


class _NotExpressibleError(Exception):
    pass


def _schema(op: str, opset: int, domain: str = "") -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(op, max_inclusive_version=opset, domain=domain)
    except onnx.defs.SchemaError:
        return None


def _generic_check(node: ir.Node, target: int) -> str:
    schema = _schema(node.op_type, target)
    if schema is None:
        return f"it does not exist before opset {_first_opset(node.op_type)}"
    extra = [a for a in node.attributes if a not in schema.attributes]
    if extra:
        return f"opset {target} has no attribute {', '.join(repr(a) for a in extra)}"
    n = len(node.inputs)
    while n and node.inputs[n - 1] is None:
        n -= 1
    if n > schema.max_input:
        return f"opset {target} takes at most {schema.max_input} inputs, it has {n}"
    for i, value in enumerate(node.inputs[:n]):
        if value is not None and value.dtype is not None and schema.inputs:
            formal = schema.inputs[min(i, len(schema.inputs) - 1)]
            type_str = f"tensor({onnx.TensorProto.DataType.Name(int(value.dtype)).lower()})"
            if not type_allowed(schema, formal.type_str, type_str):
                since = next((v for v in range(target + 1, onnx.defs.onnx_opset_version() + 1)
                              if (s := _schema(node.op_type, v)) is not None
                              and type_allowed(s, s.inputs[min(i, len(s.inputs) - 1)].type_str, type_str)), 0)
                newer = f" (opset {since} takes it)" if since else ""
                return f"opset {target} takes no {type_str} as its input '{formal.name}'{newer}"
    return ""


def type_allowed(schema: onnx.defs.OpSchema, type_param: str, type_str: str) -> bool:
    """Whether ``schema`` accepts ``type_str`` (``tensor(int8)``) for a formal typed ``type_param`` (``T``)."""
    for constraint in schema.type_constraints:
        if constraint.type_param_str == type_param:
            return type_str in constraint.allowed_type_strs
    return type_param == type_str or not type_param.startswith("tensor(")


def _first_opset(op: str) -> int:
    for v in range(1, 30):
        if _schema(op, v) is not None:
            return v
    return 0


def adapt_opset(model: ir.Model, target: int) -> int:
    """Rewrite ``model`` in place for opset ``target``; returns the number of nodes rewritten.

    Raises:
        UnsupportedOpsError: listing every op (with count and first provenance) that cannot be
            expressed at ``target``.
    """
    graph = model.graph
    source = graph.opset_imports.get("", graph.opset_imports.get("ai.onnx", target))
    gaps = ir.GapCollector(by_reason=False)
    changed = 0
    if source != target:
        ctx = Ctx(graph, source, target)
        for node in list(graph):
            if node.domain not in ("", "ai.onnx"):
                continue
            src = _schema(node.op_type, source)
            tgt = _schema(node.op_type, target)
            if src is not None and tgt is not None and src.since_version == tgt.since_version:
                continue
            try:
                if not adapt_node(ctx, node):
                    why = _generic_check(node, target)
                    if why:
                        raise _NotExpressibleError(why)
                else:
                    changed += 1
            except _NotExpressibleError as exc:
                gaps.add(node.op_type, ir.describe(node), str(exc))
    gaps.raise_if_any(f"the model (opset {source})", what=f"op at opset {target}", hint="Choose another --opset.")
    graph.opset_imports[""] = target
    graph.opset_imports.pop("ai.onnx", None)
    return changed
