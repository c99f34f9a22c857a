"""Shape and data-movement ops: view/reshape/flatten, permute/transpose, (un)squeeze, cat/stack,
chunk/split/unbind, select/slice, expand/repeat, pad, casts, and the no-ops torch.export leaves
in a graph (clone, dropout in eval, alias, assertions).
"""

from __future__ import annotations

import operator

import numpy as np

from convert.ir import ConversionError, DataType, Value

from ._base import LowerContext, OpCall, TensorMeta, lowers, norm_axis
from .math import floored_quotient

__all__ = ["cat", "getitem", "identity", "reshape", "split"]

_INT64_MAX = 2**63 - 1


@lowers("aten.clone", "aten.contiguous", "aten.alias", "aten.detach", "aten.lift_fresh_copy",
        "aten.dropout", "aten.feature_dropout", "aten.alpha_dropout", "aten.native_dropout",
        "aten.lift_fresh", to="(nothing)", notes="dropout only with training=False")
def identity(call: OpCall, ctx: LowerContext) -> object:
    """Pass the input through: these ops do nothing at inference."""
    if call.get("train", False):
        raise call.unsupported("dropout in training mode", "call model.eval() before converting")
    x = call.tensor("input" if "input" in call.args else "self")
    return (x, None) if call.op == "aten.native_dropout" else x


@lowers("aten._assert_tensor_metadata", "aten._assert_scalar", "aten.sym_constrain_range_for_size",
        "aten._assert_async", "aten.sym_constrain_range", to="(nothing)")
def assertion(call: OpCall, ctx: LowerContext) -> None:
    """Drop run-time assertions inserted by torch.export."""
    return None


@lowers("getitem", to="(nothing)")
def getitem(call: OpCall, ctx: LowerContext) -> object:
    """Pick one result of a multi-output op."""
    seq = call.args["self"]
    index = call.args["index"]
    # An unsupported secondary output (pooling indices, batch-norm statistics) is None here; a
    # converter that receives it as a tensor argument reports it.
    return operator.getitem(seq, index)  # type: ignore[call-overload]


def _target(call: OpCall, ctx: LowerContext, *, expand: bool = False) -> Value:
    sizes = call.args.get("size", call.args.get("shape"))  # view's and expand's argument; reshape's
    return ctx.shape_value(call.out_meta.shape, like=call.meta("self"), sizes=sizes, expand=expand)


@lowers("aten.view", "aten.reshape", "aten._unsafe_view", "aten.view_copy", to="Reshape")
def reshape(call: OpCall, ctx: LowerContext) -> Value:
    """Lower view/reshape to Reshape with the static output shape."""
    return ctx.emit("Reshape", [call.tensor("self"), _target(call, ctx)])


@lowers("aten.reshape_as", "aten.view_as", to="Reshape")
def reshape_as(call: OpCall, ctx: LowerContext) -> Value:
    """Lower reshape_as/view_as to Reshape to the other tensor's shape (its run-time shape when not static)."""
    other = call.args.get("other")
    if isinstance(other, Value) and not call.out_meta.is_static:
        return ctx.emit("Reshape", [call.tensor("self"), ctx.emit("Shape", [other])])
    return ctx.emit("Reshape", [call.tensor("self"), _target(call, ctx)])


@lowers("aten.unflatten", to="Reshape")
def unflatten(call: OpCall, ctx: LowerContext) -> Value:
    """Lower unflatten(dim, sizes) to Reshape with the output shape."""
    return ctx.emit("Reshape", [call.tensor("self"), ctx.shape_value(call.out_meta.shape, like=call.meta("self"))])


