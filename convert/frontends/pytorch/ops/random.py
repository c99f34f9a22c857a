"""Random tensors: ``rand``, ``randn``, ``randperm`` and the ``_like`` forms, as ONNX's random ops.

ONNX Runtime and torch draw from different generators, so no seed makes the converted model give
torch's numbers: the distribution, shape and dtype are kept. The parity check reports each output
that depends on a random op as NOT VERIFIED, with only its shape compared (see
``convert/parity/runtimes/onnxruntime.py``). These calls are never folded into constants at
conversion (``lowering.py``), which would freeze one draw into the file.
"""

from __future__ import annotations

from convert.ir import DataType, Value

from ._base import LowerContext, OpCall, lowers

__all__ = ["rand", "randn", "randperm"]

_FLOATS = (DataType.FLOAT, DataType.FLOAT16, DataType.DOUBLE, DataType.BFLOAT16)


def _note(call: OpCall, ctx: LowerContext) -> None:
    ctx.diagnostics.note(f"{call.where} draws random numbers: ONNX Runtime's differ from torch's for any seed, "
                         "so the parity check cannot compare the outputs that depend on them (NOT VERIFIED)")


def _random(call: OpCall, ctx: LowerContext, op: str, attrs: dict[str, object], like: str | None) -> Value:
    meta = call.out_meta
    if meta.dtype not in _FLOATS:
        raise call.unsupported(f"a random tensor of dtype {meta.dtype.name.lower()}", "ONNX draws floats only")
    _note(call, ctx)
    attrs = {**attrs, "dtype": meta.dtype}
    if like is not None and isinstance(call.args.get(like), Value):
        return ctx.emit(f"{op}Like", [call.tensor(like)], attrs)
    if meta.is_static:
        return ctx.emit(op, [], {**attrs, "shape": list(meta.dims())})
    sizes = ctx.shape_value(meta.shape, sizes=call.args.get("size"), expand=True)
    zeros = ctx.emit("Expand", [ctx.const(0.0, meta.dtype), sizes])
    return ctx.emit(f"{op}Like", [zeros], attrs)


@lowers("aten.rand", "aten.rand_like", to="RandomUniform(Like)", notes="values differ from torch's: NOT VERIFIED")
def rand(call: OpCall, ctx: LowerContext) -> Value:
    """Uniform on [0, 1)."""
    like = "self" if call.op.endswith("_like") else None
    return _random(call, ctx, "RandomUniform", {"low": 0.0, "high": 1.0}, like)


@lowers("aten.randn", "aten.randn_like", to="RandomNormal(Like)", notes="values differ from torch's: NOT VERIFIED")
def randn(call: OpCall, ctx: LowerContext) -> Value:
    """Standard normal."""
    like = "self" if call.op.endswith("_like") else None
    return _random(call, ctx, "RandomNormal", {"mean": 0.0, "scale": 1.0}, like)


@lowers("aten.randperm", to="RandomUniform+TopK", notes="a constant n; values differ from torch's: NOT VERIFIED")
def randperm(call: OpCall, ctx: LowerContext) -> Value:
    """A random permutation of 0..n-1: the order that sorts n uniform draws."""
    n = call["n"]
    if not isinstance(n, int):
        raise call.unsupported("randperm of a computed n")
    _note(call, ctx)
    keys = ctx.emit("RandomUniform", [], {"shape": [n], "dtype": DataType.FLOAT})
    _, order = ctx.emit_multi("TopK", [keys, ctx.ints([n])], {"axis": 0}, outputs=2)
    dtype = call.out_meta.dtype
    return order if dtype == DataType.INT64 else ctx.emit("Cast", [order], {"to": dtype})
