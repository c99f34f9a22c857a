"""Convert a ``.tflite`` file into the IR (NCHW inside), without TensorFlow.

Every TFLite tensor becomes a key of the TensorFlow frontend's context (``TFContext``), so layout
handling (NHWC in TFLite, NCHW in the IR, transposes only at the edges) is the TensorFlow
frontend's. Constants are NumPy views of the memory-mapped file until a converter reads them.

The main subgraph becomes the IR's graph; a subgraph that a WHILE or IF runs is converted by
``lower_subgraph`` (``controlflow.py``) with a context of its own, into whichever graph the builder
is filling (an ONNX ``Loop`` body, an ``If`` branch, or the enclosing graph for a loop's first
condition). Tensors cross a subgraph's boundary in TFLite's layout.

Quantized models (int8/uint8 activations, ``TensorType`` INT8/UINT8 with scale and zero point)
become ONNX's QDQ form: a quantized tensor stays int8/uint8 in ONNX; an op reading it reads a
``DequantizeLinear`` of it, computes in float, and its quantized output is a ``QuantizeLinear``
of the float result (after the fused activation). Weights of CONV_2D, DEPTHWISE_CONV_2D and
FULLY_CONNECTED stay int8 (per-channel ``DequantizeLinear``), their int32 biases too. ONNX
Runtime fuses these groups into its integer kernels (``QLinearConv``, ...). Other quantized
constants are dequantized in NumPy (``scale * (q - zero_point)`` in float32, as DequantizeLinear).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from convert.frontends.tensorflow.context import NCHW, TF, TO_NCHW, TO_TF, TFContext
from convert.frontends.tensorflow.graph import TFNode
from convert.ir import (
    DataType,
    GapCollector,
    GraphBuilder,
    Model,
    Options,
    RefusedError,
    Shape,
    SymbolicDim,
    TensorType,
    Unsupported,
    UsageError,
    Value,
    convert_all,
    shown,
)
from convert.ir.given import refuse_contradicting_shape

from .model import TFLModel, TFLOp, TFLQuant, TFLTensor, read_model

__all__ = ["check_support", "convert_model", "live_ops", "load", "lower_subgraph", "quantize_op", "reached", "read"]

_QUANT_TYPES = (np.dtype(np.int8), np.dtype(np.uint8))
_PASS_THROUGH = {"QUANTIZE", "DEQUANTIZE"}  # converters that handle quantized tensors themselves
_MAX_STATE = 1 << 24  # elements of a variable (state) tensor made zeros; a larger one is refused


def read(paths: Sequence[Path], options: Options) -> TFLModel:
    """Read the ``.tflite`` file named by ``paths``."""
    if len(paths) != 1:
        raise UsageError("tflite: give one .tflite file")
    sig = options.get("tflite_signature")
    return read_model(Path(paths[0]), str(sig) if sig else None)


def live_ops(model: TFLModel, ops: list[TFLOp] | None = None) -> list[TFLOp]:
    """Return the operators the outputs depend on, in order.

    A RESHAPE whose output shape is static (at most one free dimension) takes that shape, so the
    ops computing its target at run time (SHAPE -> STRIDED_SLICE -> PACK, as Keras' Flatten
    writes them) are not needed: converting them would force the tensor into TFLite's layout.
    Likewise a TRANSPOSE_CONV with a static output height and width does not read output_shape.
    """
    ops = model.ops if ops is None else ops
    producer = {t: op for op in ops for t in op.outputs}
    live: set[int] = set()
    stack = list(model.graph_outputs)
    while stack:
        op = producer.get(stack.pop())
        if op is None or op.index in live:
            continue
        live.add(op.index)
        inputs = [i for i in op.inputs if i >= 0]
        out_shape = model.tensors[op.outputs[0]].shape if op.outputs else None
        if op.name == "RESHAPE" and out_shape is not None and sum(d is None for d in out_shape) <= 1:
            inputs = inputs[:1]
        if op.name == "TRANSPOSE_CONV" and _static_hw(out_shape):
            inputs = inputs[1:]  # the output size is the output's static shape, not output_shape
        stack.extend(inputs)
    return [op for op in ops if op.index in live]


def _static_hw(shape: tuple[int | None, ...] | None) -> bool:
    return shape is not None and len(shape) == 4 and shape[1] is not None and shape[2] is not None


def fold_pointwise_dense(model: TFLModel, ops: list[TFLOp]) -> tuple[list[TFLOp], set[int]]:
    """Merge ``RESHAPE(x, [-1, C]) -> FULLY_CONNECTED -> RESHAPE([N, H, W, K])`` into one op.

    Keras' ``Dense`` on a rank-4 tensor (ConvNeXt's pointwise layers) is written this way when the
    batch is free. Flattening the leading axes, a matrix product per row and unflattening them again
    is a ``FULLY_CONNECTED`` with ``keep_num_dims`` on ``x`` itself, which the converter writes as
    a 1x1 convolution in NCHW, next to its neighbours, instead of two reshapes in TFLite's layout.
    The shapes decide: ``x`` is [N, H, W, C], the first reshape gives [M, C], the weight is [K, C]
    and the second reshape gives [N, H, W, K]; each intermediate tensor has one reader and is not
    an output. Returns the new op list and the indices of the merged FULLY_CONNECTED ops.
    """
    producer = {t: op for op in ops for t in op.outputs}
    readers: dict[int, int] = {}
    for op in ops:
        for i in op.inputs:
            readers[i] = readers.get(i, 0) + 1
    outputs = set(model.graph_outputs)
    replaced: dict[int, TFLOp] = {}
    dropped: set[int] = set()
    for outer in ops:
        fc = producer.get(outer.inputs[0]) if outer.name == "RESHAPE" and outer.inputs else None
        if fc is None or fc.name != "FULLY_CONNECTED" or len(fc.inputs) < 2 or len(fc.outputs) != 1:
            continue
        inner = producer.get(fc.inputs[0])
        if inner is None or inner.name != "RESHAPE" or not inner.inputs:
            continue
        x, flat, mid, out = (model.tensors[i] for i in (inner.inputs[0], inner.outputs[0], fc.outputs[0],
                                                          outer.outputs[0]))
        w = model.tensors[fc.inputs[1]]
        if len(x.shape) != 4 or len(flat.shape) != 2 or len(w.shape) != 2 or len(out.shape) != 4:
            continue
        n, h, wd, c = x.shape
        k = w.shape[0]
        # FULLY_CONNECTED reads its input as rows of C whatever the 2-D shape: [M, ?] is fine
        if c is None or h is None or wd is None or flat.shape[1] not in (c, None) or w.shape[1] != c \
                or out.shape != (n, h, wd, k) or mid.shape[-1] != k:
            continue
        if any(readers.get(t, 0) != 1 or t in outputs for t in (flat.index, mid.index)):
            continue
        if {inner.index, fc.index, outer.index} & (dropped | set(replaced)):
            continue  # already part of another match
        replaced[outer.index] = TFLOp(fc.index, fc.name, fc.version, [x.index, *fc.inputs[1:]], [out.index],
                                      fc.options)
        dropped |= {inner.index, fc.index}
    new_ops = [replaced.get(op.index, op) for op in ops if op.index not in dropped]
    return new_ops, {op.index for op in replaced.values()}


def reached(model: TFLModel) -> Iterator[tuple[TFLModel, list[TFLOp]]]:
    """Yield the main subgraph and each subgraph its live WHILE and IF operators run (once), with its live ops."""
    seen: set[int] = set()
    stack = [model]
    while stack:
        sg = stack.pop()
        if sg.index in seen:
            continue
        seen.add(sg.index)
        ops = live_ops(sg)
        yield sg, ops
        for op in reversed(ops):
            stack.extend(reversed(sg.runs(op)))


def _gaps(model: TFLModel) -> GapCollector:
    from .ops import OPS

    gaps = GapCollector()
    for sg, ops in reached(model):
        for op in ops:
            if op.name not in OPS:
                gaps.add(op.name, f"{model.source} {sg.label}operator {op.index} (output '{_out_name(sg, op)}')")
            for i in op.inputs + op.outputs:
                t = sg.tensors[i] if i >= 0 else None
                if t is not None and t.quant is not None and t.dtype == np.int16 and t.span is None:
                    gaps.add("int16 activations", f"{model.source} {sg.label}tensor '{t.name}'",
                             reason="16-bit quantized activations (ONNX QuantizeLinear needs opset 21)")
    return gaps


def _out_name(model: TFLModel, op: TFLOp) -> str:
    return model.tensors[op.outputs[0]].name if op.outputs else f"op{op.index}"


def check_support(paths: Sequence[Path], options: Options) -> list[Unsupported]:
    """Return every operator type of the model without a converter (with its count and first place)."""
    return _gaps(read(paths, options)).items()


def load(paths: Sequence[Path], options: Options) -> Model:
    """Convert a ``.tflite`` file into the IR (NCHW inside; see the module docstring)."""
    return convert_model(read(paths, options), options, name=Path(paths[0]).stem)


class _Lowering:
    """The state of one conversion: tensor keys, quantization, the TF context."""

    def __init__(self, model: TFLModel, ctx: TFContext) -> None:
        self.model = model
        self.ctx = ctx
        self.keys: dict[int, str] = {}
        self.current: TFLOp | None = None
        ctx.quant_consts = {}  # type: ignore[attr-defined]
        ctx.lowering = self  # type: ignore[attr-defined]

    def key(self, index: int) -> str:
        return self.keys[index]

    def is_quant_activation(self, t: TFLTensor) -> bool:
        return t.quant is not None and t.span is None and t.dtype in _QUANT_TYPES

    def add_const(self, t: TFLTensor) -> None:
        """Record a constant tensor: raw for int weights (the weight converters keep them int8)."""
        key = f"{t.name}:const"
        self.keys[t.index] = key
        arr = self.model.array(t)
        if t.quant is not None and arr.dtype.kind in "iu":
            self.ctx.quant_consts[key] = (arr, t.quant)  # type: ignore[attr-defined]
            self.ctx.consts[key] = _dequantize(arr, t.quant)  # for converters that read it as a value
        elif arr.dtype == np.float16:
            self.ctx.consts[key] = arr  # DEQUANTIZE turns it to float32
        else:
            self.ctx.consts[key] = arr
        self.ctx.shapes[key] = tuple(arr.shape)

    def float_input(self, index: int) -> str:
        """Return the key of tensor ``index`` as float: a DequantizeLinear of a quantized activation."""
        t = self.model.tensors[index]
        key = self.key(index)
        if not self.is_quant_activation(t):
            return key
        fkey = f"{key}/dq"
        ctx = self.ctx
        if key in ctx.space_to_batch:  # the dilation pattern's records (no value): the same for the float view
            ctx.space_to_batch[fkey] = ctx.space_to_batch[key]
            ctx.shapes[fkey] = ctx.shapes.get(key)
            return fkey
        if key in ctx.dilated:
            ctx.dilated[fkey] = ctx.dilated[key]
        if fkey not in self.ctx.values:
            value, layout = self.ctx.get_any_ncl(key)
            scale, zero = _qparams(self.ctx, t)
            dq = self.ctx.emit("DequantizeLinear", [value, scale, zero], suffix=f"{t.name}/dq")
            self.ctx.values[fkey] = {layout: dq}
            self.ctx.shapes[fkey] = self.ctx.shapes.get(key)
        return fkey

    def convert(self, stage: str) -> None:
        """Convert the subgraph's live operators (its inputs are keyed already)."""
        from .ops import OPS, decode_options

        model, ctx = self.model, self.ctx
        ops, merged = fold_pointwise_dense(model, live_ops(model))
        ops = live_ops(model, ops)  # the shape arithmetic of a merged reshape is no longer read
        produced = {i for op in ops for i in op.outputs}
        read = {i for op in ops for i in op.inputs}
        for t in model.tensors:
            if t.index in self.keys:
                continue
            if t.span is not None:
                self.add_const(t)
            elif t.variable and t.index in read and t.index not in produced and None not in t.shape \
                    and int(np.prod(t.shape, dtype=np.int64)) <= _MAX_STATE:
                key = f"{t.name}:state"  # a state tensor no operator writes first: zeros (a fresh interpreter)
                self.keys[t.index] = key
                ctx.consts[key] = np.zeros([int(d) for d in t.shape], t.dtype)  # type: ignore[misc]
        nodes: list[tuple[TFNode, TFLOp]] = []
        for op in ops:
            node_name = _out_name(model, op)
            for k, index in enumerate(op.outputs):
                self.keys[index] = f"{node_name}:{k}"
                ctx.shapes[f"{node_name}:{k}"] = model.tensors[index].shape
            attrs = decode_options(op.name, op.options)
            if op.index in merged:
                attrs["keep_num_dims"] = True
            node = TFNode(node_name, op.name, [], attrs,
                          [model.tensors[i].shape for i in op.outputs],
                          [model.tensors[i].dtype for i in op.outputs])
            nodes.append((node, op))
        for node, op in nodes:  # who reads each tensor (the dilated-convolution pattern checks it)
            for i in op.inputs:
                if i in self.keys:
                    ctx.consumers.setdefault(self.keys[i], []).append(node)
        convert_all(nodes, OPS, key=lambda item: item[1].name,
                    where=lambda item: f"{model.source} {model.label}operator {item[1].index} {item[1].name} "
                                       f"(output '{item[0].name}')",
                    call=self._run, options=ctx.options if stage else None, stage=stage)

    def _run(self, converter: object, item: tuple[TFNode, TFLOp]) -> None:
        node, op = item
        model, ctx = self.model, self.ctx
        ctx.item = node
        self.current = op
        if op.name in _PASS_THROUGH:
            converter(node, ctx)  # type: ignore[operator]
            return
        inputs = op.inputs[:1] if op.name == "RESHAPE" and any(
            i not in self.keys for i in op.inputs[1:] if i >= 0) else op.inputs  # a static target: see live_ops
        if op.name == "TRANSPOSE_CONV" and inputs and inputs[0] not in self.keys:
            inputs = [-1, *inputs[1:]]  # a static output size: output_shape is not converted (see live_ops)
        for i in inputs:
            if i >= 0 and i not in self.keys:
                raise RefusedError(f"input tensor '{model.tensors[i].name}' is used before it is produced")
        _refuse_other_hybrid(model, op)
        node.inputs = [self.float_input(i) if i >= 0 else "" for i in inputs]
        quantized_out = [model.tensors[i] for i in op.outputs if self.is_quant_activation(model.tensors[i])]
        if quantized_out:
            node.dtypes = [np.dtype(np.float32) for _ in op.outputs]
        converter(node, ctx)  # type: ignore[operator]
        _fused_activation(ctx, f"{node.name}:0", str(node.attrs.get("fused", "NONE")))
        for k, index in enumerate(op.outputs):
            t = model.tensors[index]
            if self.is_quant_activation(t):
                _quantize_output(ctx, f"{node.name}:{k}", t)


