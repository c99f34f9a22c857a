"""The graph IR: ONNX semantics on top of onnx_ir, behind a thin layer we own.

Only this package imports onnx_ir; the rest of the project uses the names re-exported here.
"""

from __future__ import annotations

from collections import Counter

from . import _sympy_later  # noqa: F401 - first of all: loads onnx-ir without importing sympy

# isort: split
import onnx_ir as _ir

from . import passes
from .builder import CANONICAL_OPSET, GraphBuilder, NameAuthority
from .context import FrontendContext
from .driver import GapCollector, InternalError, RefusedError, convert_all
from .edit import GraphEditor, replace_value
from .errors import (
    ConversionError,
    ConvertError,
    ExportError,
    ModelFormatError,
    PassError,
    Unsupported,
    UnsupportedOpsError,
    UsageError,
    printable,
    shown,
)
from .gcwindow import existing_objects_spared, sparing_existing_objects
from .given import refuse_contradicting_shape
from .io import from_proto, load_file, save_inline_streamed, save_model, serialize_inline
from .plugins import (
    EXAMPLE_FEEDS,
    FROZEN_DECISIONS,
    Diagnostics,
    ExporterSpec,
    ExportPlan,
    FrontendSpec,
    OpSupport,
    Options,
    OptionSpec,
    ProgressFn,
)
from .provenance import (
    INPUT_SHAPE_ORDER,
    KEEP_FLOAT32,
    Provenance,
    describe,
    get_provenance,
    output_key,
    set_output_of,
    set_provenance,
)
from .registry import Registry
from .tensors import (
    DataType,
    ExternalTensor,
    LazyTensor,
    Tensor,
    TensorProtocol,
    file_slice,
    from_array,
    is_file_slice,
    lazy,
    source_files,
    to_numpy,
    transposed,
)

Model = _ir.Model
Graph = _ir.Graph
Node = _ir.Node
Value = _ir.Value
Shape = _ir.Shape
SymbolicDim = _ir.SymbolicDim
TensorType = _ir.TensorType
Attr = _ir.Attr
AttributeType = _ir.AttributeType
serde = _ir.serde
convenience = _ir.convenience

__all__ = [
    "CANONICAL_OPSET",
    "EXAMPLE_FEEDS",
    "FROZEN_DECISIONS",
    "INPUT_SHAPE_ORDER",
    "KEEP_FLOAT32",
    "Attr",
    "AttributeType",
    "ConversionError",
    "ConvertError",
    "DataType",
    "Diagnostics",
    "ExportError",
    "ExportPlan",
    "ExporterSpec",
    "ExternalTensor",
    "FrontendContext",
    "FrontendSpec",
    "GapCollector",
    "Graph",
    "GraphBuilder",
    "GraphEditor",
    "InternalError",
    "LazyTensor",
    "Model",
    "ModelFormatError",
    "NameAuthority",
    "Node",
    "OpSupport",
    "OptionSpec",
    "Options",
    "PassError",
    "ProgressFn",
    "Provenance",
    "RefusedError",
    "Registry",
    "Shape",
    "SymbolicDim",
    "Tensor",
    "TensorProtocol",
    "TensorType",
    "Unsupported",
    "UnsupportedOpsError",
    "UsageError",
    "Value",
    "convenience",
    "convert_all",
    "describe",
    "existing_objects_spared",
    "file_slice",
    "from_array",
    "from_proto",
    "get_provenance",
    "is_file_slice",
    "lazy",
    "load_file",
    "model_stats",
    "output_key",
    "passes",
    "printable",
    "refuse_contradicting_shape",
    "replace_value",
    "save_inline_streamed",
    "save_model",
    "serde",
    "serialize_inline",
    "set_output_of",
    "set_provenance",
    "shown",
    "source_files",
    "sparing_existing_objects",
    "to_numpy",
    "transposed",
]


def model_stats(model: Model) -> dict[str, object]:
    """Return node count, op histogram, parameter count and bytes, without reading weights."""
    ops: Counter[str] = Counter()
    for node in model.graph.all_nodes():
        ops[f"{node.domain}::{node.op_type}" if node.domain else node.op_type] += 1
    params = 0
    nbytes = 0
    for value in model.graph.initializers.values():
        tensor = value.const_value
        if tensor is None:
            continue
        params += tensor.size
        nbytes += tensor.nbytes
    return {"nodes": sum(ops.values()), "ops": dict(ops), "params": params, "bytes": nbytes}
