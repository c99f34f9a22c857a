"""Lower a ``torch.export.ExportedProgram`` (ATen ops) to the IR: the lowering's entry.

Every ``call_function`` node is looked up in the op table (``ops.OPS``) by its ATen name; all
missing ops are listed at once, with the module path and source line of their first use, before
anything is converted. Nodes computed only from small constants (``arange``, ``zeros``, a class
token plus a position embedding) are evaluated by torch itself and become constants. Parameters
and buffers are wrapped without copying (``from_array(t.detach().numpy())``); only the ones a
converter actually uses become initializers.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from convert.ir import (
    ConversionError,
    ConvertError,
    GraphBuilder,
    Model,
    ModelFormatError,
    Options,
    Unsupported,
    UnsupportedOpsError,
    Value,
)

from .facts import get_attr_of, op_key
from .irvalues import META_WEIGHTS, ir_dtype, layer_key, meta_of, place_of
from .lowering import Lowering, is_complex
from .ops import TensorMeta
from .ops.spectral import real_dtype

__all__ = ["META_WEIGHTS", "ir_dtype", "layer_key", "lower_program", "output_names", "prepare_program",
           "unsupported_ops"]

logger = logging.getLogger(__name__)



def output_names(count: int) -> list[str]:
    """Return the graph output names used for ``count`` outputs: 'output' or 'output0', 'output1', ..."""
    return ["output"] if count == 1 else [f"output{i}" for i in range(count)]


def prepare_program(program: object, source: str, options: Options) -> object:
    """Return ``program``, functionalized and decomposed by torch when that is needed to lower it.

    A program every op of which has a converter, and whose in-place ops can all be rebound, is
    returned as it is. Otherwise torch functionalizes it and decomposes the ops without a
    converter into Core ATen (``decompose.py``); the summary notes which ops went that way.
    """
    probe = Lowering(program, GraphBuilder("check"), options, source)
    missing = probe.missing()
    hazards = probe.alias_hazards()
    if not missing and not hazards:
        return program
    from .decompose import decompose

    try:
        decomposed = decompose(program)
    except Exception as exc:
        if hazards:
            key = op_key(hazards[0].target)  # type: ignore[attr-defined]
            where = place_of(key, hazards[0], source)[0]
            raise ConversionError(where, f"an in-place write through a view, and torch could not functionalize "
                                  f"the program ({type(exc).__name__}: {str(exc).strip()[:200]})") from exc
        logger.debug("run_decompositions failed on %s: %s", source, exc)
        return program
    if missing:
        names = ", ".join(u.op for u in missing)
        options.diagnostics.note(f"{source}: no direct converter for {names}; lowered through torch's "
                                 "Core ATen decompositions")
    else:
        options.diagnostics.note(f"{source}: in-place writes to tensors that views share; the program was "
                                 "functionalized by torch before lowering")
    return decomposed


def unsupported_ops(program: object, source: str, options: Options | None = None) -> list[Unsupported]:
    """Return every op of ``program`` the op table cannot convert, even after torch's decompositions."""
    options = options or Options()
    program = prepare_program(program, source, options)
    return Lowering(program, GraphBuilder("check"), options, source).missing()


def lower_program(program: object, *, source: str, options: Options,
                  input_names: Sequence[str] | None = None, name: str = "pytorch") -> Model:
    """Lower an ExportedProgram to an IR model at the canonical opset.

    Args:
        program: a ``torch.export.ExportedProgram`` (not decomposed, or core ATen).
        source: what to call the model in messages (its file name).
        options: conversion options; notes go to ``options.diagnostics``.
        input_names: names of the graph inputs (default: the program's placeholder names).
        name: the graph's name.

    Returns:
        The IR model, inputs and outputs in the program's order.

    A call its converter refuses (an argument the converter does not handle) is tried once more
    through torch's decomposition of that op, where torch has one.

    Raises:
        UnsupportedOpsError: listing every op without a converter.
        ConversionError: when one call cannot be converted (its op, module path and line).
    """
    from .decompose import decomposable, decompose

    fallback = getattr(program, "fallback", None)  # a traced graph (traced.py): torch.export on refusal
    if fallback is not None:
        said = len(options.diagnostics.notes), len(options.diagnostics.warnings)
        for note in getattr(program, "notes", ()):  # the trace's own (a branch it took as the example did)
            options.diagnostics.note(note)
        try:
            return _lower_once(program, source=source, options=options, input_names=input_names, name=name)
        except ConvertError as exc:
            logger.debug("%s: the traced graph did not lower (%s); captured by torch.export", source, exc)
            del options.diagnostics.notes[said[0]:], options.diagnostics.warnings[said[1]:]  # that attempt's
            program = fallback()
    original = program
    program = prepare_program(program, source, options)
    retried: list[str] = []
    first: ConvertError | None = None  # the refusal the user's own op met, reported if retrying fails
    while True:
        try:
            model = _lower_once(program, source=source, options=options, input_names=input_names, name=name)
        except ConvertError as exc:
            first = first or exc
            key = getattr(exc, "aten_op", None)
            if key is None or key in retried or not decomposable(key):
                if first is exc:
                    raise
                raise first from exc
            retried.append(key)
            try:
                program = decompose(original, also=retried)
            except Exception:
                raise first from None
            continue
        if first is not None:
            options.diagnostics.note(f"{first}; lowered through torch's decomposition of "
                                     f"{', '.join(retried)} instead")
        return model


