"""Read a ``.tflite`` flatbuffer into plain records, without TensorFlow.

Field indices and enum values are those of TensorFlow Lite's public schema
(``tensorflow/compiler/mlir/lite/schema/schema.fbs``, file identifier ``TFL3``). Constant tensors
are not read: each keeps the position of its bytes in the file, and ``TFLModel.array`` returns a
NumPy view of the memory-mapped file (no copy) when a converter asks for the values.

Besides the main subgraph, every subgraph that a ``WHILE`` (cond, body) or ``IF`` (then, else)
of it runs is read, transitively, with the same checks. The subgraph references are checked
before any conversion: an index out of range, a subgraph that runs itself again (a cycle),
nesting deeper than ``MAX_NESTING``, more operators to convert than ``MAX_EXPANDED_OPS`` once
each loop's condition is counted twice (it is converted before the loop and inside it), and
arities or types that differ between an operator and the subgraphs it runs are each refused
with one ``ModelFormatError``.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from convert.ir import ModelFormatError, UsageError

from .flatbuf import Table, identifier, root

__all__ = ["BUILTIN_NAMES", "CONTROL_FLOW", "MAX_EXPANDED_OPS", "MAX_NESTING", "TFLModel", "TFLOp", "TFLQuant",
           "TFLTensor", "read_model"]

# TensorType -> NumPy dtype (STRING, COMPLEX, RESOURCE, VARIANT, INT4, BFLOAT16 are not converted).
_DTYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 6: "bool", 7: "int16", 9: "int8",
           10: "float64", 12: "uint64", 15: "uint32", 16: "uint16"}

# BuiltinOperator codes -> names (those of the schema; codes without an entry are reported by number).
BUILTIN_NAMES = {
    0: "ADD", 1: "AVERAGE_POOL_2D", 2: "CONCATENATION", 3: "CONV_2D", 4: "DEPTHWISE_CONV_2D",
    5: "DEPTH_TO_SPACE", 6: "DEQUANTIZE", 7: "EMBEDDING_LOOKUP", 8: "FLOOR", 9: "FULLY_CONNECTED",
    11: "L2_NORMALIZATION", 12: "L2_POOL_2D", 13: "LOCAL_RESPONSE_NORMALIZATION", 14: "LOGISTIC",
    16: "LSTM", 17: "MAX_POOL_2D", 18: "MUL", 19: "RELU", 20: "RELU_N1_TO_1", 21: "RELU6", 22: "RESHAPE",
    23: "RESIZE_BILINEAR", 24: "RNN", 25: "SOFTMAX", 26: "SPACE_TO_DEPTH", 28: "TANH", 31: "CALL",
    32: "CUSTOM", 34: "PAD", 36: "GATHER", 37: "BATCH_TO_SPACE_ND", 38: "SPACE_TO_BATCH_ND", 39: "TRANSPOSE",
    40: "MEAN", 41: "SUB", 42: "DIV", 43: "SQUEEZE", 44: "UNIDIRECTIONAL_SEQUENCE_LSTM", 45: "STRIDED_SLICE",
    47: "EXP", 48: "TOPK_V2", 49: "SPLIT", 50: "LOG_SOFTMAX", 53: "CAST", 54: "PRELU", 55: "MAXIMUM",
    56: "ARG_MAX", 57: "MINIMUM", 58: "LESS", 59: "NEG", 60: "PADV2", 61: "GREATER", 62: "GREATER_EQUAL",
    35: "UNIDIRECTIONAL_SEQUENCE_RNN", 46: "BIDIRECTIONAL_SEQUENCE_RNN", 52: "BIDIRECTIONAL_SEQUENCE_LSTM",
    63: "LESS_EQUAL", 64: "SELECT", 65: "SLICE", 66: "SIN", 67: "TRANSPOSE_CONV", 69: "TILE",
    70: "EXPAND_DIMS", 71: "EQUAL", 72: "NOT_EQUAL", 73: "LOG", 74: "SUM", 75: "SQRT", 76: "RSQRT",
    77: "SHAPE", 78: "POW", 79: "ARG_MIN", 81: "REDUCE_PROD", 82: "REDUCE_MAX", 83: "PACK", 84: "LOGICAL_OR",
    86: "LOGICAL_AND", 87: "LOGICAL_NOT", 88: "UNPACK",
    89: "REDUCE_MIN", 90: "FLOOR_DIV", 92: "SQUARE", 97: "RESIZE_NEAREST_NEIGHBOR", 98: "LEAKY_RELU",
    99: "SQUARED_DIFFERENCE", 100: "MIRROR_PAD", 101: "ABS", 102: "SPLIT_V", 106: "ADD_N", 108: "COS",
    104: "CEIL", 105: "REVERSE_V2", 111: "ELU", 114: "QUANTIZE", 116: "ROUND", 117: "HARD_SWISH", 118: "IF",
    119: "WHILE", 123: "SELECT_V2",
    126: "BATCH_MATMUL", 128: "CUMSUM", 129: "CALL_ONCE", 130: "BROADCAST_TO", 150: "GELU",
}

# Field indices of the schema's tables used here (declaration order, union types take a slot).
_MODEL_CODES, _MODEL_SUBGRAPHS, _MODEL_BUFFERS, _MODEL_SIGNATURES = 1, 2, 4, 7
_CODE_DEPRECATED, _CODE_CUSTOM, _CODE_VERSION, _CODE_BUILTIN = 0, 1, 2, 3
_SG_TENSORS, _SG_INPUTS, _SG_OUTPUTS, _SG_OPERATORS, _SG_NAME = 0, 1, 2, 3, 4
_T_SHAPE, _T_TYPE, _T_BUFFER, _T_NAME, _T_QUANT, _T_VARIABLE, _T_SPARSITY, _T_SIGNATURE = 0, 1, 2, 3, 4, 5, 6, 7
_Q_SCALE, _Q_ZERO, _Q_DETAILS_TYPE, _Q_AXIS = 2, 3, 4, 6
_OP_CODE, _OP_INPUTS, _OP_OUTPUTS, _OP_OPTIONS = 0, 1, 2, 4
_BUF_DATA, _BUF_OFFSET, _BUF_SIZE = 0, 1, 2
_SIG_INPUTS, _SIG_OUTPUTS, _SIG_KEY, _SIG_SUBGRAPH = 0, 1, 2, 4
_MAP_NAME, _MAP_INDEX = 0, 1

# Operators that run other subgraphs: the roles of the two subgraph indices of their options
# (WhileOptions: cond_subgraph_index, body_subgraph_index; IfOptions: then_, else_subgraph_index).
CONTROL_FLOW = {"WHILE": ("cond", "body"), "IF": ("then", "else")}
MAX_NESTING = 16  # subgraphs inside subgraphs (Keras nests two or three)
MAX_EXPANDED_OPS = 250_000  # operators converted in all, each loop condition counted twice


@dataclass(frozen=True, slots=True)
class TFLQuant:
    """Affine quantization of a tensor: ``real = scale * (q - zero_point)``, per ``axis`` when given."""

    scale: np.ndarray  # float32, one per channel or one
    zero_point: np.ndarray  # int64, same length
    axis: int | None  # the channel axis for per-channel quantization, else None


@dataclass(slots=True)
class TFLTensor:
    """One tensor of the subgraph; constants keep their bytes' position in the file."""

    index: int
    name: str
    shape: tuple[int | None, ...]  # None for a free dimension (shape_signature -1)
    dtype: np.dtype
    span: tuple[int, int] | None  # (byte offset in the file, byte length) of a constant
    quant: TFLQuant | None
    variable: bool = False  # a state tensor (is_variable): zeros until an operator writes it


