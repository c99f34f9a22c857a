"""SSD's DetectionOutput written back to Caffe (``ssd`` flavor) from what the Caffe frontend recorded.

The Caffe frontend lowers ``PriorBox`` to a constant and ``DetectionOutput`` to box decoding,
TopK and NonMaxSuppression, none of which Caffe can express. It records, in the metadata of the
node producing the detections (``convert:caffe_detection_output``; ONNX keeps node metadata, so
a Caffe -> ONNX -> Caffe trip keeps it too), the layer's parameters, its location and confidence
inputs, and each PriorBox behind the priors (parameters, bottoms, shape). ``RaiseDetectionOutput``
rewrites the recorded region back into ``convert.caffe::PriorBox`` nodes (concatenated over axis 2
when there are several) and one ``convert.caffe::DetectionOutput``; the emitters write the layers
with the recorded parameters. A region whose inputs are no longer in the graph is left alone
(and refused with its NonMaxSuppression, as any other).
"""

from __future__ import annotations

import json

from convert.ir import (
    DataType,
    GraphEditor,
    Model,
    Node,
    Provenance,
    Shape,
    TensorType,
    Value,
    convenience,
    get_provenance,
    passes,
    set_provenance,
)
from convert.ir.passes import Pass, PassResult

from .context import EmitContext, Emitted, NotExpressible
from .layers import CAFFE_DOMAIN, EMITTERS, _note

__all__ = ["DETECTION_OUTPUT_KEY", "RaiseDetectionOutput"]

DETECTION_OUTPUT_KEY = "convert:caffe_detection_output"  # written by frontends/caffe (same string)
_PARAM = "caffe_param"


class RaiseDetectionOutput(Pass):
    """Replace each recorded DetectionOutput region by PriorBox + DetectionOutput nodes."""

    def call(self, model: Model) -> PassResult:
        """Rewrite in place; return whether anything changed."""
        graph = model.graph
        values = {v.name: v for v in graph.inputs}
        for n in graph:
            values.update({v.name: v for v in n.outputs if v is not None and v.name})
        edit = GraphEditor(graph)
        changed = 0
        for node in list(graph):
            text = node.metadata_props.get(DETECTION_OUTPUT_KEY)
            if not text or node.graph is None:
                continue
            record = json.loads(text)
            loc, conf = values.get(record["loc"]), values.get(record["conf"])
            bottoms = [[values.get(b) for b in p["bottoms"]] for p in record["priors"]]
            if loc is None or conf is None or any(v is None for b in bottoms for v in b):
                continue
            priors = []
            for p, ins in zip(record["priors"], bottoms, strict=True):
                out = Value(name=edit.fresh(p["layer"]), shape=Shape(p["shape"]), type=TensorType(DataType.FLOAT))
                prior = Node(CAFFE_DOMAIN, "PriorBox", ins, convenience.convert_attributes({_PARAM: p["param"]}),
                             outputs=[out], name=out.name)
                set_provenance(prior, Provenance(file=get_provenance(node).file, layer=p["layer"], kind="PriorBox"))
                graph.insert_before(node, prior)
                priors.append(out)
            if len(priors) > 1:
                total = sum(int(p["shape"][2]) for p in record["priors"])
                joined = edit.node_before(node, "Concat", priors, {"axis": 2},
                                          base=f"{get_provenance(node).layer}_priors")
                joined.shape, joined.type = Shape([1, 2, total]), TensorType(DataType.FLOAT)
                priors = [joined]
            out = Value(name=edit.fresh(node.outputs[0].name or "detection_out"), shape=node.outputs[0].shape,
                        type=TensorType(DataType.FLOAT))
            det = Node(CAFFE_DOMAIN, "DetectionOutput", [loc, conf, priors[0]],
                       convenience.convert_attributes({_PARAM: record["param"]}), outputs=[out], name=node.name)
            set_provenance(det, get_provenance(node))
            graph.insert_before(node, det)
            edit.replace(node, out)
            changed += 1
        if changed:
            graph.opset_imports.setdefault(CAFFE_DOMAIN, 1)
            passes.EliminateDeadCode()(model)
        return PassResult(model, changed > 0)


def _with_param(node: Node, ctx: EmitContext, type_: str, field: str) -> Emitted:
    from google.protobuf import text_format

    if not ctx.flavor.detection:
        raise NotExpressible(f"{type_} is an SSD-fork layer, which {ctx.flavor.name} lacks; use --caffe-flavor ssd")
    e = ctx.layer(node, type_, list(node.inputs))
    text_format.Merge(node.attributes.get_string(_PARAM, ""), getattr(e.layer, field))
    return e


@EMITTERS.register(f"{CAFFE_DOMAIN}::PriorBox")
def prior_box(node: Node, ctx: EmitContext) -> Emitted:
    """convert.caffe::PriorBox (from RaiseDetectionOutput) -> PriorBox with its recorded parameters."""
    return _with_param(node, ctx, "PriorBox", "prior_box_param")


@EMITTERS.register(f"{CAFFE_DOMAIN}::DetectionOutput")
def detection_output(node: Node, ctx: EmitContext) -> Emitted:
    """convert.caffe::DetectionOutput (from RaiseDetectionOutput) -> DetectionOutput, recorded parameters."""
    return _with_param(node, ctx, "DetectionOutput", "detection_output_param")


_note(f"{CAFFE_DOMAIN}::PriorBox", "PriorBox", "ssd flavor; a Caffe source's PriorBox, written back")
_note(f"{CAFFE_DOMAIN}::DetectionOutput", "DetectionOutput",
      "ssd flavor; a Caffe source's DetectionOutput (recorded by the frontend), written back")
