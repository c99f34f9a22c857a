"""Fold shape-only subgraphs into constants.

A node is folded when every input is a small constant (at most ``max_bytes``) or, for ``Shape``
and ``Size``, when its input's shape is fully static. Results larger than ``max_bytes`` are not
folded, so weight-sized arithmetic is never materialised here. The common ops are evaluated with
numpy (``fold_numpy``), the others with onnx's reference implementation, one node at a time.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx_ir as _ir

from ..tensors import from_array
from .base import Pass, PassResult
from .fold_numpy import fold_fast

__all__ = ["GROWING", "NEVER_FOLD", "FoldConstants", "FoldShapeChains", "replace_by_constants", "run_reference"]

logger = logging.getLogger(__name__)

# Ops whose value depends on more than their inputs, or that are too costly to evaluate here.
NEVER_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
          "Bernoulli", "If", "Loop", "Scan", "SequenceConstruct", "Dropout"}


# Ops whose output size comes from their input values (Range(0, 2**40) is 8 TiB from 24 bytes):
# folded only when shape inference gives their output size first, and it is within the bound.
GROWING = {"Range", "ConstantOfShape", "Expand", "Tile", "OneHot", "Pad", "Resize", "Upsample", "CenterCropPad",
           "MatMul", "Gemm", "Einsum", "EyeLike", "ConvTranspose"}


def _const(value: _ir.Value | None, max_bytes: int) -> np.ndarray | None:
    if value is None:
        return None
    tensor = value.const_value
    if tensor is None or tensor.nbytes > max_bytes:
        return None
    return tensor.numpy()


class FoldConstants(Pass):
    """Replace nodes computed from small constants and static shapes by initializers."""

    def __init__(self, *, max_bytes: int = 64 * 1024) -> None:
        self.max_bytes = max_bytes

    def call(self, model: _ir.Model) -> PassResult:
        """Fold in place; returns whether anything was folded."""
        graph = model.graph
        opset = graph.opset_imports.get("", 17)
        folded = 0
        for node in list(graph):
            if node.domain not in ("", "ai.onnx") or node.op_type in NEVER_FOLD:
                continue
            if any(o.is_graph_output() for o in node.outputs):
                continue
            results = self._evaluate(node, opset)
            if results is None:
                continue
            replace_by_constants(graph, node, [from_array(arr, name=(out.name or "folded") + "__c")
                                               for out, arr in zip(node.outputs, results, strict=True)])
            folded += 1
        if folded:
            logger.debug("folded %d constant nodes", folded)
        return PassResult(model, folded > 0)

    def _evaluate(self, node: _ir.Node, opset: int) -> list[np.ndarray] | None:
        if node.op_type in ("Shape", "Size"):
            inp = node.inputs[0]
            if inp is None or inp.shape is None or not inp.shape.is_static():
                return None
            dims = np.array([int(d) for d in inp.shape], dtype=np.int64)
            if node.op_type == "Size":
                return [np.array(int(np.prod(dims)), dtype=np.int64)]
            start = node.attributes.get_int("start", 0)
            end = node.attributes.get_int("end", None)
            return [dims[start:end] if end is not None else dims[start:]]
        if node.op_type == "Constant":
            value = node.attributes.get("value")
            if value is not None and value.type == _ir.AttributeType.TENSOR:
                tensor = value.as_tensor()
                return [tensor.numpy()] if tensor.nbytes <= self.max_bytes else None
            try:
                return run_reference(_ir.serde.serialize_node(node), len(node.outputs), [], opset)
            except Exception:
                return None
        arrays = []
        for inp in node.inputs:
            if inp is None:
                arrays.append(None)
                continue
            arr = _const(inp, self.max_bytes)
            if arr is None:
                return None
            arrays.append(arr)
        if not arrays:
            return None  # a source op (random, ...) that is not a Constant
        fast = fold_fast(node, arrays, self.max_bytes)  # the common ops, without onnx's reference (fold_numpy)
        if fast is not None:
            return fast if all(r.nbytes <= self.max_bytes for r in fast) else None
        size = _output_bytes(_ir.serde.serialize_node(node), len(node.outputs), arrays, opset)
        if (size is None and node.op_type in GROWING) or (size is not None and size > self.max_bytes):
            logger.debug("not folding %s: its output would take %s bytes", node.name, size)
            return None
        try:
            results = run_reference(_ir.serde.serialize_node(node), len(node.outputs), arrays, opset)
        except Exception as exc:  # the reference lacks the op or rejects it: leave it
            logger.debug("not folding %s: %s", node.name, exc)
            return None
        if any(r.nbytes > self.max_bytes or r.dtype == object for r in results):
            return None
        return results


def replace_by_constants(graph: _ir.Graph, node: _ir.Node, tensors: list[_ir.TensorProtocol]) -> None:
    """Replace ``node`` by one initializer per output, holding ``tensors`` (named after them)."""
    for out, tensor in zip(node.outputs, tensors, strict=True):
        const = _ir.Value(name=tensor.name, shape=_ir.Shape(tensor.shape), type=_ir.TensorType(tensor.dtype),
                          const_value=tensor)
        graph.register_initializer(const)
        _ir.convenience.replace_all_uses_with(out, const)
    graph.remove(node, safe=True)


def _output_bytes(proto: object, n_outputs: int, arrays: list[np.ndarray | None], opset: int) -> int | None:
    """Return the bytes the node's outputs would take, from shape inference on constant inputs; None if unknown."""
    import onnx
    from onnx import numpy_helper

    try:
        node = onnx.NodeProto()
        node.CopyFrom(proto)  # type: ignore[arg-type]
        in_names = [f"i{i}" if a is not None else "" for i, a in enumerate(arrays)]
        out_names = [f"o{i}" for i in range(n_outputs)]
        del node.input[:]
        node.input.extend(in_names)
        del node.output[:]
        node.output.extend(out_names)
        inits = [numpy_helper.from_array(a, n) for n, a in zip(in_names, arrays, strict=True) if a is not None]
        graph = onnx.helper.make_graph([node], "bound", [], [onnx.helper.make_empty_tensor_value_info(n)
                                                             for n in out_names], inits)
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:
        return None
    total = 0
    types = {vi.name: vi.type for vi in [*inferred.graph.output, *inferred.graph.value_info]}
    for name in out_names:
        t = types.get(name)
        if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
            return None
        count = 1
        for d in t.tensor_type.shape.dim:
            if not d.HasField("dim_value") or d.dim_value < 0:
                return None
            count *= d.dim_value
        try:
            itemsize = onnx.helper.tensor_dtype_to_np_dtype(t.tensor_type.elem_type).itemsize
        except Exception:
            itemsize = 8
        total += count * itemsize
    return total


