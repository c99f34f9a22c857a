"""A traced TorchScript graph lowered without ``torch.export``: the fast capture of plain modules.

``torch.export`` costs a plain module 0.5-1.5 s before our lowering starts: importing dynamo and
functorch (1.3 s in a process that has not, which torchvision and transformers do on import) and
tracing every op through Python dispatch modes on fake tensors. Torch's tracer records the same
ATen ops in C++ in a tenth of the time, so the TorchScript exporter starts sooner (ResNet-18:
0.23 s against 0.72 s for our capture through torch.export, docs/performance.md). Here a traced
graph becomes an FX graph the op table lowers as it lowers an ExportedProgram: the same ATen ops,
the same converters, no second table.

The fast capture is four files: this one (when a trace is taken, and the ``TracedProgram`` it
makes), ``tracegraph.py`` (the traced graph read into an FX graph), ``tracevals.py`` (the values
of its ops: recorded, computed by torch's meta or fake kernels) and ``tracewatch.py`` (the number
watch: which tensors the trace made Python numbers of, and from what).

The graph is only used when it is as trustworthy as torch.export's:

- tracing warned of nothing but tensors made Python numbers (a branch, ``math.sqrt``, a split
  size) or constants (``torch.tensor``), and each was computed from input sizes and constants
  alone, which a trace at fixed input shapes freezes correctly (torch.export specialises them the
  same way); a number read from data, from weights or from a random op, and any other
  ``TracerWarning``, refuse the trace (``tracewatch.watched_numbers``);
- shapes and dtypes are those the trace recorded (a file records none: torch's meta kernels compute
  them), except downstream of an op whose result's size depends on data (torch's
  ``dynamic_output_shape`` tag, nonzero, nms, a boolean mask): there torch's fake kernels compute
  them, with a symbol for each such size (``TraceBuilder._symbolic_val``), as torch.export does; a size
  read from such a tensor stays a node of the graph (``sym_size``), integer arithmetic on it is
  recorded as torch.export records it, and the number the trace passed on as an int argument is
  read at run time; a Python number made of such a size refuses the trace (the trace would freeze
  the example's), and a branch on one (``if boxes.numel() > 0``) is taken as the example took it
  and named in a note, as torch.export's draft capture does;
- the trace wrote to none of the module's parameters and buffers (it runs ``forward`` on real
  tensors; buffers it wrote are put back), every op has a converter, and no in-place write goes
  through a view (``prepare_program`` would need torch's functionalization); an in-place op of
  constants runs here as eager ran it, on a tensor the builder computed (``TraceBuilder._ours_to_write``;
  a graph op that read it earlier reads a copy taken then), and any other write to a constant
  refuses the trace;
- only the ops, list and tuple constructs, attribute reads and size arithmetic of a trace appear
  (no scripted control flow, no Python ops), and the outputs are tensors in tuples, lists and
  dicts (a Hugging Face ``ModelOutput``), flattened in the order torch.export's pytree flattens;
- a number the trace turned into a 0-d tensor never decides a result's dtype (eager torch used it
  as a number, which does not);
- the module holds at most ``TRACE_MAX_BYTES`` of weights, all on the CPU. torchvision's detectors
  are traced with their post-processing in the forms of ``tvpost``; Keypoint R-CNN's keypoint
  decoding, a ``while_loop`` the tracer would run rather than record, is recorded as one operator
  of ours and expanded into the loop's graph here (``TraceBuilder._form``).

Anything else returns None and the caller captures with torch.export as before; nothing is lost
but the time of the attempt. The parity check's reference is the module itself (or the
TorchScript file), never this graph.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from convert.ir import GraphBuilder, Options

from .tracegraph import TraceBuilder
from .tracevals import NotTraceableError
from .tracewatch import Numbers, trace_lock, watched_numbers

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["TRACE_MAX_BYTES", "TracedProgram", "program_from_script", "trace_module"]


logger = logging.getLogger(__name__)


#: Modules with more parameter and buffer bytes than this go straight to torch.export: the trace
#: runs ``forward`` on real tensors, which on a multi-GB model costs more than it saves, and a
#: failed attempt (a dict output, say) would waste that forward.
TRACE_MAX_BYTES = 1 << 30


#: Buffers are copied before the trace (to be put back if ``forward`` writes them) up to this size.
_BUFFER_COPY_MAX_BYTES = 64 << 20


class TracedProgram:
    """What the lowering reads of an ExportedProgram, made from a traced graph.

    ``fallback`` captures the same module with torch.export: ``lower_program`` calls it when a
    converter refuses a call of this graph, so that torch's decompositions get their retry.
    """

    def __init__(self, graph: object, signature: object, state_dict: dict[str, object],
                 constants: dict[str, object], fallback: Callable[[], object] | None,
                 submodules: Mapping[str, object] | None = None) -> None:
        import torch.fx

        try:  # generates the Python code when it is run or read: 5-25 ms a conversion does not spend
            from torch.fx._lazy_graph_module import _LazyGraphModule as module_class
        except ImportError:  # pragma: no cover - torch before 2.3
            module_class = torch.fx.GraphModule
        self.graph = graph
        root = torch.nn.Module()
        for name, sub in (submodules or {}).items():  # the graphs its loops run (get_attr)
            root.add_module(name, sub)  # type: ignore[arg-type]
        # runnable (the parity check's --locate runs it layer by layer)
        self.graph_module = module_class(root, graph)
        self.graph_signature = signature
        self.state_dict = state_dict
        self.constants = constants
        self.fallback = fallback
        self.notes: list[str] = []  # what the summary says of this graph, once it is lowered (lower_program)


def _signature(builder: TraceBuilder, outputs: list[object]) -> object:
    from torch.export.graph_signature import (
        ExportGraphSignature,
        InputSpec,
        OutputKind,
        OutputSpec,
        TensorArgument,
    )

    inputs = [InputSpec(kind=kind, arg=TensorArgument(name=node.name), target=target,  # type: ignore[arg-type, attr-defined]
                        persistent=True if kind == builder.kinds.BUFFER else None)
              for kind, node, target in builder.specs]
    outs = [OutputSpec(kind=OutputKind.USER_OUTPUT, arg=TensorArgument(name=n.name), target=None)  # type: ignore[attr-defined]
            for n in outputs]
    return ExportGraphSignature(input_specs=inputs, output_specs=outs)


def program_from_script(script: object, example: Sequence[torch.Tensor], options: Options, source: str,
                        fallback: Callable[[], object] | None = None) -> TracedProgram | None:
    """The graph of TorchScript module ``script`` (a file) as a TracedProgram, or None where torch's
    TorchScript converter must read it instead (the module docstring lists when)."""
    try:
        builder = TraceBuilder(script.inlined_graph, example, script=script,  # type: ignore[attr-defined]
                           parameter_names=[n for n, _ in script.named_parameters()])  # type: ignore[attr-defined]
    except Exception as exc:  # a damaged file's module: its usual reader reports it
        logger.debug("%s: traced graph not used: %s: %s", source, type(exc).__name__, exc)
        return None
    return _program(builder, options, source, fallback)


def _program(builder: TraceBuilder, options: Options, source: str, fallback: Callable[[], object] | None,
             returned: int | None = None) -> TracedProgram | None:
    """The built graph as a TracedProgram, or None; ``returned``: the tensors the module returned,
    which the graph's flat outputs must number."""
    from .lowering import Lowering

    try:
        graph, outputs = builder.build()
        if returned is not None and len(outputs) != returned:
            raise NotTraceableError(f"{len(outputs)} graph outputs for {returned} returned tensors")
        program = TracedProgram(graph, _signature(builder, outputs), builder.state, builder.constants, fallback,
                                builder.submodules)
        probe = Lowering(program, GraphBuilder("check"), options, source)
        if probe.missing() or probe.alias_hazards():
            raise NotTraceableError("an op without a converter, or an in-place write through a view")
    except Exception as exc:  # any surprise (a damaged file's graph too): the usual capture decides
        logger.debug("%s: traced graph not used: %s: %s", source, type(exc).__name__, exc)
        return None
    return program


