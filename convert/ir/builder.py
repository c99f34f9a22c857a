"""GraphBuilder: the one way frontends create IR graphs.

It owns the name authority (every value and node name is unique and generated here, never by
counters in converters), converts plain Python attribute values, records provenance on every
node, and builds the ``Model`` with the canonical opset.

Example::

    b = GraphBuilder("tiny", source="tiny.cfg")
    x = b.input("data", DataType.FLOAT, (1, 3, 32, 32))
    w = b.initializer(file_slice(path, 16, "float32", (8, 3, 3, 3), name="conv_0.weight"))
    y = b.op("Conv", [x, w], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
             name="conv_0", prov=Provenance(file="tiny.cfg", line=12, kind="convolutional"))
    b.output(y, "out")
    model = b.build()
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np
import onnx_ir as _ir
from onnx_ir import convenience as _conv

from .provenance import Provenance, set_provenance
from .tensors import DataType, TensorProtocol, from_array

__all__ = ["CANONICAL_OPSET", "GraphBuilder", "NameAuthority"]

# The opset every frontend emits; exporters adapt to the requested one.
CANONICAL_OPSET = 17

_UNSAFE = re.compile(r"[^A-Za-z0-9_.:/\-]")


class NameAuthority:
    """Hands out unique names: ``base``, then ``base_1``, ``base_2`` ...

    Names are made safe for every format (``[A-Za-z0-9_.:/-]``) unless ``sanitize=False`` (a
    rewrite of a graph read from a file keeps the names it derives from the file's).
    """

    def __init__(self, *, sanitize: bool = True) -> None:
        self._used: set[str] = set()
        self._next: dict[str, int] = {}
        self._sanitize = sanitize

    def reserve(self, name: str) -> None:
        """Mark ``name`` as taken (e.g. names read from a source model)."""
        self._used.add(name)

    def fresh(self, base: str) -> str:
        """Return a unique name derived from ``base``."""
        base = (_UNSAFE.sub("_", base) if self._sanitize else base) or "v"
        if base not in self._used:
            self._used.add(base)
            return base
        i = self._next.get(base, 1)
        while f"{base}_{i}" in self._used:
            i += 1
        self._next[base] = i + 1
        name = f"{base}_{i}"
        self._used.add(name)
        return name


class GraphBuilder:
    """Build an IR graph node by node."""

    def __init__(
        self,
        name: str,
        *,
        source: str = "",
        opset: int = CANONICAL_OPSET,
        producer: str = "convert",
    ) -> None:
        self.names = NameAuthority()
        self.source = source
        self.opset = opset
        self._domains: dict[str, int] = {"": opset}
        self.graph = _ir.Graph([], [], nodes=[], name=name)
        self.producer = producer
        self._consts: dict[tuple[str, bytes, tuple[int, ...]], _ir.Value] = {}

    # -- values -------------------------------------------------------------------------
    def input(self, name: str, dtype: DataType, shape: Sequence[int | str | None]) -> _ir.Value:
        """Add a graph input. String or None dims are symbolic."""
        dims = [d if isinstance(d, int) else _ir.SymbolicDim(d) for d in shape]
        value = _ir.Value(name=self.names.fresh(name), shape=_ir.Shape(dims), type=_ir.TensorType(dtype))
        self.graph.inputs.append(value)
        return value

    def initializer(self, tensor: TensorProtocol, name: str | None = None) -> _ir.Value:
        """Add a constant weight (file slice, wrapped array or lazy tensor) as an initializer."""
        vname = self.names.fresh(name or tensor.name or "const")
        tensor.name = vname
        value = _ir.Value(
            name=vname, shape=_ir.Shape(tensor.shape), type=_ir.TensorType(tensor.dtype), const_value=tensor
        )
        self.graph.register_initializer(value)
        return value

    def const(self, array: np.ndarray | Sequence[float] | Sequence[int] | float | int, name: str = "const",
              dtype: np.dtype | type | None = None) -> _ir.Value:
        """Add a small constant (shapes, scales); identical constants are shared."""
        arr = np.asarray(array, dtype=dtype) if dtype is not None else np.asarray(array)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        # Only small constants are shared (a weight's bytes are not copied to make a key).
        key = (arr.dtype.str, arr.tobytes(), arr.shape) if arr.nbytes <= 4096 else None
        if key is not None and key in self._consts:
            return self._consts[key]
        # np.ascontiguousarray would turn a 0-d array into shape (1,): keep scalars scalar.
        value = self.initializer(from_array(arr if arr.flags.c_contiguous else arr.copy(), name=name), name)
        if key is not None:
            self._consts[key] = value
        return value

    def output(self, value: _ir.Value, name: str | None = None) -> _ir.Value:
        """Mark ``value`` as a graph output, renaming it to ``name`` when given.

        A value that is already a graph input or output, or an initializer, is passed through an
        Identity so that every output has a producer and a name of its own.
        """
        if value.is_graph_input() or value.is_graph_output() or value.is_initializer():
            value = self.op("Identity", [value], name=f"{name or value.name}_out")
        if name is not None and name != value.name:
            holder = self._value_named(name)
            if holder is not None:
                if holder.is_graph_input() or holder.is_graph_output():
                    raise ValueError(f"output name '{name}' is already a graph input or output")
                # Another value has the name the output must carry: that one gets a fresh name.
                holder.name = self.names.fresh(f"{name}_inner")
            self.names.reserve(name)
            value.name = name
        self.graph.outputs.append(value)
        return value

    def _value_named(self, name: str) -> _ir.Value | None:
        if name not in self.names._used:
            return None
        for v in self.graph.inputs:
            if v.name == name:
                return v
        if name in self.graph.initializers:
            return self.graph.initializers[name]
        for node in self.graph:
            for v in node.outputs:
                if v.name == name:
                    return v
        return None

    # -- nodes --------------------------------------------------------------------------
    def op(
        self,
        op_type: str,
        inputs: Sequence[_ir.Value | None],
        attributes: Mapping[str, object] | None = None,
        *,
        name: str | None = None,
        outputs: int = 1,
        domain: str = "",
        domain_version: int = 1,
        prov: Provenance | None = None,
        output_names: Sequence[str] | None = None,
    ) -> _ir.Value:
        """Append a node and return its (first) output. See ``op_multi`` for several outputs."""
        return self.op_multi(
            op_type, inputs, attributes, name=name, outputs=outputs, domain=domain,
            domain_version=domain_version, prov=prov, output_names=output_names,
        )[0]

    def op_multi(
        self,
        op_type: str,
        inputs: Sequence[_ir.Value | None],
        attributes: Mapping[str, object] | None = None,
        *,
        name: str | None = None,
        outputs: int = 1,
        domain: str = "",
        domain_version: int = 1,
        prov: Provenance | None = None,
        output_names: Sequence[str] | None = None,
    ) -> tuple[_ir.Value, ...]:
        """Append a node with ``outputs`` outputs and return them."""
        if domain and domain not in self._domains:
            self._domains[domain] = domain_version
        node_name = self.names.fresh(name or op_type)
        attrs = [_attribute(k, v) for k, v in (attributes or {}).items() if v is not None]
        if output_names is None:
            output_names = [node_name if outputs == 1 else f"{node_name}:{i}" for i in range(outputs)]
        outs = [_ir.Value(name=self.names.fresh(n)) for n in output_names]
        node = _ir.Node(domain, op_type, list(inputs), attrs, outputs=outs, name=node_name)
        prov = prov or Provenance()
        if self.source and not prov.file:
            prov = Provenance(file=self.source, layer=prov.layer, kind=prov.kind, line=prov.line)
        set_provenance(node, prov)
        self.graph.append(node)
        return tuple(node.outputs)

    # -- result -------------------------------------------------------------------------
    def build(self, *, doc: str = "") -> _ir.Model:
        """Return the model (opset imports set, producer recorded)."""
        self.graph.opset_imports.update(self._domains)
        model = _ir.Model(self.graph, ir_version=8, producer_name=self.producer, doc_string=doc or None)
        return model


def _attribute(name: str, value: object) -> _ir.Attr:
    """``value`` as an attribute, typed as ``onnx_ir.convenience.convert_attribute`` types it.

    Ints, floats, strings and lists of each (kernel shapes, pads, axes: most attributes) are made
    here directly: onnx_ir's inference checks a list against three runtime Protocols before it
    reaches sequences, and a Protocol ``isinstance`` is slow (0.04 s of a 0.5 s DenseNet-121
    conversion). Everything else goes through onnx_ir's inference.
    """
    kind = type(value)
    if kind is int:
        return _ir.AttrInt64(name, value)
    if kind is float:
        return _ir.AttrFloat32(name, value)
    if kind is str:
        return _ir.AttrString(name, value)
    if kind in (list, tuple) and value:
        if all(type(v) is int for v in value):  # not bool: left to onnx_ir (which also makes INTS)
            return _ir.AttrInt64s(name, value)
        if all(type(v) is float for v in value):
            return _ir.AttrFloat32s(name, value)
        if all(type(v) is str for v in value):
            return _ir.AttrStrings(name, value)
    return _conv.convert_attribute(name, value)