def _lower_once(program: object, *, source: str, options: Options, input_names: Sequence[str] | None,
                name: str) -> Model:
    builder = GraphBuilder(name, source=source)
    lowering = Lowering(program, builder, options, source)
    missing = lowering.missing()
    if missing:
        raise UnsupportedOpsError(source, missing, what="ATen op",
                                  hint="Run `convert ops pytorch` for the supported list.")
    users = lowering.user_inputs
    names = list(input_names) if input_names else [str(n.name) for n in users]  # type: ignore[attr-defined]
    if len(names) != len(users):
        raise ConversionError(source, f"the program has {len(users)} inputs, {len(names)} names were given")
    for node in users:
        val = node.meta.get("val")  # type: ignore[attr-defined]
        shape: Sequence[object] = getattr(val, "shape", ())
        if len(shape) and not isinstance(shape[0], int):
            lowering.sym_names[str(shape[0])] = "batch"
    for node, nm in zip(users, names, strict=True):
        meta = meta_of(node.meta.get("val"), lowering.sym_names)  # type: ignore[attr-defined]
        if not isinstance(meta, TensorMeta):
            raise ConversionError(source, f"input '{nm}' is not a tensor ({type(meta).__name__})")
        if meta.dtype != real_dtype(meta.dtype):
            raise ConversionError(source, f"input '{nm}' is a complex tensor, which ONNX has no type for; "
                                  "pass torch.view_as_real(x) and call torch.view_as_complex on it in forward")
        lowering.env[node] = builder.input(nm, meta.dtype, meta.shape)
    out_node = None
    for node in program.graph.nodes:  # type: ignore[attr-defined]
        if node.op == "call_function":
            lowering.run_node(node)
        elif node.op == "output":
            out_node = node
        elif node.op == "get_attr":
            lowering.consts[node] = _get_attr(program, node.target)
            lowering.foldable.add(node)
    if out_node is None:
        raise ModelFormatError(f"{source}: the program has no output")
    _outputs(program, lowering, out_node, builder, source)
    model = builder.build(doc=f"converted from {os.path.basename(source)} by convert (pytorch frontend)")
    model.meta["convert:aten_ops"] = dict(lowering.seen)
    return model


def _get_attr(program: object, target: str) -> object:
    return get_attr_of(program.graph_module, target)  # type: ignore[attr-defined]


def _outputs(program: object, lowering: Lowering, out_node: object, builder: GraphBuilder, source: str) -> None:
    from torch.export.graph_signature import OutputKind

    specs = program.graph_signature.output_specs  # type: ignore[attr-defined]
    flat = list(out_node.args[0])  # type: ignore[attr-defined]
    users = [f for f, s in zip(flat, specs, strict=True) if s.kind == OutputKind.USER_OUTPUT]
    names = output_names(len(users))
    for node, nm in zip(users, names, strict=True):
        if node in lowering.consts and node not in lowering.env:
            value = lowering.value(node)
        else:
            value = lowering.env.get(node) if node is not None else None
        if not isinstance(value, Value):
            raise ConversionError(source, f"output '{nm}' is not a tensor ({type(value).__name__})")
        if is_complex(node.meta.get("val")):  # type: ignore[union-attr]
            raise ConversionError(source, f"output '{nm}' is a complex tensor, which ONNX has no type for; "
                                  "return torch.view_as_real(y) (its real and imaginary parts) instead")
        builder.output(value, nm)