def _state_bytes(module: torch.nn.Module) -> int:
    total = 0
    for t in (*module.parameters(), *module.buffers()):
        total += t.numel() * t.element_size()
    return total


def trace_module(module: torch.nn.Module, example: Sequence[torch.Tensor], options: Options, source: str,
                 fallback: Callable[[], object] | None = None) -> TracedProgram | None:
    """Trace ``module`` on ``example`` and return its graph as a TracedProgram, or None (see above).

    The trace runs ``forward`` once on real tensors. Buffers it wrote (a counter, running
    statistics) are put back from a copy taken before, and the module is then captured by
    torch.export, which starts from their values as they were. A parameter it wrote stays
    written, as after any eager call of that module (parameters are not copied: that would double
    the memory of every conversion for a case no inference code has).
    """
    import torch

    if any(t.device.type != "cpu" for t in example) or any(t.device.type != "cpu" for t in module.parameters()):
        return None
    if _state_bytes(module) > TRACE_MAX_BYTES:
        return None
    buffers = list(module.buffers())
    if sum(b.numel() * b.element_size() for b in buffers) > _BUFFER_COPY_MAX_BYTES:
        return None
    saved = [(b, b._version, b.detach().clone()) for b in buffers]
    params = [(p, p._version) for p in module.parameters()]
    traced = None
    numbers = Numbers()
    try:
        # one trace at a time: the warnings' recording is the process's, not the thread's, and a
        # warning of another thread's trace would land in this one's list
        with trace_lock, torch.no_grad(), warnings.catch_warnings(record=True) as said, \
                watched_numbers(said) as numbers:
            warnings.simplefilter("always")
            traced = _trace(module, example)
    except Exception as exc:
        logger.debug("%s: tracing failed: %s", source, exc)
    finally:
        wrote = [b for b, version, copy in saved if b._version != version]
        with torch.no_grad():
            for b, version, copy in saved:
                if b._version != version:
                    b.copy_(copy)
    if traced is None:
        return None
    if wrote or any(p._version != version for p, version in params):
        logger.debug("%s: forward writes to the module's parameters or buffers; captured by torch.export", source)
        return None
    tracer_warning = getattr(torch.jit, "TracerWarning", ())
    noted = [w for w in said if issubclass(w.category, tracer_warning)]
    if numbers.from_data:
        logger.debug("%s: %d tensors read as Python numbers depend on data; captured by torch.export",
                     source, numbers.from_data)
        return None
    unexplained = [w for w in noted if id(w) not in numbers.explained]
    if unexplained:
        logger.debug("%s: tracing warned (%s); captured by torch.export", source, str(unexplained[0].message)[:200])
        return None
    graph, state, returned = traced
    from .frozen import decision_at, freezing, frozen, keep_example

    if numbers.branches and not freezing(options):
        # a branch on a count, taken as the example took it: torch.export decides whether it can be
        # captured for every input (and names it if not)
        logger.debug("%s: %d test(s) of a data-dependent count; captured by torch.export", source,
                     len(numbers.branches))
        return None
    builder = TraceBuilder(graph, example, state=state, parameter_names=[n for n, _ in module.named_parameters()])
    program = _program(builder, options, source, fallback, returned=returned)
    if program is not None and numbers.branches:
        frozen(options, source, [decision_at(file, line, taken) for (file, line), taken in numbers.branches],
               "the trace")
        keep_example(options, example)
    return program


