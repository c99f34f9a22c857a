"""The PyTorch frontend: TorchScript, ExportedProgram, pickled modules and in-memory modules -> IR.

Importing this package does not import torch; ``load`` and ``load_module`` do.

The path a model takes, one layer per step. Each layer imports only its own files and the layers
below it (``tests/frontends/pytorch/test_pytorch_layers.py`` checks this, with no import circle,
no private name shared between files, no file over 800 lines):

1. **files**: what a ``.pt``, ``.pt2`` or pickle holds, checked before torch reads it.
   ``files.py`` (which kind of file; its archive, pickles and storages checked; torch's loaders),
   ``shared.py`` (one read of a file per conversion, shared by its steps).
2. **capture**: a module or a file's model -> one program, an ExportedProgram or a
   ``TracedProgram`` that reads as one. ``capture.py`` (``capture_model``: the one place the capture
   is chosen, with why; torch.export, its draft mode, the example inputs), the fast trace in
   ``traced.py`` (when a trace is taken), ``tracegraph.py`` (the traced graph read into FX),
   ``tracevals.py`` (its values) and ``tracewatch.py`` (which tensors it made numbers of),
   ``tsfold.py`` (TorchScript through torch's converter, traced sizes folded), ``tvcapture.py``
   and ``tvpost.py`` (torchvision's functions replaced while a model is captured, and the forms
   that replace them), ``frozen.py`` (decisions on tensor values: refused, or frozen on request).
3. **lowering**: program -> IR. ``lower.py`` (the entry: every gap listed first, torch's
   decompositions retried), ``lowering.py`` (one program's lowering, node by node: constants
   folded, in-place writes rebound), ``controlflow.py`` (``torch.cond`` and ``while_loop`` -> If
   and Loop, a part of the lowering), ``decompose.py`` (torch's functionalization and Core ATen
   decompositions, for what the table lacks), ``irvalues.py`` (dtypes, metas, weights, places).
4. **program facts**: what the captures and the lowering both need to know about a program.
   ``facts.py``: views and writes, sizes that depend on data (the rule, once), constants. It
   sits under the lowering, which reads it as the captures do.
5. **ops**: the table. ``ops/``, one file per op family, keyed by ATen name.

Under all of them, ``torchenv.py``: torch's logging silenced, torch's folder and ours. This
module wires the layers: ``load`` reads the file (1), captures it (2) and lowers the program (3);
``load_module`` captures an in-memory module; ``check_support`` lists every op the table lacks.

How a module is captured: traced (torch's tracer, as torch.onnx's TorchScript exporter runs it)
and its graph lowered directly where that is as sound as ``torch.export`` (no tracer warning but
numbers made from fixed sizes, static shapes, every op converted); otherwise through
``torch.export`` (ATen ops), with a fallback to the trace on data-dependent guards. A TorchScript
file's graph is read the same way when it is a plain trace, and converted to an ExportedProgram
by torch's own converter otherwise; an ExportedProgram is lowered as it is. One op table
(``ops``) serves all of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from convert.ir import (
    ConvertError,
    FrontendSpec,
    Model,
    ModelFormatError,
    OpSupport,
    Options,
    OptionSpec,
    Unsupported,
    UsageError,
    sparing_existing_objects,
)

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["FRONTEND", "check_support", "load", "load_module", "supported_ops"]

T = TypeVar("T")

_SUFFIXES = (".pt", ".pth", ".pt2", ".ptl", ".torchscript")

OPTIONS = (
    OptionSpec("--trust-pickle", "trust_pickle", "unpickle a whole module saved with torch.save(model) "
               "(this runs code from the file)", is_flag=True, default=False),
    OptionSpec("--model", "torch_factory", "for a state_dict: the callable building the module, "
               "as package.module:factory", metavar="PKG.MOD:FACTORY"),
    OptionSpec("--freeze-data-branches", "freeze_data_branches", "capture a Python if, loop or number on "
               "tensor values (refused otherwise, naming each file:line) with the example's outcome: the file "
               "then holds only for inputs that decide alike, and the check says 'PASS on the example's branch'",
               is_flag=True, default=False),
)


def _torchvision_ops_error() -> str:
    """Import torchvision (it registers the torchvision:: operators); return why it failed, or ''."""
    import torch

    try:
        import torchvision  # noqa: F401
    except Exception as exc:  # a CUDA-only build next to CPU torch fails inside its own import
        return f"torchvision did not import: {(str(exc).strip().splitlines() or [type(exc).__name__])[0]}"
    if not hasattr(torch.ops.torchvision, "nms"):
        return "torchvision imported but its compiled operators did not load (a build for another torch?)"
    return ""


def _quiet(read: Callable[[], T]) -> T:
    from .torchenv import quiet_torch

    with quiet_torch():  # torch.export.load logs a traceback before it raises
        return read()


def _load_needing_torchvision(read: Callable[[], T], source: str,
                              mentions: Callable[[], bool] | None = None) -> T:
    """Run ``read``; when the file names torchvision:: operators torch does not know, import torchvision
    and read again. ``mentions`` tells whether the file names them when the error does not say.

    Raises:
        UsageError: torchvision's operators are needed and cannot be loaded, with the reason.
    """
    try:
        return read()
    except Exception as exc:
        text = str(exc)
        if "torchvision::" not in text and "torchvision." not in text and not (mentions is not None and mentions()):
            raise
        first = (text.strip().splitlines() or [""])[0][:200]
        if "torchvision" not in first:  # torch said only "check the warnings above" (silenced)
            first = "its graph calls torch.ops.torchvision operators, which torch does not know"
        why = _torchvision_ops_error()
        if why:
            raise UsageError(f"{source} uses torchvision's operators ({first}), and {why}. Install the "
                             "torchvision build matching your torch (for CPU torch, its +cpu wheel)") from exc
    return read()


def _capture(paths: Sequence[Path], options: Options) -> tuple[object, list[str] | None, str]:
    """Return (ExportedProgram, input names or None, source name) for a model file, captured once per
    conversion (``check_support`` and ``load`` share it: ``shared.py``)."""
    from .shared import file_key

    path = Path(paths[0]) if paths else None
    key = file_key("capture", path) if path is not None and path.is_file() else ""
    if key in options.memo:
        return options.memo[key]  # type: ignore[return-value]
    captured = _capture_file(paths, options)
    if key:
        options.memo[key] = captured
    return captured


def _forget_capture(paths: Sequence[Path], options: Options) -> None:
    from .shared import file_key

    path = Path(paths[0]) if paths else None
    if path is not None and path.is_file():
        options.memo.pop(file_key("capture", path), None)


def _capture_file(paths: Sequence[Path], options: Options) -> tuple[object, list[str] | None, str]:
    import torch

    from .capture import (
        capture_model,
        forward_input_names,
        make_example_inputs,
        resolve_shapes,
        script_input_names,
    )
    from .files import (
        CHECKPOINT,
        EXPORTED_PROGRAM,
        TORCHSCRIPT,
        archive_mentions,
        check_archive,
        check_pt2_payloads,
        check_torchscript_storages,
        classify,
        load_checkpoint,
        load_torchscript,
        traced_input_dtypes,
        traced_input_shapes,
    )
    from .shared import remember_program

    if not paths:
        raise UsageError("pytorch: no model file given")
    path = Path(paths[0])
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    source = path.name
    kind = classify(path)
    if kind == EXPORTED_PROGRAM:
        check_pt2_payloads(path, trust=bool(options.get("trust_pickle", False)))
        try:
            program = _load_needing_torchvision(lambda: _quiet(lambda: torch.export.load(path)), source,
                                                lambda: archive_mentions(path, b"torch.ops.torchvision."))
        except ConvertError:
            raise
        except Exception as exc:  # torch's own loader on a damaged file (AssertionError, TypeError, ...): the file's
            raise ModelFormatError(f"{source}: not a readable ExportedProgram ({_said(exc)})") from exc
        if options.input_shapes:
            options.diagnostics.note(f"{source}: --input-shape ignored, the ExportedProgram fixes its input shapes")
        remember_program(options, path, program)
        return program, None, source
    if kind == TORCHSCRIPT:
        check_archive(path)
        check_torchscript_storages(path)
        try:
            script = _load_needing_torchvision(
                lambda: load_torchscript(path), source)
        except ConvertError:
            raise
        except Exception as exc:  # torch's loader on a damaged file (std::bad_alloc included): the file's fault
            raise ModelFormatError(f"{source}: not a readable TorchScript file ({_said(exc)})") from exc
        if options.dynamic_batch:
            options.diagnostics.warn(f"--dynamic-batch: not supported for TorchScript files ({source}); "
                                     "the batch stays static. Save the model with torch.export instead")
            options.dynamic_batch = False  # and so it is in the file (the writer would name it `batch`)
        names = script_input_names(script, source)
        traced = traced_input_shapes(path)
        if not options.input_shapes and traced is not None and len(traced) == len(names):
            options.input_shapes = dict(zip(names, traced, strict=True))
            shown = ", ".join(f"{n}={','.join(map(str, s))}" for n, s in zip(names, traced, strict=True))
            options.diagnostics.note(f"{source}: input shapes taken from the example it was traced with: {shown}")
        dtypes = traced_input_dtypes(path)
        example = make_example_inputs(resolve_shapes(names, options, source), dtypes=dtypes)
        return _script_program(script, example, options, source), names, source
    if kind == CHECKPOINT:
        module = load_checkpoint(path, options)
        if isinstance(module, torch.jit.ScriptModule):
            names = script_input_names(module, source)
            example = make_example_inputs(resolve_shapes(names, options, source))
            return _script_program(module, example, options, source), names, source
        names = forward_input_names(module)
        example = make_example_inputs(resolve_shapes(names, options, source))
        return capture_model(module, example, options, source), names, source
    raise UsageError(f"{path}: not a PyTorch file (expected TorchScript, an ExportedProgram .pt2 or torch.save output)")


def _script_program(script: torch.jit.ScriptModule, example: Sequence[torch.Tensor], options: Options,
                    source: str) -> object:
    """A TorchScript module's program, as ``capture.capture_model`` chooses for one read from a file:
    its graph read directly where it is a plain trace, otherwise through torch's TorchScript converter."""
    from .capture import capture_model

    return capture_model(script, example, options, source, scripted=True)


