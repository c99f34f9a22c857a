"""Complex tensors and the FFT: ``_fft_r2c``, ``_fft_c2r``, ``_fft_c2c`` and the ops around them.

ONNX has no complex arithmetic, so a complex tensor of shape ``S`` is carried as a real tensor of
shape ``S + [2]`` (real part, imaginary part): the layout of ONNX ``DFT``'s input and output, and
of torch's own ``view_as_real``. ``view_as_real`` and ``view_as_complex`` are then no-ops.

Only the converters in ``COMPLEX_FORMS`` accept a complex operand or produce a complex result;
the lowering refuses every other op that touches one (``aten.mul on a complex tensor``), since a
converter written for real tensors would read the trailing pair as data.

torch's ``normalization`` argument: 0 none, 1 divide by ``sqrt(n)`` (``ortho``), 2 divide by
``n``, with ``n`` the product of the transformed sizes, whatever the direction. ONNX ``DFT``
divides its inverse by the signal length; that factor is undone here so that only torch's
normalization is applied.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from convert.ir import DataType, Value

from ._base import LowerContext, OpCall, TensorMeta, lowers, norm_axis

__all__ = ["COMPLEX_FORMS", "real_dtype"]

# key -> converter to use when a call reads or makes a complex tensor
COMPLEX_FORMS: dict[str, Callable[[OpCall, LowerContext], object]] = {}

_REAL_OF = {DataType.COMPLEX64: DataType.FLOAT, DataType.COMPLEX128: DataType.DOUBLE}


def real_dtype(dtype: DataType) -> DataType:
    """Return the real type a complex tensor is carried in (``complex64`` -> ``float``)."""
    return _REAL_OF.get(dtype, dtype)


def _complex(*keys: str, to: str, notes: str = "", table: bool = True) -> Callable[
        [Callable[[OpCall, LowerContext], object]], Callable[[OpCall, LowerContext], object]]:
    """Register the complex form of ``keys``; with ``table`` also the op table's entry."""

    def wrap(func: Callable[[OpCall, LowerContext], object]) -> Callable[[OpCall, LowerContext], object]:
        for key in keys:
            COMPLEX_FORMS[key] = func
        return lowers(*keys, to=to, notes=notes)(func) if table else func

    return wrap


def _scale(ctx: LowerContext, x: Value, factor: float, meta: TensorMeta) -> Value:
    if factor == 1.0:
        return x
    return ctx.emit("Mul", [x, ctx.const(factor, real_dtype(meta.dtype))])


def _norm_factor(sizes: Sequence[int], normalization: int) -> float:
    n = float(np.prod(sizes)) if sizes else 1.0
    return {0: 1.0, 1: 1.0 / np.sqrt(n), 2: 1.0 / n}[int(normalization)]


def _dft(ctx: LowerContext, x: Value, axis: int, *, inverse: bool = False, onesided: bool = False) -> Value:
    """One ONNX DFT along ``axis`` of the signal (never the trailing pair)."""
    return ctx.emit("DFT", [x], {"axis": axis, "inverse": int(inverse), "onesided": int(onesided)})


def _dims(call: OpCall, rank: int) -> list[int]:
    return [norm_axis(int(d), rank) for d in call["dim"]]  # type: ignore[union-attr]


@_complex("aten._fft_r2c", to="DFT", notes="real to complex; a complex result is carried as [..., 2]")
def fft_r2c(call: OpCall, ctx: LowerContext) -> Value:
    """rfftn / fftn of a real tensor: a one-sided DFT on the last axis, full DFTs on the others."""
    meta = call.meta("self")
    dims = _dims(call, meta.rank)
    onesided = bool(call.get("onesided", False))
    x = ctx.emit("Unsqueeze", [call.tensor("self"), ctx.ints([-1])])
    x = _dft(ctx, x, dims[-1], onesided=onesided)
    for d in reversed(dims[:-1]):
        x = _dft(ctx, x, d)
    return _scale(ctx, x, _norm_factor([meta.dim(d) for d in dims], call.get("normalization", 0)), meta)


