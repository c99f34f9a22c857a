"""The frontend's in-memory view of a Paddle program, shared by both file formats.

``legacy.py`` (ProgramDesc ``.pdmodel``) and ``pir.py`` (Paddle 3 ``.json``) both produce a
``Program``: ops in execution order with named input/output slots (the ProgramDesc slot
names, e.g. ``X``/``Y``/``Out``), plain Python attributes, and what is known of each
variable's dtype and shape. Converters in ``ops/`` see only this view.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["Op", "Program", "Var"]

_MAIN_SLOTS = ("Out", "Y", "Output")


@dataclass(slots=True)
class Var:
    """A variable: name, numpy dtype (None if unknown), shape (-1 for a free dim; None if unknown)."""

    name: str
    dtype: np.dtype | None = None
    shape: tuple[int, ...] | None = None
    persistable: bool = False


@dataclass(slots=True)
class Op:
    """One op: its Paddle type, named input/output slots (lists of var names) and attributes."""

    type: str
    inputs: dict[str, list[str]] = field(default_factory=dict)
    outputs: dict[str, list[str]] = field(default_factory=dict)
    attrs: dict[str, object] = field(default_factory=dict)
    index: int = 0

    def output_names(self) -> list[str]:
        """Return every output var name, the main result (Out/Y/Output) first."""
        main = [s for s in _MAIN_SLOTS if s in self.outputs]
        slots = main + [s for s in self.outputs if s not in _MAIN_SLOTS]
        return [n for s in slots for n in self.outputs[s]]

    def where(self) -> str:
        """Return ``op #12 'conv2d' -> 'conv2d_0.tmp_0'`` for messages."""
        outs = ", ".join(f"'{n}'" for n in self.output_names()[:3])
        return f"op #{self.index} '{self.type}'" + (f" -> {outs}" if outs else "")

    def attr(self, name: str, default: object = None) -> object:
        """Return attribute ``name`` or ``default``."""
        value = self.attrs.get(name)
        return default if value is None else value


@dataclass(slots=True)
class Program:
    """A whole inference program: feeds, fetches, ops, vars and the parameters it reads."""

    source: Path
    kind: str  # "pdmodel" or "json"
    ops: list[Op]
    vars: dict[str, Var]
    feeds: list[str]
    fetches: list[str]
    params: list[str]  # persistable tensors, in the order the combined params file stores them
    fetch_names: list[str] = field(default_factory=list)  # output names Paddle Inference reports

    def var(self, name: str) -> Var:
        """Return the var ``name`` (an empty record when the program does not describe it)."""
        return self.vars.get(name) or Var(name)