@dataclass(slots=True)
class TFLOp:
    """One operator: its builtin name (or ``CUSTOM:<code>``), tensor indices and options table."""

    index: int
    name: str
    version: int
    inputs: list[int]  # -1 = optional input left out
    outputs: list[int]
    options: Table | None


@dataclass(slots=True)
class TFLModel:
    """One subgraph of a ``.tflite`` file: the main one, or one that a WHILE or IF runs.

    ``subgraphs`` is shared by all of them: every subgraph read, by its index in the file.
    """

    source: str
    path: Path
    tensors: list[TFLTensor]
    ops: list[TFLOp]
    inputs: dict[str, int] = field(default_factory=dict)  # user-facing name -> tensor index (main only)
    outputs: dict[str, int] = field(default_factory=dict)
    _map: mmap.mmap | None = None
    index: int = 0  # the subgraph's index in the file
    graph_inputs: list[int] = field(default_factory=list)  # tensor indices, in order
    graph_outputs: list[int] = field(default_factory=list)
    subgraphs: dict[int, TFLModel] = field(default_factory=dict)
    label: str = ""  # "" for the main subgraph, else "subgraph N " (messages)

    def runs(self, op: TFLOp) -> list[TFLModel]:
        """Return the subgraphs a WHILE (cond, body) or IF (then, else) operator runs."""
        return [self.subgraphs[i] for i in _subgraph_refs(op)]

    def array(self, tensor: TFLTensor) -> np.ndarray:
        """Return a constant tensor's values: a read-only NumPy view of the mapped file (no copy)."""
        if tensor.span is None:
            raise ModelFormatError(f"{self.source}: tensor '{tensor.name}' has no constant data")
        offset, nbytes = tensor.span
        count = int(np.prod([d or 0 for d in tensor.shape], dtype=np.int64)) if tensor.shape else 1
        if count * tensor.dtype.itemsize != nbytes:
            raise ModelFormatError(f"{self.source}: tensor '{tensor.name}' of shape {list(tensor.shape)} "
                                   f"({tensor.dtype}) has {nbytes} bytes of data, expected "
                                   f"{count * tensor.dtype.itemsize}")
        assert self._map is not None
        arr = np.frombuffer(self._map, tensor.dtype, count=count, offset=offset)
        return arr.reshape([int(d or 0) for d in tensor.shape])


