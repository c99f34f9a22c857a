"""Read a Paddle 3 PIR program (``inference.json``) into a ``Program``.

The JSON holds ``program.regions[0].blocks[0].ops``; each op has ``#`` (``<dialect>.<name>``:
``0`` builtin, ``1`` pd_op; ``p`` is a parameter), ``I`` (input value ids, ``0`` for an absent
optional input), ``O`` (output values with their types ``TT``), and ``A`` (attributes, each
``{"N": name, "AT": {"#": type tag, "D": data}}``). PIR inputs are positional; ``_SIGNATURES``
gives them the ProgramDesc slot names so that one converter serves both formats. Builtin
``combine``/``split`` ops only build and unpack lists and are resolved here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from convert.ir import ModelFormatError

from .program import Op, Program, Var

__all__ = ["read_json"]

_X = (["X"], ["Out"])
_XY = (["X", "Y"], ["Out"])
# PIR op name -> (input slots, output slots), in PIR's positional order.
_SIGNATURES: dict[str, tuple[list[str], list[str]]] = {
    "conv2d": (["Input", "Filter"], ["Output"]),
    "depthwise_conv2d": (["Input", "Filter"], ["Output"]),
    "conv2d_transpose": (["Input", "Filter", "output_size"], ["Output"]),
    "depthwise_conv2d_transpose": (["Input", "Filter", "output_size"], ["Output"]),
    "batch_norm": (["X", "Mean", "Variance", "Scale", "Bias"],
                   ["Y", "MeanOut", "VarianceOut", "SavedMean", "SavedVariance", "ReserveSpace"]),
    "pool2d": (["X", "ksize"], ["Out"]),
    "matmul": _XY,
    "reshape": (["X", "Shape"], ["Out", "XShape"]),
    "flatten": (["X"], ["Out", "XShape"]),
    "squeeze": (["X", "axes"], ["Out", "XShape"]),
    "unsqueeze": (["X", "axes"], ["Out", "XShape"]),
    "concat": (["X", "AxisTensor"], ["Out"]),
    "split": (["X", "SectionsTensorList", "AxisTensor"], ["Out"]),
    "split_with_num": (["X", "AxisTensor"], ["Out"]),
    "slice": (["Input", "StartsTensor", "EndsTensor"], ["Out"]),
    "strided_slice": (["Input", "StartsTensor", "EndsTensor", "StridesTensor"], ["Out"]),
    "scale": (["X", "ScaleTensor"], ["Out"]),
    "dropout": (["X", "Seed", "P"], ["Out", "Mask"]),
    "nearest_interp": (["X", "OutSize", "SizeTensor", "Scale"], ["Out"]),
    "bilinear_interp": (["X", "OutSize", "SizeTensor", "Scale"], ["Out"]),
    "shape": (["Input"], ["Out"]),
    "shape64": (["Input"], ["Out"]),
    "full": ([], ["Out"]),
    "full_int_array": ([], ["Out"]),
    "full_like": (["X", "ValueTensor"], ["Out"]),
    "mean": (["X", "axis"], ["Out"]),
    "sum": (["X", "axis"], ["Out"]),
    "max_pool2d_with_index": (["X"], ["Out", "Mask"]),
    "max": (["X", "axis"], ["Out"]),
    "clip": (["X", "Min", "Max"], ["Out"]),
    "pow": (["X"], ["Out"]),
    "gather": (["X", "Index", "Axis"], ["Out"]),
    "expand": (["X", "Shape"], ["Out"]),
    "tile": (["X", "RepeatTimes"], ["Out"]),
    "pad3d": (["X", "Paddings"], ["Out"]),
    "arange": (["Start", "End", "Step"], ["Out"]),
    "layer_norm": (["X", "Scale", "Bias"], ["Y", "Mean", "Variance"]),
    "stack": (["X"], ["Y"]),
    "argmax": (["X", "axis"], ["Out"]),
    "prelu": (["X", "Alpha"], ["Out"]),
}
for _name in ("add", "subtract", "multiply", "divide", "maximum", "minimum", "elementwise_pow",
              "remainder", "floor_divide", "equal", "not_equal", "less_than", "less_equal",
              "greater_than", "greater_equal"):
    _SIGNATURES[_name] = _XY
_SIGNATURES["batch_norm_"] = _SIGNATURES["batch_norm"]
for _name in ("reshape", "squeeze", "unsqueeze", "flatten", "scale", "relu", "relu6", "hardswish",
              "hardsigmoid", "sigmoid", "tanh", "swish", "silu", "gelu", "leaky_relu", "exp", "sqrt",
              "abs", "floor", "clip", "softmax", "cast", "assign", "transpose"):
    _SIGNATURES.setdefault(_name, _X)
    _SIGNATURES[_name + "_"] = _SIGNATURES[_name]

_Json = dict[str, Any]  # a decoded JSON object

_DTYPES = {
    "t_f32": "float32", "t_f64": "float64", "t_f16": "float16", "t_i8": "int8", "t_ui8": "uint8",
    "t_i16": "int16", "t_i32": "int32", "t_i64": "int64", "t_bool": "bool", "t_bf16": "bfloat16",
}


def _tag(obj: _Json) -> str:
    tag = str(obj.get("#", ""))
    return tag.split(".", 1)[1] if "." in tag else tag


def _attr(at: _Json) -> object:
    """Decode one typed attribute ``{"#": "0.a_i32", "D": 1}`` to a Python value."""
    tag = _tag(at)
    data: Any = at.get("D")
    if tag == "a_array":
        return [_attr(item) for item in data or []]
    if tag in ("a_intarray",):
        return [int(v) for v in data]
    if tag in ("a_i32", "a_i64", "a_index"):
        return int(data)
    if tag in ("a_f32", "a_f64"):
        return float(data)
    if tag == "a_bool":
        return bool(data)
    if tag == "a_scalar":
        return data[1] if isinstance(data, list) and len(data) == 2 else data
    return data


_MAX_DIM = 2**31 - 1  # no tensor dimension of a real model is larger (-1: dynamic)


def _value_type(tt: _Json | None) -> tuple[np.dtype | None, tuple[int, ...] | None]:
    if not tt or _tag(tt) != "t_dtensor":
        return None, None
    data = tt.get("D") or []
    dtype_name = _DTYPES.get(_tag(data[0])) if data else None
    dtype = np.dtype(dtype_name) if dtype_name and dtype_name != "bfloat16" else None
    shape = tuple(int(d) for d in data[1]) if len(data) > 1 else None
    if shape is not None and any(not -1 <= d <= _MAX_DIM for d in shape):  # 10^23 reached the ONNX serializer
        raise ValueError(f"dimension outside -1..{_MAX_DIM} in the shape {list(shape)}")
    return dtype, shape


def _param_name(attrs: object) -> str | None:
    """The parameter's name: last item of the compact ``p`` form, or a ``parameter_name`` attribute."""
    if isinstance(attrs, list) and attrs:
        if isinstance(attrs[-1], str):
            return attrs[-1]
        for a in attrs:
            if isinstance(a, dict) and a.get("N") == "parameter_name":
                value = _attr(a["AT"])
                return str(value) if value else None
    return None


