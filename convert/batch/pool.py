"""Run manifest models in a local pool of worker processes, and choose its size.

Each worker is a fresh interpreter (the ``spawn`` start method: forking a process whose torch or
ONNX Runtime thread pools are running gives children that deadlock) that takes one model at a
time over a pipe, so the parent always knows which model a worker holds. A worker that dies
(killed by the OOM killer or a signal, a segfault in a framework) is replaced; the model it held
runs once more on a fresh worker, and if that worker dies too the model is an ``ERROR`` row.

Pool size (``pool_size``): ``min(cores, models, memory // per_worker)``, at least 1, where
``cores`` is the CPUs this process may run on, ``memory`` is 80 % of MemAvailable, and
``per_worker`` is 1 GiB (an interpreter with a framework and ONNX Runtime loaded) plus three times
the largest model's files (the source runtime, the written copy and ONNX Runtime's session each
hold the weights while the parity check runs). Each worker's math libraries get
``cores // workers`` threads.
"""

from __future__ import annotations

import contextlib
import logging
import math
import multiprocessing as mp
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path

from .manifest import ModelSpec
from .worker import ERROR, ModelResult, run_model

__all__ = ["Event", "Work", "pool_size", "run_local", "usable_cores"]

logger = logging.getLogger(__name__)

GIB = 1 << 30
BASE_WORKER_BYTES = 1 * GIB
WEIGHT_FACTOR = 3
MEMORY_SHARE = 0.8
PROGRESS_EVERY_S = 0.2


@dataclass(frozen=True, slots=True)
class Event:
    """What the runner tells its caller: a model ``started``, made ``progress``, or is ``done``."""

    kind: str
    index: int
    name: str
    slot: int | None = None  # the local worker holding the model (None on Ray)
    step: str = ""
    done: int = 0
    total: int = 0
    result: ModelResult | None = None


#: ``work(spec, out_dir, progress) -> ModelResult``; a module-level function (workers import it by name).
Work = Callable[..., ModelResult]


def usable_cores() -> int:
    """Return the CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _model_bytes(spec: ModelSpec) -> int:
    total = 0
    for name in spec.files:
        p = Path(name)
        if p.is_dir():
            total += sum(q.stat().st_size for q in p.iterdir() if q.is_file())
        else:
            for q in [p, *p.parent.glob(p.name + ".*")] if not p.exists() else [p]:
                if q.is_file():
                    total += q.stat().st_size
    return total


def pool_size(specs: Sequence[ModelSpec], *, cores: int | None = None, mem_available: int | None = None) -> int:
    """Return how many workers to start for ``specs`` (the rule is in the module docstring)."""
    cores = usable_cores() if cores is None else cores
    memory = _mem_available() if mem_available is None else mem_available
    size = max(1, min(cores, len(specs)))
    if memory is not None:
        largest = max((_model_bytes(s) for s in specs), default=0)
        per_worker = BASE_WORKER_BYTES + WEIGHT_FACTOR * largest
        size = min(size, max(1, int(memory * MEMORY_SHARE) // per_worker))
    return size


def _worker_main(conn: Connection, work: Work, threads: int) -> None:
    """Body of a worker process: take (index, spec, out_dir) until told to stop (None)."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, str(threads))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        index, spec, out_dir = task
        result = work(spec, out_dir, _Progress(conn, index))
        conn.send(("done", index, result))


class _Progress:
    """A worker's ``progress(step, done, total)``: sent to the parent at most every 0.2 s per model."""

    def __init__(self, conn: Connection, index: int) -> None:
        self.conn, self.index, self.last = conn, index, 0.0

    def __call__(self, step: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done >= total or now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            self.conn.send(("progress", self.index, step, done, total))


class _Slot:
    def __init__(self, ctx: mp.context.SpawnContext, work: Work, threads: int) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, work, threads), daemon=True)
        self.proc.start()
        child.close()
        self.task: int | None = None
        self.deadline = math.inf  # time.monotonic() past which the model it holds has timed out

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(None)
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join()

    def death(self) -> str:
        self.proc.join(timeout=5)
        code = self.proc.exitcode
        if code is not None and code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exited with status {code}"


