"""The values of a traced graph's ops: meta values, symbolic numbers, and torch's fake kernels.

Part of the fast capture (``traced.py``), used by its graph builder (``tracegraph.py``): what a
result's shape and dtype are taken from (``recorded_vals``: the live trace's record; ``agrees``:
that record checked against what is computed here; ``elementwise_val``: an elementwise result
written out), what a symbolic size is (``is_number_node``, ``is_symbolic``), and where torch's fake
kernels run for the builder (``python_dispatcher``, ``torch_frames_skipped``, ``fake_kernels_quiet``).
``NotTraceableError`` is how any part of the fast capture says the trace cannot stand in for
torch.export.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from .torchenv import torch_folder

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["NotTraceableError", "agrees", "elementwise_val", "fake_kernels_quiet", "flat", "has_node", "identity_of",
           "int_operand", "is_int_node", "is_number_node", "is_symbolic", "mask_dtypes", "meta_value", "metas_of",
           "python_dispatcher", "recorded_vals", "storage_of", "torch_frames_skipped"]


class NotTraceableError(Exception):
    """The trace cannot stand in for torch.export here (the message says why); capture with export."""


def has_node(value: object) -> bool:
    import torch.fx

    if isinstance(value, torch.fx.Node):
        return True
    if isinstance(value, (list, tuple)):
        return any(has_node(v) for v in value)
    return False


def flat(value: object) -> Iterator[object]:
    if isinstance(value, (list, tuple)):
        for v in value:
            yield from flat(v)
    else:
        yield value


def meta_value(value: object) -> object:
    """The meta-device stand-in of a real value (tensors), kept as it is otherwise."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.to("meta")
    if isinstance(value, (list, tuple)):
        return type(value)(meta_value(v) for v in value)
    return value