def _refuse_other_hybrid(model: TFLModel, op: TFLOp) -> None:
    """Refuse an operator that reads int8 weights with float activations (dynamic-range quantization)
    unless its hybrid kernel is written (``hybrid.HYBRID_OPS``): TFLite quantizes its input on the fly,
    which the float operator on dequantized weights does not reproduce."""
    from .hybrid import HYBRID_OPS

    if op.name in HYBRID_OPS or op.name in _PASS_THROUGH:
        return
    tensors = [model.tensors[i] for i in op.inputs if i >= 0]
    weights = [t for t in tensors if t.span is not None and t.quant is not None and t.dtype in _QUANT_TYPES]
    if weights and any(t.span is None and t.quant is None and t.dtype == np.float32 for t in tensors):
        raise RefusedError(f"int8 weights {shown(weights[0].name)} with float activations (dynamic-range quantization, "
                           "TFLiteConverter's Optimize.DEFAULT without a representative dataset): TFLite runs "
                           f"{op.name} with a hybrid kernel, which is converted for CONV_2D, DEPTHWISE_CONV_2D and "
                           "FULLY_CONNECTED only. Re-export without optimizations, or with a representative dataset "
                           "(full integer)")


def _dequantize(arr: np.ndarray, quant: TFLQuant) -> np.ndarray:
    shape = [1] * arr.ndim
    if quant.axis is not None and arr.ndim:
        shape[quant.axis] = -1
    scale = quant.scale.reshape(shape) if quant.axis is not None else quant.scale[0]
    zero = quant.zero_point.reshape(shape) if quant.axis is not None else quant.zero_point[0]
    return ((arr.astype(np.int64) - zero).astype(np.float32) * np.float32(scale)).astype(np.float32)


