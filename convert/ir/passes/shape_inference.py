"""Shape inference that works beyond protobuf's 2 GiB limit.

onnx's C++ inference needs a ModelProto; weights over 1 KiB are left out of the proto handed to
it (they go in as typed inputs instead), so the proto stays small whatever the model's size.

Only the main graph's tensor values are updated, and only where inference knows more: types of
sequence/optional values are never overwritten, and outputs of control-flow nodes (If, Loop,
Scan) keep what they had, because onnx merges branch shapes unreliably.
"""

from __future__ import annotations

import logging

import onnx
import onnx_ir as _ir

from .base import Pass, PassResult

__all__ = ["InferShapes", "strict_inference_error", "weightless_proto"]

logger = logging.getLogger(__name__)

_BIG = 1024
_CONTROL_FLOW = {"If", "Loop", "Scan"}
_MAX_PROPAGATED = 1 << 16  # elements of an integer tensor that data propagation may hold
_INTEGER_TYPES = {onnx.TensorProto.INT32, onnx.TensorProto.INT64, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64,
                  onnx.TensorProto.INT16, onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.UINT16}
# Ops whose output size comes from their input values, not their input sizes.
_GROWING = {"Range", "ConstantOfShape", "Expand", "Tile", "OneHot", "Pad", "Resize", "Upsample", "CenterCropPad"}


def weightless_proto(model: _ir.Model) -> onnx.ModelProto:
    """Return ``model`` as a ModelProto whose weights over 1 KiB are typed graph inputs instead: what
    shape inference and a loader's checks need, without a byte of the weights (small constants, the
    shapes a Reshape reads, stay). ``model`` is left as it was."""
    graph = model.graph
    saved = []
    n_inputs = len(graph.inputs)
    for value in list(graph.initializers.values()):
        tensor = value.const_value
        if tensor is None or tensor.nbytes <= _BIG:
            continue
        if value.shape is None:
            value.shape = _ir.Shape(tensor.shape)
        if value.dtype is None:
            value.dtype = tensor.dtype
        saved.append((value, tensor))
        value.const_value = None
        graph.initializers.pop(value.name)
        if not value.is_graph_input():
            graph.inputs.append(value)
    try:
        return _ir.serde.serialize_model(model)
    finally:
        while len(graph.inputs) > n_inputs:  # pop(): slice deletion leaves values marked as inputs
            graph.inputs.pop()
        for value, tensor in saved:
            value.const_value = tensor
            graph.register_initializer(value)


def strict_inference_error(proto: onnx.ModelProto) -> str:
    """Return the first error onnx's shape inference finds in strict mode (sizes that contradict each
    other, an input of the wrong type: what ONNX Runtime refuses to load), or '' when there is none."""
    try:
        onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True, data_prop=False)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
        text = " ".join(str(exc).split())
        return text.removeprefix("[ShapeInferenceError] Inference error(s): ")
    return ""


def _infer(model: _ir.Model, data_prop: bool) -> onnx.ModelProto | None:
    proto = weightless_proto(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=False)
        if not data_prop or _static(inferred):  # data propagation could only add sizes that are missing
            return inferred
        too_big = _large_integer_value(inferred)
        if too_big:
            logger.debug("shape inference without data propagation: %s", too_big)
            return inferred
        return onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=True)
    except Exception as exc:  # inference is best effort: a model it cannot handle keeps its shapes
        logger.debug("shape inference failed: %s", exc)
        return None


def _static(proto: onnx.ModelProto) -> bool:
    """Whether inference gave every value of the main graph a tensor type with all its sizes."""
    graph = proto.graph
    inferred = {vi.name for vi in (*graph.value_info, *graph.output)
                if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")
                and all(d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)}
    return all(out in inferred for node in graph.node for out in node.output if out)


def _all_known(graph: _ir.Graph) -> bool:
    """Whether every value ``InferShapes`` would update already has a dtype and a static shape (a
    PyTorch capture's values all do): the ones it skips (control-flow outputs, values of another
    type) aside."""
    for node in graph:
        if node.op_type in _CONTROL_FLOW:
            continue
        for value in node.outputs:
            if value.type is not None and not isinstance(value.type, _ir.TensorType):
                continue
            if value.dtype is None or value.shape is None or not value.shape.is_static():
                return False
    return True


def _large_integer_value(proto: onnx.ModelProto) -> str:
    """Name an integer tensor too large for onnx's data propagation, or return ''.

    Data propagation keeps every element of an integer tensor as a shape dimension (about 150
    bytes each): a constant Range(0, 2**27) feeding an Add took 20 GiB and a minute. Shape
    tensors have a handful of elements, so propagation is skipped when an integer value has more
    than ``_MAX_PROPAGATED`` elements, or an unknown size and comes from an op that can make any
    size from small inputs.
    """
    producers = {out: node.op_type for node in proto.graph.node for out in node.output}
    graph = proto.graph
    for vi in [*graph.input, *graph.value_info, *graph.output]:
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or tt.elem_type not in _INTEGER_TYPES:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        known = tt.HasField("shape") and all(d is not None for d in dims)
        count = 1
        for d in dims:
            count *= d or 1
        if known and count > _MAX_PROPAGATED:
            return f"'{vi.name}' has {count:,} elements"
        if not known and producers.get(vi.name) in _GROWING:
            return f"'{vi.name}' ({producers[vi.name]}) has an unknown size"
    return ""


class InferShapes(Pass):
    """Fill in main-graph tensor types and shapes with onnx's shape inference."""

    def __init__(self, *, data_prop: bool = True) -> None:
        self.data_prop = data_prop

    def call(self, model: _ir.Model) -> PassResult:
        """Infer shapes of the values of ``model.graph`` in place."""
        if _all_known(model.graph):  # nothing inference could fill in: onnx is not asked (2-20 ms)
            return PassResult(model, False)
        inferred = _infer(model, self.data_prop)
        if inferred is None:
            return PassResult(model, False)
        known: dict[str, onnx.TypeProto] = {}
        for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
            known[vi.name] = vi.type
        modified = False
        for node in model.graph:
            if node.op_type in _CONTROL_FLOW:
                continue
            for value in node.outputs:
                t = known.get(value.name or "")
                if t is None or not t.HasField("tensor_type"):
                    continue
                if value.type is not None and not isinstance(value.type, _ir.TensorType):
                    continue
                tt = t.tensor_type
                if value.dtype is None and tt.elem_type:
                    value.dtype = _ir.DataType(tt.elem_type)
                    modified = True
                if tt.HasField("shape"):
                    dims = [d.dim_value if d.HasField("dim_value") else
                            _ir.SymbolicDim(d.dim_param or None) for d in tt.shape.dim]
                    shape = _ir.Shape(dims)
                    if value.shape != shape and (value.shape is None or not value.shape.is_static()):
                        value.shape = shape
                        modified = True
        return PassResult(model, modified)
