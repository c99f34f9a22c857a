"""Read a ProgramDesc ``.pdmodel`` (protobuf, the pre-PIR format) into a ``Program``.

Block 0 holds the inference graph: ``feed`` ops name the inputs (by ``col``), ``fetch`` ops the
outputs, and persistable ``LOD_TENSOR`` vars are the parameters, stored in the combined
``.pdiparams`` in sorted-name order. Sub-blocks (control flow) are not supported.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from convert.ir import ModelFormatError
from convert.ir.protocheck import non_text_field

from .program import Op, Program, Var

if TYPE_CHECKING:
    from . import framework_pb2 as fw

__all__ = ["VARTYPE_DTYPES", "read_pdmodel"]

# VarType.Type -> numpy dtype name (None: not a dense tensor dtype).
VARTYPE_DTYPES: dict[int, str] = {
    0: "bool", 1: "int16", 2: "int32", 3: "int64", 4: "float16", 5: "float32", 6: "float64",
    20: "uint8", 21: "int8", 22: "bfloat16",
}
_LOD_TENSOR = 7


def _attr_value(a: fw.OpDesc.Attr) -> object:
    from . import framework_pb2 as fw

    t = a.type
    simple: dict[int, Callable[[], object]] = {
        fw.INT: lambda: a.i, fw.FLOAT: lambda: a.f, fw.STRING: lambda: a.s, fw.INTS: lambda: list(a.ints),
        fw.FLOATS: lambda: list(a.floats), fw.STRINGS: lambda: list(a.strings), fw.BOOLEAN: lambda: a.b,
        fw.BOOLEANS: lambda: list(a.bools), fw.LONG: lambda: a.l, fw.LONGS: lambda: list(a.longs),
        fw.FLOAT64S: lambda: list(a.float64s), fw.FLOAT64: lambda: a.float64, fw.BLOCK: lambda: a.block_idx,
        fw.BLOCKS: lambda: list(a.blocks_idx), fw.VAR: lambda: a.var_name, fw.VARS: lambda: list(a.vars_name),
    }
    if t in simple:
        return simple[t]()
    if t == fw.SCALAR:
        return _scalar(a.scalar)
    if t == fw.SCALARS:
        return [_scalar(s) for s in a.scalars]
    return None


def _scalar(s: fw.Scalar) -> object:
    values: dict[int, object] = {1: s.b, 2: s.i, 3: s.r}
    return values.get(s.type, s.r)


def _col(attrs: dict[str, object], default: int) -> int:
    col = attrs.get("col")
    return col if isinstance(col, int) else default


def read_pdmodel(path: Path) -> Program:
    """Parse ``path`` and return its block-0 program.

    Raises:
        ModelFormatError: the file is not a Paddle ProgramDesc.
    """
    from google.protobuf.message import DecodeError

    from . import framework_pb2 as fw

    data = path.read_bytes()
    prog = fw.ProgramDesc()
    try:
        prog.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise ModelFormatError(f"{path.name}: not a Paddle program (protobuf decode failed: {exc}). "
                               "Is this a .pdmodel written by paddle.jit.save?") from exc
    bad = non_text_field(prog)
    if bad is not None:
        raise ModelFormatError(f"{path.name}: the name or text at {bad} is not valid UTF-8. Is the file corrupt?")
    if not prog.blocks or not any(op.type for op in prog.blocks[0].ops):
        raise ModelFormatError(f"{path.name}: not a Paddle program (no blocks or ops). "
                               "Is this a .pdmodel written by paddle.jit.save?")
    if len(prog.blocks) > 1:
        raise ModelFormatError(f"{path.name}: has {len(prog.blocks)} blocks; control flow (sub-blocks) "
                               "is not supported. Try --via paddle2onnx.")
    block = prog.blocks[0]
    vars_: dict[str, Var] = {}
    params: list[str] = []
    for vd in block.vars:
        if not vd.name:
            raise ModelFormatError(f"{path.name}: not a Paddle program (a variable has no name)")
        dtype = shape = None
        if vd.type.type == _LOD_TENSOR and vd.type.HasField("lod_tensor"):
            td = vd.type.lod_tensor.tensor
            name = VARTYPE_DTYPES.get(td.data_type)
            dtype = np.dtype(name) if name and name != "bfloat16" else None
            shape = tuple(int(d) for d in td.dims)
            if vd.persistable:
                params.append(vd.name)
        vars_[vd.name] = Var(vd.name, dtype, shape, bool(vd.persistable))
    ops: list[Op] = []
    feeds: dict[int, str] = {}
    fetches: dict[int, str] = {}
    for i, od in enumerate(block.ops):
        if not od.type:
            raise ModelFormatError(f"{path.name}: not a Paddle program (op #{i} has no type)")
        attrs = {a.name: _attr_value(a) for a in od.attrs if not a.name.startswith("op_")}
        inputs = {v.parameter: list(v.arguments) for v in od.inputs}
        outputs = {v.parameter: list(v.arguments) for v in od.outputs}
        if od.type in ("feed", "fetch"):
            slot, table, args = ("Out", feeds, outputs) if od.type == "feed" else ("X", fetches, inputs)
            if not args.get(slot):
                raise ModelFormatError(f"{path.name}: op #{i} '{od.type}' has no '{slot}' variable")
            table[_col(attrs, len(table))] = args[slot][0]
        else:
            ops.append(Op(od.type, inputs, outputs, attrs, index=i))
    if not feeds or not fetches:
        raise ModelFormatError(f"{path.name}: the program has no feed or no fetch ops; "
                               "save the model for inference with paddle.jit.save")
    return Program(path, "pdmodel", ops, vars_, [feeds[k] for k in sorted(feeds)],
                   [fetches[k] for k in sorted(fetches)], sorted(params))