def _qparams(ctx: TFContext, t: TFLTensor) -> tuple[Value, Value]:
    q = t.quant
    assert q is not None
    if q.axis is not None and len(q.scale) > 1:
        raise RefusedError(f"tensor '{t.name}' is quantized per channel; only per-tensor activations are supported")
    scale = ctx.builder.const(np.array(q.scale[0], np.float32), name=f"{t.name}_scale")
    zero = ctx.builder.const(np.array(q.zero_point[0], t.dtype), name=f"{t.name}_zero")
    return scale, zero


_ACTIVATIONS = {"RELU": ("Relu", None), "RELU6": ("Clip", (0.0, 6.0)), "RELU_N1_TO_1": ("Clip", (-1.0, 1.0)),
                "TANH": ("Tanh", None)}


def _fused_activation(ctx: TFContext, key: str, fused: str) -> None:
    """Apply a fused activation to the op's (float) output 0, in each layout it is held."""
    if fused == "NONE":
        return
    if fused not in _ACTIVATIONS:
        raise RefusedError(f"fused activation {fused} is not supported")
    op_type, clip = _ACTIVATIONS[fused]
    held = ctx.values.get(key)
    if not held and key in ctx.space_to_batch:
        return  # SPACE_TO_BATCH_ND (and its EXPAND_DIMS) of the dilation pattern: recorded, not computed
    if not held:
        raise RefusedError("a fused activation on a constant result")
    for layout, value in list(held.items()):
        inputs = [value]
        if clip is not None:
            inputs += [ctx.builder.const(np.array(v, np.float32)) for v in clip]
        held[layout] = ctx.emit(op_type, inputs, suffix=fused.lower())