def _quant(table: Table | None, source: str, name: str) -> TFLQuant | None:
    if table is None:
        return None
    scale = table.vector(_Q_SCALE, "<f4")
    if not len(scale):
        return None
    if int(table.scalar(_Q_DETAILS_TYPE, "<B")):
        raise ModelFormatError(f"{source}: tensor '{name}' uses custom quantization details (not supported)")
    zero = table.vector(_Q_ZERO, "<i8")
    if not len(zero):
        zero = np.zeros(len(scale), np.int64)
    if len(zero) != len(scale):
        raise ModelFormatError(f"{source}: tensor '{name}' has {len(scale)} scales but {len(zero)} zero points")
    axis = int(table.scalar(_Q_AXIS, "<i")) if len(scale) > 1 else None
    return TFLQuant(scale.astype(np.float32), zero.astype(np.int64), axis)


def _buffer_span(buf: Table, size: int, source: str, index: int) -> tuple[int, int] | None:
    pos, n = buf.vector_span(_BUF_DATA, 1)
    if n:
        return pos, n
    offset = int(buf.scalar(_BUF_OFFSET, "<Q"))
    nbytes = int(buf.scalar(_BUF_SIZE, "<Q"))
    if offset > 1:  # models past 2 GB keep buffers after the flatbuffer (offset from the file's start)
        if offset + nbytes > size:
            raise ModelFormatError(f"{source}: buffer {index} ({nbytes} bytes at {offset}) runs past the end "
                                   f"of the file ({size} bytes): truncated")
        return offset, nbytes
    return None


@dataclass(slots=True)
class _File:
    """What every subgraph of one file shares while it is read."""

    source: str
    path: Path
    mapped: mmap.mmap
    size: int
    codes: list[tuple[str, int]]
    buffers: list[Table]
    tables: list[Table]


