"""Read an ONNX file into the IR, external data included, without reading any weight.

The .onnx file is parsed without its external data; every external tensor then becomes a
lazy file slice. Before that, every external-data location is checked: absolute paths, paths
that leave the model's folder (``..`` or a symbolic link) and hard-linked data files are refused
with an error that says which tensor and why.
"""

from __future__ import annotations

import os
import stat as _stat
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from convert import ir
from convert.ir.errors import shown
from convert.ir.protocheck import non_text_field

__all__ = ["check_support", "read_onnx", "sniff"]

_MAX_OPSET = 2**31 - 1  # onnx.defs takes a C int
_MAX_NAME = 255  # bytes in one path component on every common file system
_ML_DOMAINS = {"", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training"}
# Domains ONNX Runtime implements beyond the standard: passed through unchanged.
_RUNTIME_DOMAINS = {"com.microsoft", "com.microsoft.nchwc", "com.ms.internal.nhwc"}


def sniff(path: Path) -> bool:
    """Return True when ``path`` starts like a serialized ModelProto (ir_version field first)."""
    try:
        with open(path, "rb") as f:
            head = f.read(2)
    except OSError:
        return False
    return len(head) == 2 and head[0] == 0x08 and 1 <= head[1] <= 20


def _load_proto(path: Path) -> onnx.ModelProto:
    if not path.exists():
        raise ir.UsageError(f"{path}: no such file")
    if path.is_dir():
        raise ir.UsageError(f"{path}: is a folder, expected an .onnx file")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise ir.ModelFormatError(
            f"{path.name}: not a valid ONNX model ({type(exc).__name__}: {str(exc).strip() or 'parse error'}). "
            "Is the file truncated, or another format?"
        ) from exc
    if proto.ir_version <= 0 or not proto.HasField("graph") or not proto.opset_import:
        raise ir.ModelFormatError(
            f"{path.name}: not an ONNX model (no ir_version, graph or opset_import). "
            "Is it truncated, or another format?"
        )
    bad = non_text_field(proto)
    if bad is not None:
        raise ir.ModelFormatError(f"{path.name}: the name or text at {bad} is not valid UTF-8. Is the file corrupt?")
    for opset in proto.opset_import:
        if not 1 <= opset.version <= _MAX_OPSET:
            raise ir.ModelFormatError(
                f"{path.name}: opset_import '{opset.domain or 'ai.onnx'}' has version {opset.version}, "
                f"outside 1..{_MAX_OPSET}. Is the file corrupt?"
            )
    return proto


def _tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _tensors(attr.g)
            for g in attr.graphs:
                yield from _tensors(g)


def _check_external(path: Path, proto: onnx.ModelProto) -> None:
    base = path.parent.resolve()
    sizes: dict[Path, int] = {}
    for tensor in _tensors(proto.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        where = f"{path.name}: tensor '{tensor.name}'"
        if not location:
            raise ir.ModelFormatError(f"{where} is external but names no location")
        if "\x00" in location or location.endswith(("/", "\\")) or any(
                len(part.encode()) > _MAX_NAME for part in Path(location).parts):
            raise ir.ModelFormatError(
                f"{where}: its external data location {location[:80]!r} is not a file name "
                "(a NUL byte, a trailing slash or a name over 255 bytes). Is the file corrupt?"
            )
        if os.path.isabs(location) or Path(location).is_absolute():
            raise ir.ModelFormatError(
                f"{where} points to the absolute path '{location}'; external data must be a path "
                "relative to the model's folder. Refused for safety."
            )
        target = (path.parent / location)
        normalized = Path(os.path.normpath(path.parent.absolute() / location))
        if base not in normalized.resolve().parents and normalized.resolve() != base:
            raise ir.ModelFormatError(
                f"{where} points to '{location}', outside the model's folder '{path.parent}'. "
                "Refused for safety: external data must stay beside the model."
            )
        try:
            stat = target.resolve().stat()
        except FileNotFoundError:
            raise ir.ModelFormatError(f"{where}: its external data file '{location}' does not exist") from None
        except OSError as exc:
            raise ir.ModelFormatError(f"{where}: cannot read its external data '{location}': {exc.strerror}") from exc
        if not _stat.S_ISREG(stat.st_mode):
            raise ir.ModelFormatError(
                f"{where}: its external data '{location}' is not a regular file (a FIFO, device or folder). Refused."
            )
        if stat.st_nlink > 1:
            raise ir.ModelFormatError(
                f"{where}: external data file '{location}' has {stat.st_nlink} hard links, which the "
                "IR refuses (a hard link can smuggle a file from outside the folder in). "
                f"Copy it to break the link: cp --remove-destination \"$(readlink -f {location})\" {location}"
            )
        try:
            offset = int(info.get("offset", 0) or 0)
            length = None if info.get("length") in (None, "") else int(info["length"])
        except ValueError:
            raise ir.ModelFormatError(
                f"{where}: external data offset/length must be integers, got "
                f"offset={info.get('offset')!r} length={info.get('length')!r}"
            ) from None
        if offset < 0 or (length is not None and length < 0):
            raise ir.ModelFormatError(f"{where}: negative external data offset/length ({offset}, {length})")
        size = sizes.setdefault(target, stat.st_size)
        need = _expected_bytes(tensor)
        if length is not None and need is not None and length != need:
            raise ir.ModelFormatError(
                f"{where}: its dims {list(tensor.dims)} need {need:,} bytes but its external data length is "
                f"{length:,}. Is the file corrupt?"
            )
        if length is None:
            length = need
        if length is not None and offset + length > size:
            raise ir.ModelFormatError(
                f"{where}: needs bytes {offset:,}..{offset + length:,} of '{location}', "
                f"which has only {size:,} bytes. Is the data file truncated?"
            )


# A sparse initializer is read as the dense tensor it stands for (as ONNX Runtime does): at most
# this many bytes, which one TensorProto can hold.
_DENSE_MAX = 2**31 - 1


def _densify(path: Path, graph: onnx.GraphProto) -> None:
    """Replace every sparse initializer of ``graph`` and its subgraphs by its dense initializer.

    A sparse tensor holds NNZ ``values`` (1-D), their ``indices`` (int64: NNZ linear positions, or
    NNZ x rank coordinates) and the dense ``dims``; every other element is 0.

    Raises:
        ModelFormatError: for a sparse tensor whose parts disagree (naming it and why), or one
            whose dense form would not fit one tensor.
    """
    from onnx import numpy_helper

    for sparse in graph.sparse_initializer:
        values, indices, dims = sparse.values, sparse.indices, [int(d) for d in sparse.dims]
        where = f"{path.name}: sparse initializer '{values.name}'"
        if values.data_location == onnx.TensorProto.EXTERNAL or indices.data_location == onnx.TensorProto.EXTERNAL:
            raise ir.ModelFormatError(f"{where} keeps its values or indices in external data, which is not read "
                                      "for sparse tensors; store it dense")
        if any(d < 0 for d in dims):
            raise ir.ModelFormatError(f"{where} has a negative dimension {dims}. Is the file corrupt?")
        try:
            vals = numpy_helper.to_array(values)
            idx = numpy_helper.to_array(indices)
        except (ValueError, TypeError, KeyError) as exc:
            raise ir.ModelFormatError(f"{where}: its values or indices cannot be read ({exc}). "
                                      "Is the file corrupt?") from exc
        count = 1
        for d in dims:
            count *= d
        nbytes = count * vals.dtype.itemsize
        if nbytes > _DENSE_MAX:
            raise ir.ModelFormatError(f"{where}: dense, its dims {dims} take {nbytes / 2**30:.1f} GiB, more than one "
                                      "tensor holds; store it dense with external data")
        nnz = vals.size
        if vals.ndim != 1 or idx.dtype != np.int64 or not (
                (idx.ndim == 1 and idx.size == nnz) or (idx.ndim == 2 and idx.shape == (nnz, len(dims)))):
            raise ir.ModelFormatError(
                f"{where}: {vals.size} values of dims {list(vals.shape)} with int64 indices of dims "
                f"{list(idx.shape)} (of type {idx.dtype}); ONNX wants 1-D values and [NNZ] or [NNZ, {len(dims)}] "
                "int64 indices. Is the file corrupt?")
        if idx.ndim == 2:
            if nnz and ((idx < 0).any() or (idx >= np.asarray(dims, np.int64)).any()):
                raise ir.ModelFormatError(f"{where}: an index lies outside its dims {dims}. Is the file corrupt?")
            flat = np.ravel_multi_index(tuple(idx.T), dims) if nnz else np.zeros(0, np.int64)
        else:
            flat = idx
            if nnz and (int(flat.min()) < 0 or int(flat.max()) >= count):
                raise ir.ModelFormatError(f"{where}: an index lies outside its {count} elements. Is the file corrupt?")
        if np.unique(flat).size != flat.size:
            raise ir.ModelFormatError(f"{where}: an index appears twice, so the element's value is not one. "
                                      "Is the file corrupt?")
        dense = np.zeros(count, dtype=vals.dtype)
        dense[flat] = vals
        graph.initializer.append(numpy_helper.from_array(dense.reshape(dims), name=values.name))
    del graph.sparse_initializer[:]
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                _densify(path, sub)


def _expected_bytes(tensor: onnx.TensorProto) -> int | None:
    """Bytes the tensor's dims need in raw form (packed 4-bit types included); None for strings."""
    try:
        bits = ir.DataType(tensor.data_type).bitwidth
    except (ValueError, TypeError):  # STRING, UNDEFINED, or a type this onnx_ir does not know
        return None
    count = 1
    for d in tensor.dims:
        count *= d
    return (count * bits + 7) // 8


_DATA_TYPES = {v for v in onnx.TensorProto.DataType.values() if v != onnx.TensorProto.UNDEFINED}


def _check_tensors(path: Path, proto: onnx.ModelProto) -> None:
    """Refuse tensors whose dims are negative or disagree with their stored bytes."""
    for tensor in _tensors(proto.graph):
        where = f"{path.name}: tensor '{tensor.name}'"
        if any(d < 0 for d in tensor.dims):
            raise ir.ModelFormatError(f"{where} has a negative dimension {list(tensor.dims)}. Is the file corrupt?")
        if tensor.data_type not in _DATA_TYPES:
            raise ir.ModelFormatError(
                f"{where} has data type {tensor.data_type}, which is not an ONNX tensor type. Is the file corrupt?"
            )
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            continue
        if not tensor.HasField("raw_data"):
            _check_typed_data(where, tensor)
            continue
        need = _expected_bytes(tensor)
        if need is not None and need != len(tensor.raw_data):
            raise ir.ModelFormatError(
                f"{where}: its dims {list(tensor.dims)} need {need:,} bytes but it stores "
                f"{len(tensor.raw_data):,}. Is the file corrupt?"
            )


_T = onnx.TensorProto
# The typed field holding one value per element, for the types stored that way (not raw_data).
_TYPED_FIELDS = {
    _T.FLOAT: "float_data", _T.DOUBLE: "double_data", _T.INT64: "int64_data", _T.STRING: "string_data",
    _T.UINT32: "uint64_data", _T.UINT64: "uint64_data", _T.INT32: "int32_data", _T.INT16: "int32_data",
    _T.INT8: "int32_data", _T.UINT16: "int32_data", _T.UINT8: "int32_data", _T.BOOL: "int32_data",
    _T.FLOAT16: "int32_data", _T.BFLOAT16: "int32_data",
}
_ANY_TYPED = ("float_data", "double_data", "int32_data", "int64_data", "uint64_data", "string_data")


# Complex numbers are stored as two values each (real, imaginary) in these fields.
_COMPLEX_FIELDS = {_T.COMPLEX64: "float_data", _T.COMPLEX128: "double_data"}


def _check_typed_data(where: str, tensor: onnx.TensorProto) -> None:
    """Refuse a tensor kept in typed fields whose value count disagrees with its dims (an empty one too)."""
    count = 1
    for d in tensor.dims:
        count *= d
    if tensor.data_type in _COMPLEX_FIELDS:  # a COMPLEX128 in int64_data reached onnx_ir's AssertionError
        field = _COMPLEX_FIELDS[tensor.data_type]
        stored = len(getattr(tensor, field))
        if stored != 2 * count or any(len(getattr(tensor, f)) for f in _ANY_TYPED if f != field):
            raise ir.ModelFormatError(
                f"{where}: its dims {list(tensor.dims)} need {count:,} complex values ({2 * count:,} in {field}) "
                f"but it stores {stored:,} there. Is the file corrupt?"
            )
        return
    field = _TYPED_FIELDS.get(tensor.data_type)
    stored = len(getattr(tensor, field)) if field else sum(len(getattr(tensor, f)) for f in _ANY_TYPED)
    if (field and stored != count) or (not field and count and not stored):
        raise ir.ModelFormatError(
            f"{where}: its dims {list(tensor.dims)} need {count:,} values but it stores {stored:,}. "
            "Is the file corrupt?"
        )


def _node_label(node: onnx.NodeProto) -> str:
    return f"node {shown(node.name or (node.output[0] if node.output else '?'))} ({shown(node.op_type)[1:-1]})"


# Attribute types whose value is one message: an attribute of that type without it is corrupt.
_MESSAGE_ATTRIBUTES = {onnx.AttributeProto.TENSOR: "t", onnx.AttributeProto.GRAPH: "g",
                       onnx.AttributeProto.SPARSE_TENSOR: "sparse_tensor", onnx.AttributeProto.TYPE_PROTO: "tp"}
_ATTRIBUTE_TYPES = frozenset(v for k, v in onnx.AttributeProto.AttributeType.items() if k != "UNDEFINED")


def _check_acyclic(where: str, graph: onnx.GraphProto) -> None:
    """Refuse a graph whose nodes depend on each other in a cycle (no order computes it)."""
    producer = {out: i for i, node in enumerate(graph.node) for out in node.output if out}
    users: list[list[int]] = [[] for _ in graph.node]
    waiting = [0] * len(graph.node)
    for i, node in enumerate(graph.node):
        for dep in {producer[name] for name in node.input if name in producer}:
            users[dep].append(i)
            waiting[i] += 1
    ready = [i for i, n in enumerate(waiting) if n == 0]
    done = 0
    while ready:
        i = ready.pop()
        done += 1
        for j in users[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                ready.append(j)
    if done < len(graph.node):
        stuck = next(i for i, n in enumerate(waiting) if n > 0)
        raise ir.ModelFormatError(f"{where}: {_node_label(graph.node[stuck])} waits on a cycle of nodes that depend "
                                  "on their own outputs, so no order computes the graph. Is the file corrupt?")


def _schema(node: onnx.NodeProto, opsets: dict[str, int]) -> onnx.defs.OpSchema | None:
    """Return the standard schema of ``node`` at the model's opset (None: not a standard op)."""
    if node.domain not in ("", "ai.onnx"):
        return None
    try:
        return onnx.defs.get_schema(node.op_type, max_inclusive_version=opsets.get("", opsets.get("ai.onnx", 1)),
                                    domain="")
    except onnx.defs.SchemaError:
        return None


_C_INT = 2**31 - 1
# Window attributes of the standard ops and the least value each may take; every value must also
# fit a C int (what every runtime stores them in). A stride of 2^62 is a corrupt file.
_WINDOW_ATTRIBUTES = {"kernel_shape": 1, "strides": 1, "dilations": 1, "pads": 0, "output_padding": 0,
                      "output_shape": 0, "group": 1}
# Axis attributes: no tensor has 2^31 dimensions.
_AXIS_ATTRIBUTES = ("axis", "axes")
# Inputs the standard ops take as 1-D tensors, which every runtime insists on: (op, input index) ->
# rank. Checked where the input is a constant the file holds (an initializer or a Constant node's
# value). Not Squeeze/Unsqueeze axes nor Range's scalars: runtimes take those 0-D or 1-D alike, and
# the ONNX test suite has such files.
_INPUT_RANKS = {
    **{("Slice", i): 1 for i in (1, 2, 3, 4)}, ("Reshape", 1): 1, ("Expand", 1): 1, ("Tile", 1): 1,
    ("ConstantOfShape", 0): 1, ("Pad", 1): 1,
}


def _check_values(where: str, node: onnx.NodeProto, dims: dict[str, list[int]],
                  ranks: dict[str, int] | None = None) -> None:
    """Refuse window and axis attributes out of any sane range, constant inputs of the wrong rank
    (``dims``: the dims of the constants the graph holds, by name), and a convolution whose weight's
    rank is not its input's (``ranks``: the declared ranks of the graph inputs)."""
    if node.op_type in ("Conv", "ConvTranspose") and len(node.input) > 1 and node.input[1] in dims:
        w_rank = len(dims[node.input[1]])
        x = node.input[0]
        x_rank = len(dims[x]) if x in dims else (ranks or {}).get(x, w_rank)
        if w_rank < 3 or x_rank != w_rank:
            raise ir.ModelFormatError(
                f"{where}: {_node_label(node)} weight '{node.input[1]}' has dims {dims[node.input[1]]} for an input "
                f"of rank {x_rank}; a convolution's weight has its input's rank (at least 3). Is the file corrupt?"
            )
    for attr in node.attribute:
        values = list(attr.ints) if attr.type == onnx.AttributeProto.INTS else (
            [attr.i] if attr.type == onnx.AttributeProto.INT else [])
        if not values:
            continue
        if attr.name in _WINDOW_ATTRIBUTES and node.op_type != "Pad":  # Pad-2's pads may be negative (a crop)
            low = _WINDOW_ATTRIBUTES[attr.name]
            bad = next((v for v in values if not low <= v <= _C_INT), None)
            if bad is not None:
                raise ir.ModelFormatError(
                    f"{where}: {_node_label(node)} attribute '{attr.name}' holds {bad}, outside {low}..{_C_INT}. "
                    "Is the file corrupt?"
                )
        elif attr.name in _AXIS_ATTRIBUTES and any(abs(v) > _C_INT for v in values):
            raise ir.ModelFormatError(
                f"{where}: {_node_label(node)} attribute '{attr.name}' holds "
                f"{values[0] if len(values) == 1 else values}, beyond any tensor's rank. Is the file corrupt?"
            )
    for i, name in enumerate(node.input):
        rank = _INPUT_RANKS.get((node.op_type, i))
        if rank is not None and name in dims and len(dims[name]) != rank:
            raise ir.ModelFormatError(
                f"{where}: {_node_label(node)} input {i} '{name}' has dims {dims[name]}; {node.op_type} takes a "
                f"{rank}-D tensor there. Is the file corrupt?"
            )


def _check_signature(where: str, node: onnx.NodeProto, schema: onnx.defs.OpSchema,
                     weights: dict[str, int] | None = None) -> None:
    """Refuse an empty name for a required input, an attribute of another type than the op declares,
    and an initializer (``weights``: name -> data type) of a type the op does not take there.

    All are what a corrupt file looks like: every consumer (shape inference, the passes, the
    exporters) reads a required input, an attribute of the declared type and a weight of one of
    the input's types (a STRING Conv bias reached the Caffe weight writer).
    """
    single = onnx.defs.OpSchema.FormalParameterOption.Single
    if weights:
        allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
        formals = list(schema.inputs)
        for i, name in enumerate(node.input):
            if not name or name not in weights or not formals:
                continue
            formal = formals[min(i, len(formals) - 1)]
            if i >= len(formals) and formal.option != onnx.defs.OpSchema.FormalParameterOption.Variadic:
                break
            types = allowed.get(formal.type_str, {formal.type_str})
            dtype = onnx.TensorProto.DataType.Name(weights[name])
            if f"tensor({dtype.lower()})" not in types:
                takes = ", ".join(sorted(t[7:-1].upper() for t in types if t.startswith("tensor(")))
                raise ir.ModelFormatError(
                    f"{where}: {_node_label(node)} input {i} ('{formal.name}') is the initializer '{name}' of type "
                    f"{dtype}; {node.op_type} takes {takes} there. "
                    "Is the file corrupt?"
                )
    for i, formal in enumerate(schema.inputs):
        if formal.option != single:
            break  # optional and variadic inputs may be absent
        if i >= len(node.input) or not node.input[i]:
            what = "is empty" if i < len(node.input) else "is missing"
            raise ir.ModelFormatError(
                f"{where}: {_node_label(node)} input {i} ('{formal.name}') {what}, but {node.op_type} requires it. "
                "Is the file corrupt?"
            )
    if len(node.output) < schema.min_output:  # a Shape without its output reached FoldConstants
        raise ir.ModelFormatError(
            f"{where}: {_node_label(node)} has {len(node.output)} output(s); {node.op_type} produces at least "
            f"{schema.min_output}. Is the file corrupt?"
        )
    for attr in node.attribute:
        spec = schema.attributes.get(attr.name)
        if spec is not None and not attr.ref_attr_name and attr.type != spec.type:
            have = onnx.AttributeProto.AttributeType.Name(attr.type)
            want = onnx.AttributeProto.AttributeType.Name(int(spec.type))
            raise ir.ModelFormatError(
                f"{where}: {_node_label(node)} attribute '{attr.name}' is of type {have}; {node.op_type} takes "
                f"{want}. Is the file corrupt?"
            )


def _check_graph(path: Path, graph: onnx.GraphProto, outer: frozenset[str] = frozenset(),
                 opsets: dict[str, int] | None = None) -> None:
    """Refuse values defined twice and node inputs or graph outputs that nothing defines.

    Names are resolved over the whole graph (the passes sort nodes that are out of order) and,
    for a subgraph, over the graphs enclosing it. Standard ops are also checked against their
    schema at the model's opset (``_check_signature``).
    """
    opsets = opsets or {}
    weights = {t.name: t.data_type for t in graph.initializer}
    dims = {t.name: list(t.dims) for t in graph.initializer}
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in graph.input
             if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
            value = next((a.t for a in node.attribute if a.name == "value" and a.HasField("t")), None)
            if value is not None:
                dims[node.output[0]] = list(value.dims)
    where = f"{path.name}: graph '{graph.name}'"
    defined: dict[str, str] = {}
    initializers = {t.name for t in graph.initializer} | {t.values.name for t in graph.sparse_initializer}
    for v in graph.input:
        if v.name in defined:
            raise ir.ModelFormatError(f"{where} lists the input '{v.name}' twice. Is the file corrupt?")
        defined[v.name] = f"graph input '{v.name}'"
    for name in initializers:
        defined.setdefault(name, f"initializer '{name}'")
    for node in graph.node:
        for out in node.output:
            if not out:
                continue
            if out in defined:
                raise ir.ModelFormatError(
                    f"{where}: {_node_label(node)} writes the value '{out}', which {defined[out]} already "
                    "defines; every value must have one producer. Is the file corrupt?"
                )
            defined[out] = _node_label(node)
    visible = outer | frozenset(defined)
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name and name not in visible:
                raise ir.ModelFormatError(
                    f"{where}: {_node_label(node)} input {i} '{name}' is not a graph input, an initializer "
                    "or the output of any node. Is the file corrupt?"
                )
        for attr in node.attribute:
            if attr.type not in _ATTRIBUTE_TYPES:
                raise ir.ModelFormatError(
                    f"{where}: {_node_label(node)} attribute '{attr.name}' has no valid type ({attr.type}). "
                    "Is the file corrupt?"
                )
            field = _MESSAGE_ATTRIBUTES.get(attr.type)
            if field is not None and not attr.ref_attr_name and not attr.HasField(field):
                kind = onnx.AttributeProto.AttributeType.Name(attr.type)
                raise ir.ModelFormatError(
                    f"{where}: {_node_label(node)} attribute '{attr.name}' is of type {kind} but holds none. "
                    "Is the file corrupt?"
                )
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                _check_graph(path, sub, visible, opsets)
        schema = _schema(node, opsets)
        if schema is not None:
            _check_signature(where, node, schema, weights)
            _check_values(where, node, dims, ranks)
    _check_acyclic(where, graph)
    for v in graph.output:
        if v.name not in visible:
            raise ir.ModelFormatError(
                f"{where}: output '{v.name}' is not produced by any node, input or initializer. Is the file corrupt?"
            )


def _deserialize(path: Path, proto: onnx.ModelProto) -> ir.Model:
    """Build the IR from the checked proto; a proto the IR cannot represent is a malformed file."""
    try:
        return ir.from_proto(proto, path.parent.resolve())
    except (ir.serde.SerdeError, ValueError, TypeError, KeyError, IndexError, OverflowError) as exc:
        cause = exc
        while cause.__cause__ is not None and isinstance(cause, ir.serde.SerdeError):
            cause = cause.__cause__  # the SerdeError names only the function; the cause says why
        why = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        raise ir.ModelFormatError(
            f"{path.name}: cannot read the model's graph ({type(cause).__name__}: {why[:200]}). Is the file corrupt?"
        ) from exc


def check_support(paths: Sequence[Path], options: ir.Options) -> list[ir.Unsupported]:
    """Return every op of the model that is neither standard ONNX nor an ONNX Runtime domain."""
    proto = _load_proto(paths[0])
    return _unsupported(paths[0], proto)


def _unsupported(path: Path, proto: onnx.ModelProto) -> list[ir.Unsupported]:
    opsets = {o.domain: o.version for o in proto.opset_import}
    local = {(f.domain, f.name) for f in proto.functions}
    found: dict[tuple[str, str], list[str]] = {}

    def walk(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            key = (node.domain, node.op_type)
            if key in local:
                continue
            if node.domain in _ML_DOMAINS:
                domain = "" if node.domain == "ai.onnx" else node.domain
                version = opsets.get(domain, opsets.get("ai.onnx", 1))
                if not onnx.defs.has(node.op_type, max_inclusive_version=version, domain=domain):
                    found.setdefault(key, []).append(node.name or node.output[0] if node.output else "?")
            elif node.domain not in _RUNTIME_DOMAINS:
                found.setdefault(key, []).append(node.name or (node.output[0] if node.output else "?"))
            for attr in node.attribute:
                if attr.HasField("g"):
                    walk(attr.g)
                for g in attr.graphs:
                    walk(g)

    walk(proto.graph)
    items = []
    for (domain, op), names in found.items():
        label = f"{domain}::{op}" if domain else op
        version = opsets.get(domain, 0)
        reason = (f"not an ONNX op at opset {version}" if domain in ("", "ai.onnx")
                  else f"custom domain '{domain}' has no implementation here")
        items.append(ir.Unsupported(label, len(names), f"{path.name} node '{names[0]}'", reason))
    return items


def read_onnx(paths: Sequence[Path], options: ir.Options) -> ir.Model:
    """Load the .onnx at ``paths[0]`` into the IR; weights stay in their files until written."""
    if len(paths) != 1:
        raise ir.UsageError(
            f"an ONNX model is one .onnx file (its external data is found from it); got {len(paths)} files"
        )
    path = Path(paths[0])
    proto = _load_proto(path)
    _densify(path, proto.graph)
    _check_tensors(path, proto)
    _check_external(path, proto)
    _check_graph(path, proto.graph, opsets={o.domain: o.version for o in proto.opset_import})
    unsupported = _unsupported(path, proto)
    if unsupported:
        raise ir.UnsupportedOpsError(path.name, unsupported, hint="Run `convert ops onnx` for what is supported.")
    model = _deserialize(path, proto)
    del proto
    _weights_are_not_inputs(model)
    source = path.name
    for node in model.graph.all_nodes():
        if not node.metadata_props.get("convert:source_file"):
            first = next((o.name for o in node.outputs if o.name), "")
            ir.set_provenance(node, ir.Provenance(file=source, layer=node.name or first or "", kind=node.op_type))
    _apply_input_shapes(model, options, source)
    return model


def _weights_are_not_inputs(model: ir.Model) -> None:
    """Drop main-graph inputs that have an initializer: they are weights, not runtime inputs.

    IR version 3 required every initializer to be listed as a graph input too (the early model-zoo
    files), and exporters asked to ``keep_initializers_as_inputs`` still write that layout. Left as
    inputs, shape inference treats them as unknown runtime tensors and the converted model and the
    parity check would take every weight as an input. (IR >= 4 gives such an input a meaning, "a
    default the caller may override"; no model this toolkit converts relies on overriding a weight.)
    """
    graph = model.graph
    for i in reversed(range(len(graph.inputs))):
        if graph.inputs[i].is_initializer():
            graph.inputs.pop(i)  # pop(): slice deletion leaves values marked as inputs


def _apply_input_shapes(model: ir.Model, options: ir.Options, source: str = "the model") -> None:
    if not options.input_shapes:
        return
    by_name = {v.name: v for v in model.graph.inputs}
    given = dict(options.input_shapes)
    if "" in given and len(by_name) == 1:  # an unnamed --input-shape is the only input's
        given[next(iter(by_name))] = given.pop("")
    for name, shape in given.items():
        value = by_name.get(name)
        if value is None and name in model.graph.initializers:
            raise ir.UsageError(
                f"--input-shape names '{name}', a weight (initializer) of the model, not a runtime input; "
                f"inputs: {', '.join(by_name) or '(none)'}"
            )
        if value is None:
            raise ir.UsageError(
                f"--input-shape names '{name}', which is not an input; inputs: {', '.join(by_name) or '(none)'}"
            )
        if value.shape is not None and len(value.shape) != len(shape):
            raise ir.UsageError(f"--input-shape {name}: rank {len(shape)}, but the input has rank {len(value.shape)}")
        if value.shape is not None:  # a size the file fixes stays: another one writes a file that does not load
            ir.refuse_contradicting_shape(name, shape, [d if isinstance(d, int) else None for d in value.shape],
                                          source=source)
        value.shape = ir.Shape(list(shape))
