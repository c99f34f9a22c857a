"""Capture a model as one program: the choice of capture (``capture_model``), and torch's captures.

The capture layer's entry (see ``__init__``'s "the path a model takes"). ``capture_model`` is the
one place the capture is chosen, and says why (its docstring lists the order): the fast trace
(``traced.py``), ``torch.export`` (non-strict, which keeps the high-level ATen ops: conv2d,
batch_norm, linear, ...), its draft mode, or ``torch.jit.trace`` and torch's TorchScript converter
(``script_to_program``, with ``tsfold.py``) where torch.export meets a data-dependent guard (a
detector's NMS, a branch on tensor values); the summary says so. The example inputs a capture
runs on are made here too (``resolve_shapes``, ``make_example_inputs``).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import logging
import os
import re
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from convert.ir import ConversionError, ModelFormatError, Options, UsageError

from .torchenv import PACKAGE, quiet_torch, torch_folder
from .tvcapture import torchvision_replaced_for_capture
from .tvpost import replace_torchvision_scripted

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["TORCHSCRIPT_MIN_TORCH", "attributes_kept", "capture_model", "export_module", "forward_input_names",
           "make_example_inputs", "quiet_torch", "resolve_shapes", "script_input_names", "script_to_program"]

logger = logging.getLogger(__name__)

_DATA_DEPENDENT = ("data-dependent", "data dependent", "GuardOnDataDependentSymNode",
                   "Could not guard on", "unbacked", "Dynamic control flow is not supported")


def _is_data_dependent(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if type(seen).__name__ == "GuardOnDataDependentSymNode":
            return True
        text = str(seen)
        if any(marker in text for marker in _DATA_DEPENDENT):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def forward_input_names(module: torch.nn.Module) -> list[str]:
    """Return the names of ``module.forward``'s positional parameters."""
    try:
        params = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def script_input_names(script: torch.jit.ScriptModule, source: str = "the TorchScript file") -> list[str]:
    """Return the input names of a TorchScript module's ``forward`` (without ``self``).

    Raises:
        ModelFormatError: the module has no ``forward`` (a damaged or hand-edited archive).
    """
    forward = getattr(script, "forward", None)
    schema = getattr(forward, "schema", None)
    if schema is None:
        raise ModelFormatError(f"{source}: the TorchScript module has no forward method to convert")
    return [a.name for a in schema.arguments[1:]]


def resolve_shapes(names: Sequence[str], options: Options, source: str) -> list[tuple[int, ...]]:
    """Return the shape of each input from ``options.input_shapes`` (by name or as ``input0``...).

    Raises:
        UsageError: when an input has no shape, naming the flag to pass.
    """
    given = dict(options.input_shapes)
    known = {*names, *(f"input{i}" for i in range(len(names))), *([""] if len(names) == 1 else [])}
    unknown = [k for k in given if k not in known]
    if unknown:
        raise UsageError(f"{source}: --input-shape names {', '.join(repr(k) for k in unknown)}, "
                         f"which the model does not have (inputs: {', '.join(names)})")
    shapes: list[tuple[int, ...]] = []
    for i, name in enumerate(names):
        shape = given.pop(name, None)
        if shape is None:
            shape = given.pop(f"input{i}", None)
        if shape is None and len(names) == 1 and "" in given:  # an unnamed --input-shape is the only input's
            shape = given.pop("")
        if shape is None:
            listed = ", ".join(f"'{n}'" for n in names)
            raise UsageError(
                f"{source}: the shape of input '{name}' is unknown (inputs: {listed}). "
                f"Pass --input-shape {name}=1,3,224,224 (one per input; 'input{i}' works too)"
            )
        shapes.append(tuple(int(d) for d in shape))
    if given:
        raise UsageError(f"{source}: --input-shape names {', '.join(repr(k) for k in given)}, "
                         f"which the model does not have (inputs: {', '.join(names)})")
    return shapes