def read_model(path: Path, signature: str | None = None) -> TFLModel:
    """Map ``path`` and read its main subgraph (or the subgraph of ``signature`` when given).

    The subgraphs its WHILE and IF operators run are read too (``TFLModel.subgraphs``).
    """
    source = path.name
    try:
        with path.open("rb") as fh:
            mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:  # ValueError: an empty file cannot be mapped
        raise ModelFormatError(f"{source}: cannot read the file ({exc})") from exc
    view = memoryview(mapped)
    if identifier(view) != b"TFL3":
        raise ModelFormatError(f"{source}: not a TFLite flatbuffer (no 'TFL3' identifier at byte 4)")
    model = root(view, source, "Model")
    codes = []
    for code in model.tables(_MODEL_CODES, "OperatorCode"):
        builtin = max(int(code.scalar(_CODE_DEPRECATED, "<b")), int(code.scalar(_CODE_BUILTIN, "<i")))
        name = BUILTIN_NAMES.get(builtin, f"BUILTIN_{builtin}")
        if name == "CUSTOM":
            name = f"CUSTOM:{code.string(_CODE_CUSTOM, '?')}"
        codes.append((name, int(code.scalar(_CODE_VERSION, "<i", 1))))
    buffers = model.tables(_MODEL_BUFFERS, "Buffer")
    subgraphs = model.tables(_MODEL_SUBGRAPHS, "SubGraph")
    if not subgraphs:
        raise ModelFormatError(f"{source}: the model has no subgraph")
    sg_index = 0
    sig_inputs: dict[str, int] = {}
    sig_outputs: dict[str, int] = {}
    signatures = {s.string(_SIG_KEY): s for s in model.tables(_MODEL_SIGNATURES, "SignatureDef")}
    if signature is not None and signature not in signatures:
        known = ", ".join(repr(k) for k in signatures) or "none"
        raise UsageError(f"{source}: no signature '{signature}' (the model has {known})")
    sig = signatures.get(signature) if signature is not None else (
        next(iter(signatures.values())) if len(signatures) == 1 else None)
    if sig is not None:
        sg_index = int(sig.scalar(_SIG_SUBGRAPH, "<I"))
        if sg_index >= len(subgraphs):
            raise ModelFormatError(f"{source}: signature refers to subgraph {sg_index} of {len(subgraphs)}")
        sig_inputs = {m.string(_MAP_NAME): int(m.scalar(_MAP_INDEX, "<I"))
                      for m in sig.tables(_SIG_INPUTS, "TensorMap")}
        sig_outputs = {m.string(_MAP_NAME): int(m.scalar(_MAP_INDEX, "<I"))
                       for m in sig.tables(_SIG_OUTPUTS, "TensorMap")}
    file = _File(source, path, mapped, len(view), codes, buffers, subgraphs)
    main = _read_subgraph(file, sg_index, "")
    by_index_in = {v: k for k, v in sig_inputs.items()}
    by_index_out = {v: k for k, v in sig_outputs.items()}
    main.inputs = _named(main.graph_inputs, by_index_in, main.tensors, source, "input")
    main.outputs = _named(main.graph_outputs, by_index_out, main.tensors, source, "output")
    both = sorted(set(main.inputs) & set(main.outputs))
    if both:
        raise ModelFormatError(f"{source}: '{both[0]}' names both an input and an output of the model")
    _read_reached(file, main)
    return main