@lowers("aten.flatten", to="Flatten / Reshape", notes="Flatten for flatten(1) , Reshape otherwise")
def flatten(call: OpCall, ctx: LowerContext) -> Value:
    """Lower flatten(start_dim=1) to Flatten(axis=1), any other range to Reshape."""
    rank = call.meta("self").rank
    start = norm_axis(int(call.get("start_dim", 0)), rank)  # type: ignore[call-overload]
    end = norm_axis(int(call.get("end_dim", -1)), rank)  # type: ignore[call-overload]
    if start == 1 and end == rank - 1:
        return ctx.emit("Flatten", [call.tensor("self")], {"axis": 1})
    return ctx.emit("Reshape", [call.tensor("self"), _target(call, ctx)])


@lowers("aten.permute", to="Transpose")
def permute(call: OpCall, ctx: LowerContext) -> Value:
    """Lower permute to Transpose(perm)."""
    rank = call.meta("self").rank
    perm = [norm_axis(int(d), rank) for d in call["dims"]]  # type: ignore[attr-defined]
    return ctx.emit("Transpose", [call.tensor("self")], {"perm": perm})


@lowers("aten.transpose", "aten.t", "aten.numpy_T", to="Transpose")
def transpose(call: OpCall, ctx: LowerContext) -> Value:
    """Lower transpose(dim0, dim1) / t to Transpose (t of a 1-D tensor is a no-op)."""
    rank = call.meta("self").rank
    if rank < 2:
        return call.tensor("self")
    a = norm_axis(int(call.get("dim0", 0)), rank)  # type: ignore[call-overload]
    b = norm_axis(int(call.get("dim1", 1)), rank)  # type: ignore[call-overload]
    perm = list(range(rank))
    perm[a], perm[b] = perm[b], perm[a]
    if call.op != "aten.transpose":
        perm = list(reversed(range(rank)))
    return ctx.emit("Transpose", [call.tensor("self")], {"perm": perm})


@lowers("aten.unsqueeze", to="Unsqueeze")
def unsqueeze(call: OpCall, ctx: LowerContext) -> Value:
    """Lower unsqueeze to Unsqueeze (axes as an input since opset 13)."""
    axis = norm_axis(int(call["dim"]), call.out_meta.rank)  # type: ignore[call-overload]
    return ctx.emit("Unsqueeze", [call.tensor("self"), ctx.ints([axis])])


@lowers("aten.squeeze", to="Squeeze / Identity", notes="only dims of size 1 are removed, as in torch")
def squeeze(call: OpCall, ctx: LowerContext) -> Value:
    """Lower squeeze to Squeeze over the given dims that have size 1 (all size-1 dims if none given)."""
    meta = call.meta("self")
    dims = call.args.get("dim")
    if dims is None:
        dims = call.args.get("dims")
    if dims is None:
        axes = [i for i, d in enumerate(meta.shape) if d == 1]
    else:
        items = dims if isinstance(dims, (list, tuple)) else [dims]
        picked = [norm_axis(int(d), meta.rank) for d in items]  # type: ignore[arg-type]
        axes = [a for a in picked if meta.shape[a] == 1]
    if not axes:
        return call.tensor("self")
    return ctx.emit("Squeeze", [call.tensor("self"), ctx.ints(axes)])


def _tensors(call: OpCall, name: str) -> list[Value]:
    items = call.args.get(name)
    if not isinstance(items, (list, tuple)) or not all(isinstance(v, Value) for v in items):
        raise call.unsupported(f"argument '{name}' must be a list of tensors")
    return list(items)


@lowers("aten.cat", "aten.concat", "aten.concatenate", to="Concat")
def cat(call: OpCall, ctx: LowerContext) -> Value:
    """Lower cat to Concat(axis); empty tensors in the list are dropped, as torch does."""
    axis = norm_axis(int(call.get("dim", 0)), call.out_meta.rank)  # type: ignore[call-overload]
    metas = call.metas.get("tensors")
    tensors = _tensors(call, "tensors")
    if isinstance(metas, list):
        tensors = [t for t, m in zip(tensors, metas, strict=True) if not (m.rank == 1 and m.shape[0] == 0)]
    if len(tensors) == 1:
        return tensors[0]
    return ctx.emit("Concat", tensors, {"axis": axis})


