"""Half-precision ONNX: ``--precision fp16`` / ``bf16`` rewrite a float32 graph's compute and weights.

The rule (as torch's CUDA autocast draws it, applied to ONNX ops):

* **Kept in float32** (``FP32_OPS``): ops whose accuracy depends on a wide accumulator or a wide
  range: reductions (``ReduceSum``, ``ReduceMean``, ``CumSum``...), the normalisations
  (``LayerNormalization``, ``GroupNormalization``, ``InstanceNormalization``, an unfolded
  ``BatchNormalization``...), ``Softmax``/``LogSoftmax``, and exp/log/pow and their kin. Their
  float inputs are cast up to float32 and their weights stay float32; their outputs are float32
  and are cast down where a half op reads them.
* **Half** (everything else in the default ONNX domain): convolutions, matrix products and the
  element-wise ops between them. Their float32 weights are written in half (rounded to nearest;
  in fp16 clamped to +-65504, so a mask constant such as -3.4e38 stays finite and ``0 * mask`` is
  not NaN), and ops whose output type comes from an attribute (``Cast``, ``ConstantOfShape``,
  ``Constant``, ``EyeLike``, the random generators) produce half where they produced float32.
* **Kept in float32 too**: nodes a frontend marks ``ir.KEEP_FLOAT32`` because the source computes
  them in float32 whatever its dtype (a language model's rotary angles: position x frequency in
  half precision is off by whole radians past a few thousand tokens).
* **Untouched**: inputs whose type the op's schema does not tie to its output (``Resize``'s
  ``scales`` and ``roi``, ``Shape``'s input...), ops of other domains, and control flow
  (``If``/``Loop``/``Scan`` run in float32 with their bodies as written; half values they read
  are cast up before them).
* **Graph inputs and outputs** stay float32 (``keep_io_types``, the default): the file is a
  drop-in replacement for the float32 one. ``--half-io`` makes them half too.

Only float32 values change; float64, integer and boolean tensors are left as they are. Weights
are converted lazily (computed when written), so memory stays flat as for a float32 export; a
weight that can read its source in another dtype (``cast_to``, the ``hf`` route's slices of a
bf16 checkpoint) is read in half directly: a bf16 weight written as bf16 is copied, not converted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import onnx.defs

from convert import ir

__all__ = ["FP32_OPS", "PRECISIONS", "PRECISION_KEY", "lower_precision"]

logger = logging.getLogger(__name__)

FLOAT = ir.DataType.FLOAT
PRECISION_KEY = "convert:precision"
PRECISIONS = {"fp16": ir.DataType.FLOAT16, "bf16": ir.DataType.BFLOAT16}
FP16_MAX = 65504.0

#: Ops computed in float32 in a half-precision model (see the module docstring).
FP32_OPS = frozenset({
    # reductions and running sums: a half accumulator loses the small terms
    "ReduceSum", "ReduceSumSquare", "ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "CumSum",
    # normalisations: a mean and a variance over many elements
    "LayerNormalization", "GroupNormalization", "InstanceNormalization", "BatchNormalization",
    "LpNormalization", "MeanVarianceNormalization", "RMSNormalization", "SkipLayerNormalization",
    # exponentials and logarithms: a half range overflows at exp(11.1)
    "Softmax", "LogSoftmax", "Exp", "Log", "Pow", "Reciprocal", "Softplus",
    "Acos", "Asin", "Cosh", "Sinh", "Tan",
})

# Ops whose float output type is set by an attribute, and that attribute.
_TYPED_BY_ATTR = {"Cast": "to", "EyeLike": "dtype", "RandomNormal": "dtype", "RandomUniform": "dtype",
                  "RandomNormalLike": "dtype", "RandomUniformLike": "dtype", "Bernoulli": "dtype"}
_TENSOR_ATTR = {"Constant": "value", "ConstantOfShape": "value"}


def _schema(node: ir.Node, opset: int) -> onnx.defs.OpSchema | None:
    if node.domain not in ("", "ai.onnx"):
        return None
    try:
        return onnx.defs.get_schema(node.op_type, opset, "")
    except onnx.defs.SchemaError:
        return None


def _tied_inputs(schema: onnx.defs.OpSchema, n_inputs: int, n_outputs: int) -> tuple[set[int], set[int]]:
    """Return (inputs, outputs): the positions whose type variable is shared by an input and an
    output (``T`` in Add's ``(A: T, B: T) -> C: T``), i.e. computed in the op's own precision."""
    def formal(params: list[onnx.defs.OpSchema.FormalParameter], i: int) -> str:
        if not params:
            return ""
        p = params[min(i, len(params) - 1)]
        return p.type_str if i < len(params) or p.option == onnx.defs.OpSchema.FormalParameterOption.Variadic else ""

    in_types = [formal(schema.inputs, i) for i in range(n_inputs)]
    out_types = [formal(schema.outputs, i) for i in range(n_outputs)]
    variables = {c.type_param_str for c in schema.type_constraints}
    shared = {t for t in in_types if t in variables} & {t for t in out_types if t in variables}
    return ({i for i, t in enumerate(in_types) if t in shared}, {i for i, t in enumerate(out_types) if t in shared})


def _is_half_node(node: ir.Node, schema: onnx.defs.OpSchema | None, half: ir.DataType) -> bool:
    """Whether ``node`` computes in ``half``: a default-domain op outside ``FP32_OPS``, without
    subgraphs, whose schema admits ``half`` for the types it ties (ONNX's Conv has no bfloat16)."""
    if schema is None or node.op_type in FP32_OPS or node.metadata_props.get(ir.KEEP_FLOAT32):
        return False
    if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values()):
        return False
    name = "tensor(float16)" if half == ir.DataType.FLOAT16 else "tensor(bfloat16)"
    tied_in, _ = _tied_inputs(schema, len(node.inputs), len(node.outputs))
    variables = {schema.inputs[min(i, len(schema.inputs) - 1)].type_str for i in tied_in}
    return all(name in c.allowed_type_strs for c in schema.type_constraints if c.type_param_str in variables)


def _retype(value: ir.Value, dtype: ir.DataType) -> None:
    """Give ``value`` a type object of its own: frontends share one TensorType between values, and
    onnx_ir's ``dtype`` setter changes that object in place (every value holding it would follow)."""
    value.type = ir.TensorType(dtype)


def _half_array(array: np.ndarray, half: ir.DataType) -> np.ndarray:
    """Round float32 ``array`` to ``half`` (fp16: clamped to its finite range first)."""
    if half == ir.DataType.FLOAT16:
        return np.clip(array, -FP16_MAX, FP16_MAX).astype(np.float16)
    # ml_dtypes' bfloat16 (onnx_ir's numpy type for BFLOAT16): round to nearest even, NaN kept
    return np.asarray(array, dtype=np.float32).astype(half.numpy())


class _Rewriter:
    def __init__(self, model: ir.Model, half: ir.DataType, keep_io_types: bool) -> None:
        self.model = model
        self.graph = model.graph
        self.half = half
        self.keep_io = keep_io_types
        self.opset = int(model.graph.opset_imports.get("", 17))
        self.editor = ir.GraphEditor(self.graph)
        self.casts: dict[tuple[int, ir.DataType], ir.Value] = {}
        self.count = {"half": 0, "fp32": 0, "casts": 0, "weights": 0}
        self.decided: dict[int, bool] = {}

    # -- which uses want half ---------------------------------------------------------------
    def wants(self, node: ir.Node, index: int) -> ir.DataType | None:
        """The dtype ``node`` needs at input ``index`` if that input is float32 or half: half, float32,
        or None (take it as it is)."""
        if node.graph is not self.graph:
            return FLOAT  # a control-flow body reads the outer value as it was written
        schema = _schema(node, self.opset)
        if schema is None:
            return FLOAT  # another domain's op: as written
        if node.op_type in _TENSOR_ATTR or node.op_type in _TYPED_BY_ATTR:
            return None  # Cast reads any type; its output type is its attribute's
        tied, _ = _tied_inputs(schema, len(node.inputs), len(node.outputs))
        if index not in tied:
            fixed = schema.inputs[min(index, len(schema.inputs) - 1)].type_str
            return FLOAT if fixed == "tensor(float)" else None
        return self.half if self.is_half(node) else FLOAT

    def is_half(self, node: ir.Node) -> bool:
        """Whether ``node`` computes in half (``_is_half_node``), cached per node."""
        key = id(node)
        if key not in self.decided:
            self.decided[key] = _is_half_node(node, _schema(node, self.opset), self.half)
        return self.decided[key]

    # -- edits ------------------------------------------------------------------------------
    def cast(self, value: ir.Value, to: ir.DataType, before: ir.Node) -> ir.Value:
        key = (id(value), to)
        if key not in self.casts:
            base = f"{value.name or 'value'}_{'fp32' if to == FLOAT else to.name.lower()}"
            out = self.editor.node_before(before, "Cast", [value], {"to": to}, base=base)
            out.shape = value.shape
            _retype(out, to)
            self.casts[key] = out
            self.count["casts"] += 1
        return self.casts[key]

    def convert_weights(self) -> None:
        """Write in half the float32 initializers that only half uses read."""
        for name, value in list(self.graph.initializers.items()):
            if value.dtype != FLOAT or value.const_value is None or value.is_graph_input():
                continue
            uses = list(value.uses())
            if not uses or any(self.wants(u[0], u[1]) != self.half for u in uses):
                continue
            source = value.const_value
            half = self.half
            cast_to = getattr(source, "cast_to", None)  # a weight that reads its source in any dtype (hf)
            if callable(cast_to):
                value.const_value = cast_to(half)
                _retype(value, half)
                self.count["weights"] += 1
                continue

            def compute(source: ir.TensorProtocol = source, half: ir.DataType = half) -> np.ndarray:
                return _half_array(ir.to_numpy(source), half)

            value.const_value = ir.lazy(compute, half, [int(d) for d in source.shape], name=name)
            _retype(value, half)
            self.count["weights"] += 1

    def retype_attribute(self, node: ir.Node) -> None:
        """A ``Cast``/``ConstantOfShape``/... that makes float32 makes half instead."""
        key = _TYPED_BY_ATTR.get(node.op_type)
        if key is not None and key in node.attributes and node.attributes[key].value == FLOAT:
            node.attributes[key] = ir.Attr(key, ir.AttributeType.INT, int(self.half))
            for out in node.outputs:
                if out.dtype == FLOAT:
                    _retype(out, self.half)
            return
        key = _TENSOR_ATTR.get(node.op_type)
        if key is not None and key in node.attributes:
            tensor = node.attributes[key].value
            if getattr(tensor, "dtype", None) == FLOAT:
                arr = _half_array(ir.to_numpy(tensor), self.half)
                node.attributes[key] = ir.Attr(key, ir.AttributeType.TENSOR, ir.Tensor(arr, name=tensor.name))
                for out in node.outputs:
                    if out.dtype in (FLOAT, None):
                        _retype(out, self.half)

    def run(self) -> dict[str, int]:
        self.convert_weights()
        if not self.keep_io:
            for value in self.graph.inputs:
                if value.dtype == FLOAT:
                    _retype(value, self.half)
        for node in list(self.graph):
            half_node = node.graph is self.graph and self.is_half(node)
            for i, value in enumerate(node.inputs):
                if value is None or value.dtype not in (FLOAT, self.half):
                    continue
                want = self.wants(node, i)
                if want is not None and value.dtype != want:
                    node.replace_input_with(i, self.cast(value, want, node))
            self._cast_captured(node)
            if half_node and (node.op_type in _TYPED_BY_ATTR or node.op_type in _TENSOR_ATTR):
                self.retype_attribute(node)
            elif half_node:
                schema = _schema(node, self.opset)
                if schema is not None:
                    tied_in, tied_out = _tied_inputs(schema, len(node.inputs), len(node.outputs))
                    made_half = any(node.inputs[i] is not None and node.inputs[i].dtype == self.half
                                    for i in tied_in if i < len(node.inputs))
                    if made_half:
                        for i in tied_out:
                            if node.outputs[i].dtype == FLOAT:
                                _retype(node.outputs[i], self.half)
            self.count["half" if half_node else "fp32"] += 1
        self._restore_outputs()
        return self.count

    def _cast_captured(self, node: ir.Node) -> None:
        """Control flow reads outer values inside its bodies: those that became half are cast up
        before ``node`` and the bodies read the float32 copy."""
        for attr in node.attributes.values():
            graphs = [attr.value] if attr.type == ir.AttributeType.GRAPH else \
                list(attr.value) if attr.type == ir.AttributeType.GRAPHS else []
            for body in graphs:
                for inner in _all_nodes(body):
                    for i, value in enumerate(inner.inputs):
                        if value is not None and value.dtype == self.half and value.graph is self.graph:
                            inner.replace_input_with(i, self.cast(value, FLOAT, node))

    def _restore_outputs(self) -> None:
        """Graph outputs that became half are cast back to float32 (keep_io_types), keeping their names."""
        for i, value in enumerate(list(self.graph.outputs)):
            if value.dtype != self.half or not self.keep_io:
                continue
            name = value.name
            value.name = self.editor.fresh(f"{name}_{self.half.name.lower()}")
            out = ir.Value(name=name, shape=value.shape, type=ir.TensorType(FLOAT))
            node = ir.Node("", "Cast", [value], [ir.Attr("to", ir.AttributeType.INT, int(FLOAT))],
                           outputs=[out], name=f"{name}_to_fp32")
            self.graph.append(node)
            self.graph.outputs[i] = out
            self.count["casts"] += 1


def _all_nodes(graph: ir.Graph) -> list[ir.Node]:
    found = []
    for node in graph:
        found.append(node)
        for attr in node.attributes.values():
            graphs = [attr.value] if attr.type == ir.AttributeType.GRAPH else \
                list(attr.value) if attr.type == ir.AttributeType.GRAPHS else []
            for g in graphs:
                found.extend(_all_nodes(g))
    return found


def lower_precision(model: ir.Model, precision: str, *, keep_io_types: bool = True,
                    infer: Callable[[ir.Model], object] | None = None) -> dict[str, int]:
    """Rewrite ``model`` in place to compute in ``precision`` (``fp16`` or ``bf16``) by the rule above.

    Returns:
        Counts: ``half`` and ``fp32`` nodes, ``casts`` inserted, ``weights`` written in half.

    Raises:
        UsageError: an unknown precision.
    """
    if precision not in PRECISIONS:
        raise ir.UsageError(f"--precision {precision}: choose fp32, fp16 or bf16")
    if any(v.type is None for node in model.graph for v in node.outputs):
        (infer or ir.passes.InferShapes())(model)
    untyped = [v.name for node in model.graph for v in node.outputs if v.type is None and v.uses()]
    if untyped:
        raise ir.ExportError(f"--precision {precision}: the type of {len(untyped)} value(s) is unknown "
                             f"(first '{untyped[0]}'), so which are float32 cannot be told")
    counts = _Rewriter(model, PRECISIONS[precision], keep_io_types).run()
    # The parity check reads this back (``convert check`` on the file judges it as a half model).
    model.metadata_props[PRECISION_KEY] = precision
    logger.info("%s: %d nodes in half, %d in float32, %d casts, %d weights in half", precision,
                counts["half"], counts["fp32"], counts["casts"], counts["weights"])
    return counts