def make_example_inputs(shapes: Sequence[Sequence[int]], seed: int = 0,
                        dtypes: Sequence[str] | None = None) -> tuple[torch.Tensor, ...]:
    """Return seeded example inputs of ``shapes``: float32, or the ``dtypes`` named ('int64', 'bool').

    Integer inputs (token ids, attention masks) are 0 or 1, valid for any embedding or mask.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = []
    for i, s in enumerate(shapes):
        name = dtypes[i] if dtypes is not None and i < len(dtypes) else "float32"
        dtype = getattr(torch, name, torch.float32)
        if dtype.is_floating_point:
            out.append(torch.rand(tuple(s), generator=gen).to(dtype))
        else:
            out.append(torch.randint(0, 2, tuple(s), generator=gen).to(dtype))
    return tuple(out)


def script_to_program(script: torch.jit.ScriptModule, example: Sequence[torch.Tensor], source: str,
                      traced_from: str | None = None) -> object:
    """Convert a TorchScript module to an ExportedProgram with torch's TorchScript converter.

    ``traced_from``: why torch.export failed on the module this was traced from (the message then
    says so, instead of suggesting torch.export.save, which would fail the same way).
    """
    import torch

    if _torch_minor() < TORCHSCRIPT_MIN_TORCH:  # the converter's API we drive (tsfold) is 2.6's
        need = ".".join(map(str, TORCHSCRIPT_MIN_TORCH))
        raise UsageError(f"{source}: reading a TorchScript file needs torch>={need} (its TorchScript converter); "
                         f"this is torch {torch.__version__}. Upgrade torch, or save the model with "
                         "torch.export.save (.pt2), which this torch reads")
    try:
        from torch._export import converter  # noqa: F401  # what script_to_exported drives
    except ImportError as exc:
        raise UsageError(f"{source}: this torch version cannot convert TorchScript graphs; "
                         f"install torch>={'.'.join(map(str, TORCHSCRIPT_MIN_TORCH))}") from exc
    from .tsfold import concretize, script_to_exported

    try:
        with quiet_torch():
            program = script_to_exported(script, example)
            concretize(program, example)
            return program
    except Exception as exc:
        why = _first_line(exc).rstrip(".")
        where = _script_node_place(script, why)
        if traced_from is not None:
            raise ConversionError(f"module {source}", f"torch.export failed ({traced_from}), its draft mode too, "
                                  f"and torch could not convert the traced graph: {why}{where}") from exc
        if _traced_torchvision_detection(script):
            raise ConversionError(
                f"TorchScript model {source}",
                f"torch could not convert this traced torchvision detector ({why}{where}); torchvision's "
                f"tracing-only code computes image sizes as tensors and Mask/Keypoint R-CNN's post-processing "
                f"as scripted loops, which are replaced where they have the form torchvision {_tv_version()} "
                f"traces. Convert the module instead, convert.convert(model, example) in Python: "
                f"torchvision's detectors are captured by torch.export there") from exc
        hint = ("Save the model with torch.export.save instead (a Python loop is unrolled there, a "
                "data-dependent branch can be written with torch.cond, a data-dependent loop with "
                "torch._higher_order_ops.while_loop)")
        raise ConversionError(f"TorchScript model {source}",
                              f"torch could not convert the scripted graph: {why}{where}. {hint}") from exc


#: The oldest torch whose TorchScript converter has the API ``tsfold`` drives (2.5's
#: ``get_block_to_lifted_attrs`` returns one mapping, 2.6's two; 2.4's has neither): measured by
#: running the TorchScript tests on torch 2.4.1, and reading 2.5.1's and 2.6.0's converter.
TORCHSCRIPT_MIN_TORCH = (2, 6)


def _torch_minor() -> tuple[int, int]:
    """torch's (major, minor) version, from ``torch.__version__`` ("2.14.1+cpu" -> (2, 14))."""
    import torch

    found = re.match(r"(\d+)\.(\d+)", str(torch.__version__))
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def _tv_version() -> str:
    return str(getattr(sys.modules.get("torchvision"), "__version__", "?"))