def metas_of(value: object) -> object:
    import torch.fx

    if isinstance(value, torch.fx.Node):
        return value.meta["val"]
    if isinstance(value, dict):
        return {k: metas_of(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(metas_of(v) for v in value)
    return value


def storage_of(tensor: torch.Tensor) -> int:
    """Where ``tensor``'s memory starts (shared by its views); 0 for one without memory."""
    return int(tensor.untyped_storage().data_ptr())


def identity_of(tensor: torch.Tensor) -> tuple[object, ...]:
    """Which memory a tensor shows, as what: a TorchScript module hands out a new Python object for
    the same parameter on each attribute read, so object ids would split one weight in two."""
    return (tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tuple(tensor.stride()))


def is_number_node(value: object) -> bool:
    """Whether ``value`` is a graph node computing a symbolic number (a size that depends on data)."""
    import torch
    import torch.fx

    return isinstance(value, torch.fx.Node) and isinstance(value.meta.get("val"), (torch.SymInt, torch.SymBool,
                                                                                  torch.SymFloat))


def is_int_node(value: object) -> bool:
    import torch

    return is_number_node(value) and isinstance(value.meta["val"], torch.SymInt)  # type: ignore[attr-defined]


def is_symbolic(value: object) -> bool:
    """Whether ``value`` is a graph node whose meta value belongs to the fake mode (a symbolic number,
    or a tensor computed from one whose size depends on data)."""
    import torch.fx
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(value, torch.fx.Node) and (isinstance(value.meta.get("val"), FakeTensor)
                                                 or is_number_node(value))


def int_operand(value: object) -> object | None:
    """An operand of integer size arithmetic: a symbolic int node, an int, or a 0-d integer constant
    tensor as its int; None otherwise (a float, a tensor of data)."""
    import torch

    if is_int_node(value) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.dtype.is_floating_point \
            and value.dtype != torch.bool and not value.is_complex():
        return int(value.item())
    return None


# Elementwise ops. On tensors of one shape (beside 0-d tensors and numbers) the result has that shape;
# torch's fake kernels of these are Python references that prove each broadcast and stride on the
# symbolic sizes, 1-4 ms a call (RetinaNet's post-processing has about 160: 0.2 s). Out of place only.
_ELEMENTWISE = frozenset({
    "abs", "add", "atan2", "bitwise_and", "bitwise_not", "bitwise_or", "bitwise_xor", "ceil", "clamp", "clamp_max",
    "clamp_min", "cos", "div", "eq", "erf", "exp", "floor", "fmod", "ge", "gt", "le", "log", "log1p", "log2",
    "logical_and", "logical_not", "logical_or", "logical_xor", "lt", "masked_fill", "maximum", "minimum", "mul", "ne",
    "neg", "pow", "reciprocal", "relu", "remainder", "round", "rsqrt", "rsub", "sigmoid", "sign", "sin", "sqrt",
    "sub", "tanh", "trunc", "where",
})


def elementwise_val(name: str, operands: Sequence[object], outs: list[object] | None) -> object | None:
    """The fake result of elementwise op ``name`` written out, or None (torch's kernel then computes it).

    Where every operand of one or more dimensions has the same sizes (the same symbols) and its
    dimensions in row-major order (contiguous, or constant strides decreasing over the dimensions not
    of size 1: a column of boxes), the result is that shape, contiguous, as torch's TensorIterator
    lays it out, of the dtype the live trace recorded (type promotion, as eager did it). Anything
    else, a file's op (no recorded dtype) included, is torch's.
    """
    import sympy
    import torch

    kind = outs[0].type() if outs and len(outs) == 1 else None  # type: ignore[attr-defined]
    dtype = kind.dtype() if isinstance(kind, torch._C.TensorType) else None
    if name not in _ELEMENTWISE or dtype is None or (name == "where" and len(operands) != 3):
        return None
    tensors = [t for t in flat(operands) if isinstance(t, torch.Tensor)]
    full = [t for t in tensors if t.dim() > 0]
    if not full or any(t.device != full[0].device for t in tensors):
        return None

    def expr(n: object) -> object:
        return n.node.expr if isinstance(n, torch.SymInt) else sympy.Integer(n)  # type: ignore[arg-type]

    try:  # the Max of torch's size expressions (a contiguous stride is made of max(1, size) of each size)
        from torch.utils._sympy.functions import Max
    except ImportError:  # pragma: no cover - another torch: its strides may not match, and torch decides
        Max = sympy.Max  # noqa: N806

    def row_major(t: torch.Tensor) -> bool:
        plain = clamped = sympy.Integer(1)  # contiguous: each stride the product of the sizes after it
        for size, stride in zip(reversed(t.shape), reversed(t.stride()), strict=True):
            if expr(stride) not in (plain, clamped):
                break
            plain, clamped = plain * expr(size), clamped * Max(1, expr(size))
        else:
            return True
        strides = [st for n, st in zip(t.shape, t.stride(), strict=True) if not (isinstance(n, int) and n == 1)]
        return all(isinstance(st, int) and st > 0 for st in strides) and all(
            a > b for a, b in itertools.pairwise(strides))

    shape = [expr(n) for n in full[0].shape]
    if any([expr(n) for n in t.shape] != shape for t in full[1:]) or not all(row_major(t) for t in full):
        return None
    return torch.empty(full[0].shape, dtype=dtype, device=full[0].device)


def mask_dtypes(values: list[object]) -> list[str]:
    """The dtype names of the graph tensors among an index op's indices (its second argument), by
    their meta values."""
    import torch
    import torch.fx

    return [str(i.meta["val"].dtype).removeprefix("torch.")
            for i in flat(values[1] if len(values) > 1 else []) if isinstance(i, torch.fx.Node)]


def recorded_vals(outs: Sequence[object]) -> object:
    """The results' shapes and dtypes as a live trace recorded them from the real run (meta tensors),
    or None where one is not a tensor of known size and dtype.

    Used instead of running each op's meta kernel: some of those are Python decompositions whose
    first call imports dynamo (batch_norm's: 1 s), which is the cost this capture exists to avoid.
    The recorded sizes are the example's; that they depend on input sizes only is what the refusals
    of ``_aten`` (torch's ``dynamic_output_shape`` tag, boolean masks, numbers read from data) and of
    ``trace_module`` (any tracer warning but a number made from fixed sizes) establish.
    """
    import torch

    vals = []
    for o in outs:
        kind = o.type()  # type: ignore[attr-defined]
        if not isinstance(kind, torch._C.TensorType) or kind.dtype() is None or kind.sizes() is None:
            return None
        vals.append(torch.empty(kind.sizes(), dtype=kind.dtype(), device="meta"))
    return vals[0] if len(vals) == 1 else tuple(vals)


def agrees(name: str, recorded: object, val: object, *, symbolic: bool = False) -> None:
    """The dtype and shape a live trace recorded for a result (a TorchScript file records none) must
    be those computed here; otherwise this graph would compute something else. ``symbolic``: ``val``'s
    sizes may be symbols, of which the recorded sizes are the example's values: rank and fixed sizes
    must agree."""
    import torch

    kind = recorded.type()  # type: ignore[attr-defined]
    if not isinstance(kind, torch._C.TensorType):
        return
    dtype, sizes = kind.dtype(), kind.sizes()
    if not isinstance(val, torch.Tensor):
        if dtype is not None or sizes is not None:
            raise NotTraceableError(f"aten::{name}: the trace recorded a tensor, here it is a {type(val).__name__}")
        return
    if symbolic and sizes is not None:
        sizes = [r if isinstance(d, int) else d for r, d in zip(sizes, val.shape, strict=False)] \
            if len(sizes) == val.dim() else sizes
    if (dtype is not None and dtype != val.dtype) or (sizes is not None and list(sizes) != list(val.shape)):
        raise NotTraceableError(f"aten::{name}: the trace recorded {dtype} {sizes}, here {val.dtype} {list(val.shape)}")


def python_dispatcher() -> contextlib.AbstractContextManager[None]:
    """torch's Python dispatcher, as torch.export runs its fake kernels: composite ops (``pad``)
    decompose in Python, with no guard on a size that depends on data (the C++ ones specialise it)."""
    from torch._dispatch.python import enable_python_dispatcher

    return enable_python_dispatcher()  # type: ignore[no-any-return]


@contextlib.contextmanager
def fake_kernels_quiet() -> Iterator[None]:
    """Keep torch's fake tensors from logging a kernel's failure with its traceback (at ERROR, to
    stderr): a fake kernel that fails refuses the trace, which the caller reports as it reports any."""
    log = logging.getLogger("torch._subclasses.fake_tensor")
    disabled = log.disabled
    log.disabled = True
    try:
        yield
    finally:
        log.disabled = disabled


class _TorchFiles:
    """The files of torch's package, as a container (``in``): what a ShapeEnv skips to find the
    frame that made a symbol or a guard."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def __contains__(self, filename: object) -> bool:
        return isinstance(filename, str) and (filename.startswith(self.folder) or filename == "<string>")


_skipped_lock = threading.Lock()


_skipping = 0  # fake calls in progress, all threads, with symbolic_shapes.uninteresting_files replaced


_torch_uninteresting: list[object] = []  # torch's own, put back by the last one out


@contextlib.contextmanager
def torch_frames_skipped() -> Iterator[None]:
    """Have torch's ShapeEnv name the frame that made a symbol without importing torch.export.

    On a process's first unbacked symbol (an NMS's count) torch's structured-trace logging and the
    ShapeEnv's source locations call ``symbolic_shapes.uninteresting_files()``, whose first call
    imports ``torch.export._trace`` and AOTAutograd to list their files: 0.2 s of a 0.9 s capture
    of SSDlite, for a frame name no one reads here. While this package's fake calls run it is
    replaced by every file of torch's package (the frames it lists all are: a frame of a module not
    yet imported cannot be on the stack); torch's own is put back when the last call ends. Its
    callers only test membership (``in``; read in torch 2.14).
    """
    global _skipping
    from torch.fx.experimental import symbolic_shapes

    with _skipped_lock:
        if _skipping == 0:
            _torch_uninteresting[:] = [symbolic_shapes.uninteresting_files]
            files = _TorchFiles(torch_folder())
            symbolic_shapes.uninteresting_files = lambda: files  # type: ignore[assignment,return-value]
        _skipping += 1
    try:
        yield
    finally:
        with _skipped_lock:
            _skipping -= 1
            if _skipping == 0:
                symbolic_shapes.uninteresting_files = _torch_uninteresting.pop()  # type: ignore[assignment]
