"""IR -> deploy prototxt + caffemodel.

The graph is legalised (``legalize.py``), then every node goes through its emitter. Nodes Caffe
cannot express are all collected and reported at once, before anything is written. A
caffemodel is one protobuf message, so weights past 2 GiB are refused up front with the size.
Both files are written to temporary files in the target folder and moved into place at the end;
nothing is left behind on failure.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from convert.ir import (
    ConvertError,
    ExportError,
    GapCollector,
    Graph,
    InternalError,
    Model,
    ModelFormatError,
    Options,
    Unsupported,
    UnsupportedOpsError,
    UsageError,
    describe,
    get_provenance,
    output_key,
    passes,
    shown,
)

from . import layers_tensor  # noqa: F401  (registers the tensor emitters)
from .context import Blob, EmitContext, Emitted, NotExpressible
from .decompose import DecomposeBoundedActivations
from .detection import RaiseDetectionOutput
from .flavor import Flavor, flavor
from .layers import EMITTERS
from .legalize import LegalizeForCaffe
from .old_opsets import AttributesToInputs
from .resize import LowerBilinearResize

if TYPE_CHECKING:
    from convert._proto import caffe_pb2

__all__ = ["MAX_CAFFEMODEL_BYTES", "CaffePlan", "build_net", "check", "output_paths", "plan", "refuse_unloadable",
           "save_caffe"]

logger = logging.getLogger(__name__)

# protobuf refuses messages of 2 GiB and more; keep a margin for the layer records.
MAX_CAFFEMODEL_BYTES = 2**31 - 16 * 2**20
# The SSD-era forks hard-code protobuf's read limit to 512 MiB (SetTotalBytesLimit(536870912)).
FORK_CAFFEMODEL_BYTES = 536870912


def output_paths(out_path: Path) -> tuple[Path, Path]:
    """Map ``-o`` to ``(<base>.prototxt, <base>.caffemodel)``.

    A ``.prototxt`` or ``.caffemodel`` suffix on ``out_path`` is dropped to form the base.
    """
    out = Path(out_path)
    base = out.with_suffix("") if out.suffix.lower() in (".prototxt", ".caffemodel") else out
    return base.with_name(base.name + ".prototxt"), base.with_name(base.name + ".caffemodel")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_./:\-]", "_", name) or "blob"


def _key(node: object) -> str:
    domain = node.domain  # type: ignore[attr-defined]
    op = node.op_type  # type: ignore[attr-defined]
    return op if domain in ("", "ai.onnx") else f"{domain}::{op}"


def _prepare(model: Model, flav: Flavor) -> Model:
    """Return a legalised copy of ``model`` (structure cloned, tensors shared; the caller's is untouched)."""
    model = model.clone()
    graph = model.graph
    if any(v.shape is None for n in graph for v in n.outputs if v is not None):
        passes.InferShapes()(model)
    # Caffe holds weights as blobs: a weight computed from constants (ConstantOfShape, Transpose
    # of an initializer, as old ONNX files have) becomes a lazy constant, evaluated when written.
    if passes.FoldWeights()(model).modified:
        passes.EliminateDeadCode()(model)
    if flav.detection:  # a Caffe source's SSD head, recorded by the frontend: PriorBox + DetectionOutput again
        RaiseDetectionOutput()(model)
    AttributesToInputs()(model)  # Clip/Pad/Slice of opsets < 10/11 in the form the emitters read
    DecomposeBoundedActivations(flav)(model)
    LowerBilinearResize(flav)(model)  # bilinear: Deconvolution (integer half-pixel) or matrices
    LegalizeForCaffe()(model)
    return model


def build_net(model: Model, flav: Flavor) -> tuple[caffe_pb2.NetParameter, list[Emitted], list[Unsupported]]:
    """Emit every node; return ``(NetParameter without blobs, layers, gaps)``."""
    _refuse_attribute_references(model)
    model = _prepare(model, flav)
    graph = model.graph
    ctx = EmitContext(graph, flav)
    pb = ctx.pb
    net = pb.NetParameter(name=graph.name or "net")
    emitted: list[Emitted] = []
    gaps = GapCollector(by_reason=False)
    for value in graph.inputs:
        if value.is_initializer():
            continue
        try:
            dims = list(ctx.shape(value))
        except NotExpressible as exc:
            gaps.add("input", f"graph input '{value.name}'", str(exc))
            continue
        if not flav.input_layer:  # the net's own input / input_shape fields (BVLC 1.0 style)
            net.input.append(ctx.blob(value))
            net.input_shape.add(dim=dims)
            continue
        lp = pb.LayerParameter(name=ctx.blob(value), type="Input", top=[ctx.blob(value)])
        lp.input_param.shape.add(dim=dims)
        emitted.append(Emitted(lp))
    # Caffe's outputs are the tops nothing consumes: a graph output that is also used inside the
    # graph is computed under an internal name and copied to its own name by a Split at the end.
    for value in graph.outputs:
        if value.uses() and not value.is_graph_input():
            ctx.rename_internal(value)
    regions = {} if flav.detection else _detection_regions(graph)
    for node in graph:
        if id(node) in regions:
            first = regions.pop(id(node))
            if first:
                gaps.add("DetectionOutput", first, _detection_reason(flav))
            continue
        key = _key(node)
        emit = EMITTERS.lookup(key)
        if emit is None:
            gaps.add(key, describe(node), "Caffe has no layer for it")
            continue
        try:
            result = emit(node, ctx)
        except NotExpressible as exc:
            gaps.add(key, describe(node), str(exc))
            continue
        except ConvertError:
            raise
        except Exception as exc:  # a bug in the emitter, not the user's model (see convert.ir.driver)
            raise InternalError(describe(node), exc) from exc
        if result is not None:
            key, prov = output_key(node), get_provenance(node)
            if key:
                folded = f" + '{key}' folded in" if key != prov.layer else ""
                result.origin = (key, prov.where() + folded)
            emitted.append(result)
    outputs = set()
    for value in graph.outputs:
        blob = ctx.blob(value)
        name = _safe(value.name or blob)
        outputs.add(name)
        if value.is_graph_input() or blob != name:
            lp = pb.LayerParameter(name=f"{name}_output", type="Split", bottom=[blob], top=[name])
            emitted.append(Emitted(lp))
        else:
            outputs.add(blob)
    # Caffe makes every top no layer reads a net output: a Slice's unused pieces (a Split whose
    # outputs are not all used) would be listed beside the model's own. A Silence layer reads them.
    read = {b for e in emitted for b in e.layer.bottom}
    unused = [t for t in dict.fromkeys(t for e in emitted for t in e.layer.top) if t not in read and t not in outputs]
    if unused:
        emitted.append(Emitted(pb.LayerParameter(name="unused_tops", type="Silence", bottom=unused)))
    for e in emitted:
        net.layer.add().CopyFrom(e.layer)
    return net, emitted, gaps.items()


def _refuse_attribute_references(model: Model) -> None:
    """Refuse a node whose attribute refers to an attribute of an enclosing function (``ref_attr_name``)
    where no function encloses it: nothing gives that attribute a value, so no Caffe layer can be
    written for the node (ONNX allows such references only inside a FunctionProto's nodes).

    Raises:
        ModelFormatError: naming the node, the attribute and the name it refers to.
    """
    for node in model.graph.all_nodes():
        for name, attr in node.attributes.items():
            if attr.is_ref():
                raise ModelFormatError(
                    f"{describe(node)}: attribute {shown(name)} refers to the attribute "
                    f"{shown(attr.ref_attr_name)} of an enclosing function (ref_attr_name), but the node is not "
                    "inside a function, so nothing gives it a value. Is the file corrupt?"
                )


def _detection_regions(graph: Graph) -> dict[int, str]:
    """Map each node of a Caffe source's DetectionOutput lowering (its provenance says so) to where
    the layer is, for the first node of each layer, and to '' for the others (one gap per layer)."""
    regions: dict[int, str] = {}
    seen: set[str] = set()
    for node in graph:
        prov = get_provenance(node)
        if prov.kind == "DetectionOutput":
            regions[id(node)] = "" if prov.layer in seen else prov.where()
            seen.add(prov.layer)
    return regions


def _detection_reason(flav: Flavor) -> str:
    return (
        "its number of rows (the detections NonMaxSuppression keeps) depends on the data, and Caffe blobs "
        f"have fixed shapes: only the SSD fork's DetectionOutput layer computes it, which the '{flav.name}' "
        "dialect lacks (no input shape changes this); use --caffe-flavor ssd, or export to ONNX"
    )


@dataclass(slots=True)
class CaffePlan:
    """One lowering of a model to Caffe: checked (``gaps``), then written (``write``) without lowering again."""

    net: caffe_pb2.NetParameter
    emitted: list[Emitted]
    gaps: list[Unsupported]
    flav: Flavor
    options: Options

    def write(self, out_path: Path) -> list[Path]:
        """Write ``<base>.prototxt`` and ``<base>.caffemodel``; return both paths.

        Raises:
            UnsupportedOpsError: listing every node Caffe cannot express (nothing written).
            ExportError: when the weights exceed one caffemodel's 2 GiB (nothing written).
        """
        return _write(self, out_path)


def plan(model: Model, options: Options) -> CaffePlan:
    """Lower ``model`` to Caffe layers once; ``model`` is not modified."""
    flav = flavor(options.get("caffe_flavor"))
    if options.get("caffe_upsample_layer", False):
        if flav.name != "ssd":
            raise UsageError(f"--caffe-upsample-layer: the Upsample layer is the SSD fork's; --caffe-flavor "
                             f"{flav.name} has none")
        flav = replace(flav, upsample=True)
    net, emitted, gaps = build_net(model, flav)
    return CaffePlan(net, emitted, gaps, flav, options)


def check(model: Model, options: Options) -> list[Unsupported]:
    """Return every node Caffe cannot express; ``model`` is not modified."""
    return plan(model, options).gaps


def _nbytes(blob: object) -> int:
    return int(getattr(blob, "nbytes", 0))


def _array(blob: object, layer: str = "?") -> np.ndarray:
    """Return the blob's values as float32 (Caffe blobs hold floats); numbers of any type convert.

    Raises:
        ExportError: the values are not numbers (a STRING tensor of a corrupt model).
    """
    arr = blob if isinstance(blob, np.ndarray) else blob.numpy()  # type: ignore[attr-defined]
    if np.asarray(arr).dtype.kind not in "biuf":
        name = getattr(blob, "name", None) or "?"
        raise ExportError(f"layer '{layer}': its weight '{name}' holds {np.asarray(arr).dtype} values, not numbers; "
                          "a Caffe blob holds floats. Is the source model corrupt?")
    return np.ascontiguousarray(arr, dtype=np.float32)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, length: int) -> bytes:
    """Return the key and length prefix of a length-delimited field."""
    return _varint(number << 3 | 2) + _varint(length)


