"""Read a ``.tflite`` flatbuffer into plain records, without TensorFlow.

Field indices and enum values are those of TensorFlow Lite's public schema
(``tensorflow/compiler/mlir/lite/schema/schema.fbs``, file identifier ``TFL3``). Constant tensors
are not read: each keeps the position of its bytes in the file, and ``TFLModel.array`` returns a
NumPy view of the memory-mapped file (no copy) when a converter asks for the values.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from convert.ir import ModelFormatError, UsageError

from .flatbuf import Table, identifier, root

__all__ = ["BUILTIN_NAMES", "TFLModel", "TFLOp", "TFLQuant", "TFLTensor", "read_model"]

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
    63: "LESS_EQUAL", 64: "SELECT", 65: "SLICE", 66: "SIN", 67: "TRANSPOSE_CONV", 69: "TILE",
    70: "EXPAND_DIMS", 71: "EQUAL", 72: "NOT_EQUAL", 73: "LOG", 74: "SUM", 75: "SQRT", 76: "RSQRT",
    77: "SHAPE", 78: "POW", 79: "ARG_MIN", 81: "REDUCE_PROD", 82: "REDUCE_MAX", 83: "PACK", 88: "UNPACK",
    89: "REDUCE_MIN", 90: "FLOOR_DIV", 92: "SQUARE", 97: "RESIZE_NEAREST_NEIGHBOR", 98: "LEAKY_RELU",
    99: "SQUARED_DIFFERENCE", 100: "MIRROR_PAD", 101: "ABS", 102: "SPLIT_V", 106: "ADD_N", 108: "COS",
    111: "ELU", 114: "QUANTIZE", 116: "ROUND", 117: "HARD_SWISH", 118: "IF", 119: "WHILE", 123: "SELECT_V2",
    126: "BATCH_MATMUL", 128: "CUMSUM", 130: "BROADCAST_TO", 150: "GELU",
}

# Field indices of the schema's tables used here (declaration order, union types take a slot).
_MODEL_CODES, _MODEL_SUBGRAPHS, _MODEL_BUFFERS, _MODEL_SIGNATURES = 1, 2, 4, 7
_CODE_DEPRECATED, _CODE_CUSTOM, _CODE_VERSION, _CODE_BUILTIN = 0, 1, 2, 3
_SG_TENSORS, _SG_INPUTS, _SG_OUTPUTS, _SG_OPERATORS, _SG_NAME = 0, 1, 2, 3, 4
_T_SHAPE, _T_TYPE, _T_BUFFER, _T_NAME, _T_QUANT, _T_SPARSITY, _T_SIGNATURE = 0, 1, 2, 3, 4, 6, 7
_Q_SCALE, _Q_ZERO, _Q_DETAILS_TYPE, _Q_AXIS = 2, 3, 4, 6
_OP_CODE, _OP_INPUTS, _OP_OUTPUTS, _OP_OPTIONS = 0, 1, 2, 4
_BUF_DATA, _BUF_OFFSET, _BUF_SIZE = 0, 1, 2
_SIG_INPUTS, _SIG_OUTPUTS, _SIG_KEY, _SIG_SUBGRAPH = 0, 1, 2, 4
_MAP_NAME, _MAP_INDEX = 0, 1


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
    """The main subgraph of a ``.tflite`` file."""

    source: str
    path: Path
    tensors: list[TFLTensor]
    ops: list[TFLOp]
    inputs: dict[str, int] = field(default_factory=dict)  # user-facing name -> tensor index
    outputs: dict[str, int] = field(default_factory=dict)
    _map: mmap.mmap | None = None

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


def read_model(path: Path, signature: str | None = None) -> TFLModel:
    """Map ``path`` and read its main subgraph (or the subgraph of ``signature`` when given)."""
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
    sg = subgraphs[sg_index]
    size = len(view)
    tensors = []
    names_seen: set[str] = set()
    for i, t in enumerate(sg.tables(_SG_TENSORS, "Tensor")):
        name = t.string(_T_NAME) or f"tensor_{i}"
        if name in names_seen:
            name = f"{name}__{i}"
        names_seen.add(name)
        code = int(t.scalar(_T_TYPE, "<b"))
        if code not in _DTYPES:
            raise ModelFormatError(f"{source}: tensor '{name}' has TensorType {code}, which is not supported")
        if t.has(_T_SPARSITY):
            raise ModelFormatError(f"{source}: tensor '{name}' is sparse (densify it before converting)")
        shape = [int(d) for d in t.vector(_T_SHAPE, "<i4")]
        signature_shape = [int(d) for d in t.vector(_T_SIGNATURE, "<i4")]
        dims = tuple(None if s < 0 else int(d) for d, s in zip(shape, signature_shape, strict=True)) \
            if len(signature_shape) == len(shape) else tuple(shape)
        buf_index = int(t.scalar(_T_BUFFER, "<I"))
        span = None
        if buf_index:
            if buf_index >= len(buffers):
                raise ModelFormatError(f"{source}: tensor '{name}' refers to buffer {buf_index} of {len(buffers)}")
            span = _buffer_span(buffers[buf_index], size, source, buf_index)
        quant = _quant(t.table(_T_QUANT, "QuantizationParameters"), source, name)
        if quant is not None and quant.axis is not None and not (
                0 <= quant.axis < len(dims) and dims[quant.axis] == len(quant.scale)):
            raise ModelFormatError(f"{source}: tensor '{name}' of shape {list(dims)} has {len(quant.scale)} "
                                   f"scales along axis {quant.axis}")
        if any(d is not None and d < 0 for d in dims):
            raise ModelFormatError(f"{source}: tensor '{name}' has a negative dimension {list(dims)}")
        tensors.append(TFLTensor(i, name, dims, np.dtype(_DTYPES[code]), span, quant))
    ops = []
    for k, op in enumerate(sg.tables(_SG_OPERATORS, "Operator")):
        code = int(op.scalar(_OP_CODE, "<I"))
        if code >= len(codes):
            raise ModelFormatError(f"{source}: operator {k} refers to operator code {code} of {len(codes)}")
        ins = [int(x) for x in op.vector(_OP_INPUTS, "<i4")]
        outs = [int(x) for x in op.vector(_OP_OUTPUTS, "<i4")]
        for idx in ins + outs:
            if idx >= len(tensors) or idx < -1:
                raise ModelFormatError(f"{source}: operator {k} ({codes[code][0]}) refers to tensor {idx} "
                                       f"of {len(tensors)}")
        if -1 in outs:  # only an input may be left out
            raise ModelFormatError(f"{source}: operator {k} ({codes[code][0]}) has an output left out (-1)")
        ops.append(TFLOp(k, codes[code][0], codes[code][1], ins, outs, op.table(_OP_OPTIONS, "BuiltinOptions")))
    graph_inputs = [int(x) for x in sg.vector(_SG_INPUTS, "<i4")]
    graph_outputs = [int(x) for x in sg.vector(_SG_OUTPUTS, "<i4")]
    for idx in graph_inputs + graph_outputs:
        if not 0 <= idx < len(tensors):
            raise ModelFormatError(f"{source}: the subgraph's inputs/outputs refer to tensor {idx} of {len(tensors)}")
    computed = {idx for op in ops for idx in op.outputs}
    for idx in graph_outputs:
        if idx not in computed and idx not in graph_inputs and tensors[idx].span is None:
            raise ModelFormatError(f"{source}: output tensor '{tensors[idx].name}' is computed by no operator")
    by_index_in = {v: k for k, v in sig_inputs.items()}
    by_index_out = {v: k for k, v in sig_outputs.items()}
    inputs = _named(graph_inputs, by_index_in, tensors, source, "input")
    outputs = _named(graph_outputs, by_index_out, tensors, source, "output")
    both = sorted(set(inputs) & set(outputs))
    if both:
        raise ModelFormatError(f"{source}: '{both[0]}' names both an input and an output of the model")
    return TFLModel(source, path, tensors, ops, inputs, outputs, mapped)


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