@lowers("aten.stack", to="Unsqueeze+Concat")
def stack(call: OpCall, ctx: LowerContext) -> Value:
    """Lower stack to an Unsqueeze of each input and one Concat."""
    axis = norm_axis(int(call.get("dim", 0)), call.out_meta.rank)  # type: ignore[call-overload]
    axes = ctx.ints([axis])
    parts = [ctx.emit("Unsqueeze", [t, axes]) for t in _tensors(call, "tensors")]
    return ctx.emit("Concat", parts, {"axis": axis})


def _split(call: OpCall, ctx: LowerContext, sizes: list[int], axis: int) -> tuple[Value, ...]:
    x = call.tensor("self")
    if len(sizes) == 1:
        return (x,)
    return ctx.emit_multi("Split", [x, ctx.ints(sizes)], {"axis": axis}, outputs=len(sizes))


@lowers("aten.split", "aten.split_with_sizes", "aten.chunk", "aten.tensor_split", "aten.unsafe_split",
        to="Split", notes="sizes taken from the static output shapes")
def split(call: OpCall, ctx: LowerContext) -> tuple[Value, ...]:
    """Lower split / split_with_sizes / chunk to one Split with explicit sizes."""
    meta = call.meta("self")
    axis = norm_axis(int(call.get("dim", 0)), meta.rank)  # type: ignore[call-overload]
    outs = call.out if isinstance(call.out, (list, tuple)) else [call.out]
    dims = [o.shape[axis] for o in outs]  # type: ignore[union-attr]
    if all(isinstance(d, int) for d in dims):
        return _split(call, ctx, [int(d) for d in dims], axis)
    if len(outs) == 1:
        return (call.tensor("self"),)
    given = call.args.get("split_sizes")  # computed sizes (a detector's per-image counts)
    if not isinstance(given, (list, tuple)) or len(given) != len(outs):
        raise ConversionError(call.where, f"cannot split into the symbolic sizes {tuple(dims)}")
    sizes = ctx.emit("Concat", [s if isinstance(s, Value) else ctx.ints([int(s)]) for s in given], {"axis": 0})
    return ctx.emit_multi("Split", [call.tensor("self"), sizes], {"axis": axis}, outputs=len(outs))


@lowers("aten.unbind", to="Split+Squeeze")
def unbind(call: OpCall, ctx: LowerContext) -> tuple[Value, ...]:
    """Lower unbind to Split into size-1 pieces, each squeezed."""
    meta = call.meta("self")
    axis = norm_axis(int(call.get("dim", 0)), meta.rank)  # type: ignore[call-overload]
    pieces = _split(call, ctx, [1] * meta.dim(axis), axis)
    axes = ctx.ints([axis])
    return tuple(ctx.emit("Squeeze", [p, axes]) for p in pieces)


@lowers("aten.select", to="Gather", notes="a scalar index drops the dimension, as in torch")
def select(call: OpCall, ctx: LowerContext) -> Value:
    """Lower select(dim, index) to Gather with a scalar index."""
    meta = call.meta("self")
    axis = norm_axis(int(call["dim"]), meta.rank)  # type: ignore[call-overload]
    index = int(call["index"])  # type: ignore[call-overload]
    if index < 0:
        index += meta.dim(axis)
    return ctx.emit("Gather", [call.tensor("self"), ctx.ints(index)], {"axis": axis})


def _slice_bound(ctx: LowerContext, bound: Value) -> Value:
    """Return a computed slice bound (a 0-d or 1-element integer tensor) as a 1-element int64 input."""
    return ctx.emit("Reshape", [ctx.emit("Cast", [bound], {"to": DataType.INT64}), ctx.ints([1])])