def _quantize_output(ctx: TFContext, key: str, t: TFLTensor) -> None:
    held = ctx.values.get(key)
    if not held and key in ctx.space_to_batch:
        return  # SPACE_TO_BATCH_ND (and its EXPAND_DIMS) of the dilation pattern: recorded, not computed
    if not held:
        raise RefusedError(f"quantized output '{t.name}' is a constant")
    scale, zero = _qparams(ctx, t)
    for layout, value in list(held.items()):
        held[layout] = ctx.emit("QuantizeLinear", [value, scale, zero], suffix=f"{t.name}/q")


def quantize_op(node: TFNode, ctx: TFContext) -> None:
    """QUANTIZE (float -> int, or a requantization int -> int) and DEQUANTIZE (int or float16 -> float32)."""
    low: _Lowering = ctx.lowering  # type: ignore[attr-defined]
    op = low.current
    src = low.model.tensors[op.inputs[0]]
    dst = low.model.tensors[op.outputs[0]]
    key = low.key(op.inputs[0])
    if op.name == "DEQUANTIZE":
        if src.span is not None:  # a constant: float16 or quantized weights, done in NumPy
            arr = ctx.consts[key]
            ctx.bind_const(arr.astype(np.float32))
            return
        x, layout = ctx.get_any(key)
        if src.quant is None:
            ctx.bind(ctx.emit("Cast", [x], {"to": DataType.FLOAT}), layout)
            return
        scale, zero = _qparams(ctx, src)
        ctx.bind(ctx.emit("DequantizeLinear", [x, scale, zero]), layout)
        return
    if dst.quant is None:
        raise RefusedError(f"QUANTIZE output '{dst.name}' has no quantization parameters")
    x, layout = ctx.get_any(low.float_input(op.inputs[0]))
    scale, zero = _qparams(ctx, dst)
    ctx.bind(ctx.emit("QuantizeLinear", [x, scale, zero]), layout)


