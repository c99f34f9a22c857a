"""The conversion context handed to every Caffe layer converter.

It maps Caffe blob names to IR values (an in-place layer, ``top == bottom``, simply rebinds the
name to its new value), keeps each value's static shape, and wraps the graph builder so every
node carries the layer's provenance (prototxt file, line, type, name).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from convert.ir import (
    ConversionError,
    DataType,
    GraphBuilder,
    ModelFormatError,
    Options,
    Provenance,
    Shape,
    TensorType,
    Value,
    from_array,
    shown,
)
from convert.ir.context import FrontendContext

from .reader import LayerDef

__all__ = ["CaffeContext"]


class CaffeContext(FrontendContext):
    """Blob table, shapes and node emission for one conversion; the current item is the layer."""

    def __init__(self, builder: GraphBuilder, source: str, weights_file: str, options: Options) -> None:
        super().__init__(builder)
        self.source = source
        self.weights_file = weights_file
        self.options = options
        self.diagnostics = options.diagnostics
        self.blobs: dict[str, Value] = {}

    # -- blobs ------------------------------------------------------------------------------
    def input(self, layer: LayerDef, index: int = 0) -> Value:
        """Return the IR value of ``layer``'s bottom ``index``."""
        if index >= len(layer.bottoms):
            raise self.error(layer, f"needs at least {index + 1} bottom blob(s), has {len(layer.bottoms)}")
        name = layer.bottoms[index]
        value = self.blobs.get(name)
        if value is None:
            raise self.error(layer, f"bottom blob '{name}' is not produced by any earlier layer or input")
        return value

    def inputs(self, layer: LayerDef) -> list[Value]:
        """Return the IR values of every bottom of ``layer`` (at least one)."""
        if not layer.bottoms:
            raise self.error(layer, "has no bottom blob")
        return [self.input(layer, i) for i in range(len(layer.bottoms))]

    def set_top(self, layer: LayerDef, value: Value, index: int = 0) -> None:
        """Bind top ``index`` of ``layer`` to ``value`` (rebinding in-place blobs)."""
        if index >= len(layer.tops):
            raise self.error(layer, f"produces {index + 1} outputs but declares {len(layer.tops)} top(s)")
        self.blobs[layer.tops[index]] = value

    @staticmethod
    def shape(value: Value) -> tuple[int, ...]:
        """Return the static shape of ``value``."""
        if value.shape is None:
            raise ValueError(f"value '{value.name}' has no known shape")
        dims = []
        for d in value.shape:
            if not isinstance(d, int):
                raise ValueError(f"value '{value.name}' has a symbolic dimension")
            dims.append(d)
        return tuple(dims)

    # -- emission (convert.ir.context.FrontendContext; the current item is the layer) -----------
    def provenance(self, item: LayerDef) -> Provenance:
        """Return the provenance of ``item``: the prototxt, the layer's line, type and name."""
        return Provenance(file=self.source, layer=item.name, kind=item.type, line=item.line)

    def node_name(self, item: LayerDef, op_type: str, suffix: str = "") -> str:
        """Nodes are named after their layer, plus the converter's suffix (``conv1_pad``)."""
        return item.name + suffix

    def emit(self, op_type: str, inputs: Sequence[Value | None], attrs: Mapping[str, object] | None = None,
             shape: Sequence[int] | None = None, *, domain: str = "", suffix: str = "") -> Value:
        """Append one node for the current layer and return its output, typed float32 with ``shape``."""
        out = super().emit(op_type, inputs, attrs, domain=domain, suffix=suffix)
        if shape is not None:
            out.type = TensorType(DataType.FLOAT)
            out.shape = Shape([int(d) for d in shape])
        return out

    def emit_multi(self, op_type: str, inputs: Sequence[Value | None], attrs: Mapping[str, object] | None = None,
                   shapes: Sequence[Sequence[int]] | None = None, *, outputs: int = 1, domain: str = "",
                   suffix: str = "") -> tuple[Value, ...]:
        """Append one node with several outputs (Split, TopK) for the current layer, each typed
        float32 with its shape in ``shapes``."""
        outs = super().emit_multi(op_type, inputs, attrs, outputs=len(shapes) if shapes else outputs,
                                  domain=domain, suffix=suffix)
        for out, shape in zip(outs, shapes or (), strict=False):
            out.type = TensorType(DataType.FLOAT)
            out.shape = Shape([int(d) for d in shape])
        return outs

    def weight(self, layer: LayerDef, array: np.ndarray, what: str) -> Value:
        """Add ``array`` (float32) as an initializer named ``<layer>.<what>``."""
        arr = np.ascontiguousarray(array, dtype=np.float32)
        return self.builder.initializer(from_array(arr, name=f"{layer.name}.{what}"))

    def const(self, array: object, dtype: type = np.float32) -> Value:
        """Add a small constant (shapes, axes, scalars)."""
        return self.builder.const(np.asarray(array, dtype=dtype), name="const")

    # -- blobs of the caffemodel --------------------------------------------------------------
    def blob(self, layer: LayerDef, index: int, shape: Sequence[int], what: str) -> np.ndarray:
        """Return blob ``index`` of ``layer`` reshaped to ``shape``, checking its size.

        Raises:
            ModelFormatError: when the blob is missing or has the wrong number of values.
        """
        where = self.where(layer)
        if index >= len(layer.blobs):
            found = "no blobs" if not layer.blobs else f"only {len(layer.blobs)} blob(s)"
            raise ModelFormatError(
                f"{self.weights_file}: layer {shown(layer.name)} ({layer.type}, {where}) has {found}; "
                f"expected the {what} as blob {index}. Are the prototxt and caffemodel from the same model?"
            )
        arr = layer.blobs[index]
        count = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
        if arr.size != count:
            raise ModelFormatError(
                f"{self.weights_file}: layer {shown(layer.name)} ({layer.type}, {where}): {what} blob has shape "
                f"{list(arr.shape)} ({arr.size} values), expected {list(shape)} ({count} values). "
                "Are the prototxt and caffemodel from the same model?"
            )
        return arr.reshape(tuple(shape))

    # -- errors ---------------------------------------------------------------------------------
    def where(self, item: LayerDef) -> str:
        """Return ``file:line``."""
        return f"{self.source}:{item.line}" if item.line is not None else self.source

    def error(self, layer: LayerDef, why: str) -> ConversionError:
        """Return a ``ConversionError`` naming ``layer`` and its prototxt line."""
        return ConversionError(f"layer {shown(layer.name)} ({layer.type}) at {self.where(layer)}", why)
