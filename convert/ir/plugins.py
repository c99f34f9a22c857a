"""The contract between the top of ``convert`` and each frontend / exporter package.

A frontend package ``convert.frontends.<fw>`` exposes ``FRONTEND: FrontendSpec``; an exporter
package ``convert.exporters.<fmt>`` exposes ``EXPORTER: ExporterSpec``. Importing either must
not import a framework (torch, paddle, cv2): do that inside the functions that need it.

Format-specific command-line options are declared here as ``OptionSpec`` records; the CLI turns
them into options and passes their values in ``Options.extra`` under ``OptionSpec.dest``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import onnx_ir as _ir

from convert._specs import OpSupport, OptionSpec

from .errors import ConvertError, Unsupported

__all__ = [
    "EXAMPLE_FEEDS",
    "FROZEN_DECISIONS",
    "Diagnostics",
    "ExportPlan",
    "ExporterSpec",
    "FrontendSpec",
    "OpSupport",
    "OptionSpec",
    "Options",
    "ProgressFn",
]

logger = logging.getLogger(__name__)

# Options.extra key: the inputs a conversion took data-dependent sizes from (a PyTorch capture that
# settled a detector's counts from its example), as a tuple of arrays in input order. The converted
# model holds for inputs like these, so the parity check runs on them unless the user gives inputs.
EXAMPLE_FEEDS = "example_feeds"

# Options.extra key: the decisions on tensor values a conversion froze to the example's, each
# 'file:line `code` (the example: True)' (a Python ``if`` on data, captured with the example's
# branch because the user asked for it: PyTorch's ``--freeze-data-branches``). The file holds only
# for inputs that decide alike, so the parity check's verdict is never a plain PASS then.
FROZEN_DECISIONS = "frozen_decisions"

# progress(step_name, done, total): called by long steps; the CLI turns it into a bar.
ProgressFn = Callable[[str, int, int], None]


def _no_progress(step: str, done: int, total: int) -> None:
    return None


class Diagnostics:
    """Non-fatal notes gathered during a conversion, printed as a summary at the end.

    Under ``strict`` every warning becomes a ``ConvertError`` at the point it is raised.
    """

    def __init__(self, *, strict: bool = False) -> None:
        self.strict = strict
        self.notes: list[str] = []
        self.warnings: list[str] = []

    def note(self, message: str) -> None:
        """Record an informational note (e.g. 'dropped 3 Dropout layers')."""
        if message not in self.notes:
            self.notes.append(message)
            logger.debug("note: %s", message)

    def warn(self, message: str) -> None:
        """Record a warning; an error under ``--strict``."""
        if self.strict:
            raise ConvertError(f"{message} (an error under --strict)")
        if message not in self.warnings:
            self.warnings.append(message)
            logger.debug("warning: %s", message)


@dataclass(slots=True)
class Options:
    """Options common to every route plus format-specific ones in ``extra``."""

    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    strict: bool = False
    dynamic_batch: bool = False
    opset: int | None = None  # None: an ONNX source keeps its opset, other sources get 17
    external_data: bool | None = None
    extra: dict[str, object] = field(default_factory=dict)
    diagnostics: Diagnostics = field(default_factory=Diagnostics)
    progress: ProgressFn = _no_progress
    # What one conversion's steps share, by a key their module chooses: a frontend's capture read once
    # for ``check_support`` and ``load``, the source program handed to the parity check. Lives as long
    # as these options (one conversion); never written anywhere.
    memo: dict[str, object] = field(default_factory=dict)

    def get(self, key: str, default: object = None) -> object:
        """Return a format-specific option (``OptionSpec.dest``) or ``default``."""
        value = self.extra.get(key)
        return default if value is None else value


@dataclass(frozen=True, slots=True)
class FrontendSpec:
    """How to read one source format into the IR."""

    name: str
    description: str
    suffixes: tuple[str, ...]
    load: Callable[[Sequence[Path], Options], _ir.Model]
    sniff: Callable[[Path], bool] = lambda path: False
    ops: Callable[[], Sequence[OpSupport]] = lambda: ()
    check_support: Callable[[Sequence[Path], Options], Sequence[Unsupported]] | None = None
    options: tuple[OptionSpec, ...] = ()
    # The module whose ``open_runtime(paths, options)`` runs this format for the parity check.
    runtime: str = ""
    # An in-memory model (the Python API's ``convert(module, ...)``): ``load_object(obj, example_inputs,
    # options)`` converts it, ``object_runtime(obj, example_inputs, options)`` is its reference runtime.
    load_object: Callable[[object, object, Options], _ir.Model] | None = None
    object_runtime: Callable[[object, object, Options], object] | None = None
    # A frontend that converts only some in-memory objects says which (asked before the others).
    claims_object: Callable[[object], bool] | None = None
    # Files that go beside the converted model (onnxruntime-genai's genai_config.json):
    # ``write_beside(model, written, options)`` runs after the model is written, returns what it wrote.
    write_beside: Callable[[_ir.Model, Sequence[Path], Options], Sequence[Path]] | None = None
    # A check of the frontend's own in place of output-by-output parity (a language model's greedy
    # generation): ``verdict(source, written, options, tol=, seed=, inputs=)`` returns a report with
    # ``passed``, ``verdict``, ``table()``, ``to_json()``, ``notes``, ``method``, ``seed``, ``dest_device``.
    verdict: Callable[..., object] | None = None


class ExportPlan(Protocol):
    """A model lowered once for an exporter: what it cannot express, and how to write it."""

    gaps: Sequence[Unsupported]

    def write(self, path: Path) -> Sequence[Path]:
        """Write the lowered model at ``path``; return every file written, the main one first."""
        ...


@dataclass(frozen=True, slots=True)
class ExporterSpec:
    """How to write the IR in one destination format."""

    name: str
    description: str
    suffix: str
    save: Callable[[_ir.Model, Path, Options], Sequence[Path]]
    ops: Callable[[], Sequence[OpSupport]] = lambda: ()
    check: Callable[[_ir.Model, Options], Sequence[Unsupported]] | None = None
    # One lowering, checked then written: ``plan(model, options)`` returns an ``ExportPlan``. An
    # exporter with a plan does its work once; ``check`` and ``save`` are then ``plan(...).gaps``
    # and ``plan(...).write(path)``.
    plan: Callable[[_ir.Model, Options], ExportPlan] | None = None
    options: tuple[OptionSpec, ...] = ()
    # Extra files written beside the main output (e.g. '.caffemodel' beside '.prototxt').
    companions: tuple[str, ...] = ()
