"""The conversion context handed to every TF op converter: values by tensor name, with their layout.

TensorFlow's image ops are NHWC; the IR is built NCHW inside. Every rank-4 tensor is held in one
or both layouts: ``"tf"`` (as TensorFlow has it) and ``"nchw"`` (axes ``[0, 3, 1, 2]`` of it).
A layout-sensitive converter asks for ``"nchw"`` and produces ``"nchw"``; an elementwise one keeps
whatever layout its inputs have; a converter that needs TensorFlow's axes asks for ``"tf"``. The
missing layout is made by one Transpose on first request and cached, so transposes appear only
where a layout-agnostic stretch meets an op that needs TensorFlow's axes, and at the graph's edges.
Constants are kept as arrays until a converter reads them and are transposed in NumPy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from convert.ir import GraphBuilder, Options, Provenance, RefusedError, Value
from convert.ir.context import FrontendContext
from convert.ir.tensors import lazy

from .graph import TFNode

__all__ = ["NCHW", "NCL", "TF", "TO_NCHW", "TO_TF", "ConvWeight", "TFContext", "nchw_axis"]

TF = "tf"
NCHW = "nchw"
# Rank-3 [N, L, C] tensors between Keras Conv1D layers are held as [N, C, L] (axes [0, 2, 1]) by
# the converters that opt in (``get_any_ncl``: Squeeze of a Conv's H, ExpandDims back to a Conv,
# elementwise ops, Pad); every other converter sees TensorFlow's layout.
NCL = "ncl"
TO_NCHW = (0, 3, 1, 2)
TO_TF = (0, 2, 3, 1)


def nchw_axis(axis: int) -> int:
    """Return where TensorFlow's (NHWC) axis ``axis`` of a rank-4 tensor is in NCHW."""
    return TO_TF[axis % 4]


@dataclass(frozen=True, slots=True)
class ConvWeight:
    """A convolution's OIHW weight as a recipe: computed from TensorFlow's filter when it is written.

    ``source`` is the filter as TensorFlow holds it (for a SavedModel, a view of the mapped
    variables file), ``layout`` rearranges it to OIHW (a transposed convolution's IOHW), and
    ``scale`` (float64, one per output channel: the batch norms folded into it) multiplies it
    along ``axis`` (the output channels: 0 for OIHW, 1 for IOHW), rounded to the filter's dtype
    once. Nothing is computed during the conversion, so converting holds no copy of the weights.
    """

    source: np.ndarray
    layout: Callable[[np.ndarray], np.ndarray]
    shape: tuple[int, ...]
    scale: np.ndarray | None = None
    axis: int = 0

    def scaled(self, scale: np.ndarray) -> ConvWeight:
        """Return this weight with each output channel multiplied by ``scale``."""
        total = scale.astype(np.float64) if self.scale is None else self.scale * scale
        return replace(self, scale=total)

    def array(self) -> np.ndarray:
        """Compute the OIHW weight."""
        oihw = self.layout(self.source)
        if self.scale is not None:
            shape = [1] * oihw.ndim
            shape[self.axis] = -1
            oihw = (oihw * self.scale.reshape(shape)).astype(self.source.dtype)
        return np.ascontiguousarray(oihw)