def _trace(module: torch.nn.Module, example: Sequence[torch.Tensor],
           ) -> tuple[object, list[tuple[str, object]], int] | None:
    """Trace ``module`` into a flat TorchScript graph: (graph, the weights it takes after the example,
    the number of tensors the module returned).

    ``torch.jit._get_trace_graph`` (what torch.onnx's TorchScript exporter traces with) records the
    ops without making a script module per submodule, which ``torch.jit.trace`` does: EfficientNet-B0
    0.07-0.10 s against 0.50 s. Scope names (the module paths of errors and ``--locate``) are recorded
    from the same table ``torch.jit.trace`` fills. Not strict (as torch.onnx traces): a dict output
    (a Hugging Face ``ModelOutput``) is recorded, flattened in insertion order, the order of
    torch.export's pytree and of the parity check's reference. None when the output holds anything
    but tensors in tuples, lists and dicts (a number, None, a cache object).
    """
    import torch
    from torch.jit import _trace as jit_trace

    scopes = {m: f"__module.{name}" if name else "__module" for name, m in module.named_modules()}
    before = jit_trace._trace_module_map
    jit_trace._trace_module_map = scopes
    try:
        graph, result = torch.jit._get_trace_graph(module, tuple(example), strict=False)  # type: ignore[attr-defined]
    finally:
        jit_trace._trace_module_map = before
    returned = _returned_tensors(result)
    if returned is None:
        return None
    # the weights follow the example in the graph's inputs, in this order (deduplicated by object)
    state = list(torch.jit._unique_state_dict(module, keep_vars=True).items())  # type: ignore[attr-defined]
    return graph, state, returned


def _returned_tensors(value: object) -> int | None:
    """How many tensors ``value`` holds, or None unless it is tensors in tuples, lists and dicts with
    string keys."""
    import torch

    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            return None
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        counts = [_returned_tensors(v) for v in value]
        return None if None in counts else sum(counts)  # type: ignore[arg-type]
    return 1 if isinstance(value, torch.Tensor) else None
