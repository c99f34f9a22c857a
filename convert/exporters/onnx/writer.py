"""Write the IR as an ONNX file, with weights streamed to external data when large.

The exporter adds up initializer bytes itself: above ``EXTERNAL_THRESHOLD`` (1.8 GiB) or on
request it writes ``<name>.data`` beside the model, one tensor at a time, with relative locations.
Letting protobuf fail on its own gives only "Failed to serialize proto", after gigabytes of RAM.
Everything is written in a temporary folder inside the target folder and moved into place at the
end, so a failure or Ctrl-C leaves nothing at the output path.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

import onnx

from convert import ir

from .adapters import adapt_opset, type_allowed

__all__ = ["EXTERNAL_THRESHOLD", "MAX_OPSET", "MIN_OPSET", "ORT_MIN_OPSET", "refuse_unloadable", "save_onnx"]

logger = logging.getLogger(__name__)

EXTERNAL_THRESHOLD = int(1.8 * 1024**3)
MIN_OPSET = 1
ORT_MIN_OPSET = 7  # ONNX Runtime refuses models below opset 7
MAX_OPSET = onnx.defs.onnx_opset_version()

def _min_ir_version(opset: int) -> int:
    """The oldest IR version that can carry ``opset`` (runtimes reject IR versions newer than they know)."""
    return int(onnx.helper.find_min_ir_version_for([onnx.helper.make_opsetid("", opset)], ignore_unknown=True))


def _weight_bytes(model: ir.Model) -> int:
    return sum(v.const_value.nbytes for g in model.graphs() for v in g.initializers.values()
               if v.const_value is not None)


def make_batch_dynamic(model: ir.Model, diagnostics: ir.Diagnostics, name: str = "batch") -> None:
    """Make the leading dimension of every input and output symbolic.

    Intermediate shapes are cleared (the runtime infers them again) and Reshape targets that
    hard-code the batch size as their first element get 0 ('copy from input') instead.
    """
    graph = model.graph
    batch_sizes = set()
    for v in list(graph.inputs) + list(graph.outputs):
        if v.shape is not None and len(v.shape) > 0:
            if isinstance(v.shape[0], int):
                batch_sizes.add(v.shape[0])
            v.shape = ir.Shape([ir.SymbolicDim(name), *list(v.shape)[1:]])
    io = {id(v) for v in list(graph.inputs) + list(graph.outputs)}
    fixed = 0
    for node in graph:
        if node.op_type == "Reshape" and node.domain == "" and len(node.inputs) > 1:
            target = node.inputs[1]
            src = node.inputs[0]
            if (target is not None and target.const_value is not None and src is not None
                    and src.shape is not None and len(src.shape) > 0 and src.shape[0] in batch_sizes
                    and not node.attributes.get_int("allowzero", 0)):
                arr = target.const_value.numpy().copy()
                if arr.ndim == 1 and arr.size and arr[0] in batch_sizes and arr[0] == src.shape[0]:
                    arr[0] = 0
                    newname = f"{target.name}_dynbatch"
                    value = ir.Value(name=newname, shape=ir.Shape(arr.shape), type=ir.TensorType(ir.DataType.INT64),
                                     const_value=ir.from_array(arr, name=newname))
                    graph.register_initializer(value)
                    node.replace_input_with(1, value)
                    fixed += 1
        for out in node.outputs:
            if id(out) not in io:
                out.shape = None
    if fixed:
        diagnostics.note(f"--dynamic-batch: {fixed} Reshape target(s) now copy the batch dimension")


# What ONNX Runtime says when it lacks an op, rather than finding the graph wrong: no verdict on loading.
_ORT_UNKNOWN_OP = ("is not a registered function/op", "Could not find an implementation", "No Op registered",
                   "not a registered", "Unrecognized attribute")


def refuse_unloadable(model: ir.Model, opset: int, options: ir.Options) -> None:
    """Refuse, before anything is written, a model that ONNX Runtime would not load.

    onnx's shape inference in strict mode runs on the graph without its weights (they are typed
    inputs: no byte is read; 0.1 s for a graph of a few hundred nodes): it finds sizes that
    contradict each other, as ONNX Runtime does when it loads a file (an NHWC input shape given to an
    NCHW conversion: "Can't merge shape info"). Where it finds something, ONNX Runtime itself is asked
    to load that weightless graph, since onnx's inference is stricter than the runtime on a few ops:
    only what both refuse is refused.

    Raises:
        ExportError: what the runtime refuses, and that nothing was written.
    """
    from convert.ir.passes.shape_inference import strict_inference_error, weightless_proto

    proto = weightless_proto(model)
    found = strict_inference_error(proto)
    if not found:
        return
    _refuse_types_of_another_opset(found, opset)
    if opset >= ORT_MIN_OPSET:
        refused = _ort_refusal(proto)
        if not refused:
            logger.debug("onnx's strict shape inference objects (%s), but ONNX Runtime loads the graph", found)
            return
        found = refused
    given = ("; an --input-shape was given: check it against `convert inspect`" if options.input_shapes
             else "; this is a bug in convert: please report it")
    raise ir.ExportError(f"the converted model would not load in ONNX Runtime: {found[:600]}. Nothing was "
                         f"written{given}")


_UNSUPPORTED_TYPE = re.compile(r"\(op_type:(\w+)(?:, node name: ([^)]*))?\): \[\w+\] (\w+) typestr: (\w+), "
                               r"has unsupported type: (tensor\(\w+\))")


def _refuse_types_of_another_opset(found: str, opset: int) -> None:
    """Refuse, as an op this opset cannot express, an input type that opset's schema does not take but a
    newer one does (BitShift on int8 written at opset 25: ONNX's own schema says no)."""
    gaps = ir.GapCollector(by_reason=False)
    for op, node, formal, type_param, type_str in _UNSUPPORTED_TYPE.findall(found):
        since = next((v for v in range(opset + 1, MAX_OPSET + 1)
                      if (s := _schema(op, v)) is not None and type_allowed(s, type_param, type_str)), 0)
        if since:
            gaps.add(op, f"node {ir.shown(node)}" if node else "a node",
                     f"opset {opset} takes no {type_str} as its input '{formal}' (opset {since} takes it)")
    gaps.raise_if_any(f"the model (opset {opset})", what=f"op at opset {opset}", hint="Choose another --opset.")


def _schema(op: str, opset: int) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(op, opset, "")
    except onnx.defs.SchemaError:
        return None


def _ort_refusal(proto: object) -> str:
    """Return why ONNX Runtime refuses to load ``proto`` as a user's session does (its default graph
    optimisations: the layout ones re-check sizes that the basic ones let through), or '' when it loads
    it, or when it refuses only for an op it does not have."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4  # its lenient merges warn on stderr: the verdict is ours to say
    try:
        ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])  # type: ignore[attr-defined]
    except Exception as exc:  # ONNX Runtime's own error types
        text = " ".join(str(exc).split())
        if any(s in text for s in _ORT_UNKNOWN_OP):
            return ""
        return text.split(" : ", 3)[-1] if " : " in text else text
    return ""


def save_onnx(model: ir.Model, path: Path, options: ir.Options) -> list[Path]:
    """Write ``model`` to ``path`` (and ``path.data`` when external) at ``options.opset``.

    Returns:
        The files written, the model first.

    Raises:
        UnsupportedOpsError: ops that cannot be expressed at the requested opset.
        ExportError: the target folder is not writable, or the checker rejects the result.
    """
    # No --opset: keep the model's own (an ONNX source's; 17, the IR's canonical opset, otherwise).
    opset = int(options.opset) if options.opset is not None else int(model.graph.opset_imports.get("", 17))
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise ir.UsageError(f"--opset {opset} is out of range: this onnx supports {MIN_OPSET}..{MAX_OPSET}")
    if opset < ORT_MIN_OPSET:
        options.diagnostics.warn(f"opset {opset}: ONNX Runtime runs opset {ORT_MIN_OPSET} and later, so it cannot load "
                                 "this file (nor can the parity check); other runtimes may")
    adapt_opset(model, opset)
    if any(v.type is None for v in model.graph.outputs):
        ir.passes.InferShapes()(model)
        untyped = [v.name for v in model.graph.outputs if v.type is None]
        if untyped:
            raise ir.ExportError(f"cannot tell the type of graph output(s) {', '.join(untyped)}; "
                                 "the frontend must set it")
    if options.dynamic_batch:
        make_batch_dynamic(model, options.diagnostics)
    precision = str(options.get("precision", "fp32"))
    if precision != "fp32":
        from .precision import lower_precision

        counts = lower_precision(model, precision, keep_io_types=not options.get("half_io", False))
        options.diagnostics.note(
            f"--precision {precision}: {counts['half']} nodes in {precision}, {counts['fp32']} kept in fp32 "
            f"(reductions, normalisations, softmax, exp/log: see docs/precision.md), {counts['weights']} "
            f"weights in {precision}, inputs and outputs "
            f"{'in ' + precision if options.get('half_io', False) else 'kept fp32'}")
    if not model.graph.name:  # ONNX requires one; a source may have none (a SavedModel's mangled signature)
        model.graph.name = "main_graph"
    # IR 4 dropped the rule that initializers must be graph inputs; folding adds initializers.
    ir_needed = max(_min_ir_version(opset), 4)
    model.ir_version = ir_needed

    refuse_unloadable(model, opset, options)
    total = _weight_bytes(model)
    external = options.external_data if options.external_data is not None else total > EXTERNAL_THRESHOLD
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise ir.ExportError(f"cannot write {path}: folder '{folder}' does not exist")
    data_name = path.name + ".data" if external else None
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder))
    try:
        tmp_model = tmp / path.name

        def progress(done: int, total_bytes: int) -> None:
            options.progress("writing weights", done, total_bytes)

        try:
            if external:
                logger.info("writing %.2f GiB of weights to %s", total / 1024**3, data_name)
                ir.save_model(model, tmp_model, external_data=data_name, progress=progress)
                # By path: the checker then follows external data instead of loading it.
                onnx.checker.check_model(str(tmp_model))
            else:
                # Streamed: memory stays near the largest tensor (see ir.save_inline_streamed).
                ir.save_inline_streamed(model, tmp_model, check=onnx.checker.check_model, progress=progress)
        except onnx.checker.ValidationError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ir.ExportError(f"the ONNX checker rejected the exported model: {first}") from exc
        written = [path]
        if data_name is not None:
            os.replace(tmp / data_name, folder / data_name)
            written.append(folder / data_name)
        os.replace(tmp_model, path)
        return written
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