def _read_subgraph(file: _File, index: int, label: str) -> TFLModel:
    """Read subgraph ``index``: its tensors, operators, inputs and outputs, each checked."""
    source, codes, buffers = file.source, file.codes, file.buffers
    sg = file.tables[index]
    tensors = []
    names_seen: set[str] = set()
    for i, t in enumerate(sg.tables(_SG_TENSORS, "Tensor")):
        name = t.string(_T_NAME) or f"tensor_{i}"
        if name in names_seen:
            name = f"{name}__{i}"
        names_seen.add(name)
        code = int(t.scalar(_T_TYPE, "<b"))
        if code not in _DTYPES:
            raise ModelFormatError(f"{source}: {label}tensor '{name}' has TensorType {code}, which is not supported")
        if t.has(_T_SPARSITY):
            raise ModelFormatError(f"{source}: {label}tensor '{name}' is sparse (densify it before converting)")
        shape = [int(d) for d in t.vector(_T_SHAPE, "<i4")]
        signature_shape = [int(d) for d in t.vector(_T_SIGNATURE, "<i4")]
        dims = tuple(None if s < 0 else int(d) for d, s in zip(shape, signature_shape, strict=True)) \
            if len(signature_shape) == len(shape) else tuple(shape)
        buf_index = int(t.scalar(_T_BUFFER, "<I"))
        span = None
        if buf_index:
            if buf_index >= len(buffers):
                raise ModelFormatError(f"{source}: {label}tensor '{name}' refers to buffer {buf_index} "
                                       f"of {len(buffers)}")
            span = _buffer_span(buffers[buf_index], file.size, source, buf_index)
        quant = _quant(t.table(_T_QUANT, "QuantizationParameters"), source, name)
        if quant is not None and quant.axis is not None and not (
                0 <= quant.axis < len(dims) and dims[quant.axis] == len(quant.scale)):
            raise ModelFormatError(f"{source}: {label}tensor '{name}' of shape {list(dims)} has "
                                   f"{len(quant.scale)} scales along axis {quant.axis}")
        if any(d is not None and d < 0 for d in dims):
            raise ModelFormatError(f"{source}: {label}tensor '{name}' has a negative dimension {list(dims)}")
        tensors.append(TFLTensor(i, name, dims, np.dtype(_DTYPES[code]), span, quant,
                                 bool(t.scalar(_T_VARIABLE, "<?", False))))
    ops = []
    for k, op in enumerate(sg.tables(_SG_OPERATORS, "Operator")):
        code = int(op.scalar(_OP_CODE, "<I"))
        if code >= len(codes):
            raise ModelFormatError(f"{source}: {label}operator {k} refers to operator code {code} of {len(codes)}")
        ins = [int(x) for x in op.vector(_OP_INPUTS, "<i4")]
        outs = [int(x) for x in op.vector(_OP_OUTPUTS, "<i4")]
        for idx in ins + outs:
            if idx >= len(tensors) or idx < -1:
                raise ModelFormatError(f"{source}: {label}operator {k} ({codes[code][0]}) refers to tensor {idx} "
                                       f"of {len(tensors)}")
        if -1 in outs:  # only an input may be left out
            raise ModelFormatError(f"{source}: {label}operator {k} ({codes[code][0]}) has an output left out (-1)")
        ops.append(TFLOp(k, codes[code][0], codes[code][1], ins, outs, op.table(_OP_OPTIONS, "BuiltinOptions")))
    graph_inputs = [int(x) for x in sg.vector(_SG_INPUTS, "<i4")]
    graph_outputs = [int(x) for x in sg.vector(_SG_OUTPUTS, "<i4")]
    for idx in graph_inputs + graph_outputs:
        if not 0 <= idx < len(tensors):
            owner = f"{label.strip()}'s" if label else "the subgraph's"
            raise ModelFormatError(f"{source}: {owner} inputs/outputs refer to tensor {idx} of {len(tensors)}")
    if label and len(set(graph_inputs)) != len(graph_inputs):
        raise ModelFormatError(f"{source}: {label}takes one tensor as two of its inputs")
    computed = {idx for op in ops for idx in op.outputs}
    for idx in graph_outputs:
        if idx not in computed and idx not in graph_inputs and tensors[idx].span is None:
            raise ModelFormatError(f"{source}: {label}output tensor '{tensors[idx].name}' is computed by no operator")
    return TFLModel(source, file.path, tensors, ops, _map=file.mapped, index=index, graph_inputs=graph_inputs,
                    graph_outputs=graph_outputs, label=label)


def _subgraph_refs(op: TFLOp) -> list[int]:
    """Return the two subgraph indices of a WHILE or IF operator's options ([] for other operators)."""
    if op.name not in CONTROL_FLOW or op.options is None:
        return []
    return [int(op.options.scalar(0, "<i", -1)), int(op.options.scalar(1, "<i", -1))]


