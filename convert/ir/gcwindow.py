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
is, and nested windows are one window).
"""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Callable, Iterator
from typing import TypeVar

__all__ = ["existing_objects_spared", "sparing_existing_objects"]

F = TypeVar("F", bound=Callable[..., object])


@contextlib.contextmanager
def existing_objects_spared() -> Iterator[None]:
    """Within the block, full collections skip the objects that existed when it began."""
    if not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def sparing_existing_objects(fn: F) -> F:
    """``fn`` run inside ``existing_objects_spared``."""

    @functools.wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> object:
        with existing_objects_spared():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
