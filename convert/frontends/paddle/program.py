"""The frontend's in-memory view of a Paddle program, shared by both file formats.

``legacy.py`` (ProgramDesc ``.pdmodel``) and ``pir.py`` (Paddle 3 ``.json``) both produce a
``Program``: ops in execution order with named input/output slots (the ProgramDesc slot
names, e.g. ``X``/``Y``/``Out``), plain Python attributes, and what is known of each
variable's dtype and shape. Converters in ``ops/`` see only this view.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["Op", "Program", "Var"]

_MAIN_SLOTS = ("Out", "Y", "Output")


def _to_int(value: object) -> int:
    if isinstance(value, (int, float, str, np.integer, np.floating)):
        return int(value)
    raise ValueError(f"expected a number, got {value!r}")


def _to_float(value: object) -> float:
    if isinstance(value, (int, float, str, np.integer, np.floating)):
        return float(value)
    raise ValueError(f"expected a number, got {value!r}")


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

    def _first(self, names: tuple[str, ...]) -> object:
        for name in names:
            value = self.attrs.get(name)
            if value is not None:
                return value
        return None

    def int_(self, *names: str, default: int = 0) -> int:
        """Return the first present attribute of ``names`` as an int."""
        value = self._first(names)
        return default if value is None else _to_int(value)

    def float_(self, *names: str, default: float = 0.0) -> float:
        """Return the first present attribute of ``names`` as a float."""
        value = self._first(names)
        return default if value is None else _to_float(value)

    def bool_(self, *names: str, default: bool = False) -> bool:
        """Return the first present attribute of ``names`` as a bool."""
        value = self._first(names)
        return default if value is None else bool(value)

    def str_(self, *names: str, default: str = "") -> str:
        """Return the first present attribute of ``names`` as a str."""
        value = self._first(names)
        return default if value is None else str(value)

    def ints(self, *names: str, default: Sequence[int] = ()) -> list[int]:
        """Return the first present attribute of ``names`` as a list of ints (a scalar becomes [x])."""
        value = self._first(names)
        if value is None:
            return list(default)
        items = value if isinstance(value, (list, tuple)) else [value]
        return [_to_int(v) for v in items]

    def floats(self, *names: str, default: Sequence[float] = ()) -> list[float]:
        """Return the first present attribute of ``names`` as a list of floats (a scalar becomes [x])."""
        value = self._first(names)
        if value is None:
            return list(default)
        items = value if isinstance(value, (list, tuple)) else [value]
        return [_to_float(v) for v in items]


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