def run_local(
    specs: Sequence[ModelSpec],
    out_dir: Path,
    *,
    workers: int,
    on_event: Callable[[Event], None] | None = None,
    work: Work = run_model,
) -> list[ModelResult]:
    """Run every model on ``workers`` local processes; return the rows in manifest order."""
    ctx = mp.get_context("spawn")
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    workers = max(1, min(workers, len(specs)))
    threads = max(1, usable_cores() // workers)
    emit = on_event or (lambda event: None)
    queue: deque[int] = deque(range(len(specs)))
    attempts = [0] * len(specs)
    retry_reason = [""] * len(specs)
    results: list[ModelResult | None] = [None] * len(specs)
    slots: list[_Slot | None] = [None] * workers
    lost = 0  # workers found dead while idle
    try:
        while queue or any(s is not None and s.task is not None for s in slots):
            for k in range(workers):
                slot = slots[k]
                if queue and (slot is None or slot.task is None):
                    if slot is None:
                        slot = slots[k] = _Slot(ctx, work, threads)
                    index = queue[0]
                    try:
                        slot.conn.send((index, specs[index], str(out_dir)))
                    except OSError:  # the idle worker died (the OOM killer chose it): start another
                        lost += 1
                        why = slot.death()
                        slots[k] = None
                        if lost > 2 * workers + 2:
                            raise RuntimeError(f"worker processes die before taking a model (the last {why})") from None
                        continue
                    queue.popleft()
                    attempts[index] += 1
                    slot.task = index
                    limit = specs[index].timeout
                    slot.deadline = time.monotonic() + limit if limit else math.inf
                    emit(Event("started", index, specs[index].name, slot=k))
            busy = [s for s in slots if s is not None and s.task is not None]
            if not busy:
                continue
            nearest = min(s.deadline for s in busy) - time.monotonic()
            ready = wait([s.conn for s in busy] + [s.proc.sentinel for s in busy],
                         timeout=None if nearest == math.inf else max(0.0, nearest))
            for k, slot in enumerate(slots):
                if slot is None or slot.task is None:
                    continue
                if slot.conn in ready or slot.proc.sentinel in ready:
                    died = _drain(slot, k, specs, results, attempts, retry_reason, emit)
                    if died:
                        index = slot.task
                        slot.task = None
                        slots[k] = None
                        why = f"its worker {died} while converting"
                        if attempts[index] < 2:
                            retry_reason[index] = why
                            logger.warning("%s: %s; running it once more", specs[index].name, why)
                            queue.appendleft(index)
                        else:
                            row = ModelResult(name=specs[index].name, route=specs[index].route, verdict=ERROR,
                                              error=f"{retry_reason[index]}, and again on the retry",
                                              attempts=attempts[index], retry_reason=retry_reason[index])
                            results[index] = row
                            emit(Event("done", index, row.name, slot=k, result=row))
                if slot.task is not None and time.monotonic() > slot.deadline:
                    _time_out(slot, specs, results, attempts, retry_reason)
                    index = slot.task
                    slots[k] = None
                    emit(Event("done", index, specs[index].name, slot=k, result=results[index]))
    except BaseException:  # Ctrl-C, SIGTERM: stop the workers now, whatever they hold
        for slot in slots:
            if slot is not None:
                slot.proc.kill()
        raise
    finally:
        for slot in slots:
            if slot is not None:
                slot.stop()
    return [r for r in results if r is not None]


def _time_out(slot: _Slot, specs: Sequence[ModelSpec], results: list[ModelResult | None], attempts: list[int],
              retry_reason: list[str]) -> None:
    """Kill a worker past its model's timeout; the model is an ERROR row (a hang is not retried)."""
    index = slot.task
    assert index is not None
    slot.proc.kill()
    slot.proc.join()
    spec = specs[index]
    results[index] = ModelResult(name=spec.name, route=spec.route, verdict=ERROR, seconds=float(spec.timeout or 0),
                                 error=f"timed out after {spec.timeout:g} s (timeout = {spec.timeout:g}); its worker "
                                       "was killed", attempts=attempts[index], retry_reason=retry_reason[index])


def _drain(slot: _Slot, k: int, specs: Sequence[ModelSpec], results: list[ModelResult | None],
           attempts: list[int], retry_reason: list[str], emit: Callable[[Event], None]) -> str:
    """Read every message the worker sent; return why it died ('' when it is alive)."""
    while slot.task is not None:
        try:
            if not slot.conn.poll():
                break
            message = slot.conn.recv()
        except (EOFError, OSError):
            return slot.death()
        kind, index = message[0], message[1]
        if kind == "progress":
            emit(Event("progress", index, specs[index].name, slot=k, step=message[2], done=message[3],
                       total=message[4]))
        else:
            row: ModelResult = message[2]
            row.attempts, row.retry_reason = attempts[index], retry_reason[index]
            results[index] = row
            slot.task = None
            emit(Event("done", index, row.name, slot=k, result=row))
    if slot.task is not None and not slot.proc.is_alive():
        return slot.death()
    return ""