class TFContext(FrontendContext):
    """State of one conversion: builder, the value table (per layout), constants, options.

    The current item is the TF node being converted (None while the loader transposes the outputs).
    """

    item: TFNode | None

    def __init__(self, builder: GraphBuilder, options: Options) -> None:
        super().__init__(builder)
        self.options = options
        self.diagnostics = options.diagnostics
        self.values: dict[str, dict[str, Value]] = {}
        self.consts: dict[str, np.ndarray] = {}
        self.shapes: dict[str, tuple[int | None, ...] | None] = {}
        self.consumers: dict[str, list[TFNode]] = {}  # tensor name -> the converted nodes reading it
        # SpaceToBatchND outputs that a convolution will read as a dilated conv: name -> (input, block, pads).
        # Rank-3 ones (Keras' dilated Conv1D: SpaceToBatchND -> ExpandDims -> Conv2D) have a 1-D block;
        # the ExpandDims records its output with the 2-D block and the input expanded likewise.
        self.space_to_batch: dict[str, tuple[str, list[int], list[list[int]]]] = {}
        # Outputs of convolutions made from such a pattern (and of the Squeeze back to rank 3 after
        # one): name -> (the Conv node's output, block, the Conv's spatial axes (0 = H, 1 = W) the
        # block's entries are for), so that BatchToSpaceND's crops reduce that Conv's pads.
        self.dilated: dict[str, tuple[Value, list[int], list[int]]] = {}
        # Outputs of Convs (and ConvTransposes): name -> (input, weight, attributes, out channels, the
        # weight's recipe, the bias (float64) or None, the ONNX op type), so that a per-channel Add
        # (BiasAdd) or Mul reading only them emits one Conv with the summed bias or the scaled weight
        # and bias instead (the first is dead then).
        self.convs: dict[str, tuple[Value, Value, dict[str, object], int, ConvWeight, np.ndarray | None, str]] = {}
        # Outputs of zero Pads of only H and W: name -> (input, ONNX pads [top, left, bottom, right]),
        # so that a Conv reading only them takes the padding as its own pads (the Pad is dead then).
        self.zero_pads: dict[str, tuple[str, list[int]]] = {}
        # Inside a converted loop's body (``ops/controlflow.py``): the tensor lists it reads (list tensor ->
        # the outer tensor it was made from), those it writes (list tensor -> scan output slot) and
        # the item written to each slot.
        self.list_reads: dict[str, str] = {}
        self.list_writes: dict[str, int] = {}
        self.scan_items: dict[int, Value] = {}

    def weight(self, weight: ConvWeight, name: str) -> Value:
        """Add ``weight`` as an initializer computed when the exporter writes it."""
        dtype = weight.source.dtype
        return self.builder.initializer(lazy(weight.array, dtype, weight.shape, name=name), name)

    # -- reading ---------------------------------------------------------------------------
    def shape(self, name: str) -> tuple[int | None, ...] | None:
        """Return TensorFlow's static shape of tensor ``name`` (None when its rank is unknown)."""
        if name in self.consts:
            return tuple(self.consts[name].shape)
        return self.shapes.get(name)

    def rank(self, name: str) -> int | None:
        """Return the rank of tensor ``name``, when known."""
        shape = self.shape(name)
        return None if shape is None else len(shape)

    def const(self, name: str) -> np.ndarray | None:
        """Return the value of tensor ``name`` when it is a constant, else None."""
        return self.consts.get(name)

    def need_const(self, name: str, what: str) -> np.ndarray:
        """Return a constant input or refuse naming ``what`` it is."""
        value = self.consts.get(name)
        if value is None:
            raise RefusedError(f"{what} ('{name}') must be a constant after freezing")
        return value

    def layouts(self, name: str) -> set[str]:
        """Return the layouts tensor ``name`` is already available in (constants: none)."""
        return set(self.values.get(name, {}))

    def is_nchw(self, name: str) -> bool:
        """Return True when the tensor is held in NCHW (and not in TF's layout)."""
        return self.layouts(name) == {NCHW}

    def get(self, name: str, layout: str = TF) -> Value:
        """Return the IR value of tensor ``name`` in ``layout``, transposing once if needed."""
        if name in self.consts:
            arr = self.consts[name]
            if layout == NCHW and arr.ndim == 4:
                arr = np.ascontiguousarray(arr.transpose(TO_NCHW))
            if layout == NCL and arr.ndim == 3:
                arr = np.ascontiguousarray(arr.transpose(0, 2, 1))
            return self.builder.const(arr, name=name.replace(":0", ""))
        held = self.values.get(name)
        if not held:
            raise RefusedError(f"tensor '{name}' is used before it is produced")
        if layout in held:
            return held[layout]
        if self.rank(name) == 3 and (NCL in held or layout == NCL):
            want = NCL if layout == NCL else TF  # a rank-3 tensor's other form: one Transpose
            if want in held:
                return held[want]
            source = held[TF if want == NCL else NCL]
            value = self.emit("Transpose", [source], {"perm": [0, 2, 1]}, suffix=f"to_{want}")
            held[want] = value
            return value
        if self.rank(name) != 4:
            # Layouts differ only for rank-4 tensors; other ranks are held once.
            return next(iter(held.values()))
        source = next(iter(held.values()))
        perm = TO_NCHW if layout == NCHW else TO_TF
        value = self.emit("Transpose", [source], {"perm": list(perm)}, suffix=f"to_{layout}")
        held[layout] = value
        return value

    def get_any_ncl(self, name: str) -> tuple[Value, str]:
        """``get_any``, but a rank-3 tensor held as [N, C, L] comes in that form (layout ``NCL``)."""
        if NCL in self.values.get(name, {}):
            return self.values[name][NCL], NCL
        return self.get_any(name)

    def get_any(self, name: str) -> tuple[Value, str]:
        """Return the tensor in whichever layout it is held (NCHW first) and that layout."""
        held = self.values.get(name, {})
        for layout in (NCHW, TF):
            if layout in held:
                return held[layout], layout
        return self.get(name, TF), TF

    # -- emitting --------------------------------------------------------------------------
    def current(self) -> TFNode | None:
        """The TF node being converted, or None (the loader's own nodes)."""
        return self.item

    def provenance(self, item: TFNode | None) -> Provenance:
        """The TF node's name and op."""
        return Provenance(layer=item.name, kind=item.op) if item else Provenance()

    def node_name(self, item: TFNode | None, op_type: str, suffix: str = "") -> str:
        """``<TF node>/<OpType or suffix>`` (``tf/...`` outside a converter)."""
        return f"{item.name if item else 'tf'}/{suffix or op_type}"

    def bind(self, value: Value, layout: str = TF, index: int = 0) -> None:
        """Make ``value`` output ``index`` of the current node, held in ``layout``."""
        node = self.item
        assert node is not None, "bind() outside a converter"
        name = f"{node.name}:{index}"
        if not (self.rank(name) == 4 or (layout == NCL and self.rank(name) == 3)):
            layout = TF
        self.values[name] = {layout: value}

    def bind_const(self, array: np.ndarray, index: int = 0) -> None:
        """Record a constant output of the current node (materialised only when read)."""
        assert self.item is not None
        self.consts[f"{self.item.name}:{index}"] = array

    def alias(self, source: str, index: int = 0) -> None:
        """Make output ``index`` of the current node the same tensor as ``source`` (Identity)."""
        assert self.item is not None
        name = f"{self.item.name}:{index}"
        if source in self.consts:
            self.consts[name] = self.consts[source]
        else:
            self.values[name] = self.values.setdefault(source, {})
        self.shapes.setdefault(name, self.shape(source))
