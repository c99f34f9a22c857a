"""Run manifest models as tasks on an existing Ray cluster (``convert batch --ray ADDRESS``).

Ray schedules; we only submit one task per model (1 CPU each, no Ray-side retries) and collect
the rows. A task whose worker dies (``WorkerCrashedError``, a lost node) is submitted once more and
the row says so; a second death is an ``ERROR`` row. The cluster's workers need the frameworks the
routes use, and the model files at the same paths (a shared file system); this package itself is
shipped to them with the job (``runtime_env`` ``py_modules``) when we connect, so they run the
driver's version of ``convert``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from convert.ir import UsageError

from .manifest import ModelSpec
from .pool import Event, Work
from .worker import ERROR, ModelResult, run_model

__all__ = ["run_ray"]

logger = logging.getLogger(__name__)


def _task(work: Work, spec: ModelSpec, out_dir: str) -> ModelResult:
    return work(spec, out_dir, None)


def _probe(address: str, timeout: float = 5.0) -> None:
    """Fail fast on a ``host:port`` (or ``ray://host:port``) nobody listens on: Ray itself retries for minutes.

    Raises:
        UsageError: naming the address and the socket error.
    """
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # 'auto', 'local': Ray finds the cluster itself
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
            pass
    except OSError as exc:
        raise UsageError(f"--ray {address}: no Ray cluster answers there ({exc.strerror or exc}); start one with "
                         "`ray start --head` or give its address") from None


def run_ray(
    specs: Sequence[ModelSpec],
    out_dir: Path,
    *,
    address: str,
    on_event: Callable[[Event], None] | None = None,
    work: Work = run_model,
) -> list[ModelResult]:
    """Run every model as a Ray task on the cluster at ``address`` (``auto``, ``host:port``, ``ray://...``).

    When this process is already connected to Ray (``ray.init`` was called), that connection is used.

    Raises:
        UsageError: ray is not installed, or the cluster cannot be reached.
    """
    try:
        import ray
        from ray import exceptions as ray_errors
    except ImportError:
        raise UsageError("--ray needs the ray package: pip install 'convert-toolkit[ray]'") from None
    import convert

    emit = on_event or (lambda event: None)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    connected_here = not ray.is_initialized()
    if connected_here:
        _probe(address)
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING,
                     runtime_env={"py_modules": [str(Path(convert.__file__).parent)],
                                  "excludes": ["__pycache__"]})
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise UsageError(f"--ray {address}: cannot connect to the Ray cluster: {exc}") from None
    remote = ray.remote(num_cpus=1, max_retries=0)(_task)
    died = (ray_errors.WorkerCrashedError, ray_errors.NodeDiedError, ray_errors.LocalRayletDiedError)
    attempts = [1] * len(specs)
    reasons = [""] * len(specs)
    results: list[ModelResult | None] = [None] * len(specs)
    try:
        pending = {}
        for i, spec in enumerate(specs):
            pending[remote.remote(work, spec, str(out_dir))] = i
            emit(Event("started", i, spec.name))
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            ref = ready[0]
            index = pending.pop(ref)
            spec = specs[index]
            try:
                row: ModelResult = ray.get(ref)
            except died as exc:
                why = f"its Ray worker died ({type(exc).__name__}) while converting"
                if attempts[index] < 2:
                    attempts[index] += 1
                    reasons[index] = why
                    logger.warning("%s: %s; running it once more", spec.name, why)
                    pending[remote.remote(work, spec, str(out_dir))] = index
                    continue
                row = ModelResult(name=spec.name, route=spec.route, verdict=ERROR,
                                  error=f"{reasons[index]}, and again on the retry")
            except ray_errors.RayError as exc:
                why = " ".join(str(exc).split())[:300]
                row = ModelResult(name=spec.name, route=spec.route, verdict=ERROR,
                                  error=f"the Ray task failed: {type(exc).__name__}: {why}")
            row.attempts, row.retry_reason = attempts[index], reasons[index]
            results[index] = row
            emit(Event("done", index, spec.name, result=row))
    finally:
        if connected_here:
            ray.shutdown()
    return [r for r in results if r is not None]
