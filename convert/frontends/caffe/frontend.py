"""Caffe deploy prototxt + caffemodel -> IR.

``check_support`` lists every layer type without a converter (with a count and the first
prototxt line) before anything is converted; ``load`` raises them all at once as one
``UnsupportedOpsError``. A failure inside one converter is re-raised as ``ConversionError``
naming the layer and its prototxt line.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from convert.ir import (
    DataType,
    GapCollector,
    GraphBuilder,
    Model,
    ModelFormatError,
    OpSupport,
    Options,
    Unsupported,
    UsageError,
    convert_all,
    shown,
)

from . import layers_tensor  # noqa: F401  (registers the tensor layers)
from .context import CaffeContext
from .layers import LAYERS, Converter
from .reader import LayerDef, NetDef, read_caffemodel, read_prototxt
from .support import CHECKS

__all__ = ["check_support", "load", "ops", "sniff", "split_paths"]

logger = logging.getLogger(__name__)

_TEXT_SUFFIXES = (".prototxt", ".pbtxt", ".txt")


def split_paths(paths: Sequence[Path]) -> tuple[Path, Path | None]:
    """Return ``(prototxt, caffemodel)`` from the user's paths, in any order.

    Raises:
        UsageError: when there is no prototxt or more than two files.
    """
    paths = [Path(p) for p in paths]
    if not paths or len(paths) > 2:
        raise UsageError("caffe needs a deploy .prototxt and a .caffemodel (two files)")
    for p in paths:
        if not p.is_file():
            raise UsageError(f"no such file: '{p}'")
    if len(paths) == 1:
        return paths[0], None
    a, b = paths
    if a.suffix.lower() == ".caffemodel" or b.suffix.lower() in _TEXT_SUFFIXES:
        a, b = b, a
    return a, b


def _parse(paths: Sequence[Path]) -> tuple[NetDef, Path, Path | None]:
    proto, weights = split_paths(paths)
    return read_prototxt(proto), proto, weights


def check_support(paths: Sequence[Path], options: Options) -> list[Unsupported]:
    """Return every layer type of the prototxt that has no converter (count, first line)."""
    net, _, _ = _parse(paths)
    return _unsupported(net).items()


def _unsupported(net: NetDef) -> GapCollector:
    gaps = GapCollector()
    for layer in net.layers:
        where = f"{net.file}:{layer.line}" if layer.line is not None else net.file
        if layer.type not in LAYERS:
            reason = ""
        else:
            check = CHECKS.get(layer.type)
            reason = check(layer) if check is not None else ""
            if not reason:
                continue
        gaps.add(layer.type, f"{where} '{layer.name}'", reason)
    return gaps


def load(paths: Sequence[Path], options: Options) -> Model:
    """Convert a Caffe model (prototxt + caffemodel) to the IR.

    Raises:
        UsageError: when the caffemodel is missing.
        ModelFormatError: for malformed files or blobs that do not match the prototxt.
        UnsupportedOpsError: listing every unsupported layer type.
        ConversionError: when one layer cannot be converted.
    """
    net, proto, weights = _parse(paths)
    _unsupported(net).raise_if_any(net.file, what="layer type", hint="Run `convert ops caffe` for the supported list.")
    if weights is None:
        raise UsageError(f"{proto.name}: the caffemodel is missing; pass the .prototxt and the .caffemodel")
    read_caffemodel(weights, net)
    return _convert(net, weights.name, options)


def _convert(net: NetDef, weights_name: str, options: Options) -> Model:
    builder = GraphBuilder(net.name, source=net.file)
    ctx = CaffeContext(builder, net.file, weights_name, options)
    # Net outputs: tops never consumed by a later layer. Reserve their names first so the final
    # value of each can carry the blob name exactly.
    consumed: dict[str, bool] = {}
    order: list[str] = []
    for layer in net.layers:
        for b in layer.bottoms:
            consumed[b] = True
        for t in layer.tops:
            if t not in consumed:
                order.append(t)
            consumed[t] = False
    outputs = [t for t in order if not consumed[t]]
    _add_inputs(net, ctx, options)
    for name in outputs:
        if name not in ctx.blobs:
            builder.names.reserve(name)

    def run(convert: Converter, layer: LayerDef) -> None:
        ctx.item = layer
        convert(layer, ctx)
        ctx.check_blob_count(layer)

    convert_all(net.layers, LAYERS, key=lambda layer: layer.type, call=run, options=options, stage="caffe layers",
                where=lambda layer: f"layer {shown(layer.name)} ({shown(layer.type)[1:-1]}) at {ctx.where(layer)}")
    for name in outputs:
        value = ctx.blobs.get(name)
        if value is None or (value.is_graph_input() and value.name == name):
            continue  # an input no layer reads is not an output
        if value.is_graph_input() or value.is_graph_output() or value.is_initializer():
            builder.output(value, name)
            continue
        value.name = name
        builder.output(value)
    if not builder.graph.outputs:
        raise ModelFormatError(f"{net.file}: the net has no outputs (no layer computes a blob from its inputs)")
    return builder.build(doc=f"converted from Caffe {net.file}")


def _add_inputs(net: NetDef, ctx: CaffeContext, options: Options) -> None:
    declared = list(net.inputs)
    for layer in net.layers:
        if layer.type == "Input":
            shapes = [tuple(int(d) for d in s.dim) for s in layer.param.input_param.shape]
            for i, top in enumerate(layer.tops):
                shape = shapes[i] if i < len(shapes) else (shapes[0] if shapes else ())
                declared.append((top, shape))
    if not declared:
        raise ModelFormatError(f"{net.file}: no inputs declared (input/input_shape/input_dim or an Input layer)")
    if options.dynamic_batch:
        ctx.diagnostics.note("Caffe nets have a static batch size: --dynamic-batch ignored by the Caffe frontend")
    given = dict(options.input_shapes)
    if "" in given and len(declared) == 1:  # an unnamed --input-shape is the only input's
        given[declared[0][0]] = given.pop("")
    unknown = [n for n in given if n not in {name for name, _ in declared}]
    if unknown:
        raise UsageError(f"--input-shape names {', '.join(repr(n) for n in unknown)}, which "
                         f"{'is not an input' if len(unknown) == 1 else 'are not inputs'} of {net.file}; "
                         f"its inputs: {', '.join(repr(name) for name, _ in declared)}")
    for name, shape in declared:
        shape = tuple(given.get(name, shape))
        if not shape:
            raise UsageError(f"{net.file}: input '{name}' has no shape; give one with --input-shape {name}=1,3,224,224")
        ctx.blobs[name] = ctx.builder.input(name, DataType.FLOAT, [int(d) for d in shape])


def sniff(path: Path) -> bool:
    """Return True when ``path`` looks like a Caffe prototxt (text with layer blocks)."""
    try:
        head = Path(path).read_bytes()[:4096]
    except OSError:
        return False
    if b"\x00" in head:
        return False
    text = head.decode("utf-8", errors="ignore")
    return ("layer {" in text or "layers {" in text or "layer{" in text) and ("type:" in text or "type :" in text)


def ops() -> list[OpSupport]:
    """Return the support table: one row per Caffe layer type."""
    return LAYERS.support()
