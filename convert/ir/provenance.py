"""Provenance: where a node came from in the source model, kept in its metadata.

Keys live under ``convert:`` in ``node.metadata_props`` so they survive a round trip through
ONNX. They feed error messages ("node 'conv_3' (Conv) from yolov4.cfg:112 [convolutional]")
and let users find their layers in the converted model.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as _ir

from .errors import shown

__all__ = ["INPUT_SHAPE_ORDER", "KEEP_FLOAT32", "Provenance", "describe", "get_provenance", "output_key",
           "set_output_of", "set_provenance"]

_FILE = "convert:source_file"
_LAYER = "convert:source_layer"
_KIND = "convert:source_type"
_LINE = "convert:source_line"
# A node that computes another source layer's output (a Conv with the next layer's BatchNorm
# folded in) names that layer here; the parity check's localisation reads it.
_OUTPUT_OF = "convert:output_of"
# On a graph input presented in another layout than its source (TensorFlow's NHWC input held NCHW):
# the order in which `--input-shape` lists its dims, as indices of the graph's dims ("0,2,3,1").
INPUT_SHAPE_ORDER = "convert:input_shape_order"
# On a node the source computes in float32 whatever the model's precision (a language model's rotary
# frequencies and angles, which transformers computes with autocast off): ``--precision`` keeps it so.
KEEP_FLOAT32 = "convert:keep_float32"


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a node came from: source file, layer or op name, its type, and a line if known."""

    file: str = ""
    layer: str = ""
    kind: str = ""
    line: int | None = None

    def where(self) -> str:
        """Return ``file:line [kind] 'layer'``, leaving out the parts that are unknown."""
        parts = []
        if self.file:
            parts.append(f"{self.file}:{self.line}" if self.line is not None else self.file)
        elif self.line is not None:
            parts.append(f"line {self.line}")
        if self.kind:
            parts.append(f"[{self.kind}]")
        if self.layer:
            parts.append(shown(self.layer))
        return " ".join(parts)


def set_provenance(node: _ir.Node, prov: Provenance) -> None:
    """Store ``prov`` in ``node.metadata_props``."""
    meta = node.metadata_props
    if prov.file:
        meta[_FILE] = prov.file
    if prov.layer:
        meta[_LAYER] = prov.layer
    if prov.kind:
        meta[_KIND] = prov.kind
    if prov.line is not None:
        meta[_LINE] = str(prov.line)


def get_provenance(node: _ir.Node) -> Provenance:
    """Read the provenance stored on ``node`` (empty fields when absent)."""
    meta = node.metadata_props
    line = meta.get(_LINE)
    return Provenance(
        file=meta.get(_FILE, ""),
        layer=meta.get(_LAYER, ""),
        kind=meta.get(_KIND, ""),
        line=int(line) if line and line.isdigit() else None,
    )


def output_key(node: _ir.Node) -> str:
    """Return the source layer whose output ``node`` computes ('' when unknown)."""
    meta = node.metadata_props
    return meta.get(_OUTPUT_OF) or meta.get(_LAYER, "")


def set_output_of(node: _ir.Node, absorbed: _ir.Node) -> None:
    """Record that ``node`` now computes ``absorbed``'s output (``absorbed`` is folded into it)."""
    key = output_key(absorbed)
    if key:
        node.metadata_props[_OUTPUT_OF] = key


def describe(node: _ir.Node) -> str:
    """Return ``node 'name' (OpType) from <provenance>`` for messages."""
    op = node.op_type if not node.domain else f"{node.domain}::{node.op_type}"
    if node.name:
        text = f"node {shown(node.name)} ({op})"
    else:
        outs = [o.name for o in node.outputs if o.name]
        text = f"the {op} node producing {shown(outs[0])}" if outs else f"an unnamed {op} node"
    where = get_provenance(node).where()
    return f"{text} from {where}" if where else text