def _said(exc: BaseException) -> str:
    """What a framework's loader said, in one line (its type when it said nothing)."""
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}" if first else f"{type(exc).__name__}: the file ends early or is damaged"


@sparing_existing_objects
def load(paths: Sequence[Path], options: Options) -> Model:
    """Read a PyTorch model file into the IR (see the module docstring for the formats)."""
    from .lower import lower_program

    program, names, source = _capture(paths, options)
    _forget_capture(paths, options)  # check_support's and ours; the lowering holds what it needs
    return lower_program(program, source=source, options=options, input_names=names,
                         name=os.path.splitext(source)[0])


@sparing_existing_objects  # see convert/ir/gcwindow.py: a quarter of a ResNet's conversion otherwise
def load_module(module: torch.nn.Module, example_inputs: Sequence[torch.Tensor] | torch.Tensor,
                options: Options | None = None, *, name: str | None = None) -> Model:
    """Convert an in-memory ``nn.Module`` (the Python API) with its example inputs.

    Args:
        module: the model; it is put in eval mode.
        example_inputs: one tensor or a sequence of tensors, as ``module(*example_inputs)`` takes.
        options: conversion options (defaults when None).
        name: the graph name (default: the module's class name).

    Returns:
        The IR model; inputs are named after ``forward``'s parameters, outputs 'output' or 'output0'...
    """
    import torch

    from .capture import capture_model, forward_input_names
    from .lower import lower_program

    options = options or Options()
    example = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    source = name or type(module).__name__
    program = capture_model(module, example, options, source)
    names = forward_input_names(module)[: len(example)] or None
    if names is not None and len(names) != len(example):
        names = None
    return lower_program(program, source=source, options=options, input_names=names, name=source)


def check_support(paths: Sequence[Path], options: Options) -> list[Unsupported]:
    """Return every ATen op of the model that the op table cannot convert."""
    from .lower import unsupported_ops

    program, _, source = _capture(paths, options)
    return unsupported_ops(program, source, options)


def supported_ops() -> list[OpSupport]:
    """Return the support table: one row per ATen op."""
    from .ops import OPS

    return OPS.support(sort=True)


def _sniff(path: Path) -> bool:
    from .files import classify

    return classify(path) is not None


def _module_runtime(module: object, example_inputs: object, options: Options) -> object:
    from convert.parity.runtimes.torch import module_runtime  # lazily: imports torch

    return module_runtime(module, example_inputs, options)


FRONTEND = FrontendSpec(
    name="pytorch",
    description="PyTorch: TorchScript (.pt), ExportedProgram (.pt2), torch.save modules (--trust-pickle)",
    suffixes=_SUFFIXES,
    load=load,
    sniff=_sniff,
    ops=supported_ops,
    check_support=check_support,
    options=OPTIONS,
    runtime="convert.parity.runtimes.torch",
    load_object=lambda obj, example, options: load_module(obj, example, options),  # type: ignore[arg-type]
    object_runtime=_module_runtime,
)