def run_reference(proto: object, n_outputs: int, arrays: list[np.ndarray | None], opset: int) -> list[np.ndarray]:
    """Run one serialized node (a NodeProto) on ``arrays`` with onnx's reference implementation."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    node_proto = onnx.NodeProto()
    node_proto.CopyFrom(proto)  # type: ignore[arg-type]
    proto = node_proto
    in_names = [f"i{i}" if a is not None else "" for i, a in enumerate(arrays)]
    out_names = [f"o{i}" for i in range(n_outputs)]
    del proto.input[:]
    proto.input.extend(in_names)
    del proto.output[:]
    proto.output.extend(out_names)
    inputs = [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
              for n, a in zip(in_names, arrays, strict=True) if a is not None]
    outputs = [onnx.helper.make_empty_tensor_value_info(n) for n in out_names]
    graph = onnx.helper.make_graph([proto], "fold", inputs, outputs)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    feeds = {n: a for n, a in zip(in_names, arrays, strict=True) if a is not None}
    results = ReferenceEvaluator(model).run(None, feeds)
    return [np.asarray(r) for r in results]


class FoldShapeChains(Pass):
    """Fold shape computations that only become static once shapes are inferred, to a fixpoint.

    Exporters such as torch.onnx write ``chunk``/``split``/``view`` sizes as ``Shape -> Gather ->
    Div -> Slice`` chains. Folding one link makes the next value's shape static only after shape
    inference; so fold, drop what is dead, infer, and fold again while anything folds (at most
    ``rounds`` times). A graph with nothing left to fold costs one walk over its nodes.
    """

    def __init__(self, *, rounds: int = 16) -> None:
        self.rounds = rounds

    def call(self, model: _ir.Model) -> PassResult:
        """Fold and infer in place; returns whether anything was folded."""
        from .dce import EliminateDeadCode
        from .shape_inference import InferShapes

        modified = False
        for _ in range(self.rounds):
            if not FoldConstants()(model).modified:
                break
            modified = True
            EliminateDeadCode()(model)
            InferShapes()(model)
        return PassResult(model, modified)
