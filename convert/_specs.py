"""The declarations a format makes about itself: its command-line options and its support table.

Kept apart from ``convert.ir`` (which imports onnx-ir, numpy and onnx) so that ``convert.catalog``
and the CLI can hold them without that import: ``convert.ir`` re-exports both.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OpSupport", "OptionSpec"]


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """A format-specific command-line option, e.g. ``--decode`` for Darknet."""

    flag: str
    dest: str
    help: str
    is_flag: bool = False
    default: object = None
    type: type | None = None
    choices: tuple[str, ...] = ()
    metavar: str | None = None


@dataclass(frozen=True, slots=True)
class OpSupport:
    """One row of a support table: the source spelling, what it maps to, its limits."""

    op: str
    maps_to: str
    notes: str = ""
