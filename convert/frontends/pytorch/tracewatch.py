"""The number watch of the fast capture: which tensors a trace made Python numbers of, and whether
each was computed from fixed sizes alone.

Part of the fast capture (``traced.py``): torch's tracer only warns that a tensor became a number
(a branch, ``math.sqrt``, a split size) or a constant (``torch.tensor``); whether the number is
sound at fixed input shapes depends on where the tensor came from. ``watched_numbers`` looks that
up while the trace runs (``_from_sizes``, ``_shape_fixed``), ties each warning to its verdict, and
notes each branch on a count (a size that depends on data, ``facts.py``'s rule) with the model's
file:line. ``trace_module`` then accepts the trace or leaves the module to torch.export.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from .facts import script_size_depends_on_data
from .torchenv import PACKAGE, torch_folder
from .tracevals import flat

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["Numbers", "trace_lock", "watched_numbers"]


# The Tensor methods that make a Python number of a tensor. Under tracing they warn (TracerWarning), except
# for a slice bound, whose data flow the tracer records.
_TO_NUMBER = ("__bool__", "__float__", "__int__", "__index__", "item")


# The traced ops a number made from sizes passes through: scalar wrapping and arithmetic. Any other
# op between a size and the number (a graph input, a weight, rand, empty) makes it data.
_SIZE_LEAVES = frozenset({"aten::dim", "prim::Constant"})  # and aten::size, numel, _shape_as_tensor: see _from_sizes


_SIZE_ARITHMETIC = frozenset({"prim::NumToTensor", "prim::ListConstruct", "prim::TupleConstruct"}) | frozenset(
    f"aten::{name}" for name in (
        "Int", "Float", "Bool", "ScalarImplicit", "detach", "to", "add", "sub", "mul", "div", "floor_divide",
        "floordiv", "remainder", "neg", "abs", "sqrt", "pow", "floor", "ceil", "round", "log2", "log", "exp",
        "reciprocal", "slice", "select", "unsqueeze", "squeeze", "cat", "stack", "view", "reshape",
        "eq", "ne", "lt", "le",
        "gt", "ge", "__and__", "__or__", "__not__", "logical_and", "logical_or", "logical_not", "min", "max",
        "mul_", "add_", "sub_", "div_", "floor_divide_",
    ))


class Numbers:
    """What ``watched_numbers`` saw: conversions not made from fixed sizes, the warnings of those
    that were, and where a branch tested a size that may depend on data (the model's file:line)."""

    def __init__(self) -> None:
        self.from_data = 0
        self.explained: set[int] = set()  # id() of the recorded warnings a size-only conversion raised
        self.branches: list[tuple[tuple[str, int], object]] = []  # ((file, line), what the example decided)


class _Watch(threading.local):
    """This thread's trace in progress: (what it saw, the recorded warnings, values of fixed size)."""

    current: tuple[Numbers, list[object], set[int]] | None = None


_watch = _Watch()


trace_lock = threading.Lock()  # see trace_module


_watch_lock = threading.Lock()


_watchers = 0  # traces in progress, all threads: the wrappers stay installed while there is one


_unwatched: dict[tuple[object, str], object] = {}  # (owner, name) -> its own entry, put back by the last one out


def _watched_places() -> list[tuple[object, str, Callable[[tuple[object, ...], dict[str, object]], list[object]],
                                  Callable[[torch.Tensor, set[int], list[object]], bool]]]:
    """Where a tensor's value or size leaves the graph, the tensors each call hands over, and what
    makes the call sound: the number methods of torch.Tensor (the tensor itself, computed from fixed
    sizes), ``torch.tensor`` and ``torch.as_tensor`` (the tensors in their data: a tensor made of
    Python numbers and constants is a constant, which the tracer warns of too), iterating over a
    tensor or taking its length (the tensor, whose sizes must be fixed: ``for image in batch``), and
    ``Tensor.data``, which the tracer records as a constant of the example's values, silently (the
    tensor, computed from fixed sizes: even a weight's goes to torch.export, as its numbers do)."""
    import torch

    def own(args: tuple[object, ...], kwargs: dict[str, object]) -> list[object]:
        return [args[0]]

    def data(args: tuple[object, ...], kwargs: dict[str, object]) -> list[object]:
        return [t for t in flat(args[0] if args else kwargs.get("data")) if isinstance(t, torch.Tensor)]

    # the ATen ops behind Tensor.item, called by name (torch.ops.aten.X): no warning at all, so a
    # number read from data there would otherwise go unseen (``.default`` and other overloads are not
    # wrapped: reading one from the model's code fails, and the module goes to torch.export; see _WatchedOp)
    by_name = [(torch.ops.aten, name, own, _from_sizes) for name in ("_local_scalar_dense", "item")]
    return [*((torch.Tensor, name, own, _from_sizes) for name in _TO_NUMBER),
            *((torch, name, data, _from_sizes) for name in ("tensor", "as_tensor")),
            *by_name, *((torch.Tensor, name, own, _shape_fixed) for name in ("__iter__", "__len__")),
            (torch.Tensor, "data", own, _from_sizes)]


class _WatchedOp:
    """An ATen op packet (``torch.ops.aten.item``) with ``watch`` around its call. Its overloads
    (``.default``) are not handed to the model's code, which would call them unwatched (reading one
    fails, and the module goes to torch.export); but a module of torch's imported while a trace runs
    (torch.cond imports torch._dynamo, whose imports read ``torch.ops.aten._local_scalar_dense.default``)
    gets the real one: failing there broke torch._dynamo for the rest of the process ("module
    'torch._dynamo' has no attribute 'exc'" on every later torch.export)."""

    def __init__(self, packet: object, watched: Callable[..., object]) -> None:
        self._packet, self._watched = packet, watched

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self._watched(*args, **kwargs)

    def __getattr__(self, name: str) -> object:
        if _importing():
            return getattr(self._packet, name)
        raise AttributeError(f"{name} of an op watched while tracing")


def _importing() -> bool:
    """Whether a module is being imported on this thread (a frame of importlib's on the stack)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _wrapped(owner: object, name: str, watch: Callable[[Callable[..., object]], Callable[..., object]]) -> object:
    """``owner.name`` with ``watch`` around it: a function wrapped, an op packet as ``_WatchedOp``, a
    data descriptor (``Tensor.data``) as a property whose getter is wrapped and whose setter is the
    descriptor's."""
    import torch

    entry = getattr(owner, name)
    if isinstance(entry, torch._ops.OpOverloadPacket):
        return _WatchedOp(entry, watch(entry))
    if callable(entry):
        return watch(entry)

    def get(tensor: object) -> object:
        return entry.__get__(tensor, type(tensor))

    get.__name__ = name
    return property(watch(get), entry.__set__)


@contextlib.contextmanager
def watched_numbers(said: list[object]) -> Iterator[Numbers]:
    """While tracing, note for each tensor made a Python number whether it was computed from sizes alone.

    Torch's tracer only warns that such a number becomes a constant of the graph; whether that is
    sound depends on where the tensor came from, which the finished graph no longer shows (its dead
    code is removed). So ``torch.Tensor``'s number methods and ``torch.tensor`` are wrapped for the
    trace (``_watched_places``): on this thread, while it traces, each call looks up the graph
    value of the tensors it hands over and walks back to see whether only sizes, constants and
    scalar arithmetic lead to them. The warnings the call adds to ``said`` (the recording of
    ``warnings.catch_warnings``) are tied to that verdict, so a warning raised anywhere else stays
    unexplained. Other threads pay one check; the wrappers are installed by the first trace in
    progress and removed by the last, always.

    Why wrappers on a third-party class, which this project otherwise never touches: no hook of
    torch's sees the tensor a number is made of. A ``TorchFunctionMode`` is switched off inside the
    functions it intercepts (InstanceNorm's size checks run inside ``F.instance_norm``), and the
    warning itself carries no tensor. The wrappers live only while a trace runs, keep their state
    per thread, and call torch's own function in every case. (Code that bound ``torch.tensor`` to
    another name at import calls it unwatched: its warning stays unexplained, and torch.export decides.)
    """
    global _watchers

    seen = Numbers()
    with _watch_lock:
        if _watchers == 0:
            _unwatched.clear()
            for owner, name, handed, sound in _watched_places():
                _unwatched[(owner, name)] = vars(owner).get(name)
                setattr(owner, name, _wrapped(owner, name, functools.partial(_watcher, handed=handed, sound=sound)))
        _watchers += 1
    _watch.current = (seen, said, set())
    try:
        yield seen
    finally:
        _watch.current = None
        with _watch_lock:
            _watchers -= 1
            if _watchers == 0:
                for (owner, name), entry in _unwatched.items():
                    if entry is None:
                        with contextlib.suppress(AttributeError):
                            delattr(owner, name)
                    else:
                        setattr(owner, name, entry)


def _watcher(function: Callable[..., object],
             handed: Callable[[tuple[object, ...], dict[str, object]], list[object]],
             sound: Callable[[torch.Tensor, set[int], list[object]], bool]) -> Callable[..., object]:
    """``function``, noting in this thread's trace whether the tensors ``handed`` picks from its
    arguments are ``sound`` (computed from fixed sizes alone; of a fixed size), and tying the
    warnings it raises to that verdict."""
    import torch

    def watched(*args: object, **kwargs: object) -> object:
        current = _watch.current
        if current is None or torch._C._get_tracing_state() is None:
            return function(*args, **kwargs)
        seen, said, fixed = current
        counts: list[object] = []  # the traced values whose sizes, read here, may depend on data
        sizes = all(sound(t, fixed, counts) for t in handed(args, kwargs))  # type: ignore[arg-type]
        if counts and getattr(function, "__name__", "") != "__bool__":
            sizes = False  # a count made a number: the trace would freeze the example's
        before = len(said)
        result: object = None
        try:
            result = function(*args, **kwargs)
            return result
        finally:
            if sizes:
                seen.explained.update(id(w) for w in said[before:])
                if counts:  # a branch on a count: taken as the example took it, and named
                    seen.branches.append((_model_frame(), result))
            else:
                seen.from_data += 1

    return watched


def _from_sizes(tensor: torch.Tensor, fixed: set[int], counts: list[object]) -> bool:
    """Whether the traced value of ``tensor`` is computed from sizes and constants only.

    Only scalar arithmetic (``_SIZE_ARITHMETIC``) may lead from sizes to it. A size read from a
    tensor whose shape the input shapes fix is fixed; a tensor downstream of an op whose result's
    size depends on data (``nonzero(x).size(0)`` is a count) is added to ``counts`` (all its sizes:
    which of them depend on the data, the trace does not show). ``fixed``: values already seen to
    have fixed shapes. A tensor the trace does not follow (``x.data``) may hold anything: not sound.
    """
    import torch

    try:
        value = torch._C._get_value_trace(tensor)
    except RuntimeError:  # not followed by the trace: a .data, say, which may hold anything
        return False
    todo, seen = [value.node()], set()
    while todo:
        node = todo.pop()
        kind = node.kind()
        if kind in ("aten::size", "aten::numel", "aten::_shape_as_tensor"):
            ins = list(node.inputs())
            if not _size_fixed(ins[0], fixed):
                counts.append(ins[0])
            continue
        if kind in _SIZE_LEAVES:
            continue
        if kind not in _SIZE_ARITHMETIC:
            return False
        for value in node.inputs():
            if value.unique() not in seen:
                seen.add(value.unique())
                todo.append(value.node())
    return True


def _shape_fixed(tensor: torch.Tensor, fixed: set[int], counts: list[object]) -> bool:
    """Whether the traced value of ``tensor`` has sizes the input shapes fix (iterating over it and
    ``len`` read its first), or is added to ``counts`` where they may depend on data."""
    import torch

    try:
        value = torch._C._get_value_trace(tensor)
    except RuntimeError:  # not followed by the trace: a .data, say, which may hold anything
        return False
    if not _size_fixed(value, fixed):
        counts.append(value)
    return True


def _model_frame() -> tuple[str, int]:
    """(file, line) of the innermost frame of the model's code (not torch's, not this package's)."""
    import traceback

    skipped = (torch_folder(), PACKAGE + os.sep)
    for frame in reversed(traceback.extract_stack()[:-2]):
        if not frame.filename.startswith(skipped) and frame.filename != contextlib.__file__:
            return frame.filename, frame.lineno or 0
    return "?", 0


def _size_fixed(value: object, fixed: set[int]) -> bool:
    """Whether no op upstream of traced ``value`` makes a size from data (``facts.size_depends_on_data``)."""
    todo, walked = [value], {value.unique()}  # type: ignore[attr-defined]
    while todo:
        node = todo.pop().node()  # type: ignore[attr-defined]
        if script_size_depends_on_data(node):
            return False
        for v in node.inputs():
            if v.unique() not in fixed and v.unique() not in walked:
                walked.add(v.unique())
                todo.append(v)
    fixed.update(walked)
    return True