def _read_reached(file: _File, main: TFLModel) -> None:
    """Read every subgraph the main one runs, transitively, into the shared ``subgraphs`` table.

    A depth-first walk: a reference to a subgraph on the current path is a cycle. Each subgraph
    is read once; its nesting height and expanded operator count are kept for later references.
    """
    source = file.source
    found = main.subgraphs
    found[main.index] = main
    height: dict[int, int] = {}
    expanded: dict[int, int] = {}
    path: list[int] = []

    def visit(sg: TFLModel, depth: int) -> None:
        path.append(sg.index)
        own_height, count = 0, len(sg.ops)
        for op in sg.ops:
            roles = CONTROL_FLOW.get(op.name)
            if roles is None:
                continue
            where = f"{source}: {sg.label}operator {op.index} {op.name}"
            if op.options is None:
                raise ModelFormatError(f"{where} has no options: which subgraphs it runs is not given")
            for role, ref in zip(roles, _subgraph_refs(op), strict=True):
                if not 0 <= ref < len(file.tables):
                    raise ModelFormatError(f"{where}: its {role} subgraph {ref} is not in the file "
                                           f"({len(file.tables)} subgraphs)")
                if ref in path:
                    raise ModelFormatError(f"{where}: its {role} subgraph {ref} runs subgraph {sg.index} again "
                                           f"(a cycle); control flow cannot recurse")
                if ref not in found:
                    if depth + 1 > MAX_NESTING:
                        raise ModelFormatError(f"{where}: subgraphs are nested more than {MAX_NESTING} deep")
                    found[ref] = _read_subgraph(file, ref, f"subgraph {ref} ")
                    visit(found[ref], depth + 1)
                if depth + 1 + height[ref] > MAX_NESTING:
                    raise ModelFormatError(f"{where}: subgraphs are nested more than {MAX_NESTING} deep")
                own_height = max(own_height, 1 + height[ref])
            first, second = (found[r] for r in _subgraph_refs(op))
            _check_arity(where, sg, op, first, second)
            count += (2 * expanded[first.index] if op.name == "WHILE" else expanded[first.index]) \
                + expanded[second.index]
            if count > MAX_EXPANDED_OPS:
                raise ModelFormatError(f"{where}: its subgraphs expand to more than {MAX_EXPANDED_OPS:,} operators")
        path.pop()
        height[sg.index] = own_height
        expanded[sg.index] = count

    visit(main, 0)


def _check_arity(where: str, sg: TFLModel, op: TFLOp, first: TFLModel, second: TFLModel) -> None:
    """Check that a WHILE's or IF's tensors match the inputs and outputs of the subgraphs it runs."""
    def types(model: TFLModel, indices: list[int]) -> list[str]:
        return [str(model.tensors[i].dtype) if i >= 0 else "none" for i in indices]

    if op.name == "WHILE":
        cond, body = first, second
        carried = types(sg, op.inputs)
        checks = [("its outputs", types(sg, op.outputs)),
                  (f"the cond subgraph {cond.index}'s inputs", types(cond, cond.graph_inputs)),
                  (f"the body subgraph {body.index}'s inputs", types(body, body.graph_inputs)),
                  (f"the body subgraph {body.index}'s outputs", types(body, body.graph_outputs))]
        if types(cond, cond.graph_outputs) != ["bool"]:
            raise ModelFormatError(f"{where}: the cond subgraph {cond.index} returns "
                                   f"{types(cond, cond.graph_outputs)}; it must return one bool")
        what = "its inputs"
    else:
        if not op.inputs or op.inputs[0] < 0:
            raise ModelFormatError(f"{where} has no condition input")
        carried = types(sg, op.inputs[1:])
        outs = types(sg, op.outputs)
        checks = [(f"the {role} subgraph {b.index}'s inputs", types(b, b.graph_inputs)) for role, b in
                  (("then", first), ("else", second))]
        for role, b in (("then", first), ("else", second)):
            if types(b, b.graph_outputs) != outs:
                raise ModelFormatError(f"{where}: its outputs are {outs} but the {role} subgraph {b.index} returns "
                                       f"{types(b, b.graph_outputs)}")
        what = "its inputs after the condition"
    for name, got in checks:
        if got != carried:
            raise ModelFormatError(f"{where}: {what} are {carried} but {name} are {got}")


def _named(indices: list[int], signature: dict[int, str], tensors: list[TFLTensor], source: str,
           what: str) -> dict[str, int]:
    """Return the subgraph's inputs or outputs by user-facing name (the signature's, else the tensor's)."""
    named: dict[str, int] = {}
    for i in indices:
        name = signature.get(i, tensors[i].name)
        if named.get(name, i) != i:
            raise ModelFormatError(f"{source}: two {what}s are named '{name}' (tensors {named[name]} and {i})")
        named[name] = i
    return named