def _traced_torchvision_detection(script: torch.jit.ScriptModule) -> bool:
    """Whether ``script`` holds code traced from torchvision's detection models
    (``torchvision/models/detection/``), as its source ranges say (a file saved without them: False)."""
    import re

    pattern = re.compile(r'File "[^"]*torchvision[/\\]models[/\\]detection[/\\]')
    try:
        graph = script.inlined_graph  # type: ignore[attr-defined]  # kept alive while its nodes are read
        return any(pattern.search(str(node.sourceRange())) for node in graph.nodes())
    except Exception:  # source ranges are best effort
        return False


def _script_node_place(script: torch.jit.ScriptModule, message: str) -> str:
    """Return ' (at file:line)' for the first node of the kind torch names in ``message`` ('prim::Loop')."""
    import re

    m = re.search(r"node ([a-z]+::\w+)", message)
    if m is None:
        return ""
    try:
        graph = script.inlined_graph  # type: ignore[attr-defined]  # kept alive while its nodes are read
        nodes = graph.findAllNodes(m.group(1))
        text = str(nodes[0].sourceRange()) if nodes else ""
    except Exception:  # source ranges are best effort: a file saved without debug info has none
        return ""
    lines = text.splitlines()
    place = re.search(r'File "([^"]+)", line (\d+)', lines[0]) if lines else None
    if place is None:
        return ""
    return f" (at {os.path.basename(place.group(1))}:{place.group(2)})"  # the line where the node starts


def _export_dynamic_batch(module: torch.nn.Module, example: Sequence[torch.Tensor], options: Options,
                          source: str) -> object | None:
    """Export with dimension 0 of every input symbolic; None (with a warning) when the model fixes it.

    torch specialises sizes 0 and 1, so a batch-1 example is doubled for the capture. When the batch
    stays static, ``options.dynamic_batch`` is turned off: the file then declares the batch it takes
    (the writer would otherwise name dimension 0 of every input and output ``batch``).
    """
    import torch
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    auto = getattr(torch.export.Dim, "AUTO", None)
    if auto is None:
        return _static_batch(options, "--dynamic-batch needs torch>=2.6 (torch.export.Dim.AUTO); the batch stays "
                                      "static")
    batched = tuple(torch.cat([x, x]) if x.dim() and x.shape[0] == 1 else x for x in example)
    dynamic = tuple({0: auto} if x.dim() else None for x in batched)
    try:
        with torch.no_grad(), quiet_torch():
            program = torch.export.export(module, batched, dynamic_shapes=dynamic, strict=False)
    except Exception as exc:
        return _static_batch(options, f"--dynamic-batch: torch.export could not keep the batch of {source} "
                                      f"symbolic ({_first_line(exc)}); the batch stays static")
    users = [n for n in program.graph.nodes if n.op == "placeholder"][-len(batched):]
    # A size torch specialised may still be a SymInt, of a constant expression (a loop over the batch,
    # `list(x)` in torchvision's detectors, made it 2, the doubled example's): that is a fixed size.
    if all(is_concrete_int(n.meta["val"].shape[0]) for n in users if n.meta["val"].dim()):
        return _static_batch(options, f"--dynamic-batch: {source} fixes its batch size (torch.export "
                                      "specialised it); the batch stays static")
    return program


def _static_batch(options: Options, warning: str) -> None:
    """Warn that the batch stays static, and keep it so in the file (``options.dynamic_batch`` off)."""
    options.diagnostics.warn(warning)
    options.dynamic_batch = False


@contextlib.contextmanager
def attributes_kept(module: torch.nn.Module) -> Iterator[None]:
    """Put every submodule's attributes back as they were once the block ends.

    torch.export runs ``forward`` on fake tensors. A forward that caches tensors on its module
    (ultralytics' Detect head stores its anchors and strides on the first call) would otherwise
    leave FakeTensors behind, and the caller's model would fail on its next eager call. Only the
    attribute containers are copied, never the weights.
    """
    saved = []
    for sub in module.modules():
        state = dict(sub.__dict__)
        inner = {k: copy.copy(v) for k, v in state.items() if type(v) in (dict, list, set)}
        saved.append((sub, state, inner))
    try:
        yield
    finally:
        for sub, state, inner in saved:
            sub.__dict__.clear()
            sub.__dict__.update(state)
            for key, contents in inner.items():
                container = state[key]
                container.clear()
                if isinstance(container, list):
                    container.extend(contents)
                else:
                    container.update(contents)


