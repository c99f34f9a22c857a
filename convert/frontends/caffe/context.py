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
        self._read: dict[int, set[int]] = {}  # blob indices each layer read (by layer index)
        self._owners: dict[str, tuple[str, tuple[int, ...]]] = {}  # shared param: first layer, shape

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
    # Real Caffe (Net::CopyTrainedLayersFrom) refuses a caffemodel entry whose number of blobs is not
    # the layer's, or one of whose blobs has another shape than the layer's own (Blob::ShapeEquals):
    # the exact shape, or, for a blob recorded in the legacy num/channels/height/width form, the
    # layer's shape padded with leading 1s to four axes. The same number of values in another shape
    # (a transposed InnerProduct weight) is refused there, and so here.
    def blob(self, layer: LayerDef, index: int, shape: Sequence[int], what: str) -> np.ndarray:
        """Return blob ``index`` of ``layer`` in ``shape``, the shape Caffe's layer gives that blob.

        A blob shared with other layers by ``param { name }`` comes from the sharer whose caffemodel
        entry Caffe copies last (``reader._resolve_shared``).

        Raises:
            ModelFormatError: when the blob is missing, or is recorded in a shape Caffe refuses.
        """
        shape = tuple(int(d) for d in shape)
        self._read.setdefault(layer.index, set()).add(index)
        if index < len(layer.blobs):
            self._check_shape(layer, index, shape, what)
        shared = layer.shared.get(index)
        if shared is not None:
            return self._shared_blob(layer, index, shape, what, shared)
        if index >= len(layer.blobs):
            raise self._missing(layer, index, what)
        return layer.blobs[index].reshape(shape)

    def _check_shape(self, layer: LayerDef, index: int, shape: tuple[int, ...], what: str) -> None:
        form, dims = layer.stored[index] if index < len(layer.stored) else ("shape", layer.blobs[index].shape)
        if form == "legacy":
            ok = len(shape) <= 4 and (1,) * (4 - len(shape)) + shape == dims
            recorded = f"the legacy shape num/channels/height/width {' x '.join(map(str, dims))}"
        else:
            ok = dims == shape
            recorded = f"shape {list(dims)}"
        if ok:
            return
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        size = layer.blobs[index].size
        legacy = (f" (in the legacy form {' x '.join(map(str, (1,) * (4 - len(shape)) + shape))})"
                  if form == "legacy" and len(shape) <= 4 else "")
        why = (f" exactly{legacy}: the same {count} values in another shape, which real Caffe refuses to copy "
               "('shape mismatch')" if size == count else f"{legacy} ({count} values), not {size}")
        raise ModelFormatError(
            f"{self.weights_file}: layer {shown(layer.name)} ({layer.type}, {self.where(layer)}): its {what} "
            f"(blob {index}) has {recorded}; Caffe's {layer.type} here holds {list(shape)}{why}. "
            "Are the prototxt and caffemodel from the same model?"
        )

    def _shared_blob(self, layer: LayerDef, index: int, shape: tuple[int, ...], what: str,
                     shared: tuple[str, bool, LayerDef | None, int]) -> np.ndarray:
        name, permissive, source, at = shared
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        owner = self._owners.setdefault(name, (layer.name, shape))
        if owner[0] != layer.name and owner[1] != shape and (
                not permissive or int(np.prod(owner[1], dtype=np.int64)) != count):
            raise ModelFormatError(
                f"{self.source}: layer {shown(layer.name)} ({layer.type}, {self.where(layer)}) shares its {what} "
                f"'{name}' with layer {shown(owner[0])}, which holds it as {list(owner[1])}, this layer as "
                f"{list(shape)}: Caffe refuses to share it ("
                + ("the counts differ" if permissive else "shapes must be equal unless share_mode: PERMISSIVE")
                + ")"
            )
        if source is None:
            raise self._missing(layer, index, what, shared=name)
        arr = source.blobs[at]
        if arr.size != count:
            raise ModelFormatError(
                f"{self.weights_file}: layer {shown(layer.name)} ({layer.type}, {self.where(layer)}) shares its "
                f"{what} '{name}' with layer {shown(source.name)}, whose caffemodel entry holds {arr.size} values "
                f"for it; this layer needs {list(shape)} ({count} values). "
                "Are the prototxt and caffemodel from the same model?"
            )
        return arr.reshape(shape)

    def _missing(self, layer: LayerDef, index: int, what: str, shared: str = "") -> ModelFormatError:
        found = ("no entry" if not layer.in_caffemodel else "no blobs" if not layer.blobs
                 else f"only {len(layer.blobs)} blob(s)")
        also = f" (nor any layer sharing it as '{shared}')" if shared else ""
        filler = (" Real Caffe would run it with the prototxt's filler values instead; convert does not guess them."
                  if not layer.in_caffemodel else "")
        return ModelFormatError(
            f"{self.weights_file}: layer {shown(layer.name)} ({layer.type}, {self.where(layer)}) has {found} in the "
            f"caffemodel{also}; expected the {what} as blob {index}.{filler} "
            "Are the prototxt and caffemodel from the same model?"
        )

    def check_blob_count(self, layer: LayerDef) -> None:
        """Refuse a caffemodel entry with another number of blobs than ``layer`` reads, as Caffe does.

        Raises:
            ModelFormatError: naming the layer and both counts.
        """
        used = len(self._read.get(layer.index, ()))
        if layer.in_caffemodel and len(layer.blobs) != used:
            raise ModelFormatError(
                f"{self.weights_file}: layer {shown(layer.name)} ({layer.type}, {self.where(layer)}) has "
                f"{len(layer.blobs)} blob(s) in the caffemodel; Caffe's {layer.type} layer with these parameters "
                f"holds {used}, and real Caffe refuses the file ('Incompatible number of blobs'). "
                "Are the prototxt and caffemodel from the same model?"
            )

    # -- errors ---------------------------------------------------------------------------------
    def where(self, item: LayerDef) -> str:
        """Return ``file:line``."""
        return f"{self.source}:{item.line}" if item.line is not None else self.source

    def error(self, layer: LayerDef, why: str) -> ConversionError:
        """Return a ``ConversionError`` naming ``layer`` and its prototxt line."""
        return ConversionError(f"layer {shown(layer.name)} ({layer.type}) at {self.where(layer)}", why)