def _load(path: Path) -> _Json:
    try:
        with path.open("rb") as f:
            doc = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFormatError(f"{path.name}: not a Paddle PIR program (invalid JSON: {exc}). "
                               "Is this an inference.json written by paddle.jit.save?") from exc
    except RecursionError:  # nesting no PIR program has; json's decoder recurses per level
        raise ModelFormatError(f"{path.name}: not a Paddle PIR program (JSON nested too deeply to read). "
                               "Is this an inference.json written by paddle.jit.save?") from None
    try:  # "\ud800" in a JSON string decodes to an unpaired surrogate, which no name can hold
        json.dumps(doc, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ModelFormatError(f"{path.name}: a string of the PIR program holds an unpaired surrogate "
                               f"({exc.object[exc.start:exc.end]!a}), not text. Is the file corrupt?") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("base_code"), dict) \
            or doc["base_code"].get("magic") != "pir" or "program" not in doc:
        raise ModelFormatError(f"{path.name}: not a Paddle PIR program (no 'base_code.magic: pir'). "
                               "Is this an inference.json written by paddle.jit.save?")
    return doc


def read_json(path: Path) -> Program:
    """Parse ``path`` and return its top-level block as a ``Program``.

    Raises:
        ModelFormatError: the file is not a PIR program, or has nested regions (control flow).
    """
    doc = _load(path)
    try:
        blocks = doc["program"]["regions"][0]["blocks"]
        raw_ops = blocks[0]["ops"]
    except (KeyError, IndexError, TypeError) as exc:
        raise ModelFormatError(f"{path.name}: PIR program has no top-level block") from exc
    where = [-1]
    try:
        return _read_ops(path, raw_ops, where)
    except ModelFormatError:
        raise
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, RecursionError) as exc:
        raise ModelFormatError(f"{path.name}: op #{where[0]} of the PIR program is malformed "
                               f"({type(exc).__name__}: {exc}). Was the file edited or truncated?") from exc