def _draft_export(module: torch.nn.Module, example: Sequence[torch.Tensor], options: Options, source: str,
                  reason: str) -> object | None:
    """Capture with ``torch.export.draft_export``, which settles data-dependent decisions from the example.

    Accepted only when every problem it reports is such a decision (not a missing or wrong fake
    kernel), and then only where the user asked for decisions to be frozen (``frozen.frozen``:
    refused otherwise, each decision named with its file:line and source line).
    """
    import torch

    from .frozen import decisions_of_draft, frozen, keep_example

    draft = getattr(torch.export, "draft_export", None)
    if draft is None:
        return None
    try:
        with torch.no_grad(), quiet_torch():
            program = draft(module, tuple(example), strict=False)
    except Exception as exc:
        logger.debug("draft_export failed on %s: %s", source, _first_line(exc))
        return None
    report = getattr(program, "_report", None)
    failures = list(getattr(report, "failures", []))
    decided = [f for f in failures if getattr(f.failure_type, "name", "") == "DATA_DEPENDENT_ERROR"]
    if len(decided) != len(failures):
        kinds = sorted({getattr(f.failure_type, "name", "?") for f in failures} - {"DATA_DEPENDENT_ERROR"})
        logger.debug("draft_export of %s reported %s; not used", source, ", ".join(kinds))
        return None
    frozen(options, source, decisions_of_draft(decided, _file_names(report), torch_folder(), PACKAGE + os.sep),
           "torch.export.draft_export")
    keep_example(options, example)
    logger.debug("torch.export could not capture %s soundly (%s); draft_export used", source, reason)
    return program


def _file_names(report: object) -> dict[int, str]:
    """The file names of a draft report's frames, by the number torch interned each under: the
    report's own table (the files first logged during that export), then torch's process-wide one
    (a file an earlier export logged is not in the report's)."""
    names: dict[int, str] = {}
    try:
        from torch._logging import structured

        names.update({v: k for k, v in getattr(structured, "INTERN_TABLE", {}).items()})
    except ImportError:  # pragma: no cover - torch without structured logging
        pass
    names.update(getattr(report, "str_to_filename", {}) or {})
    return names