def _blob_dims(src: object) -> tuple[int, ...]:
    shape = getattr(src, "shape", ())
    return tuple(int(d) for d in shape)


def _stream_caffemodel(fh: BinaryIO, name: str, emitted: list[Emitted], options: Options) -> None:
    """Write a binary NetParameter holding only the layers with blobs, one tensor at a time.

    Protobuf fields may be written in any order and messages concatenated, so each layer is its
    header (name, type, bottom, top) serialised by protobuf followed by hand-framed BlobProtos
    (``shape`` = field 7, packed float ``data`` = field 5) whose lengths come from the shapes.
    Only one tensor is in memory at a time; the file is a valid caffemodel for Caffe and OpenCV.
    """
    from convert._proto import caffe_pb2 as pb

    fh.write(pb.NetParameter(name=name).SerializeToString())
    layers = [e for e in emitted if e.blobs]
    for done, e in enumerate(layers, 1):
        head = pb.LayerParameter(name=e.layer.name, type=e.layer.type, bottom=e.layer.bottom, top=e.layer.top)
        header = head.SerializeToString()
        framed: list[tuple[bytes, int, Blob]] = []
        for src in e.blobs:
            dims = _blob_dims(src)
            shape = pb.BlobShape(dim=list(dims)).SerializeToString()
            count = int(np.prod(dims, dtype=np.int64)) if dims else 1
            body = _field(7, len(shape)) + shape + _field(5, 4 * count)
            framed.append((body, count, src))
        blob_sizes = [len(body) + 4 * count for body, count, _ in framed]
        length = len(header) + sum(len(_field(7, size)) + size for size in blob_sizes)
        fh.write(_field(100, length) + header)
        for (body, count, src), size in zip(framed, blob_sizes, strict=True):
            arr = _array(src, e.layer.name)
            if arr.size != count:
                raise AssertionError(f"blob of layer '{e.layer.name}' has {arr.size} values, expected {count}")
            fh.write(_field(7, size) + body)
            fh.write(arr.astype("<f4", copy=False).tobytes())
            del arr
        options.progress("caffe weights", done, len(layers))


