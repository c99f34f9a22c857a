"""existing_objects_spared: the collector leaves the caller's objects alone during a conversion and
gets them back afterwards; nothing the conversion makes escapes collection, and the caller's own
freeze is not undone."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref

import pytest

from convert.ir import existing_objects_spared, sparing_existing_objects


class _Node:
    def __init__(self) -> None:
        self.other: object = self  # a reference cycle: only the cyclic collector frees it


def test_objects_from_before_are_spared_and_returned():
    assert gc.get_freeze_count() == 0
    old = _Node()
    old_ref = weakref.ref(old)
    del old
    with existing_objects_spared():
        assert gc.get_freeze_count() > 0
        gc.collect()
        assert old_ref() is not None  # made before the window: left alone
        new = _Node()
        new_ref = weakref.ref(new)
        del new
        gc.collect()
        assert new_ref() is None  # made inside the window: collected as usual
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert old_ref() is None  # back within the collector's reach


def test_a_caller_s_freeze_and_a_disabled_collector_are_left_as_they_are():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with existing_objects_spared():
            pass
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
    gc.disable()
    try:
        with existing_objects_spared():
            assert gc.get_freeze_count() == 0
    finally:
        gc.enable()


def test_nested_windows_and_an_exception_end_with_nothing_frozen():
    @sparing_existing_objects
    def inner() -> None:
        raise ValueError("inside")

    with existing_objects_spared():
        with pytest.raises(ValueError):
            inner()
        assert gc.get_freeze_count() > 0  # the inner window did not end the outer one
    assert gc.get_freeze_count() == 0


def test_importing_the_toolkit_spares_the_caller_s_objects_and_leaves_nothing_frozen():
    """Importing onnx-ir (convert.ir) sets off collections; that import runs in a window too, which
    is closed when it is done."""
    code = ("import gc\n"
            "seen = []\n"
            "gc.callbacks.append(lambda phase, _: seen.append(gc.get_freeze_count()) if phase == 'start' else 0)\n"
            "import convert.ir\n"
            "assert gc.get_freeze_count() == 0 and gc.isenabled()\n"
            "assert any(seen), seen  # onnx-ir's import collected with the older objects frozen\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_windows_of_two_threads_are_one_until_the_last_ends():
    """The first thread's window ending does not unfreeze under a second thread's, still open."""
    import threading

    entered, first_done = threading.Event(), threading.Event()
    seen: list[int] = []

    def second() -> None:
        with existing_objects_spared():
            entered.set()
            first_done.wait(30)
            seen.append(gc.get_freeze_count())

    with existing_objects_spared():
        worker = threading.Thread(target=second)
        worker.start()
        assert entered.wait(30)
    first_done.set()
    worker.join(30)
    assert seen and seen[0] > 0  # still frozen after the window that froze ended
    assert gc.get_freeze_count() == 0