def capture_model(subject: torch.nn.Module, example: Sequence[torch.Tensor], options: Options, source: str,
                  *, scripted: bool = False, fast: bool = True) -> object:
    """Capture ``subject`` as one program: the one place the capture is chosen.

    ``subject`` is a TorchScript module read from a file (``scripted``: a ``.pt``, or a pickled
    ``ScriptModule``) or any other module (the Python API, a pickled ``nn.Module``; an in-memory
    ScriptModule is captured as a module, which torch.export refuses); an ExportedProgram (``.pt2``)
    is a program already. The result is an ExportedProgram, or a ``traced.TracedProgram`` that the
    lowering reads as one. The first of these that applies is taken, each choice logged (debug) with
    why the ones before it were not:

    1. a TorchScript module whose graph is a plain trace: that graph, read directly
       (``traced.program_from_script``), as fast as the trace and with no converter;
    2. any other TorchScript module: torch's TorchScript converter (``script_to_program``);
    3. a module, unless ``fast`` is False or ``--dynamic-batch`` asks for a symbolic batch (a trace
       fixes every size): the fast trace (``traced.trace_module``), where it is as sound as
       torch.export (its module docstring lists when), at a fraction of torch.export's time;
    4. torch.export (non-strict), with dimension 0 of every input symbolic under ``--dynamic-batch``
       where the model lets it be;
    5. where torch.export meets a data-dependent guard: ``torch.export.draft_export``, when every
       problem it reports is a decision on data that the user lets freeze (``frozen.py``);
    6. otherwise ``torch.jit.trace``, its graph converted by torch's TorchScript converter (its
       decisions on data frozen alike, or refused).

    The direct readings (1 and 3) carry the capture the next step would make as their ``fallback``:
    the lowering takes it when a converter refuses a call of the traced graph (``lower.lower_program``).
    A module is left in eval mode with its attributes as they were (``attributes_kept``), and
    torchvision's functions are replaced while it is captured (``tvcapture.py``).
    """
    import torch

    from .traced import program_from_script, trace_module

    if scripted:
        script: torch.jit.ScriptModule = subject  # type: ignore[assignment]

        def converted() -> object:
            return script_to_program(script, example, source)

        # torchvision's scripted post-processing (a traced detector's NMS, mask paste, keypoint loop) as
        # operators of ours, which both readers expand into the forms of tvpost
        replace_torchvision_scripted(script)
        program = program_from_script(script, example, options, source, fallback=converted)
        if program is not None:
            logger.debug("%s: the TorchScript graph is a plain trace; read directly", source)
            return program
        logger.debug("%s: the TorchScript graph is not a plain trace (see above); torch's converter reads it",
                     source)
        return converted()
    module = subject
    module.eval()
    with attributes_kept(module), torchvision_replaced_for_capture():
        if not fast:
            why = "the fast trace is off"
        elif options.dynamic_batch:
            why = "--dynamic-batch (a trace fixes every size)"
        else:
            program = trace_module(module, example, options, source,
                                   fallback=lambda: capture_model(module, example, options, source, fast=False))
            if program is not None:
                logger.debug("%s: captured by the fast trace", source)
                return program
            why = "the fast trace was refused (see above)"
        if options.dynamic_batch:
            program = _export_dynamic_batch(module, example, options, source)
            if program is not None:
                logger.debug("%s: captured by torch.export with a symbolic batch", source)
                return program
        try:
            with torch.no_grad(), quiet_torch():
                program = torch.export.export(module, tuple(example), strict=False)
            logger.debug("%s: captured by torch.export: %s", source, why)
            return program
        except Exception as exc:
            if not _is_data_dependent(exc):
                raise ConversionError(f"module {source}", f"torch.export failed: {_first_line(exc)}") from exc
            reason = _first_line(exc)
        program = _draft_export(module, example, options, source, reason)
        if program is not None:
            return program
        logger.debug("%s: torch.export met a data-dependent guard (%s) and draft_export did not settle it; "
                     "traced with torch.jit.trace", source, reason)
        return _jit_traced(module, example, options, source, reason)


def export_module(module: torch.nn.Module, example: Sequence[torch.Tensor], options: Options,
                  source: str, *, fast: bool = True) -> object:
    """Capture ``module`` (an ``nn.Module``) as ``capture_model`` chooses: the fast trace where it is as
    sound as torch.export (unless ``fast`` is False), otherwise torch.export, falling back to tracing
    on data-dependent guards."""
    return capture_model(module, example, options, source, scripted=False, fast=fast)


def _jit_traced(module: torch.nn.Module, example: Sequence[torch.Tensor], options: Options, source: str,
                reason: str) -> object:
    """``module`` traced by ``torch.jit.trace`` and converted by torch's TorchScript converter, its decisions
    on data frozen (or refused: ``frozen.frozen``); ``reason``: why torch.export failed."""
    import torch

    from .frozen import decisions_of_warnings, frozen, keep_example

    try:
        with torch.no_grad(), quiet_torch(), warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            traced = torch.jit.trace(  # type: ignore[no-untyped-call]
                module, tuple(example), check_trace=False, strict=False)
    except Exception as exc:
        raise ConversionError(f"module {source}", f"torch.export failed ({reason}) and tracing failed too: "
                              f"{_first_line(exc)}") from exc
    frozen(options, source, decisions_of_warnings(said), "torch.jit.trace")
    keep_example(options, example)
    options.diagnostics.note(
        f"torch.export could not capture {source} (data-dependent: {reason}); "
        "fell back to a traced TorchScript graph, valid for inputs like the example"
    )
    return script_to_program(traced, example, source, traced_from=reason)
