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


def _blob_array(blob: Any) -> np.ndarray:
    if blob.HasField("shape"):
        shape = tuple(int(d) for d in blob.shape.dim)
    else:
        legacy = (blob.num, blob.channels, blob.height, blob.width)
        shape = tuple(int(d) for d in legacy)
    if len(blob.data):
        arr = np.asarray(blob.data, dtype=np.float32)
    else:
        arr = np.asarray(blob.double_data, dtype=np.float64).astype(np.float32)
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if arr.size != count:
        if not blob.HasField("shape") and arr.size and not any(shape):
            return arr  # no shape recorded at all: keep it flat
        raise ValueError(f"blob shape {list(shape)} holds {count} values but {arr.size} are stored")
    return arr.reshape(shape)


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
    by_name: dict[str, Sequence[object]] = {}
    for lp in list(weights.layer) + list(weights.layers):
        if lp.blobs:
            by_name[lp.name] = lp.blobs
    del weights
    for layer in net.layers:
        blobs = by_name.get(layer.name)
        if not blobs:
            continue
        try:
            layer.blobs = [_blob_array(b) for b in blobs]
        except ValueError as exc:
            raise ModelFormatError(
                f"{path.name}: layer {shown(layer.name)} ({shown(layer.type)[1:-1]}): {exc}. "
                "Is the caffemodel from this prototxt?"
            ) from exc
        layer.has_weights = True
    logger.debug("%s: blobs for %d layers", path.name, len(by_name))
