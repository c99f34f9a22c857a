"""Op converters keyed by TFLite's builtin operator names, and the option tables they read.

Most TFLite builtins are a TensorFlow op with its attributes moved into an options table; those
are converted by building that TensorFlow node and calling the TensorFlow frontend's converter
(same layout handling: NCHW inside). The ops with weights (CONV_2D, DEPTHWISE_CONV_2D,
TRANSPOSE_CONV, FULLY_CONNECTED) have their own converters so that int8 weights stay int8 in ONNX behind a
``DequantizeLinear`` (per channel). Fused activations are applied by the loader after the op.
Control flow (``WHILE``, ``IF``) is in ``controlflow.py``, the fused sequence ops (LSTM, RNN) in
``sequence.py``; both register into ``OPS`` when this module is imported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from convert.frontends.tensorflow.context import NCHW, TF, TFContext, nchw_axis
from convert.frontends.tensorflow.graph import TFNode
from convert.frontends.tensorflow.ops import OPS as TF_OPS
from convert.frontends.tensorflow.ops.math import binary_inputs
from convert.frontends.tensorflow.ops.nn import conv_pads, conv_transpose_pads, dilated_source
from convert.ir import DataType, ModelFormatError, RefusedError, Registry, Value
from convert.ir.tensors import lazy

if TYPE_CHECKING:
    from .model import TFLModel, TFLOp

__all__ = ["OPS", "OPTIONS", "SIGNATURES", "Converter", "QuantWeights", "Signature", "check_operator",
           "decode_options"]


class Converter(Protocol):
    """The signature of an op converter (``node.attrs`` holds the decoded options)."""

    def __call__(self, node: TFNode, ctx: TFContext) -> None: ...


class QuantWeights(Protocol):
    """What a weight converter needs from the loader: a constant's raw values and quantization."""

    def raw(self, key: str) -> tuple[np.ndarray, object] | None: ...


OPS: Registry[Converter] = Registry("tflite ops")

_B, _I, _F = "<b", "<i", "<f"
_PADDING = {0: "SAME", 1: "VALID"}
ACTIVATIONS = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH", 5: "SIGN_BIT"}

# Builtin options tables: field name, struct format, default (schema declaration order; a union
# type or a deprecated field keeps its slot, written as None).
OPTIONS: dict[str, list[tuple[str, str, object] | None]] = {
    "CONV_2D": [("padding", _B, 0), ("stride_w", _I, 1), ("stride_h", _I, 1), ("fused", _B, 0),
                ("dilation_w", _I, 1), ("dilation_h", _I, 1)],
    "DEPTHWISE_CONV_2D": [("padding", _B, 0), ("stride_w", _I, 1), ("stride_h", _I, 1), ("depth_multiplier", _I, 1),
                          ("fused", _B, 0), ("dilation_w", _I, 1), ("dilation_h", _I, 1)],
    "AVERAGE_POOL_2D": [("padding", _B, 0), ("stride_w", _I, 1), ("stride_h", _I, 1), ("filter_w", _I, 1),
                        ("filter_h", _I, 1), ("fused", _B, 0)],
    "FULLY_CONNECTED": [("fused", _B, 0), ("weights_format", _B, 0), ("keep_num_dims", "<?", False),
                        ("asymmetric_quantize_inputs", "<?", False)],
    "SOFTMAX": [("beta", _F, 0.0)],
    "CONCATENATION": [("axis", _I, 0), ("fused", _B, 0)],
    "ADD": [("fused", _B, 0)], "SUB": [("fused", _B, 0)], "MUL": [("fused", _B, 0)], "DIV": [("fused", _B, 0)],
    "RESHAPE": [],
    "MEAN": [("keep_dims", "<?", False)],
    "SQUEEZE": [],
    "STRIDED_SLICE": [("begin_mask", _I, 0), ("end_mask", _I, 0), ("ellipsis_mask", _I, 0),
                      ("new_axis_mask", _I, 0), ("shrink_axis_mask", _I, 0), ("offset", "<?", False)],
    "LEAKY_RELU": [("alpha", _F, 0.0)],
    "GATHER": [("axis", _I, 0), ("batch_dims", _I, 0)],
    "BATCH_MATMUL": [("adj_x", "<?", False), ("adj_y", "<?", False)],
    "PACK": [("values_count", _I, 0), ("axis", _I, 0)],
    "MIRROR_PAD": [("mode", _B, 0)],
    "GELU": [("approximate", "<?", False)],
    "SHAPE": [("out_type", _B, 2)],
    "TRANSPOSE_CONV": [("padding", _B, 0), ("stride_w", _I, 1), ("stride_h", _I, 1), ("fused", _B, 0)],
    "RESIZE_BILINEAR": [None, None, ("align_corners", "<?", False), ("half_pixel_centers", "<?", False)],
    "RESIZE_NEAREST_NEIGHBOR": [("align_corners", "<?", False), ("half_pixel_centers", "<?", False)],
    "DEPTH_TO_SPACE": [("block_size", _I, 0)],
    "SPACE_TO_DEPTH": [("block_size", _I, 0)],
    "SPLIT": [("num_splits", _I, 0)],
    "SPLIT_V": [("num_splits", _I, 0)],
    # the sequence ops' fused activation is the cell's (not applied to the output): "activation"
    "UNIDIRECTIONAL_SEQUENCE_LSTM": [("activation", _B, 0), ("cell_clip", _F, 0.0), ("proj_clip", _F, 0.0),
                                     ("time_major", "<?", False), ("asymmetric_quantize_inputs", "<?", False),
                                     ("diagonal_recurrent_tensors", "<?", False)],
    "BIDIRECTIONAL_SEQUENCE_LSTM": [("activation", _B, 0), ("cell_clip", _F, 0.0), ("proj_clip", _F, 0.0),
                                    ("merge_outputs", "<?", False), ("time_major", "<?", True),
                                    ("asymmetric_quantize_inputs", "<?", False)],
    "UNIDIRECTIONAL_SEQUENCE_RNN": [("time_major", "<?", False), ("activation", _B, 0),
                                    ("asymmetric_quantize_inputs", "<?", False)],
}
OPTIONS["MAX_POOL_2D"] = OPTIONS["AVERAGE_POOL_2D"]
for _reduce in ("SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD"):
    OPTIONS[_reduce] = OPTIONS["MEAN"]


# Options that TFLite's kernels divide by or count with: a file holding 0 or less is malformed.
_AT_LEAST_1 = ("stride_w", "stride_h", "dilation_w", "dilation_h", "filter_w", "filter_h", "depth_multiplier",
               "block_size")


