"""Read a deploy prototxt (text) and a caffemodel (binary) into plain layer records.

The prototxt gives the structure and every layer parameter; the caffemodel gives only blobs,
matched to layers by name. Both the current ``layer`` and the legacy V1 ``layers`` forms are
read. protobuf's text parser does not report where each layer starts, so a small scanner finds
the line of every top-level ``layer {`` / ``layers {`` block for provenance and messages.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from convert.ir import ModelFormatError, shown

__all__ = ["LayerDef", "NetDef", "layer_lines", "read_caffemodel", "read_prototxt"]

logger = logging.getLogger(__name__)

# V1 enum names whose V2 spelling is not simple title case.
_V1_TYPES = {
    "ABSVAL": "AbsVal",
    "ARGMAX": "ArgMax",
    "BNLL": "BNLL",
    "CONCAT": "Concat",
    "CONVOLUTION": "Convolution",
    "DATA": "Data",
    "DECONVOLUTION": "Deconvolution",
    "DROPOUT": "Dropout",
    "DUMMY_DATA": "DummyData",
    "ELTWISE": "Eltwise",
    "EXP": "Exp",
    "FLATTEN": "Flatten",
    "HDF5_DATA": "HDF5Data",
    "IMAGE_DATA": "ImageData",
    "INNER_PRODUCT": "InnerProduct",
    "LRN": "LRN",
    "MEMORY_DATA": "MemoryData",
    "MVN": "MVN",
    "POOLING": "Pooling",
    "POWER": "Power",
    "RELU": "ReLU",
    "SIGMOID": "Sigmoid",
    "SILENCE": "Silence",
    "SOFTMAX": "Softmax",
    "SOFTMAX_LOSS": "SoftmaxWithLoss",
    "SPLIT": "Split",
    "SLICE": "Slice",
    "TANH": "TanH",
    "THRESHOLD": "Threshold",
    "ACCURACY": "Accuracy",
    "EUCLIDEAN_LOSS": "EuclideanLoss",
    "WINDOW_DATA": "WindowData",
    "IM2COL": "Im2col",
}


@dataclass(slots=True)
class LayerDef:
    """One layer: its name, type, bottoms/tops, the parameter message and its blobs."""

    name: str
    type: str
    bottoms: list[str]
    tops: list[str]
    # caffe_pb2.LayerParameter or V1LayerParameter: the converters read fields both declare.
    param: Any
    line: int | None = None
    index: int = 0
    blobs: list[np.ndarray] = field(default_factory=list)
    has_weights: bool = False
    #: How the caffemodel records each blob's shape, as Caffe compares it with the layer's own:
    #: ``("legacy", (num, channels, height, width))`` when any of those four fields is present,
    #: else ``("shape", dims)`` (``()`` when the blob records no shape at all).
    stored: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    #: The caffemodel has an entry of this layer's name (with any number of blobs, none included):
    #: Caffe then requires exactly the layer's own number of blobs.
    in_caffemodel: bool = False
    #: Blobs this layer shares with others by ``param { name }``, by blob index: the parameter's
    #: name, whether ``share_mode: PERMISSIVE`` (count, not shape, must agree), and the layer and
    #: blob index whose caffemodel entry holds the shared values (``None``: no sharer has one).
    shared: dict[int, tuple[str, bool, LayerDef | None, int]] = field(default_factory=dict)


@dataclass(slots=True)
class NetDef:
    """A parsed net: name, declared inputs with shapes, layers in order."""

    name: str
    file: str
    inputs: list[tuple[str, tuple[int, ...]]]
    layers: list[LayerDef]


def _looks_binary(data: bytes) -> bool:
    head = data[:4096]
    if b"\x00" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start < len(head) - 4  # a multi-byte character cut at the end is fine
    return False


def layer_lines(text: str) -> list[int]:
    """Return the 1-based line of each top-level ``layer``/``layers`` block, in order.

    Comments (``#`` to end of line) and quoted strings are skipped; nesting is tracked with
    braces and angle brackets (both delimit messages in text format).
    """
    lines: list[int] = []
    depth = 0
    line = 1
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
            i += 1
        elif ch == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif ch in "\"'":
            j = i + 1
            while j < n and text[j] != ch:
                if text[j] == "\\":
                    j += 1
                elif text[j] == "\n":
                    break
                j += 1
            i = j + 1
        elif ch in "{<":
            depth += 1
            i += 1
        elif ch in "}>":
            depth -= 1
            i += 1
        elif ch.isalpha() or ch == "_":
            j = i
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            word = text[i:j]
            if depth == 0 and word in ("layer", "layers"):
                lines.append(line)
            i = j
        else:
            i += 1
    return lines


def read_prototxt(path: Path) -> NetDef:
    """Parse a deploy prototxt into a ``NetDef`` (no blobs yet).

    Raises:
        ModelFormatError: on a binary file, a syntax error (with line:column) or bad inputs.
    """
    from google.protobuf import text_format

    from convert._proto import caffe_pb2

    data = Path(path).read_bytes()
    if _looks_binary(data):
        raise ModelFormatError(
            f"{path.name}: not a text prototxt (binary data; is it a caffemodel?). "
            "Pass the deploy .prototxt first and the .caffemodel second."
        )
    text = data.decode("utf-8", errors="replace")
    net = caffe_pb2.NetParameter()
    try:
        text_format.Parse(text, net, allow_unknown_extension=False)
    except text_format.ParseError as exc:
        line, col = exc.GetLine(), exc.GetColumn()
        msg = str(exc)
        # protobuf prefixes "line:col : "; keep only the reason.
        if " : " in msg[:24]:
            msg = msg.split(" : ", 1)[1]
        where = f"{path.name}:{line}:{col}" if line else path.name
        raise ModelFormatError(f"{where}: prototxt syntax error: {msg}. Is this a Caffe deploy prototxt?") from exc
    lines = layer_lines(text)
    layers: list[LayerDef] = []
    if net.layer and net.layers:
        raise ModelFormatError(f"{path.name}: mixes 'layer' and legacy 'layers' blocks; use one form")
    if net.layer:
        for i, lp in enumerate(net.layer):
            layers.append(
                LayerDef(
                    lp.name,
                    lp.type,
                    list(lp.bottom),
                    list(lp.top),
                    lp,
                    lines[i] if i < len(lines) else None,
                    i,
                )
            )
    else:
        enum = caffe_pb2.V1LayerParameter.LayerType
        for i, lp in enumerate(net.layers):
            ename = enum.Name(lp.type) if lp.type in enum.values() else str(lp.type)
            vtype = _V1_TYPES.get(ename, ename.title().replace("_", ""))
            layers.append(
                LayerDef(lp.name, vtype, list(lp.bottom), list(lp.top), lp, lines[i] if i < len(lines) else None, i)
            )
    layers = [ly for ly in layers if _in_test_phase(ly.param)]
    inputs = _declared_inputs(net, path)
    return NetDef(net.name or path.stem, path.name, inputs, layers)


def _in_test_phase(param: Any) -> bool:
    include = list(getattr(param, "include", ()))
    exclude = list(getattr(param, "exclude", ()))
    if include:
        return any((not r.HasField("phase")) or r.phase == 1 for r in include)
    return not any(r.HasField("phase") and r.phase == 1 for r in exclude)


def _declared_inputs(net: Any, path: Path) -> list[tuple[str, tuple[int, ...]]]:
    names = list(net.input)
    if not names:
        return []
    if net.input_shape:
        shapes = [tuple(int(d) for d in s.dim) for s in net.input_shape]
    elif net.input_dim:
        dims = [int(d) for d in net.input_dim]
        if len(dims) != 4 * len(names):
            raise ModelFormatError(
                f"{path.name}: {len(names)} inputs need {4 * len(names)} input_dim values, found {len(dims)}"
            )
        shapes = [tuple(dims[4 * i : 4 * i + 4]) for i in range(len(names))]
    else:
        shapes = [()] * len(names)
    if len(shapes) == 1 and len(names) > 1:
        shapes = shapes * len(names)
    if len(shapes) != len(names):
        raise ModelFormatError(f"{path.name}: {len(names)} inputs but {len(shapes)} input shapes")
    return list(zip(names, shapes, strict=True))


def _stored_shape(blob: Any) -> tuple[str, tuple[int, ...]]:
    """Return the shape ``blob`` records, in the form Caffe compares it with a layer's (Blob::ShapeEquals):
    the legacy 4-D ``num/channels/height/width`` whenever any of those fields is present (absent ones
    read as 0), else the ``shape`` message's dims (none at all: a 0-axis blob)."""
    if any(blob.HasField(f) for f in ("num", "channels", "height", "width")):
        return "legacy", (int(blob.num), int(blob.channels), int(blob.height), int(blob.width))
    return "shape", tuple(int(d) for d in blob.shape.dim)


def _blob_array(blob: Any) -> tuple[np.ndarray, tuple[str, tuple[int, ...]]]:
    """Return a blob's values (float32, in its recorded shape) and that shape's form (``_stored_shape``)."""
    stored = _stored_shape(blob)
    shape = stored[1]
    if len(blob.data):
        arr = np.asarray(blob.data, dtype=np.float32)
    else:
        arr = np.asarray(blob.double_data, dtype=np.float64).astype(np.float32)
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if arr.size != count:
        what = "legacy shape num/channels/height/width" if stored[0] == "legacy" else "shape"
        raise ValueError(f"blob {what} {list(shape) if shape else '[] (none recorded)'} holds {count} values but "
                         f"{arr.size} are stored")
    return arr.reshape(shape), stored


def _param_names(param: Any) -> list[tuple[str, bool]]:
    """Return, per blob index, the name a layer's ``param`` gives that blob ('' : not shared) and
    whether its share_mode is PERMISSIVE (V1 layers: names only, always strict)."""
    out = []
    for spec in getattr(param, "param", ()):
        if isinstance(spec, str):
            out.append((spec, False))
        else:
            out.append((spec.name, int(spec.share_mode) == 1))
    return out


def _resolve_shared(net: NetDef, order: dict[str, int]) -> None:
    """Record, for every blob shared by ``param { name }``, where its values come from as Caffe has it.

    Sharing layers hold one blob; ``Net::CopyTrainedLayersFrom`` copies each caffemodel entry into
    its layer in the file's order, so the shared values are those of the last entry (in the
    caffemodel's order) among the sharers that have one: a layer without an entry of its own gets
    them too. ``order``: each entry's position in the caffemodel.
    """
    slots: dict[str, list[tuple[LayerDef, int, bool]]] = {}
    for layer in net.layers:
        for i, (name, permissive) in enumerate(_param_names(layer.param)):
            if name:
                slots.setdefault(name, []).append((layer, i, permissive))
    for name, users in slots.items():
        if len(users) < 2:
            continue
        held = [(order[ly.name], ly, i) for ly, i, _ in users if ly.name in order and i < len(ly.blobs)]
        source = max(held, key=lambda t: t[0]) if held else None
        for layer, i, permissive in users:
            layer.shared[i] = (name, permissive, source[1] if source else None, source[2] if source else 0)


def read_caffemodel(path: Path, net: NetDef) -> None:
    """Attach the blobs of ``path`` to the layers of ``net`` (matched by layer name).

    Raises:
        ModelFormatError: when the file is truncated or not a caffemodel, or a blob is inconsistent.
    """
    from google.protobuf.message import DecodeError

    from convert._proto import caffe_pb2

    data = Path(path).read_bytes()
    weights = caffe_pb2.WeightsNet()
    try:
        weights.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise ModelFormatError(
            f"{path.name}: not a valid caffemodel ({len(data):,} bytes; truncated or not binary "
            f"protobuf): {exc}. "
            "Re-download or re-save it; pass the .prototxt first and the .caffemodel second."
        ) from exc
    if not _looks_binary(data[:4096]) and data.lstrip()[:1].isalpha():
        raise ModelFormatError(f"{path.name}: looks like a text prototxt, not a binary caffemodel")
    # Caffe matches entries to layers by name; where two entries share a name, the later one's
    # blobs are the ones left in the layer (each is copied in turn).
    by_name: dict[str, Sequence[object]] = {}
    order: dict[str, int] = {}
    for i, lp in enumerate(list(weights.layer) + list(weights.layers)):
        by_name[lp.name] = lp.blobs
        order[lp.name] = i
    del weights
    for layer in net.layers:
        blobs = by_name.get(layer.name)
        if blobs is None:
            continue
        layer.in_caffemodel = True
        try:
            arrays = [_blob_array(b) for b in blobs]
        except ValueError as exc:
            raise ModelFormatError(
                f"{path.name}: layer {shown(layer.name)} ({shown(layer.type)[1:-1]}): {exc}. "
                "Is the caffemodel from this prototxt?"
            ) from exc
        layer.blobs = [a for a, _ in arrays]
        layer.stored = [form for _, form in arrays]
        layer.has_weights = bool(arrays)
    _resolve_shared(net, order)
    logger.debug("%s: entries for %d layers", path.name, len(by_name))