def convert_model(model: TFLModel, options: Options, *, name: str = "tflite") -> Model:
    """Convert a read ``TFLModel`` into the IR (see ``load``)."""
    from .ops import check_operator

    _gaps(model).raise_if_any(model.source, hint="Run `convert ops tflite` for the supported list.")
    for sg, ops in reached(model):
        for op in ops:
            check_operator(sg, op)
    keep_nhwc = bool(options.get("keep_nhwc", False))
    builder = GraphBuilder(name, source=model.source)
    ctx = TFContext(builder, options)
    low = _Lowering(model, ctx)
    unknown = sorted(set(options.input_shapes) - set(model.inputs))
    if unknown:
        raise UsageError(f"--input-shape names {', '.join(repr(n) for n in unknown)}; the inputs of "
                         f"{model.source} are {', '.join(repr(n) for n in model.inputs)}")
    for user_name, index in model.inputs.items():
        t = model.tensors[index]
        key = f"{t.name}:input"
        low.keys[index] = key
        dims: list[int | str] = [("N" if i == 0 else f"{user_name}_dim{i}") if d is None else int(d)
                                 for i, d in enumerate(t.shape)]
        nchw = len(dims) == 4 and not keep_nhwc
        tfl_dims = dims
        if nchw:
            dims = [dims[p] for p in TO_NCHW]
        if user_name in options.input_shapes:
            # --input-shape is in the order the converted model declares (NCHW unless --keep-nhwc):
            # the shape `convert inspect` prints and the hints show; TFLite's is NHWC
            refuse_contradicting_shape(user_name, options.input_shapes[user_name], dims, source=str(model.source),
                                       order="NCHW: TFLite's NHWC transposed; --keep-nhwc keeps NHWC" if nchw else "")
            dims = list(options.input_shapes[user_name])
            tfl_dims = [dims[p] for p in TO_TF] if nchw and len(dims) == 4 else dims
        ctx.shapes[key] = tuple(int(d) if isinstance(d, int) else None for d in tfl_dims)
        value = builder.input(user_name, DataType.from_numpy(t.dtype), dims)
        ctx.values[key] = {NCHW if nchw else TF: value}
    low.convert("convert tflite ops")
    ctx.item = None
    for user_name, index in model.outputs.items():
        key = low.key(index)
        layout = NCHW if ctx.rank(key) == 4 and not keep_nhwc else TF
        out = builder.output(ctx.get(key, layout), user_name)
        shape = model.tensors[index].shape
        if out.shape is None and shape is not None:  # the file's shape, a free dim named (not ONNX's "unk__0")
            dims: list[int | str] = [("N" if i == 0 else f"{user_name}_dim{i}") if d is None else int(d)
                                     for i, d in enumerate(shape)]
            if layout == NCHW:
                dims = [dims[p] for p in TO_NCHW]
            out.shape = Shape([d if isinstance(d, int) else SymbolicDim(d) for d in dims])
            if out.type is None:  # unknown before inference only after a Loop or If
                out.type = TensorType(DataType.from_numpy(model.tensors[index].dtype))
    layout_note = "NHWC as in TFLite" if keep_nhwc else "NCHW (rank-4 inputs and outputs transposed)"
    options.diagnostics.note(f"tflite: image tensors are {layout_note}")
    return builder.build(doc=f"converted from TFLite {model.source}")


def lower_subgraph(parent: TFContext, sg: TFLModel, inputs: Sequence[Value]) -> list[Value]:
    """Convert subgraph ``sg`` into the graph the builder is filling; return its outputs.

    ``inputs`` (in TFLite's layout) are its inputs, in order; the outputs are in TFLite's layout
    too. The subgraph gets a context of its own, so no value or cached transpose of it is seen
    outside (where it would belong to another ONNX graph), nor any of the parent's inside.
    """
    ctx = TFContext(parent.builder, parent.options)
    low = _Lowering(sg, ctx)
    for index, value in zip(sg.graph_inputs, inputs, strict=True):
        t = sg.tensors[index]
        key = f"{t.name}:input"
        low.keys[index] = key
        ctx.shapes[key] = t.shape
        ctx.values[key] = {TF: value}
    low.convert("")
    ctx.item = None
    return [ctx.get(low.key(i), TF) for i in sg.graph_outputs]
