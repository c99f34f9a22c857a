"""Convert one manifest model with its parity check, in whatever process runs it (pool or Ray).

``run_model`` never raises for the model's sake: a model that cannot be converted (a missing
file, an unsupported op, a bug in convert) becomes an ``ERROR`` row with its one-line message.
It calls the public ``convert.api.convert`` exactly as the single command does, and keeps the
``ParityReport`` that call returns.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from convert import api, formats, ir
from convert._words import cli_words
from convert.parity import ParityReport

from .manifest import ModelSpec

__all__ = [
    "CONVERTED",
    "ERROR",
    "FAIL",
    "PASS",
    "REGRESSED",
    "UNCHECKED",
    "ModelResult",
    "peak_rss",
    "reset_peak_rss",
    "run_model",
]

logger = logging.getLogger(__name__)

PASS = "PASS"  # converted, every output within tolerance
FAIL = "FAIL"  # converted, an output out of tolerance (or a reference without spread: NOT VERIFIED)
UNCHECKED = "UNCHECKED"  # converted, but the parity check could not run (its runtime is missing or failed)
CONVERTED = "CONVERTED"  # converted with check = false
REGRESSED = "REGRESSED"  # within tolerance, but worse than the accepted baseline by more than the factor
ERROR = "ERROR"  # could not convert (missing file, unsupported op, worker died twice, internal error)

ProgressFn = Callable[[str, int, int], None]


@dataclass(slots=True)
class ModelResult:
    """One row of a batch: what happened to one model."""

    name: str
    route: str
    verdict: str
    seconds: float = 0.0
    peak_rss: int = 0  # bytes, the worker's high-water mark while converting this model
    error: str = ""  # why ERROR / UNCHECKED, one line
    outputs: list[str] = field(default_factory=list)
    report: ParityReport | None = None
    attempts: int = 1
    retry_reason: str = ""  # why it ran again (its first worker died)
    worker: str = ""  # host:pid
    regressions: list[str] = field(default_factory=list)  # vs the baseline, one line per output
    detail: str = ""  # the traceback of an internal error

    @property
    def worst(self) -> tuple[str, float] | None:
        """The output with the largest error relative to its scale, and that error (an output not
        measured, NaN, ranks last)."""
        if self.report is None or not self.report.outputs:
            return None
        out = max(self.report.outputs, key=lambda o: -1.0 if o.rel_to_scale != o.rel_to_scale else o.rel_to_scale)
        return out.name, out.rel_to_scale


def reset_peak_rss() -> None:
    """Reset this process's peak RSS (Linux: ``/proc/self/clear_refs``); elsewhere a no-op."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_rss() -> int:
    """Return this process's peak RSS in bytes since the last ``reset_peak_rss`` (Linux) or since it started."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


@cli_words()  # a row's error is said as the command line says it
def run_model(spec: ModelSpec, out_dir: str, progress: ProgressFn | None = None) -> ModelResult:
    """Convert ``spec`` into ``out_dir/<name>/`` with its parity check; never raises for the model's sake."""
    reset_peak_rss()
    start = time.perf_counter()
    row = ModelResult(name=spec.name, route=_route(spec), verdict=ERROR,
                      worker=f"{socket.gethostname()}:{os.getpid()}")
    options: dict[str, object] = dict(spec.options)
    if spec.input_shapes:
        options["input_shapes"] = dict(spec.input_shapes)
    target = str(Path(out_dir) / spec.name) + os.sep  # a folder: the exporter names the files
    try:
        result = api.convert(
            list(spec.files), to=spec.dest, out=target, format=spec.source, check=spec.check,
            atol=spec.atol, rtol=spec.rtol, tol=spec.tol, inputs=spec.inputs, seed=spec.seed, locate=spec.locate,
            on=list(spec.on) or None,
            fold_batchnorm=spec.fold_bn, progress=progress, **options,
        )
    except ir.ConvertError as exc:
        row.error = _one_line(str(exc)) or type(exc).__name__
    except Exception as exc:  # a bug in convert: the row says so, the batch goes on
        row.error = f"internal error: {type(exc).__name__}: {_one_line(str(exc))}"
        row.detail = traceback.format_exc()
        logger.debug("internal error converting %s", spec.name, exc_info=True)
    else:
        row.route = result.route
        row.outputs = [str(p) for p in result.outputs]
        row.report = result.report
        if result.parity_error:
            row.verdict, row.error = UNCHECKED, _one_line(result.parity_error)
        elif result.report is None:
            row.verdict = CONVERTED
        else:
            row.verdict = PASS if result.report.passed else FAIL
    row.seconds = time.perf_counter() - start
    row.peak_rss = peak_rss()
    return row


def _route(spec: ModelSpec) -> str:
    """``src:dst``, the source guessed from the files as the conversion will when the manifest omits it."""
    if spec.source is None:
        try:
            return f"{formats.detect_format([Path(p) for p in spec.files])}:{spec.dest}"
        except ir.ConvertError:
            pass
    return spec.route


def _one_line(text: str) -> str:
    return " ".join(text.split())
