"""State of one Caffe export: blob and layer names, shapes, constants, collected layers."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from convert.ir import INPUT_SHAPE_ORDER, Graph, Node, TensorProtocol, Value, get_provenance

from .flavor import Flavor

__all__ = ["Blob", "EmitContext", "Emitted", "NotExpressible"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_./:\-]")


class NotExpressible(Exception):  # noqa: N818 (internal signal, never escapes)
    """Raised by an emitter when Caffe cannot express this node; the message says why."""


if TYPE_CHECKING:
    from convert._proto import caffe_pb2


class BlobSource(Protocol):
    """Anything that can become a blob: IR tensors and deferred arrays."""

    @property
    def nbytes(self) -> int: ...

    def numpy(self) -> np.ndarray: ...


# A blob source: a tensor (file slice, lazy, wrapped), a deferred array or an array.
Blob = BlobSource | TensorProtocol | np.ndarray


@dataclass(slots=True)
class Emitted:
    """One Caffe layer: its prototxt message and its blobs (materialised only when written)."""

    layer: caffe_pb2.LayerParameter
    blobs: list[Blob] = field(default_factory=list)
    # (source layer key, where) written as a comment above the layer: users find their layers,
    # and the parity check's localisation pairs this layer's top with the source layer's output.
    origin: tuple[str, str] | None = None


class EmitContext:
    """Names, shapes and constants for the emitters."""

    def __init__(self, graph: Graph, flavor: Flavor) -> None:
        from convert._proto import caffe_pb2

        self.pb = caffe_pb2
        self.graph = graph
        self.flavor = flavor
        self._blob_names: dict[int, str] = {}
        self._used_blobs: set[str] = set()
        self._used_layers: set[str] = set()
        # A source layer lowered to several nodes gives its name to the last of them (the one
        # producing its top); the others keep their node names.
        self._main: dict[int, str] = {}
        last: dict[str, Node] = {}
        for node in graph:
            key = get_provenance(node).layer
            if key:
                last[key] = node
        for key, node in last.items():
            safe = _UNSAFE.sub("_", key)
            self._main[id(node)] = safe
            self._used_layers.add(safe)
        self.produced: list[Value] = []  # values with a Caffe blob, in order (for Crop references)

    # -- names --------------------------------------------------------------------------------
    def blob(self, value: Value) -> str:
        """Return the Caffe blob name of ``value`` (its IR name, made safe and unique)."""
        key = id(value)
        if key not in self._blob_names:
            base = _UNSAFE.sub("_", value.name or "blob") or "blob"
            name, i = base, 1
            while name in self._used_blobs:
                name, i = f"{base}_{i}", i + 1
            self._used_blobs.add(name)
            self._blob_names[key] = name
        return self._blob_names[key]

    def rename_internal(self, value: Value) -> None:
        """Give ``value`` an internal blob name, freeing its own name for an output copy."""
        if id(value) not in self._blob_names:
            base = _UNSAFE.sub("_", value.name or "blob") or "blob"
            self._used_blobs.add(base)
            name, i = f"{base}_internal", 1
            while name in self._used_blobs:
                name, i = f"{base}_internal{i}", i + 1
            self._used_blobs.add(name)
            self._blob_names[id(value)] = name

    def alias(self, value: Value, source: Value) -> None:
        """Make ``value`` another name for ``source``'s blob (Identity, Dropout)."""
        self._blob_names[id(value)] = self.blob(source)

    def is_alias(self, value: Value) -> bool:
        """Return True when ``value`` was bound to another value's blob."""
        name = self._blob_names.get(id(value))
        return name is not None and name != _UNSAFE.sub("_", value.name or "blob")

    def layer_name(self, node: Node) -> str:
        """Return a unique layer name: the source layer's name when one node carries it."""
        if id(node) in self._main:
            return self._main.pop(id(node))
        base = _UNSAFE.sub("_", node.name or get_provenance(node).layer or node.op_type) or node.op_type
        name, i = base, 1
        while name in self._used_layers:
            name, i = f"{base}_{i}", i + 1
        self._used_layers.add(name)
        return name

    # -- values -------------------------------------------------------------------------------
    def shape(self, value: Value | None) -> tuple[int, ...]:
        """Return the static shape of ``value``; NotExpressible when unknown."""
        if value is None or value.shape is None:
            hint = self.input_shape_hint()
            raise NotExpressible(
                f"the shape of '{getattr(value, 'name', None) or 'its input'}' is unknown and Caffe layers are "
                + (f"sized from it; give the model's input shape with {hint}" if hint else
                   "sized from it; the inputs' shapes are all static, so it depends on the data or on an op "
                   "shape inference does not know")
            )
        dims = []
        for d in value.shape:
            if not isinstance(d, int):
                if not self.input_shape_hint():
                    raise NotExpressible(
                        f"'{value.name}' has a dimension ({d}) that depends on the data (a row count such as "
                        "NonMaxSuppression's or NonZero's, decided at run time), not on the input's shape; Caffe "
                        "blobs have fixed shapes, so no input shape fixes it"
                    )
                raise NotExpressible(  # the same words for every value: said once (errors._listed)
                    f"a symbolic dimension from the input's shape; Caffe needs static shapes: "
                    f"fix it with {self.input_shape_hint()}"
                )
            dims.append(int(d))
        return tuple(dims)

    def input_shape_hint(self) -> str:
        """Return ``--input-shape NAME=...`` for each runtime input whose shape is not static ('' when
        every input's shape is static: then no --input-shape can fix a dimension)."""
        hints = []
        for v in self.graph.inputs:
            if v.is_initializer():
                continue
            dims = list(v.shape) if v.shape is not None else None
            if dims is not None and all(isinstance(d, int) for d in dims):
                continue
            order = v.metadata_props.get(INPUT_SHAPE_ORDER)  # --input-shape in the source's order (NHWC)
            if dims is not None and order and len(order.split(",")) == len(dims):
                dims = [dims[int(i)] for i in order.split(",")]
            # a free leading dim is the batch: 1 (a deployed Caffe net has a fixed batch); others to fill in
            shown = ",".join(str(d) if isinstance(d, int) else ("1" if i == 0 else "?")
                             for i, d in enumerate(dims)) if dims else "1,3,224,224"
            hints.append(f"--input-shape {v.name}={shown}")
        return " ".join(hints)

    @staticmethod
    def const(value: Value | None) -> TensorProtocol | None:
        """Return the constant tensor behind ``value`` or None."""
        return None if value is None else value.const_value

    @staticmethod
    def small(value: Value | None, what: str) -> np.ndarray:
        """Return the values of a small constant input (axes, shapes, scalars)."""
        t = None if value is None else value.const_value
        if t is None:
            raise NotExpressible(f"its {what} is computed at run time; Caffe needs it constant")
        return np.asarray(t.numpy())

    def layer(
        self,
        node: Node,
        type_: str,
        bottoms: Sequence[Value | None],
        tops: Sequence[Value] | None = None,
        blobs: Sequence[Blob] = (),
    ) -> Emitted:
        """Return a new layer for ``node`` with blob names for bottoms and tops."""
        lp = self.pb.LayerParameter(name=self.layer_name(node), type=type_)
        for v in bottoms:
            if v is None:
                raise NotExpressible("an optional input is missing where Caffe needs a blob")
            lp.bottom.append(self.blob(v))
        outs = list(node.outputs) if tops is None else list(tops)
        lp.top.extend(self.blob(v) for v in outs)
        self.produced.extend(outs)
        return Emitted(lp, list(blobs))