@dataclass(frozen=True, slots=True)
class Signature:
    """The tensors an operator takes, as TFLite's kernel checks them (``tensorflow/lite/kernels``).

    Checked for every operator to convert before any converter runs (``check_operator``), so that a
    converter may index its inputs and read its weights' shapes.
    """

    inputs: int  # required inputs: a tensor each (not -1)
    optional: int = 0  # trailing inputs that may be absent or -1 (a bias)
    variadic: bool = False  # any number of inputs from ``inputs`` on (CONCATENATION, PACK, ADD_N)
    outputs: int | None = 1  # None: any number (SPLIT, WHILE, IF)
    ints: tuple[tuple[int, int], ...] = ()  # (input, most rank): integer tensors (axes, shapes, paddings)
    ranks: tuple[tuple[int, int], ...] = ()  # (input, rank): tensors of a fixed rank (images, filters)


_UNARY = Signature(1)
_BINARY = Signature(2)
_INTS_1 = Signature(2, ints=((1, 1),))  # axes, a shape, a permutation, a size
_POOL = Signature(1, ranks=((0, 4),))
_CONV = Signature(2, 1, ranks=((0, 4), (1, 4), (2, 1)))
SIGNATURES: dict[str, Signature] = {
    **dict.fromkeys(("ABS", "CEIL", "COS", "ELU", "EXP", "FLOOR", "LOG", "LOGISTIC", "NEG", "RELU", "RELU6",
                     "ROUND", "RSQRT", "SIN", "SQRT", "SQUARE", "TANH", "HARD_SWISH", "GELU", "LEAKY_RELU",
                     "CAST", "SOFTMAX", "LOG_SOFTMAX", "QUANTIZE", "DEQUANTIZE", "SHAPE", "SQUEEZE"), _UNARY),
    **dict.fromkeys(("DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "MAX_POOL_2D", "AVERAGE_POOL_2D"), _POOL),
    **dict.fromkeys(("ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "POW", "SQUARED_DIFFERENCE", "LESS",
                     "GREATER", "LESS_EQUAL", "GREATER_EQUAL", "EQUAL", "BATCH_MATMUL"), _BINARY),
    **dict.fromkeys(("MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "TRANSPOSE", "EXPAND_DIMS", "TILE",
                     "REVERSE_V2", "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"), _INTS_1),
    **dict.fromkeys(("CONCATENATION", "PACK", "ADD_N"), Signature(1, variadic=True)),
    **dict.fromkeys(("CONV_2D", "DEPTHWISE_CONV_2D"), _CONV),
    "PAD": Signature(2, 1, ints=((1, 2),)), "PADV2": Signature(2, 1, ints=((1, 2),)),
    "MIRROR_PAD": Signature(2, ints=((1, 2),)),
    "SELECT_V2": Signature(3), "SELECT": Signature(3),
    "GATHER": Signature(2, ints=((1, 8),)),
    "STRIDED_SLICE": Signature(4, ints=((1, 1), (2, 1), (3, 1))),
    "RESHAPE": Signature(1, 1, ints=((1, 1),)),
    "SPACE_TO_BATCH_ND": Signature(3, ints=((1, 1), (2, 2))),
    "BATCH_TO_SPACE_ND": Signature(3, ints=((1, 1), (2, 2))),
    "TRANSPOSE_CONV": Signature(3, 1, ints=((0, 1),), ranks=((1, 4), (2, 4), (3, 1))),
    "FULLY_CONNECTED": Signature(2, 1, ranks=((1, 2), (2, 1))),
    "LOGICAL_AND": _BINARY, "LOGICAL_OR": _BINARY, "LOGICAL_NOT": _UNARY,
    "SPLIT": Signature(2, ints=((0, 1),), outputs=None),
    "SPLIT_V": Signature(3, ints=((1, 1), (2, 1)), outputs=None),
    "SLICE": Signature(3, ints=((1, 1), (2, 1))),
    "WHILE": Signature(0, variadic=True, outputs=None),  # arities against the subgraphs: model.py
    "IF": Signature(1, variadic=True, outputs=None),
    # 20 inputs, 24 with layer norm; which of them may be absent: sequence.py
    "UNIDIRECTIONAL_SEQUENCE_LSTM": Signature(1, 23),
    "BIDIRECTIONAL_SEQUENCE_LSTM": Signature(1, 47, outputs=None),  # 48 inputs; 1 output merged, else 2
    "UNIDIRECTIONAL_SEQUENCE_RNN": Signature(5, ranks=((0, 3), (1, 2), (2, 2), (3, 1), (4, 2))),
}


def check_operator(model: TFLModel, op: TFLOp) -> None:
    """Check an operator against its ``Signature`` and its options against ``_AT_LEAST_1``.

    Raises:
        ModelFormatError: an input or output missing or too many, an integer input that is not, a
        tensor of another rank than the kernel takes, a stride, dilation or window below 1.
    """
    sig = SIGNATURES.get(op.name)
    if sig is None:  # no converter: reported as unsupported
        return
    out = model.tensors[op.outputs[0]].name if op.outputs else f"op{op.index}"
    where = f"{model.source}: operator {op.index} {op.name} (output '{out}')"
    n = len(op.inputs)
    most = None if sig.variadic else sig.inputs + sig.optional
    if n < sig.inputs or (most is not None and n > most):
        wanted = (f"at least {sig.inputs}" if most is None else
                  f"{sig.inputs}" if most == sig.inputs else f"{sig.inputs} to {most}")
        raise ModelFormatError(f"{where} has {n} inputs; it takes {wanted}")
    missing = [k for k in range(sig.inputs if most is not None else n) if op.inputs[k] < 0]
    if missing:
        raise ModelFormatError(f"{where}: input {missing[0]} is left out (-1); it is required")
    if sig.outputs is not None and len(op.outputs) != sig.outputs:
        raise ModelFormatError(f"{where} has {len(op.outputs)} outputs; it has {sig.outputs}")
    for k, most_rank in sig.ints:
        t = model.tensors[op.inputs[k]] if k < n and op.inputs[k] >= 0 else None
        if t is not None and (t.dtype.kind not in "iu" or len(t.shape) > most_rank):
            ranks = "0 or 1" if most_rank == 1 else f"at most {most_rank}"
            raise ModelFormatError(f"{where}: input {k} '{t.name}' is {t.dtype} {list(t.shape)}; it must be "
                                   f"an integer tensor of rank {ranks}")
    for k, rank in sig.ranks:
        t = model.tensors[op.inputs[k]] if k < n and op.inputs[k] >= 0 else None
        if t is not None and len(t.shape) != rank:
            raise ModelFormatError(f"{where}: input {k} '{t.name}' has shape {list(t.shape)}; it must be of "
                                   f"rank {rank}")
    for name, value in decode_options(op.name, op.options).items():
        if name in _AT_LEAST_1 and int(value) < 1:  # type: ignore[call-overload]
            raise ModelFormatError(f"{where}: option {name} is {value}; it must be at least 1")


def decode_options(op_name: str, table: object) -> dict[str, object]:
    """Return the options of an operator as a dict (defaults where the table leaves a field out)."""
    fields = OPTIONS.get(op_name, [])
    out: dict[str, object] = {}
    for index, spec in enumerate(fields):
        if spec is None:
            continue
        name, fmt, default = spec
        out[name] = table.scalar(index, fmt, default) if table is not None else default  # type: ignore[attr-defined]
    if op_name == "RESHAPE" and table is not None:
        out["new_shape"] = table.vector(0, "<i4")  # type: ignore[attr-defined]
    if op_name == "SQUEEZE" and table is not None:
        out["squeeze_dims"] = [int(d) for d in table.vector(0, "<i4")]  # type: ignore[attr-defined]
    if "padding" in out:
        out["padding"] = _PADDING.get(int(out["padding"]), "?")  # type: ignore[call-overload]
    if "fused" in out:
        out["fused"] = ACTIVATIONS.get(int(out["fused"]), "?")  # type: ignore[call-overload]
    return out


def register(*names: str, maps_to: str, notes: str = "") -> Callable[[Converter], Converter]:
    """Register a converter under every TFLite op name in ``names`` with its support-table row."""
    return OPS.register(*names, maps_to=maps_to, notes=notes)


def _tf_converter(tf_op: str) -> Converter:
    found = TF_OPS.lookup(tf_op)
    assert found is not None, f"the TensorFlow frontend has no {tf_op} converter"
    return found


def _as_tf(tf_op: str, attrs: Callable[[TFNode, TFContext], dict[str, object]] | None = None,
           extra: Callable[[TFNode, TFContext], list[str]] | None = None) -> Converter:
    """A converter that builds the TensorFlow node ``tf_op`` and runs the TensorFlow frontend's converter."""
    tf_convert = _tf_converter(tf_op)

    def convert(node: TFNode, ctx: TFContext) -> None:
        inputs = [n for n in node.inputs if n]
        if extra is not None:
            inputs += extra(node, ctx)
        tf_node = TFNode(node.name, tf_op, inputs, attrs(node, ctx) if attrs else dict(node.attrs),
                         node.shapes, node.dtypes)
        tf_convert(tf_node, ctx)

    convert.__doc__ = f"-> TensorFlow's {tf_op} converter."
    return convert


def _const_input(value: object, suffix: str) -> Callable[[TFNode, TFContext], list[str]]:
    """Return an ``extra`` that appends a constant input (a TF attribute TFLite keeps in options)."""
    def extra(node: TFNode, ctx: TFContext) -> list[str]:
        key = f"{node.name}/{suffix}"
        v = node.attrs[value] if isinstance(value, str) else value
        ctx.consts[key] = np.asarray(v, np.int32)
        return [key]

    return extra


_SAME_NAME = {
    "LOGISTIC": "Sigmoid", "TANH": "Tanh", "RELU": "Relu", "RELU6": "Relu6", "ELU": "Elu", "EXP": "Exp",
    "LOG": "Log", "SQRT": "Sqrt", "RSQRT": "Rsqrt", "NEG": "Neg", "ABS": "Abs", "SIN": "Sin", "COS": "Cos",
    "FLOOR": "Floor", "CEIL": "Ceil", "ROUND": "Round", "SQUARE": "Square",
    "ADD": "AddV2", "SUB": "Sub", "MUL": "Mul", "DIV": "RealDiv",
    "POW": "Pow", "SQUARED_DIFFERENCE": "SquaredDifference", "ADD_N": "AddN",
    "MEAN": "Mean", "SUM": "Sum", "REDUCE_MAX": "Max", "REDUCE_MIN": "Min", "REDUCE_PROD": "Prod",
    "PAD": "Pad", "PADV2": "PadV2", "TRANSPOSE": "Transpose", "EXPAND_DIMS": "ExpandDims",
    "SQUEEZE": "Squeeze", "STRIDED_SLICE": "StridedSlice", "LOG_SOFTMAX": "LogSoftmax", "PACK": "Pack",
    "TILE": "Tile", "REVERSE_V2": "ReverseV2", "LESS": "Less", "GREATER": "Greater", "LESS_EQUAL": "LessEqual",
    "GREATER_EQUAL": "GreaterEqual", "EQUAL": "Equal", "SELECT_V2": "SelectV2", "LOGICAL_AND": "LogicalAnd",
    "LOGICAL_OR": "LogicalOr",
}
for _name, _tf in _SAME_NAME.items():
    if _tf in TF_OPS:
        register(_name, maps_to=next(r.maps_to for r in TF_OPS.support() if r.op == _tf))(_as_tf(_tf))

register("LEAKY_RELU", maps_to="LeakyRelu")(_as_tf("LeakyRelu"))


@register("MAXIMUM", "MINIMUM", maps_to="Where(Greater / Less)",
          notes="a NaN first operand gives the second, as TFLite's kernel (a > b ? a : b)")
def maximum_minimum(node: TFNode, ctx: TFContext) -> None:
    """MAXIMUM / MINIMUM -> Where(a > b, a, b) / Where(a < b, a, b), TFLite's own rule: a NaN in the
    first operand gives the second (ONNX's Max and Min, and TensorFlow's, give NaN)."""
    (a, b), layout = binary_inputs(node, ctx, node.inputs[:2])
    test = ctx.emit("Greater" if node.op == "MAXIMUM" else "Less", [a, b])
    ctx.bind(ctx.emit("Where", [test, a, b]), layout)
register("BATCH_MATMUL", maps_to="MatMul", notes="adj_x/adj_y honoured")(_as_tf("BatchMatMulV2"))
register("MIRROR_PAD", maps_to="Pad", notes="REFLECT only")(
    _as_tf("MirrorPad", lambda n, c: {"mode": "REFLECT" if n.attrs.get("mode") == 0 else "SYMMETRIC"}))
register("RESIZE_BILINEAR", maps_to="Resize (linear)", notes="align_corners / half_pixel_centers / neither")(
    _as_tf("ResizeBilinear"))
register("RESIZE_NEAREST_NEIGHBOR", maps_to="Resize (nearest)", notes="align_corners / half_pixel_centers / neither")(
    _as_tf("ResizeNearestNeighbor"))
register("DEPTH_TO_SPACE", maps_to="DepthToSpace (DCR)", notes="TFLite's channel order is ONNX's DCR in NCHW")(
    _as_tf("DepthToSpace"))
register("SPACE_TO_DEPTH", maps_to="SpaceToDepth")(_as_tf("SpaceToDepth"))
register("SPACE_TO_BATCH_ND", maps_to="(dilation of the next Conv)",
         notes="only as a dilated convolution: SPACE_TO_BATCH_ND -> [EXPAND_DIMS ->] CONV_2D -> [RESHAPE ->] "
               "BATCH_TO_SPACE_ND (Keras' dilated Conv1D)")(_as_tf("SpaceToBatchND"))
register("BATCH_TO_SPACE_ND", maps_to="(crop of the dilated Conv)",
         notes="only after a convolution made dilated from SPACE_TO_BATCH_ND")(_as_tf("BatchToSpaceND"))
register("CONCATENATION", maps_to="Concat")(_as_tf("ConcatV2", extra=_const_input("axis", "axis")))
register("GATHER", maps_to="Gather", notes="batch_dims 0")(_as_tf("GatherV2", extra=_const_input("axis", "axis")))


@register("SELECT", maps_to="Where", notes="condition of the inputs' shape or broadcastable to it (Keras' "
          "Embedding writes it); a rank-1 condition choosing rows of higher-rank inputs is refused")
def select(node: TFNode, ctx: TFContext) -> None:
    """SELECT (TFLite's first select) -> SelectV2's converter where the two agree: the condition has
    the inputs' shape, or broadcasts to it as NumPy does. SELECT also lets a rank-1 condition pick
    whole rows of a higher-rank input (which NumPy would align with the last axis instead)."""
    rank_c, rank_x = ctx.rank(node.inputs[0]), ctx.rank(node.inputs[1])
    if rank_c is None or rank_x is None or (rank_c == 1 and rank_x > 1 and ctx.shape(node.inputs[0]) != (1,)):
        raise RefusedError("SELECT with a rank-1 condition choosing rows of a higher-rank input (or of unknown "
                           "rank) is not converted")
    _tf_converter("SelectV2")(TFNode(node.name, "SelectV2", list(node.inputs[:3]), {}, node.shapes, node.dtypes), ctx)


@register("RESHAPE", maps_to="Reshape", notes="shape input or new_shape option")
def reshape(node: TFNode, ctx: TFContext) -> None:
    """RESHAPE: the target from the second input, else the options' new_shape, else the static output shape."""
    inputs = [n for n in node.inputs if n]
    if len(inputs) < 2:
        key = f"{node.name}/shape"
        new_shape = node.attrs.get("new_shape")
        if new_shape is not None and len(new_shape):  # type: ignore[arg-type]
            ctx.consts[key] = np.asarray(new_shape, np.int32)
        inputs.append(key)  # not a constant: TensorFlow's Reshape converter takes the static output shape
    _tf_converter("Reshape")(TFNode(node.name, "Reshape", inputs[:2], {}, node.shapes, node.dtypes), ctx)


@register("SOFTMAX", maps_to="Softmax", notes="last axis; beta scales the logits")
def softmax(node: TFNode, ctx: TFContext) -> None:
    """SOFTMAX(beta) -> Softmax(beta * x) over the last axis."""
    x = ctx.get(node.inputs[0], TF)
    beta = float(node.attrs.get("beta", 1.0)) or 1.0  # type: ignore[arg-type]
    if beta != 1.0:
        x = ctx.emit("Mul", [x, ctx.builder.const(np.array(beta, np.float32))], suffix="beta")
    ctx.bind(ctx.emit("Softmax", [x], {"axis": -1}))


@register("HARD_SWISH", maps_to="HardSwish")
def hard_swish(node: TFNode, ctx: TFContext) -> None:
    """HARD_SWISH -> HardSwish (x * relu6(x + 3) / 6), in the input's layout."""
    x, layout = ctx.get_any(node.inputs[0])
    ctx.bind(ctx.emit("HardSwish", [x]), layout)


@register("GELU", maps_to="Gelu as Erf / Tanh formula", notes="approximate (tanh) or exact")
def gelu(node: TFNode, ctx: TFContext) -> None:
    """GELU: 0.5 x (1 + erf(x / sqrt 2)), or the tanh approximation, in the input's layout."""
    x, layout = ctx.get_any(node.inputs[0])
    b = ctx.builder

    def c(v: float) -> Value:
        return b.const(np.array(v, np.float32))

    if node.attrs.get("approximate"):
        cube = ctx.emit("Mul", [ctx.emit("Mul", [x, x]), x])
        inner = ctx.emit("Mul", [ctx.emit("Add", [x, ctx.emit("Mul", [cube, c(0.044715)])]),
                                 c(float(np.sqrt(2.0 / np.pi)))])
        t = ctx.emit("Tanh", [inner])
    else:
        t = ctx.emit("Erf", [ctx.emit("Mul", [x, c(float(1.0 / np.sqrt(2.0)))])])
    ctx.bind(ctx.emit("Mul", [ctx.emit("Mul", [x, c(0.5)]), ctx.emit("Add", [t, c(1.0)])]), layout)


def _pool(tf_op: str) -> Converter:
    def convert(node: TFNode, ctx: TFContext) -> None:
        a = node.attrs
        attrs = {"ksize": [1, a["filter_h"], a["filter_w"], 1], "strides": [1, a["stride_h"], a["stride_w"], 1],
                 "padding": a["padding"]}
        _tf_converter(tf_op)(TFNode(node.name, tf_op, node.inputs[:1], attrs, node.shapes, node.dtypes), ctx)

    convert.__doc__ = f"-> TensorFlow's {tf_op} converter."
    return convert


register("MAX_POOL_2D", maps_to="MaxPool", notes="SAME/VALID")(_pool("MaxPool"))
register("AVERAGE_POOL_2D", maps_to="AveragePool", notes="SAME/VALID; padding excluded from the count")(
    _pool("AvgPool"))


# -- ops with weights ----------------------------------------------------------------------------

def weight(ctx: TFContext, key: str, perm: tuple[int, ...] | None, what: str,
           reshape: tuple[int, ...] | None = None) -> Value:
    """Return a constant weight (permuted, reshaped) as a value: int8 ones stay int8 behind a DequantizeLinear.

    ``ctx.quant_consts[key]`` (set by the loader) holds ``(int array, TFLQuant)`` for a quantized
    constant; its channel axis follows the permutation.
    """
    raw = getattr(ctx, "quant_consts", {}).get(key)
    node = ctx.item
    name = f"{node.name if node else 'tflite'}/{what}"
    if raw is None:
        arr = ctx.need_const(key, f"the {what}")
        return _laid_out(ctx, arr, perm, reshape, np.dtype(np.float32), name)
    arr, quant = raw
    axis = quant.axis
    shape = _shape_after(arr.shape, perm, reshape)
    if perm is not None:
        axis = None if axis is None else perm.index(axis)
    if reshape is not None and axis is not None and _shape_after(arr.shape, perm, None)[axis] != shape[axis]:
        raise RefusedError(f"the {what}'s quantization axis does not survive the reshape")
    q = _laid_out(ctx, arr, perm, reshape, arr.dtype, name)
    zero_dtype = np.int32 if arr.dtype == np.int32 else arr.dtype
    scale = quant.scale if axis is not None else quant.scale.reshape(())
    zero = quant.zero_point.astype(zero_dtype)
    zero = zero if axis is not None else zero.reshape(())
    attrs = {"axis": int(axis)} if axis is not None else {}
    return ctx.emit("DequantizeLinear", [q, ctx.builder.const(scale.astype(np.float32), name=f"{name}_scale"),
                                         ctx.builder.const(zero, name=f"{name}_zero")], attrs, suffix=f"{what}_dq")


def _bias(node: TFNode, ctx: TFContext) -> Value | None:
    if len(node.inputs) < 3 or not node.inputs[2]:
        return None
    return weight(ctx, node.inputs[2], None, "bias")


# Weights above this size become initializers computed when the exporter writes them: until then
# they stay views of the mapped .tflite file (a transposed copy of every convolution's weight would
# otherwise be held for the whole conversion).
_DEFERRED_BYTES = 64 * 1024


def _shape_after(shape: tuple[int, ...], perm: tuple[int, ...] | None,
                 reshape: tuple[int, ...] | None) -> tuple[int, ...]:
    """The shape of an array of ``shape`` transposed by ``perm``, then reshaped to ``reshape``."""
    out = tuple(shape[p] for p in perm) if perm is not None else tuple(shape)
    if reshape is None:
        return out
    total = int(np.prod(out, dtype=np.int64))
    known = int(np.prod([d for d in reshape if d != -1], dtype=np.int64))
    return tuple(total // max(known, 1) if d == -1 else int(d) for d in reshape)


def _laid_out(ctx: TFContext, arr: np.ndarray, perm: tuple[int, ...] | None, reshape: tuple[int, ...] | None,
              dtype: np.dtype, name: str) -> Value:
    """``arr`` cast to ``dtype``, transposed and reshaped, as an initializer (computed on write when large)."""

    def make() -> np.ndarray:
        out = arr.astype(dtype) if arr.dtype != dtype else arr
        if perm is not None:
            out = out.transpose(perm)
        if reshape is not None:
            out = out.reshape(reshape)
        return np.ascontiguousarray(out)

    if arr.nbytes <= _DEFERRED_BYTES:
        return ctx.builder.const(make(), name=name)
    shape = _shape_after(arr.shape, perm, reshape)
    return ctx.builder.initializer(lazy(make, dtype, shape, name=name), name)


def _conv(node: TFNode, ctx: TFContext, w: Value, kernel: list[int], group: int) -> None:
    """Emit the Conv; a SPACE_TO_BATCH_ND input makes it dilated (see the TensorFlow frontend's
    ``dilated_source``; BATCH_TO_SPACE_ND's crops are then taken off its pads)."""
    a = node.attrs
    strides = [int(a["stride_h"]), int(a["stride_w"])]  # type: ignore[call-overload]
    dilations = [int(a["dilation_h"]), int(a["dilation_w"])]  # type: ignore[call-overload]
    bias = _bias(node, ctx)
    found = dilated_source(ctx, node.inputs[0], strides, dilations, str(a["padding"]))
    if found is not None:
        x, extra = found
        attrs = {"kernel_shape": kernel, "strides": strides, "group": group, **extra}
        y = ctx.emit("Conv", [x, w] + ([bias] if bias is not None else []), attrs)
        ctx.dilated[f"{node.name}:0"] = (y, list(extra["dilations"]), [0, 1])  # type: ignore[call-overload]
        ctx.bind(y, NCHW)
        return
    tf_like = TFNode(node.name, node.op, node.inputs, {"padding": a["padding"]}, node.shapes, node.dtypes)
    attrs = {"kernel_shape": kernel, "strides": strides, "dilations": dilations, "group": group,
             **conv_pads(tf_like, ctx, kernel, strides, dilations)}
    inputs = [ctx.get(node.inputs[0], NCHW), w] + ([bias] if bias is not None else [])
    ctx.bind(ctx.emit("Conv", inputs, attrs), NCHW)


def _shape_of(ctx: TFContext, key: str) -> tuple[int, ...]:
    raw = getattr(ctx, "quant_consts", {}).get(key)
    if raw is not None:
        return tuple(raw[0].shape)
    return tuple(ctx.need_const(key, "the filter").shape)


def is_hybrid(ctx: TFContext, node: TFNode) -> bool:
    """Whether ``node`` reads int8 weights (input 1) with a float activation (input 0): a dynamic-range
    quantized operator, which TFLite runs with a hybrid kernel (``hybrid.py``)."""
    low = getattr(ctx, "lowering", None)
    op = getattr(low, "current", None)
    raw = getattr(ctx, "quant_consts", {}).get(node.inputs[1]) if len(node.inputs) > 1 else None
    if low is None or op is None or raw is None or raw[0].dtype.kind not in "iu" or not op.inputs:
        return False
    x = low.model.tensors[op.inputs[0]]
    return x.dtype == np.float32 and x.quant is None


def _hybrid_conv(node: TFNode, ctx: TFContext, perm: tuple[int, ...], kernel: list[int], group: int,
                 order: str) -> None:
    """A dynamic-range quantized convolution as TFLite's hybrid kernel computes it (``hybrid.py``)."""
    from .hybrid import quantize_rows, rescale, weight_scales

    arr, quant = ctx.quant_consts[node.inputs[1]]  # type: ignore[attr-defined]
    if arr.dtype != np.int8:
        raise RefusedError(f"dynamic-range weights of type {arr.dtype} (TFLite's hybrid kernels take int8)")
    if node.inputs[0] in ctx.space_to_batch:
        raise RefusedError("a dilated convolution (SPACE_TO_BATCH_ND) with dynamic-range int8 weights: TFLite "
                           "quantizes each space-to-batch block on its own")
    a = node.attrs
    strides = [int(a["stride_h"]), int(a["stride_w"])]  # type: ignore[call-overload]
    dilations = [int(a["dilation_h"]), int(a["dilation_w"])]  # type: ignore[call-overload]
    tf_like = TFNode(node.name, node.op, node.inputs, {"padding": a["padding"]}, node.shapes, node.dtypes)
    attrs = {"kernel_shape": kernel, "strides": strides, "dilations": dilations, "group": group,
             **conv_pads(tf_like, ctx, kernel, strides, dilations)}
    x = ctx.get(node.inputs[0], NCHW)
    w = _laid_out(ctx, arr, perm, None, np.dtype(np.int8), f"{node.name}/weight")
    channels = _shape_after(arr.shape, perm, None)[0]
    # TFLite's per-channel kernels (every depthwise one) quantize the input asymmetrically, its
    # per-tensor convolution symmetrically (and folds the filter's scale into each row's)
    per_channel = order == "depthwise" or (quant.axis is not None and quant.scale.size > 1)
    q, scale, offset = quantize_rows(ctx, x, [1, 2, 3], asymmetric=per_channel)
    acc = ctx.emit("ConvInteger", [q, w], attrs, suffix="acc")
    if offset is not None:  # less the zero point times the weights inside the image (padding reads 0)
        def i64(v: int) -> Value:
            return ctx.builder.const(np.array([v], np.int64))

        chw = ctx.emit("Slice", [ctx.emit("Shape", [x]), i64(1), i64(4)])
        shape = ctx.emit("Concat", [i64(1), chw], {"axis": 0})
        ones = ctx.emit("Expand", [ctx.builder.const(np.array(1, np.int8)), shape])
        taps = ctx.emit("ConvInteger", [ones, w], attrs, suffix="taps")
        acc = ctx.emit("Sub", [acc, ctx.emit("Mul", [offset, taps])])
    scales = weight_scales(quant, channels, "filter")
    bias = None
    if len(node.inputs) > 2 and node.inputs[2]:
        bias = ctx.builder.const(ctx.need_const(node.inputs[2], "the bias").astype(np.float32).reshape(1, -1, 1, 1),
                                 name=f"{node.name}/bias")
    if per_channel:
        y = rescale(ctx, acc, scale, ctx.builder.const(scales.reshape(1, -1, 1, 1), name=f"{node.name}/scale"), bias,
                    order)
    else:  # acc * (input * filter) + bias
        y = rescale(ctx, acc, scale, ctx.builder.const(np.array(scales[0], np.float32)), bias, "dense")
    ctx.bind(y, NCHW)


@register("CONV_2D", maps_to="Conv / ConvInteger (dynamic range)",
          notes="OHWI filter; SAME/VALID; dilation; int8 filter via DequantizeLinear; int8 filter with float "
                "activations as TFLite's hybrid kernel")
def conv_2d(node: TFNode, ctx: TFContext) -> None:
    """CONV_2D -> Conv (NCHW); the OHWI filter becomes OIHW; groups when it has fewer input channels."""
    _, h, w_, i = _shape_of(ctx, node.inputs[1])
    x_shape = ctx.shape(node.inputs[0])
    group = 1
    if x_shape is not None and len(x_shape) == 4 and x_shape[3] is not None and int(x_shape[3]) != i:
        group = int(x_shape[3]) // i
    if is_hybrid(ctx, node):
        _hybrid_conv(node, ctx, (0, 3, 1, 2), [h, w_], group, "conv")
        return
    _conv(node, ctx, weight(ctx, node.inputs[1], (0, 3, 1, 2), "weight"), [h, w_], group)


@register("DEPTHWISE_CONV_2D", maps_to="Conv (group = in channels) / ConvInteger (dynamic range)",
          notes="[1, H, W, C*M] filter; SAME/VALID; dilation; int8 filter via DequantizeLinear; int8 filter "
                "with float activations as TFLite's hybrid kernel")
def depthwise_conv_2d(node: TFNode, ctx: TFContext) -> None:
    """DEPTHWISE_CONV_2D -> Conv with group = input channels; filter [1, H, W, C*M] -> [C*M, 1, H, W]."""
    _, h, w_, _ = _shape_of(ctx, node.inputs[1])
    x_shape = ctx.shape(node.inputs[0])
    if x_shape is None or len(x_shape) != 4 or x_shape[3] is None:
        raise RefusedError("a depthwise convolution needs the input's channel count")
    if is_hybrid(ctx, node):
        _hybrid_conv(node, ctx, (3, 0, 1, 2), [h, w_], int(x_shape[3]), "depthwise")
        return
    _conv(node, ctx, weight(ctx, node.inputs[1], (3, 0, 1, 2), "weight"), [h, w_], int(x_shape[3]))


@register("TRANSPOSE_CONV", maps_to="ConvTranspose",
          notes="[O, H, W, I] filter; SAME/VALID; static H and W; bias; int8 filter via DequantizeLinear")
def transpose_conv(node: TFNode, ctx: TFContext) -> None:
    """TRANSPOSE_CONV(output_shape, filter, x[, bias]) -> ConvTranspose; filter [O, H, W, I] -> [I, O, H, W].

    Pads and output_padding as the TensorFlow frontend's ``conv_transpose_pads`` (TFLite pads as
    the convolution whose gradient it is, as TensorFlow); the output size is the output tensor's
    static shape, else the constant output_shape.
    """
    _, h, w_, in_ch = _shape_of(ctx, node.inputs[1])
    x_name = node.inputs[2]
    in_shape = ctx.shape(x_name)
    sizes = ctx.const(node.inputs[0]) if node.inputs[0] else None
    out_shape = node.shapes[0] if node.shapes else None
    out_hw = ([int(out_shape[1]), int(out_shape[2])]  # type: ignore[arg-type]
              if out_shape is not None and len(out_shape) == 4 and None not in out_shape[1:3] else
              [int(v) for v in sizes.reshape(-1)[1:3]] if sizes is not None and sizes.size == 4 else None)
    if out_hw is None or in_shape is None or len(in_shape) != 4 or None in in_shape[1:3]:
        raise RefusedError("a transposed convolution needs static input and output heights and widths")
    if in_shape[3] is not None and int(in_shape[3]) != in_ch:
        raise RefusedError(f"the input has {in_shape[3]} channels but the filter {in_ch}")
    a = node.attrs
    strides = [int(a["stride_h"]), int(a["stride_w"])]  # type: ignore[call-overload]
    attrs = {"kernel_shape": [h, w_], "strides": strides,
             **conv_transpose_pads(str(a["padding"]), None, [int(in_shape[1]), int(in_shape[2])],  # type: ignore[arg-type]
                                   out_hw, [h, w_], strides, [1, 1])}
    inputs = [ctx.get(x_name, NCHW), weight(ctx, node.inputs[1], (3, 0, 1, 2), "weight")]
    if len(node.inputs) > 3 and node.inputs[3]:
        inputs.append(weight(ctx, node.inputs[3], None, "bias"))
    ctx.bind(ctx.emit("ConvTranspose", inputs, attrs), NCHW)


@register("FULLY_CONNECTED", maps_to="Gemm / MatMul + Add / 1x1 Conv / MatMulInteger (dynamic range)",
          notes="[O, I] weights; int8 weights via DequantizeLinear; on [N, H, W, C] a 1x1 Conv; int8 weights with "
                "float activations as TFLite's hybrid kernel")
def fully_connected(node: TFNode, ctx: TFContext) -> None:
    """FULLY_CONNECTED: x flattened to [-1, I] (unless keep_num_dims) times W^T plus bias; with
    keep_num_dims on a rank-4 input (Keras' Dense on [N, H, W, C]) a 1x1 Conv in NCHW."""
    if int(node.attrs.get("weights_format", 0)):  # type: ignore[call-overload]
        raise RefusedError("shuffled weights (SHUFFLED4x16INT8) are not supported")
    out_features, in_features = _shape_of(ctx, node.inputs[1])
    rank = ctx.rank(node.inputs[0])
    keep = bool(node.attrs.get("keep_num_dims", False))
    if is_hybrid(ctx, node):
        _hybrid_dense(node, ctx, rank, keep, out_features, in_features)
        return
    bias = _bias(node, ctx)
    if rank == 4 and keep:  # a 1x1 convolution, in NCHW next to its neighbours
        w = weight(ctx, node.inputs[1], None, "weight", reshape=(out_features, in_features, 1, 1))
        inputs = [ctx.get(node.inputs[0], NCHW), w] + ([bias] if bias is not None else [])
        ctx.bind(ctx.emit("Conv", inputs, {"kernel_shape": [1, 1]}), NCHW)
        return
    x = ctx.get(node.inputs[0], TF)
    if rank == 2 or not keep:
        if rank != 2:
            x = ctx.emit("Reshape", [x, ctx.builder.const(np.array([-1, in_features], np.int64))], suffix="flatten")
        w = weight(ctx, node.inputs[1], None, "weight")
        inputs = [x, w] + ([bias] if bias is not None else [])
        ctx.bind(ctx.emit("Gemm", inputs, {"transB": 1}))
        return
    w = weight(ctx, node.inputs[1], (1, 0), "weight")
    y = ctx.emit("MatMul", [x, w])
    if bias is not None:
        y = ctx.emit("Add", [y, bias])
    ctx.bind(y)


def _hybrid_dense(node: TFNode, ctx: TFContext, rank: int | None, keep: bool, out_features: int,
                  in_features: int) -> None:
    """A dynamic-range quantized FULLY_CONNECTED as TFLite's hybrid kernel computes it (``hybrid.py``):
    each row of ``in_features`` quantized on its own (per pixel on [N, H, W, C] with keep_num_dims)."""
    from .hybrid import quantize_rows, rescale, weight_scales

    arr, quant = ctx.quant_consts[node.inputs[1]]  # type: ignore[attr-defined]
    if arr.dtype != np.int8:
        raise RefusedError(f"dynamic-range weights of type {arr.dtype} (TFLite's hybrid kernels take int8)")
    asymmetric = bool(node.attrs.get("asymmetric_quantize_inputs", False))
    scales = weight_scales(quant, out_features, "weight")
    row_sums = arr.astype(np.int32).sum(axis=1, dtype=np.int64).astype(np.int32)  # each output's weights
    bias_arr = None
    if len(node.inputs) > 2 and node.inputs[2]:
        bias_arr = ctx.need_const(node.inputs[2], "the bias").astype(np.float32).reshape(-1)
    if rank == 4 and keep:  # a 1x1 convolution in NCHW, each pixel's channels a row
        x = ctx.get(node.inputs[0], NCHW)
        w = _laid_out(ctx, arr, None, (out_features, in_features, 1, 1), np.dtype(np.int8), f"{node.name}/weight")
        q, scale, offset = quantize_rows(ctx, x, [1], asymmetric=asymmetric)
        acc = ctx.emit("ConvInteger", [q, w], {"kernel_shape": [1, 1]}, suffix="acc")
        layout, channel_shape = NCHW, (1, -1, 1, 1)
    else:
        x = ctx.get(node.inputs[0], TF)
        if rank != 2 and not keep:
            x = ctx.emit("Reshape", [x, ctx.builder.const(np.array([-1, in_features], np.int64))], suffix="flatten")
        w = _laid_out(ctx, arr, (1, 0), None, np.dtype(np.int8), f"{node.name}/weight")
        q, scale, offset = quantize_rows(ctx, x, [-1], asymmetric=asymmetric)
        acc = ctx.emit("MatMulInteger", [q, w], suffix="acc")
        layout, channel_shape = TF, (-1,)
    if offset is not None:  # less the zero point times each output's weights
        sums = ctx.builder.const(row_sums.reshape(channel_shape), name=f"{node.name}/row_sums")
        acc = ctx.emit("Sub", [acc, ctx.emit("Mul", [offset, sums])])
    bias = None if bias_arr is None else ctx.builder.const(bias_arr.reshape(channel_shape), name=f"{node.name}/bias")
    y = rescale(ctx, acc, scale, ctx.builder.const(scales.reshape(channel_shape), name=f"{node.name}/scale"), bias,
                "dense")
    ctx.bind(y, layout)


@register("SHAPE", maps_to="Shape (+ Cast)", notes="TFLite's axes; out_type int32 or int64")
def shape(node: TFNode, ctx: TFContext) -> None:
    """SHAPE -> TensorFlow's Shape converter with the output type of the options."""
    out_type = np.dtype(np.int64) if node.attrs.get("out_type") == 4 else np.dtype(np.int32)
    _tf_converter("Shape")(TFNode(node.name, "Shape", node.inputs[:1], {"out_type": out_type}, node.shapes,
                                  node.dtypes), ctx)


# TFLite's CAST from float32 saturates to these integer types, and a NaN becomes the third number
# (its interpreter, default and reference kernels alike, TF 2.21); to int8 and int64 it is C's cast,
# as ONNX Runtime's and TensorFlow's (-3.7 to uint8: TFLite 0, a C cast 253).
_SATURATING_CASTS = {np.dtype(np.uint8): (0, 255, 0), np.dtype(np.int16): (-32768, 32767, 0),
                     np.dtype(np.int32): (-(2**31), 2**31 - 1, 2**31 - 1)}


@register("CAST", maps_to="Cast", notes="float32 to uint8, int16, int32 saturates (NaN: 0, 0, INT32_MAX), "
          "as TFLite's kernel")
def cast(node: TFNode, ctx: TFContext) -> None:
    """CAST -> Cast to the output tensor's type, in the input's layout; from float32 to uint8, int16
    or int32 clipped to the type's range first, a NaN replaced, as TFLite's kernel saturates."""
    x, layout = ctx.get_any(node.inputs[0])
    to = np.dtype(node.dtypes[0])
    onnx_to = DataType.from_numpy(to)
    if x.dtype != DataType.FLOAT or to not in _SATURATING_CASTS:
        ctx.bind(ctx.emit("Cast", [x], {"to": onnx_to}), layout)
        return
    lo, hi, nan_value = _SATURATING_CASTS[to]

    def f32(v: float) -> Value:
        return ctx.builder.const(np.array(v, np.float32))

    nan = ctx.emit("IsNaN", [x])
    if hi < 2**24:  # the bounds are float32 numbers: clip, then cast
        clipped = ctx.emit("Clip", [ctx.emit("Where", [nan, f32(nan_value), x]), f32(lo), f32(hi)])
        ctx.bind(ctx.emit("Cast", [clipped], {"to": onnx_to}), layout)
        return
    # int32: 2^31 - 1 is no float32; whatever is at least 2^31 (or NaN) takes the top value
    top = ctx.emit("Or", [nan, ctx.emit("GreaterOrEqual", [x, f32(2.0**31)])])
    y = ctx.emit("Cast", [ctx.emit("Max", [x, f32(float(lo))])], {"to": onnx_to})
    ctx.bind(ctx.emit("Where", [top, ctx.builder.const(np.array(nan_value, to)), y]), layout)


def _quantize(node: TFNode, ctx: TFContext) -> None:
    """QUANTIZE / DEQUANTIZE: see ``lower.quantize_op`` (it needs the quantization of both tensors)."""
    from .lower import quantize_op

    quantize_op(node, ctx)


register("QUANTIZE", maps_to="QuantizeLinear", notes="float -> int8/uint8, or a requantization")(_quantize)
register("DEQUANTIZE", maps_to="DequantizeLinear / Cast", notes="int8/uint8 -> float; float16 weights")(_quantize)


@register("LOGICAL_NOT", maps_to="Not")
def logical_not(node: TFNode, ctx: TFContext) -> None:
    """LOGICAL_NOT -> Not, in the input's layout."""
    x, layout = ctx.get_any(node.inputs[0])
    ctx.bind(ctx.emit("Not", [x]), layout)


def _split_axis(ctx: TFContext, key: str, x_key: str) -> tuple[int, int | None]:
    """The split axis (a constant, made non-negative) and the input's static size along it (or None)."""
    axis_arr = ctx.need_const(key, "the split axis")
    shape = ctx.shape(x_key)
    if axis_arr.size != 1 or shape is None:
        raise RefusedError("the split needs one axis and an input of known rank")
    axis = int(axis_arr.reshape(-1)[0])
    if not -len(shape) <= axis < len(shape):
        raise RefusedError(f"split axis {axis} is out of range for rank {len(shape)}")
    axis %= len(shape)
    return axis, shape[axis]


def _emit_split(node: TFNode, ctx: TFContext, x_key: str, axis: int, sizes: list[int]) -> None:
    if len(sizes) != len(node.shapes):
        raise RefusedError(f"it splits into {len(sizes)} parts but has {len(node.shapes)} outputs")
    if any(s < 0 for s in sizes):
        raise RefusedError(f"split sizes {sizes} are negative")
    x, layout = ctx.get_any(x_key)
    onnx_axis = nchw_axis(axis) if layout == NCHW else axis
    outs = ctx.emit_multi("Split", [x, ctx.builder.const(np.asarray(sizes, np.int64))], {"axis": onnx_axis},
                          outputs=len(sizes))
    for k, value in enumerate(outs):
        ctx.bind(value, layout, index=k)


@register("SPLIT", maps_to="Split", notes="equal parts; constant axis; static size along it")
def split(node: TFNode, ctx: TFContext) -> None:
    """SPLIT(axis, x) into num_splits equal parts -> Split with sizes (in the input's layout)."""
    axis, dim = _split_axis(ctx, node.inputs[0], node.inputs[1])
    n = int(node.attrs.get("num_splits", 0))  # type: ignore[call-overload]
    if n < 1 or dim is None or dim % n:
        raise RefusedError(f"cannot split a dimension of {dim if dim is not None else 'unknown'} size into "
                           f"{n} equal parts")
    _emit_split(node, ctx, node.inputs[1], axis, [dim // n] * n)


@register("SPLIT_V", maps_to="Split", notes="constant sizes (one may be -1) and axis")
def split_v(node: TFNode, ctx: TFContext) -> None:
    """SPLIT_V(x, size_splits, axis) -> Split with the sizes (a -1 takes the rest of a static dimension)."""
    axis, dim = _split_axis(ctx, node.inputs[2], node.inputs[0])
    sizes = [int(v) for v in ctx.need_const(node.inputs[1], "the split sizes").reshape(-1)]
    if sizes.count(-1) > 1:
        raise RefusedError(f"split sizes {sizes} have more than one -1")
    if -1 in sizes:
        if dim is None:
            raise RefusedError("a -1 split size needs a static size along the axis")
        sizes[sizes.index(-1)] = dim - (sum(sizes) + 1)
    if dim is not None and sum(sizes) != dim:
        raise RefusedError(f"split sizes {sizes} do not add up to the dimension's {dim}")
    _emit_split(node, ctx, node.inputs[0], axis, sizes)


@register("SLICE", maps_to="Slice", notes="begin and size (-1: to the end), constant or computed")
def slice_(node: TFNode, ctx: TFContext) -> None:
    """SLICE(x, begin, size) -> Slice(x, begin, begin + size or the end where size is -1) in TFLite's axes."""
    x_key, begin_key, size_key = node.inputs[:3]
    begin, size = ctx.const(begin_key), ctx.const(size_key)
    end_max = np.iinfo(np.int64).max
    if begin is not None and size is not None:
        begin = begin.reshape(-1).astype(np.int64)
        size = size.reshape(-1).astype(np.int64)
        if begin.shape != size.shape:
            raise RefusedError(f"begin has {begin.size} values but size {size.size}")
        end = np.where(size < 0, end_max, begin + size)
        data = ctx.const(x_key)
        if data is not None and data.ndim == begin.size:  # shape arithmetic: in NumPy
            ctx.bind_const(np.ascontiguousarray(data[tuple(slice(b, None if e == end_max else e)
                                                           for b, e in zip(begin, end, strict=True))]))
            return
        starts, ends = ctx.builder.const(begin), ctx.builder.const(end)
        axes = ctx.builder.const(np.arange(begin.size, dtype=np.int64))
    else:
        starts = ctx.emit("Cast", [ctx.get(begin_key, TF)], {"to": DataType.INT64}, suffix="begin")
        sizes = ctx.emit("Cast", [ctx.get(size_key, TF)], {"to": DataType.INT64}, suffix="size")
        to_end = ctx.emit("Less", [sizes, ctx.builder.const(np.array(0, np.int64))])
        ends = ctx.emit("Where", [to_end, ctx.builder.const(np.array(end_max, np.int64)),
                                  ctx.emit("Add", [starts, sizes])], suffix="end")
        rank = ctx.rank(x_key)
        if rank is None:
            raise RefusedError("a slice with computed bounds needs an input of known rank")
        axes = ctx.builder.const(np.arange(rank, dtype=np.int64))
    ctx.bind(ctx.emit("Slice", [ctx.get(x_key, TF), starts, ends, axes]))


from . import controlflow, sequence  # noqa: E402, F401  (they register into OPS)
