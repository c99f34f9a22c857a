"""While a conversion runs, Python's garbage collector leaves alone the objects that existed before.

A process that has imported torch holds 300,000+ objects (torchvision, transformers and dynamo
more), and every full collection walks all of them: 0.1-0.2 s each on the project's machine. A
conversion allocates enough (a trace builds a script module per submodule, the lowering an IR
node per op) to set off several, so a ResNet-sized PyTorch conversion spent a quarter of its time
re-checking the caller's objects, which it never touches (EfficientNet-B0: 0.83 -> 0.58 s with
them set aside; benchmarks/bench_pytorch.py, docs/performance.md).

``gc.freeze()`` moves every object alive now out of the collector's reach; ``gc.unfreeze()`` puts
them back. Nothing is lost: the objects the conversion creates are collected as usual, and garbage
among the older ones is only collected later, after the window. The window is opened only when the
collector is enabled and nothing is frozen already (the caller's own ``gc.freeze()`` is left as it
is, and nested windows, or windows of several threads at once, are one window).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

__all__ = ["existing_objects_spared", "sparing_existing_objects"]

F = TypeVar("F", bound=Callable[..., object])


_lock = threading.Lock()
_windows = 0  # windows open now, nested or in other threads: one window while any is
_froze = False  # whether the outermost window froze (else the collector was off, or the caller froze)


@contextlib.contextmanager
def existing_objects_spared() -> Iterator[None]:
    """Within the block, full collections skip the objects that existed when it began."""
    global _windows, _froze
    with _lock:
        if _windows == 0:
            # gc.get_freeze_count() walks the frozen objects (6 ms for torch's 300,000), so it is
            # asked only here, where nothing of ours is frozen; a nested window just counts itself.
            _froze = gc.isenabled() and not gc.get_freeze_count()
            if _froze:
                gc.freeze()
        _windows += 1
    try:
        yield
    finally:
        with _lock:
            _windows -= 1
            if _windows == 0 and _froze:
                gc.unfreeze()
                _froze = False


def sparing_existing_objects(fn: F) -> F:
    """``fn`` run inside ``existing_objects_spared``."""

    @functools.wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> object:
        with existing_objects_spared():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