@_complex("aten._fft_c2c", to="DFT", notes="complex to complex, forward or inverse")
def fft_c2c(call: OpCall, ctx: LowerContext) -> Value:
    """fftn / ifftn of a complex tensor; ONNX's 1/n on an inverse is undone (torch normalizes)."""
    meta = call.meta("self")
    dims = _dims(call, meta.rank)
    forward = bool(call.get("forward", True))
    x = call.tensor("self")
    for d in dims:
        x = _dft(ctx, x, d, inverse=not forward)
    sizes = [meta.dim(d) for d in dims]
    factor = _norm_factor(sizes, call.get("normalization", 0)) * (1.0 if forward else float(np.prod(sizes)))
    return _scale(ctx, x, factor, meta)


@_complex("aten._fft_c2r", to="DFT", notes="complex to real (irfftn): the spectrum's mirrored half is rebuilt")
def fft_c2r(call: OpCall, ctx: LowerContext) -> Value:
    """irfftn: inverse DFTs on all but the last axis, then the last axis from its one-sided half.

    The last axis holds bins ``0 .. L//2`` of a length-``L`` Hermitian spectrum; bins
    ``L//2+1 .. L-1`` are the conjugates of bins ``L-L//2-1 .. 1`` in reverse. The full spectrum
    goes through an inverse DFT and the real part is kept, which ignores the imaginary parts of
    the DC and Nyquist bins, as torch does.
    """
    meta = call.meta("self")
    dims = _dims(call, meta.rank)
    length = int(call["last_dim_size"])  # type: ignore[call-overload]
    x = call.tensor("self")
    for d in dims[:-1]:
        x = _dft(ctx, x, d, inverse=True)
    last = dims[-1]
    half = length // 2 + 1
    if meta.dim(last) != half:
        x = ctx.emit("Slice", [x, ctx.ints([0]), ctx.ints([half]), ctx.ints([last])])
    mirror_count = length - half
    if mirror_count > 0:  # bins mirror_count .. 1 of the input, conjugated
        mirror = ctx.emit("Slice", [x, ctx.ints([mirror_count]), ctx.ints([0]), ctx.ints([last]), ctx.ints([-1])])
        mirror = ctx.emit("Mul", [mirror, ctx.const([1.0, -1.0], real_dtype(meta.dtype))])
        x = ctx.emit("Concat", [x, mirror], {"axis": last})
    x = _dft(ctx, x, last, inverse=True)
    real = ctx.emit("Gather", [x, ctx.ints(0)], {"axis": -1})
    sizes = [meta.dim(d) for d in dims[:-1]] + [length]
    factor = _norm_factor(sizes, call.get("normalization", 0)) * float(np.prod(sizes))
    return _scale(ctx, real, factor, meta)


@_complex("aten.view_as_real", to="(none)", notes="a complex tensor is already carried as [..., 2]")
def view_as_real(call: OpCall, ctx: LowerContext) -> Value:
    """Return the operand: its carried form is the real view."""
    return call.tensor("self")


@_complex("aten.view_as_complex", to="(none)", notes="the [..., 2] input is the carried form")
def view_as_complex(call: OpCall, ctx: LowerContext) -> Value:
    """Return the operand: a real ``[..., 2]`` tensor is how a complex one is carried."""
    return call.tensor("self")


@_complex("aten.complex", to="Unsqueeze+Concat")
def make_complex(call: OpCall, ctx: LowerContext) -> Value:
    """torch.complex(real, imag): stack the two on a new trailing axis."""
    axes = ctx.ints([-1])
    parts = [ctx.emit("Unsqueeze", [call.tensor(n), axes]) for n in ("real", "imag")]
    return ctx.emit("Concat", parts, {"axis": -1})


def _part(index: int) -> Callable[[OpCall, LowerContext], Value]:
    def convert(call: OpCall, ctx: LowerContext) -> Value:
        x = call.tensor("self")
        if call.meta("self").dtype not in _REAL_OF:
            return x  # torch.real of a real tensor is the tensor
        return ctx.emit("Gather", [x, ctx.ints(index)], {"axis": -1})

    return convert


_complex("aten.real", to="Gather")(_part(0))
_complex("aten.imag", to="Gather")(_part(1))


@_complex("aten.abs", to="Mul+ReduceSum+Sqrt", table=False)
def complex_abs(call: OpCall, ctx: LowerContext) -> Value:
    """|z| of a complex tensor: sqrt(re^2 + im^2)."""
    x = call.tensor("self")
    if call.meta("self").dtype not in _REAL_OF:
        return ctx.emit("Abs", [x])
    squares = ctx.emit("Mul", [x, x])
    return ctx.emit("Sqrt", [ctx.emit("ReduceSum", [squares, ctx.ints([-1])], {"keepdims": 0})])