@lowers("aten.slice", to="Slice", notes="start/end may be computed (a traced x[:, :n + k]): Slice inputs at run time")
def slice_(call: OpCall, ctx: LowerContext) -> Value:
    """Lower slice(dim, start, end, step) to Slice; a full slice is a no-op.

    A traced graph converted by torch computes bounds such as ``seq_len + past_length`` as tensors
    (``aten.Int`` of a tensor): those become Slice inputs computed at run time.
    """
    meta = call.meta("self")
    axis = norm_axis(int(call.get("dim", 0)), meta.rank)  # type: ignore[call-overload]
    start = call.get("start", 0)
    end = call.get("end", _INT64_MAX)
    step = int(call.get("step", 1))  # type: ignore[call-overload]
    if isinstance(start, Value) or isinstance(end, Value):
        starts = _slice_bound(ctx, start) if isinstance(start, Value) else ctx.ints([int(start)])  # type: ignore[call-overload]
        ends = _slice_bound(ctx, end) if isinstance(end, Value) else \
            ctx.ints([min(int(end), _INT64_MAX)])  # type: ignore[call-overload]
        return ctx.emit("Slice", [call.tensor("self"), starts, ends, ctx.ints([axis]), ctx.ints([step])])
    start_i = int(start)  # type: ignore[call-overload]
    end_i = min(int(end), _INT64_MAX)  # type: ignore[call-overload]
    size = meta.shape[axis]
    if start_i == 0 and step == 1 and (end_i >= _INT64_MAX // 2 or (isinstance(size, int) and end_i >= size)):
        return call.tensor("self")
    return ctx.emit("Slice", [call.tensor("self"), ctx.ints([start_i]), ctx.ints([end_i]), ctx.ints([axis]),
                            ctx.ints([step])])


@lowers("aten.narrow", to="Slice")
def narrow(call: OpCall, ctx: LowerContext) -> Value:
    """Lower narrow(dim, start, length) to Slice."""
    meta = call.meta("self")
    axis = norm_axis(int(call["dim"]), meta.rank)  # type: ignore[call-overload]
    start = int(call["start"])  # type: ignore[call-overload]
    if start < 0:
        start += meta.dim(axis)
    end = start + int(call["length"])  # type: ignore[call-overload]
    return ctx.emit("Slice", [call.tensor("self"), ctx.ints([start]), ctx.ints([end]), ctx.ints([axis])])


@lowers("aten.expand", "aten.expand_copy", "aten.broadcast_to", "aten.expand_as", to="Expand")
def expand(call: OpCall, ctx: LowerContext) -> Value:
    """Lower expand to Expand with the static output shape (expand_as: the other tensor's run-time shape)."""
    other = call.args.get("other")
    if isinstance(other, Value) and not call.out_meta.is_static:
        return ctx.emit("Expand", [call.tensor("self"), ctx.emit("Shape", [other])])
    return ctx.emit("Expand", [call.tensor("self"), _target(call, ctx, expand=True)])


@lowers("aten.repeat", to="Tile")
def repeat(call: OpCall, ctx: LowerContext) -> Value:
    """Lower repeat to Tile (leading repeats add dimensions first)."""
    meta = call.meta("self")
    reps = [int(r) for r in call["repeats"]]  # type: ignore[attr-defined]
    x = call.tensor("self")
    if len(reps) > meta.rank:
        x = ctx.emit("Reshape", [x, ctx.ints([1] * (len(reps) - meta.rank) + meta.dims())])
    return ctx.emit("Tile", [x, ctx.ints(reps)])


def _pads(call: OpCall, rank: int) -> list[int]:
    pad = [int(p) for p in call["pad"]]  # type: ignore[attr-defined]
    begins = [0] * rank
    ends = [0] * rank
    for i in range(len(pad) // 2):
        axis = rank - 1 - i
        begins[axis] = pad[2 * i]
        ends[axis] = pad[2 * i + 1]
    return begins + ends


_PAD_MODES = {"aten.reflection_pad1d": "reflect", "aten.reflection_pad2d": "reflect",
              "aten.reflection_pad3d": "reflect", "aten.replication_pad1d": "replicate",
              "aten.replication_pad2d": "replicate", "aten.replication_pad3d": "replicate"}


@lowers("aten.constant_pad_nd", "aten.pad", *_PAD_MODES, to="Pad", notes="modes constant, reflect, replicate")
def pad(call: OpCall, ctx: LowerContext) -> Value:
    """Lower constant_pad_nd / pad / reflection_pad* / replication_pad* to Pad (pads listed from the last axis)."""
    meta = call.meta("self")
    if call.op in _PAD_MODES:
        call.args["pad"] = call.args.get("padding")
        call.args["mode"] = _PAD_MODES[call.op]
    mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}.get(str(call.get("mode", "constant")))
    if mode is None:
        raise call.unsupported(f"pad mode '{call.get('mode')}'")
    value = float(call.get("value", 0.0))  # type: ignore[arg-type]
    inputs: list[Value | None] = [call.tensor("self"), ctx.ints(_pads(call, meta.rank))]
    if mode == "constant":
        inputs.append(ctx.scalar_like(value, meta))
    return ctx.emit("Pad", inputs, {"mode": mode})


@lowers("aten._to_copy", "aten.to", "aten.type_as", "aten._to_dtype", to="Cast / (nothing)")
def to(call: OpCall, ctx: LowerContext) -> Value:
    """Lower a dtype conversion to Cast; a device move or same-dtype copy is a no-op."""
    x = call.tensor("self")
    src = call.meta("self").dtype
    dst = call.out_meta.dtype
    if src == dst:
        return x
    return ctx.emit("Cast", [x], {"to": dst})


@lowers("aten.embedding", to="Gather")
def embedding(call: OpCall, ctx: LowerContext) -> Value:
    """Lower embedding(weight, indices) to Gather on axis 0."""
    return ctx.emit("Gather", [call.tensor("weight"), call.tensor("indices")], {"axis": 0})


@lowers("aten.pixel_shuffle", to="DepthToSpace(CRD)")
def pixel_shuffle(call: OpCall, ctx: LowerContext) -> Value:
    """Lower pixel_shuffle to DepthToSpace(mode='CRD')."""
    return ctx.emit("DepthToSpace", [call.tensor("self")],
                  {"blocksize": int(call["upscale_factor"]), "mode": "CRD"})  # type: ignore[call-overload]


@lowers("aten.masked_fill", to="Where")
def masked_fill(call: OpCall, ctx: LowerContext) -> Value:
    """Lower masked_fill(mask, value) to Where(mask, value, self)."""
    meta = call.meta("self")
    value = call.args.get("value")
    v = value if isinstance(value, Value) else ctx.scalar_like(value, meta)  # type: ignore[arg-type]
    return ctx.emit("Where", [call.tensor("mask"), v, call.tensor("self")])


@lowers("aten.roll", to="Slice+Concat")
def roll(call: OpCall, ctx: LowerContext) -> Value:
    """Lower roll(shifts, dims) to a Slice pair and a Concat per dimension."""
    meta = call.meta("self")
    shifts = call["shifts"]
    dims = call.get("dims", [])
    if not dims:
        raise call.unsupported("roll without dims")
    x = call.tensor("self")
    for shift, dim in zip(shifts, dims, strict=True):  # type: ignore[call-overload]
        axis = norm_axis(int(dim), meta.rank)
        size = meta.dim(axis)
        s = int(shift) % size
        if s == 0:
            continue
        ax = ctx.ints([axis])
        tail = ctx.emit("Slice", [x, ctx.ints([size - s]), ctx.ints([size]), ax])
        head = ctx.emit("Slice", [x, ctx.ints([0]), ctx.ints([size - s]), ax])
        x = ctx.emit("Concat", [tail, head], {"axis": axis})
    return x


@lowers("aten.sym_size", "aten.size", to="(a constant)", notes="shapes are static")
def sym_size(call: OpCall, ctx: LowerContext) -> object:
    """Return the static size of a dimension (or all of them) as Python ints."""
    shape = call.meta("self").shape
    dim = call.args.get("dim")
    if dim is None:
        if all(isinstance(d, int) for d in shape):
            return list(shape)
        raise call.unsupported("x.size() of a tensor with a symbolic dim", "index it: x.size(0)")
    axis = norm_axis(int(dim), len(shape))  # type: ignore[call-overload]
    if isinstance(shape[axis], int):
        return shape[axis]
    # A symbolic size (--dynamic-batch) is computed at run time as a 1-element int64 tensor.
    return ctx.emit("Gather", [ctx.emit("Shape", [call.tensor("self")]), ctx.ints([axis])], {"axis": 0})


@lowers("aten.sym_stride", "aten.stride", "aten.sym_storage_offset", "aten.storage_offset",
        "aten.sym_is_contiguous", "aten.is_contiguous", to="(a constant)",
        notes="the value torch recorded; a symbolic one is refused")
def sym_stride(call: OpCall, ctx: LowerContext) -> object:
    """Return the stride, storage offset or contiguity torch.export recorded for the call (a
    Python int or bool)."""
    if isinstance(call.out, (int, bool)):
        return call.out
    raise call.unsupported(f"{call.op} with a symbolic value", "drop --dynamic-batch")


@lowers("aten.resize", to="Reshape", notes="resize_: to the same number of elements only (more would be uninitialised)")
def resize(call: OpCall, ctx: LowerContext) -> Value:
    """x.resize_(sizes) keeping the element count: the same buffer read in the new shape."""
    src, out = call.meta("self"), call.out_meta
    if not (src.is_static and out.is_static) or int(np.prod(src.dims())) != int(np.prod(out.dims())):
        raise call.unsupported(f"resize_ from {list(src.shape)} to {list(out.shape)}",
                               "only a resize to the same number of elements has defined contents")
    return ctx.emit("Reshape", [call.tensor("self"), ctx.ints(list(out.dims()))])


@lowers("aten.sym_numel", "aten.numel", to="(a constant)", notes="shapes are static")
def sym_numel(call: OpCall, ctx: LowerContext) -> int:
    """Return the static element count as a Python int."""
    shape = call.meta("self").shape
    if not all(isinstance(d, int) for d in shape):
        return ctx.emit("Reshape", [ctx.emit("Size", [call.tensor("self")]), ctx.ints([1])])  # type: ignore[return-value]
    count = 1
    for d in shape:
        count *= int(d)
    return count


@lowers("aten.dim", to="(a constant)")
def dim(call: OpCall, ctx: LowerContext) -> int:
    """Return the rank as a Python int."""
    return call.meta("self").rank


def _sym_operand(ctx: LowerContext, value: object) -> Value:
    return value if isinstance(value, Value) else ctx.ints([int(value)])  # type: ignore[call-overload]


def _sym_arith(op_type: str) -> object:
    def convert(call: OpCall, ctx: LowerContext) -> Value:
        a, b = call.args.get("self"), call.args.get("index")
        y = ctx.emit(op_type, [_sym_operand(ctx, a), _sym_operand(ctx, b)])
        return y

    convert.__doc__ = f"Lower size arithmetic on symbolic sizes to an int64 {op_type}."
    return convert


@lowers("operator.floordiv", to="Div+Mul+Sub (int64)", notes="only with a symbolic size operand; rounds towards "
        "-inf, as Python does")
def sym_floordiv(call: OpCall, ctx: LowerContext) -> Value:
    """Lower ``//`` of symbolic sizes as Python rounds it, towards -inf: (n - 5) // 3 is -1 at n = 4
    (ONNX's integer Div truncates, to 0; a slice end or a factor computed so was off)."""
    a, b = call.args.get("self"), call.args.get("index")
    return floored_quotient(ctx, _sym_operand(ctx, a), _sym_operand(ctx, b), TensorMeta((), DataType.INT64))


for _key, _op in {"operator.mul": "Mul", "operator.add": "Add", "operator.sub": "Sub",
                  "operator.mod": "Mod", "operator.ge": "GreaterOrEqual",
                  "operator.le": "LessOrEqual", "operator.gt": "Greater", "operator.lt": "Less",
                  "operator.eq": "Equal"}.items():
    lowers(_key, to=f"{_op} (int64)", notes="only with a symbolic size operand")(_sym_arith(_op))  # type: ignore[arg-type]


def _sym_extreme(op_type: str, pick: object) -> object:
    def convert(call: OpCall, ctx: LowerContext) -> Value | int:
        a, b = call.args.get("self"), call.args.get("index")
        if not isinstance(a, Value) and not isinstance(b, Value):
            return pick(a, b)  # type: ignore[operator,no-any-return]
        return ctx.emit(op_type, [_sym_operand(ctx, a), _sym_operand(ctx, b)])

    convert.__doc__ = f"Lower torch.sym_{op_type.lower()} of symbolic sizes to an int64 {op_type}."
    return convert


def _sym_logic(op_type: str) -> object:
    def convert(call: OpCall, ctx: LowerContext) -> Value:
        a, b = call.args.get("self"), call.args.get("index")
        parts = [v if isinstance(v, Value) else ctx.const(np.asarray([bool(v)])) for v in (a, b)]
        return ctx.emit(op_type, [ctx.emit("Cast", [v], {"to": DataType.BOOL}) for v in parts])

    convert.__doc__ = f"Lower a logical {op_type.lower()} of conditions on symbolic sizes to {op_type}."
    return convert


lowers("operator.and_", to="And", notes="conditions on symbolic sizes")(_sym_logic("And"))  # type: ignore[arg-type]
lowers("operator.or_", to="Or", notes="conditions on symbolic sizes")(_sym_logic("Or"))  # type: ignore[arg-type]
lowers("torch.sym_min", to="Min (int64)", notes="a detector's min(k, count)")(_sym_extreme("Min", min))  # type: ignore[arg-type]
lowers("torch.sym_max", to="Max (int64)")(_sym_extreme("Max", max))  # type: ignore[arg-type]


@lowers("torch.sym_not", to="Not", notes="a condition on symbolic sizes")
def sym_not(call: OpCall, ctx: LowerContext) -> Value | bool:
    """Lower torch.sym_not of a computed condition to Not (a Python bool folds)."""
    a = call.args.get("self")
    return ctx.emit("Not", [a]) if isinstance(a, Value) else not a


@lowers("torch.sym_ite", to="Where", notes="a size chosen by a condition on symbolic sizes")
def sym_ite(call: OpCall, ctx: LowerContext) -> Value | int:
    """Lower torch.sym_ite(cond, a, b) to an int64 Where (a Python condition picks directly)."""
    cond, a, b = call.args.get("self"), call.args.get("index"), call.args.get("other")
    if not isinstance(cond, Value):
        return a if cond else b  # type: ignore[return-value]
    return ctx.emit("Where", [ctx.emit("Cast", [cond], {"to": DataType.BOOL}), _sym_operand(ctx, a),
                            _sym_operand(ctx, b)])


@lowers("aten.flip", to="Slice (step -1)")
def flip(call: OpCall, ctx: LowerContext) -> Value:
    """Lower flip(dims) to one Slice with step -1 on each flipped axis."""
    meta = call.meta("self")
    axes = [norm_axis(int(d), meta.rank) for d in call["dims"]]  # type: ignore[attr-defined]
    if not axes:
        return call.tensor("self")
    n = len(axes)
    return ctx.emit("Slice", [call.tensor("self"), ctx.ints([-1] * n), ctx.ints([-_INT64_MAX] * n), ctx.ints(axes),
                            ctx.ints([-1] * n)])


@lowers("aten.nonzero", to="NonZero+Transpose", notes="the result's length depends on the data")
def nonzero(call: OpCall, ctx: LowerContext) -> Value:
    """Lower nonzero to NonZero transposed to torch's [count, rank] layout."""
    return ctx.emit("Transpose", [ctx.emit("NonZero", [call.tensor("self")])], {"perm": [1, 0]})


@lowers("aten.arange", to="Range", notes="computed bounds only; constant ranges are folded")
def arange(call: OpCall, ctx: LowerContext) -> Value:
    """Lower arange(start, end, step) whose bounds are computed sizes to Range."""
    meta = call.out_meta
    dtype = meta.dtype.numpy()
    parts = []
    for name, default in (("start", 0), ("end", None), ("step", 1)):
        v = call.args.get(name, default)
        if isinstance(v, Value):
            parts.append(ctx.emit("Reshape", [ctx.emit("Cast", [v], {"to": meta.dtype}), ctx.ints([])]))
        else:
            parts.append(ctx.const(np.asarray(v, dtype=dtype)))
    return ctx.emit("Range", parts)


@lowers("aten.diagonal", to="Transpose+Reshape+Gather", notes="static shapes")
def diagonal(call: OpCall, ctx: LowerContext) -> Value:
    """Lower diagonal(offset, dim1, dim2): move both dims last, flatten them, Gather the diagonal."""
    meta = call.meta("self")
    d1 = norm_axis(int(call.get("dim1", 0)), meta.rank)  # type: ignore[call-overload]
    d2 = norm_axis(int(call.get("dim2", 1)), meta.rank)  # type: ignore[call-overload]
    offset = int(call.get("offset", 0))  # type: ignore[call-overload]
    rest = [d for d in range(meta.rank) if d not in (d1, d2)]
    n1, n2 = meta.dim(d1), meta.dim(d2)
    x = ctx.emit("Transpose", [call.tensor("self")], {"perm": [*rest, d1, d2]})
    x = ctx.emit("Reshape", [x, ctx.ints([*(meta.dim(d) for d in rest), n1 * n2])])
    rows = np.arange(max(0, -offset), min(n1, n2 - offset)) if n2 - offset > 0 else np.arange(0)
    positions = (rows * n2 + rows + offset).astype(np.int64)
    return ctx.emit("Gather", [x, ctx.const(positions)], {"axis": len(rest)})


@lowers("aten.as_strided", "aten.as_strided_copy", to="Reshape+Gather",
        notes="static; reads the input as a contiguous buffer from its first element")
def as_strided(call: OpCall, ctx: LowerContext) -> Value:
    """Lower as_strided(size, stride, offset) to a Gather of precomputed flat positions.

    The positions are computed at conversion (offset + sum(i_k * stride_k)); the input is taken as
    the contiguous tensor torch.export's functional graphs hand to it.
    """
    meta = call.meta("self")
    size = [int(s) for s in call["size"]]  # type: ignore[attr-defined]
    stride = [int(s) for s in call["stride"]]  # type: ignore[attr-defined]
    offset = int(call.get("storage_offset", 0))  # type: ignore[call-overload]
    numel = int(np.prod(meta.dims())) if meta.rank else 1
    positions = np.full(size, offset, dtype=np.int64)
    for axis, (n, st) in enumerate(zip(size, stride, strict=True)):
        shape = [1] * len(size)
        shape[axis] = n
        positions = positions + (np.arange(n, dtype=np.int64) * st).reshape(shape)
    if positions.size and (positions.min() < 0 or positions.max() >= numel):
        raise call.unsupported(f"as_strided reading outside the input's {numel} elements")
    flat = ctx.emit("Reshape", [call.tensor("self"), ctx.ints([-1])])
    return ctx.emit("Gather", [flat, ctx.const(positions)], {"axis": 0})