def _read_ops(path: Path, raw_ops: list[_Json], where: list[int]) -> Program:
    names: dict[int, str] = {}
    lists: dict[int, list[int]] = {}  # combine output id -> element ids
    unpack: dict[int, list[_Json]] = {}  # list id -> the values builtin.split gives its elements
    vars_: dict[str, Var] = {}
    for raw in raw_ops:
        if raw.get("#") == "0.split":
            unpack[int(raw["I"][0]["%"])] = list(raw["O"])

    def name_of(vid: int, base: str) -> str:
        if vid not in names:
            names[vid] = f"{base}.tmp_{vid}"
        return names[vid]

    def declare(out: _Json, base: str, persistable: bool = False) -> str:
        vid = int(out["%"])
        name = name_of(vid, base)
        dtype, shape = _value_type(out.get("TT"))
        vars_[name] = Var(name, dtype, shape, persistable)
        return name

    ops: list[Op] = []
    feeds: list[str] = []
    fetches: dict[int, str] = {}
    fetch_names: dict[int, str] = {}
    params: list[str] = []
    for index, raw in enumerate(raw_ops):
        where[0] = index
        tag = str(raw.get("#", ""))
        if raw.get("regions"):
            raise ModelFormatError(f"{path.name}: op #{index} '{tag}' has nested regions; control flow "
                                   "is not supported. Try --via paddle2onnx.")
        outs = raw.get("O") or []
        if isinstance(outs, dict):
            outs = [outs]
        if tag in ("p", "1.parameter", "0.parameter"):
            pname = _param_name(raw.get("A"))
            if pname is None:
                raise ModelFormatError(f"{path.name}: op #{index} is a parameter without a name")
            names[int(outs[0]["%"])] = pname
            declare(outs[0], pname, persistable=True)
            params.append(pname)
            continue
        attrs = {a["N"]: _attr(a["AT"]) for a in raw.get("A") or [] if isinstance(a, dict) and "N" in a}
        attrs.pop("struct_name", None)
        in_ids = [int(i.get("%", 0)) if isinstance(i, dict) else 0 for i in raw.get("I") or []]
        if tag == "0.combine":
            lists[int(outs[0]["%"])] = in_ids
            continue
        if tag == "0.split":
            continue
        dialect, _, op_name = tag.partition(".")
        op_name = op_name or dialect
        if tag == "1.data":
            vid = int(outs[0]["%"])
            names[vid] = str(attrs.get("name") or f"input_{len(feeds)}")
            declare(outs[0], names[vid])
            feeds.append(names[vid])
            continue
        if tag == "1.fetch":
            src = names.get(in_ids[0])
            if src is None:
                raise ModelFormatError(f"{path.name}: op #{index} fetches an undefined value")
            col = attrs.get("col")
            col = col if isinstance(col, int) else len(fetches)
            fetches[col] = src
            fetch_names[col] = str(attrs.get("name") or src)
            continue
        in_slots, out_slots = _SIGNATURES.get(op_name, _X)
        inputs: dict[str, list[str]] = {}
        for pos, vid in enumerate(in_ids):
            slot = in_slots[pos] if pos < len(in_slots) else f"In{pos}"
            if vid == 0:
                inputs[slot] = []
                continue
            elems = lists.get(vid, [vid])
            missing = [e for e in elems if e not in names]
            if missing:
                raise ModelFormatError(f"{path.name}: op #{index} '{op_name}' reads value %{missing[0]} "
                                       "before it is defined")
            inputs[slot] = [names[e] for e in elems]
        outputs: dict[str, list[str]] = {}
        base = op_name.rstrip("_")
        for pos, out in enumerate(outs):
            slot = out_slots[pos] if pos < len(out_slots) else f"Out{pos}"
            if not out or "%" not in out:
                continue
            vid = int(out["%"])
            if vid in unpack:
                outputs[slot] = [declare(elem, base) for elem in unpack[vid]]
            else:
                outputs[slot] = [declare(out, base)]
        ops.append(Op(op_name, inputs, outputs, attrs, index=index))
    if not feeds or not fetches:
        raise ModelFormatError(f"{path.name}: the program has no data or no fetch ops; "
                               "save the model for inference with paddle.jit.save")
    return Program(path, "json", ops, vars_, feeds, [fetches[k] for k in sorted(fetches)], sorted(params),
                   [fetch_names[k] for k in sorted(fetches)])