def _is_complex(meta: object) -> bool:
    return isinstance(meta, TensorMeta) and meta.dtype in _REAL_OF


@_complex("aten._to_copy", "aten.to", "aten._to_dtype", "aten.clone", "aten.contiguous", to="Cast / Concat",
          table=False)
def complex_to(call: OpCall, ctx: LowerContext) -> Value:
    """A copy or dtype change to or from complex: a real tensor gains a zero imaginary part."""
    x = call.tensor("self")
    src, dst = call.meta("self"), call.out_meta
    if not _is_complex(src) and _is_complex(dst):
        x = ctx.emit("Unsqueeze", [x, ctx.ints([-1])])
        if src.dtype != real_dtype(dst.dtype):
            x = ctx.emit("Cast", [x], {"to": real_dtype(dst.dtype)})
        return ctx.emit("Concat", [x, ctx.emit("Mul", [x, ctx.const(0.0, real_dtype(dst.dtype))])], {"axis": -1})
    if _is_complex(src) and not _is_complex(dst):  # torch keeps the real part (with a warning)
        x = ctx.emit("Gather", [x, ctx.ints(0)], {"axis": -1})
    if real_dtype(src.dtype) != real_dtype(dst.dtype):
        x = ctx.emit("Cast", [x], {"to": real_dtype(dst.dtype)})
    return x


def _operand(call: OpCall, ctx: LowerContext, name: str, like: TensorMeta) -> tuple[Value, bool]:
    """Return operand ``name`` and whether it is complex; a real tensor gains a trailing unit axis."""
    value = call.args.get(name)
    meta = call.metas.get(name)
    if isinstance(value, Value):
        if _is_complex(meta):
            return value, True
        real = ctx.emit("Unsqueeze", [value, ctx.ints([-1])])
        if isinstance(meta, TensorMeta) and meta.dtype != real_dtype(like.dtype):
            real = ctx.emit("Cast", [real], {"to": real_dtype(like.dtype)})
        return real, False
    if isinstance(value, complex):
        return ctx.const([value.real, value.imag], real_dtype(like.dtype)), True
    return ctx.const(float(value), real_dtype(like.dtype)), False  # type: ignore[arg-type]


@_complex("aten.add", "aten.sub", to="Add / Sub", table=False)
def complex_add(call: OpCall, ctx: LowerContext) -> Value:
    """Complex + complex adds the pairs; a real operand adds to the real part only."""
    out = call.out_meta
    a, a_complex = _operand(call, ctx, "self", out)
    b, b_complex = _operand(call, ctx, "other", out)
    alpha = call.get("alpha", 1)
    if alpha != 1:
        b = ctx.emit("Mul", [b, ctx.const(float(alpha), real_dtype(out.dtype))])  # type: ignore[arg-type]
    pad = ctx.const([1.0, 0.0], real_dtype(out.dtype))
    if not a_complex:
        a = ctx.emit("Mul", [a, pad])
    if not b_complex:
        b = ctx.emit("Mul", [b, pad])
    return ctx.emit("Sub" if call.op == "aten.sub" else "Add", [a, b])


@_complex("aten.mul", to="Mul (+ the cross terms)", table=False)
def complex_mul(call: OpCall, ctx: LowerContext) -> Value:
    """(a + bi)(c + di) = (ac - bd) + (ad + bc)i; a real operand scales both parts."""
    out = call.out_meta
    x, x_complex = _operand(call, ctx, "self", out)
    y, y_complex = _operand(call, ctx, "other", out)
    if not (x_complex and y_complex):
        return ctx.emit("Mul", [x, y])
    zero, one = ctx.ints(0), ctx.ints(1)
    re = [ctx.emit("Gather", [v, zero], {"axis": -1}) for v in (x, y)]
    im = [ctx.emit("Gather", [v, one], {"axis": -1}) for v in (x, y)]
    real = ctx.emit("Sub", [ctx.emit("Mul", [re[0], re[1]]), ctx.emit("Mul", [im[0], im[1]])])
    imag = ctx.emit("Add", [ctx.emit("Mul", [re[0], im[1]]), ctx.emit("Mul", [im[0], re[1]])])
    axis = ctx.ints([-1])
    return ctx.emit("Concat", [ctx.emit("Unsqueeze", [real, axis]), ctx.emit("Unsqueeze", [imag, axis])], {"axis": -1})
