"""Build small Paddle programs in code (no Paddle needed) with the frontend's own schema.

``write_program`` writes a ProgramDesc ``.pdmodel`` (feed ops, the given ops, fetch ops, a
VarDesc for every variable) and ``write_params`` a combined ``.pdiparams`` in Paddle's record
layout, parameters in sorted-name order.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from convert.frontends.paddle import framework_pb2 as fw

_VT = {"bool": 0, "int16": 1, "int32": 2, "int64": 3, "float16": 4, "float32": 5, "float64": 6,
       "uint8": 20, "int8": 21}


@dataclass
class SynthOp:
    """One op: type, slots, attributes (Python values; the attribute type is inferred)."""

    type: str
    inputs: dict[str, list[str]]
    outputs: dict[str, list[str]]
    attrs: dict[str, object] = field(default_factory=dict)


def _set_attr(a: fw.OpDesc.Attr, name: str, value: object) -> None:
    a.name = name
    if isinstance(value, bool):
        a.type, a.b = fw.BOOLEAN, value
    elif isinstance(value, int):
        a.type, a.i = fw.INT, value
    elif isinstance(value, float):
        a.type, a.f = fw.FLOAT, value
    elif isinstance(value, str):
        a.type, a.s = fw.STRING, value
    elif isinstance(value, list) and value and isinstance(value[0], bool):
        a.type = fw.BOOLEANS
        a.bools.extend(value)
    elif isinstance(value, list) and value and isinstance(value[0], float):
        a.type = fw.FLOATS
        a.floats.extend(value)
    elif isinstance(value, list) and value and isinstance(value[0], str):
        a.type = fw.STRINGS
        a.strings.extend(value)
    elif isinstance(value, list):
        a.type = fw.INTS
        a.ints.extend(int(v) for v in value)
    else:
        raise TypeError(f"attribute {name}: {value!r}")


def _tensor_var(block: fw.BlockDesc, name: str, dtype: str, shape: Sequence[int] | None,
                persistable: bool = False) -> None:
    v = block.vars.add()
    v.name = name
    v.persistable = persistable
    v.type.type = fw.VarType.LOD_TENSOR
    t = v.type.lod_tensor.tensor
    t.data_type = _VT[dtype]
    if shape is not None:
        t.dims.extend(int(d) for d in shape)


def write_program(path: Path, *, feeds: Mapping[str, tuple[Sequence[int], str]], ops: Sequence[SynthOp],
                  fetches: Sequence[str], params: Mapping[str, np.ndarray],
                  shapes: Mapping[str, tuple[Sequence[int], str]]) -> Path:
    """Write a one-block ProgramDesc; ``shapes`` gives (shape, dtype) of intermediate vars."""
    prog = fw.ProgramDesc()
    block = prog.blocks.add()
    block.idx, block.parent_idx = 0, -1
    for special, kind in (("feed", fw.VarType.FEED_MINIBATCH), ("fetch", fw.VarType.FETCH_LIST)):
        v = block.vars.add()
        v.name, v.persistable = special, True
        v.type.type = kind
    for name, (shape, dtype) in feeds.items():
        _tensor_var(block, name, dtype, shape)
    for name in sorted(params):
        _tensor_var(block, name, params[name].dtype.name, params[name].shape, persistable=True)
    for name, (shape, dtype) in shapes.items():
        if name not in feeds and name not in params:
            _tensor_var(block, name, dtype, shape)

    def add(op_type: str, inputs: Mapping[str, list[str]], outputs: Mapping[str, list[str]],
            attrs: Mapping[str, object]) -> None:
        od = block.ops.add()
        od.type = op_type
        for slot, args in inputs.items():
            var = od.inputs.add()
            var.parameter = slot
            var.arguments.extend(args)
        for slot, args in outputs.items():
            var = od.outputs.add()
            var.parameter = slot
            var.arguments.extend(args)
        for k, val in attrs.items():
            _set_attr(od.attrs.add(), k, val)

    for col, name in enumerate(feeds):
        add("feed", {"X": ["feed"]}, {"Out": [name]}, {"col": col})
    for op in ops:
        add(op.type, op.inputs, op.outputs, op.attrs)
    for col, name in enumerate(fetches):
        add("fetch", {"X": [name]}, {"Out": ["fetch"]}, {"col": col})
    prog.version.version = 3003001
    path.write_bytes(prog.SerializeToString())
    return path


def record(array: np.ndarray) -> bytes:
    """Return one params-file record: headers, TensorDesc, raw little-endian data."""
    desc = fw.VarType.TensorDesc()
    desc.data_type = _VT[array.dtype.name]
    desc.dims.extend(array.shape)
    blob = desc.SerializeToString()
    head = struct.pack("<IQIi", 0, 0, 0, len(blob))
    return head + blob + np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()


def write_params(path: Path, params: Mapping[str, np.ndarray]) -> Path:
    """Write a combined .pdiparams (records in sorted-name order)."""
    path.write_bytes(b"".join(record(params[name]) for name in sorted(params)))
    return path
