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
import shutil
import tempfile
from pathlib import Path

import onnx

from convert import ir

from .adapters import adapt_opset

__all__ = ["EXTERNAL_THRESHOLD", "MAX_OPSET", "MIN_OPSET", "ORT_MIN_OPSET", "save_onnx"]

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