def _prototxt(net: caffe_pb2.NetParameter, emitted: list[Emitted], flav: Flavor) -> str:
    """Return the prototxt text: the net's fields, then each layer under a comment naming its source layer."""
    from google.protobuf import text_format

    head = type(net)()
    head.CopyFrom(net)
    del head.layer[:]  # the layers are written one by one, each under its origin comment
    parts = [f"# Written by convert-toolkit, Caffe flavor '{flav.name}'.\n", text_format.MessageToString(head)]
    for e in emitted:
        if e.origin is not None:
            key, where = e.origin
            parts.append(f"# from layer {json.dumps(key)} {' '.join(where.split())}\n")
        parts.append("layer {\n" + text_format.MessageToString(e.layer, indent=2) + "}\n")
    return "".join(parts)


def save_caffe(model: Model, out_path: Path, options: Options) -> list[Path]:
    """Lower ``model`` and write ``<base>.prototxt`` and ``<base>.caffemodel``; return both paths."""
    return plan(model, options).write(out_path)


def _write(plan: CaffePlan, out_path: Path) -> list[Path]:
    flav, net, emitted, gaps, options = plan.flav, plan.net, plan.emitted, plan.gaps, plan.options
    proto_path, model_path = output_paths(out_path)
    if gaps:
        raise UnsupportedOpsError(
            f"export to Caffe ({flav.name})",
            gaps,
            hint="Nothing was written. Run `convert ops caffe` for what maps, or export to ONNX.",
        )
    total = sum(_nbytes(b) for e in emitted for b in e.blobs)
    if total > MAX_CAFFEMODEL_BYTES:
        raise ExportError(
            f"cannot write {model_path.name}: the weights take {total / 2**30:.2f} GiB, "
            "but a caffemodel is one protobuf message and cannot reach 2 GiB. Nothing was written. "
            "Export to ONNX (external data) instead."
        )
    if flav.name == "ssd" and total > FORK_CAFFEMODEL_BYTES:
        options.diagnostics.warn(
            f"{model_path.name} will hold {total / 2**20:.0f} MiB of weights: the SSD-era Caffe forks (the ssd "
            "flavor's target) read at most 512 MiB of caffemodel (SetTotalBytesLimit(536870912) in their io.cpp) "
            "and will refuse it; --caffe-flavor bvlc writes for BVLC master, which reads up to 2 GiB")
    text = _prototxt(net, emitted, flav)
    refuse_unloadable(text, proto_path.name)
    proto_path.parent.mkdir(parents=True, exist_ok=True)
    temps: list[str] = []
    try:
        fd, tmp = tempfile.mkstemp(dir=model_path.parent, prefix=f".{model_path.name}.", suffix=".tmp")
        temps.append(tmp)
        with os.fdopen(fd, "wb") as fh:
            _stream_caffemodel(fh, net.name, emitted, options)
        fd, tmp = tempfile.mkstemp(dir=proto_path.parent, prefix=f".{proto_path.name}.", suffix=".tmp")
        temps.append(tmp)
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode())
        mode = _new_file_mode()
        for tmp in temps:  # mkstemp makes 0600; written files get the umask's mode, as open() gives
            os.chmod(tmp, mode)
        os.replace(temps[0], model_path)
        os.replace(temps[1], proto_path)
        temps.clear()
    finally:
        for tmp in temps:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    logger.info("wrote %s and %s (%d layers, %.1f MiB)", proto_path, model_path, len(net.layer), total / 2**20)
    return [proto_path, model_path]


def refuse_unloadable(text: str, name: str) -> None:
    """Refuse, before anything is written, a prototxt that Caffe could not load: one our Caffe schema
    does not parse, or a layer reading a blob that no earlier layer (nor the net's inputs) makes.

    Raises:
        ExportError: naming the layer and that nothing was written.
    """
    from google.protobuf import text_format

    from convert._proto import caffe_pb2

    net = caffe_pb2.NetParameter()
    try:
        text_format.Parse(text, net)
    except text_format.ParseError as exc:
        raise ExportError(f"the written {name} would not parse in Caffe: {exc}. Nothing was written; this is a bug "
                          "in convert: please report it") from exc
    made = set(net.input) | {top for layer in net.layer if layer.type == "Input" for top in layer.top}
    for layer in net.layer:
        missing = [b for b in layer.bottom if b not in made]
        if missing:
            raise ExportError(f"the written {name} would not load in Caffe: layer '{layer.name}' ({layer.type}) reads "
                              f"'{missing[0]}', which no earlier layer makes. Nothing was written; this is a bug in "
                              "convert: please report it")
        made.update(layer.top)


def _new_file_mode() -> int:
    """Return the mode open() gives a new file: 0o666 less the process umask."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask

