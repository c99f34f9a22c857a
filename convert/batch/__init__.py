"""``convert batch``: convert every model of a manifest with its parity check, for CI.

    result = run_batch(load_manifest(Path("models.toml")), workers=2)
    print(result.table()); Path("junit.xml").write_text(result.junit())
    raise SystemExit(result.exit_status)    # 0 all passed, 1 a parity failure, 2 a model not converted

Models run in a local pool of worker processes (``pool``) or as tasks on a Ray cluster
(``ray_runner``); each one goes through ``convert.api.convert`` (``worker``). The reports
(table, JSON, JUnit, Markdown) and the baseline comparison are in ``reports``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

from .manifest import MODEL_KEYS, Manifest, ModelSpec, load_manifest, parse_manifest
from .pool import Event, pool_size, run_local
from .reports import (
    DEFAULT_FACTOR,
    DEFAULT_FLOOR,
    SCHEMA,
    BatchResult,
    accepted_baseline,
    apply_baseline,
    baseline_errors,
    exit_status,
    regressions,
)
from .worker import CONVERTED, ERROR, FAIL, PASS, REGRESSED, UNCHECKED, ModelResult, run_model

__all__ = [
    "CONVERTED",
    "DEFAULT_FACTOR",
    "DEFAULT_FLOOR",
    "ERROR",
    "FAIL",
    "MODEL_KEYS",
    "PASS",
    "REGRESSED",
    "SCHEMA",
    "UNCHECKED",
    "BatchResult",
    "Event",
    "Manifest",
    "ModelResult",
    "ModelSpec",
    "accepted_baseline",
    "apply_baseline",
    "baseline_errors",
    "exit_status",
    "load_manifest",
    "parse_manifest",
    "pool_size",
    "regressions",
    "run_batch",
    "run_local",
    "run_model",
]


def run_batch(
    manifest: Manifest,
    *,
    out: Path | None = None,
    workers: int | None = None,
    ray_address: str | None = None,
    baseline: Path | None = None,
    factor: float = DEFAULT_FACTOR,
    floor: float = DEFAULT_FLOOR,
    on_event: Callable[[Event], None] | None = None,
    only: Sequence[str] | None = None,
) -> BatchResult:
    """Convert every model of ``manifest``; a model that fails is a row, never an exception.

    Args:
        manifest: the parsed manifest.
        out: the output folder (default: the manifest's ``output``); each model goes into ``out/<name>/``.
        workers: local worker processes (default: ``pool_size``); ignored with ``ray_address``.
        ray_address: run on this Ray cluster instead (``auto``, ``host:port``, ``ray://host:port``).
        baseline: an accepted report (``--report`` JSON of a batch or of one model) to compare against.
        factor, floor: a passing output regresses when its error exceeds ``factor x max(baseline, floor)``.
        on_event: called as models start, progress and finish (the CLI's progress display).
        only: run just these model names.

    Raises:
        UsageError: an unknown name in ``only``, an unreadable baseline, Ray missing or unreachable.
    """
    from convert.ir import UsageError

    specs = list(manifest.models)
    if only:
        unknown = sorted(set(only) - {s.name for s in specs})
        if unknown:
            raise UsageError(f"no model named {', '.join(map(repr, unknown))} in the manifest; it has "
                             f"{', '.join(s.name for s in specs)}")
        specs = [s for s in specs if s.name in set(only)]
    base = baseline_errors(baseline) if baseline is not None else None
    out_dir = Path(out) if out is not None else manifest.output
    out_dir.mkdir(parents=True, exist_ok=True)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    start = time.perf_counter()
    runner: dict[str, object]
    if ray_address is not None:
        from .ray_runner import run_ray

        runner = {"kind": "ray", "address": ray_address}
        rows = run_ray(specs, out_dir.resolve(), address=ray_address, on_event=on_event)
    else:
        size = workers if workers else pool_size(specs)
        runner = {"kind": "local", "workers": max(1, min(size, len(specs)))}
        rows = run_local(specs, out_dir.resolve(), workers=size, on_event=on_event)
    result = BatchResult(manifest=str(manifest.path), rows=rows, seconds=time.perf_counter() - start,
                         runner=runner, started=started)
    if base is not None:
        result.notes = apply_baseline(rows, base, factor=factor, floor=floor)
        result.baseline = {"path": str(baseline), "factor": factor, "floor": floor}
    return result
