"""The frontend's in-memory view of a Paddle program, shared by both file formats.

``legacy.py`` (ProgramDesc ``.pdmodel``) and ``pir.py`` (Paddle 3 ``.json``) both produce a
``Program``: ops in execution order with named input/output slots (the ProgramDesc slot
names, e.g. ``X``/``Y``/``Out``), plain Python attributes, and what is known of each
variable's dtype and shape. Converters in ``ops/`` see only this view.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np

from convert.ir import ModelFormatError

__all__ = ["Op", "Program", "Var"]

_N = TypeVar("_N", int, float)

_MAIN_SLOTS = ("Out", "Y", "Output")


class _BadAttrError(ValueError):
    """An attribute value that is not what the op needs (the Op methods add where)."""


def _to_int(value: object) -> int:
    try:
        if isinstance(value, (int, float, str, bytes, np.integer, np.floating)):
            number = int(value)
            if -(2**63) <= number < 2**63:  # Paddle's own widest integer: int64
                return number
            raise _BadAttrError(f"{number} is outside int64")
    except (ValueError, OverflowError) as exc:
        if isinstance(exc, _BadAttrError):
            raise
        raise _BadAttrError(f"{value!r} is not an integer") from exc
    raise _BadAttrError(f"{value!r} is not an integer")


def _to_float(value: object) -> float:
    try:
        if isinstance(value, (int, float, str, bytes, np.integer, np.floating)):
            return float(value)
    except (ValueError, OverflowError) as exc:
        raise _BadAttrError(f"{value!r} is not a number") from exc
    raise _BadAttrError(f"{value!r} is not a number")


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

    def _number(self, names: tuple[str, ...], value: object, parse: Callable[[object], _N]) -> _N:
        try:
            return parse(value)
        except _BadAttrError as exc:
            name = next((n for n in names if self.attrs.get(n) is not None), names[0] if names else "?")
            raise ModelFormatError(f"{self.where()}: attribute '{name}': {exc}. Is the model file damaged?") from exc

    def _first(self, names: tuple[str, ...]) -> object:
        for name in names:
            value = self.attrs.get(name)
            if value is not None:
                return value
        return None

    def int_(self, *names: str, default: int = 0) -> int:
        """Return the first present attribute of ``names`` as an int."""
        value = self._first(names)
        return default if value is None else self._number(names, value, _to_int)

    def float_(self, *names: str, default: float = 0.0) -> float:
        """Return the first present attribute of ``names`` as a float."""
        value = self._first(names)
        return default if value is None else self._number(names, value, _to_float)

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
        return [self._number(names, v, _to_int) for v in items]

    def floats(self, *names: str, default: Sequence[float] = ()) -> list[float]:
        """Return the first present attribute of ``names`` as a list of floats (a scalar becomes [x])."""
        value = self._first(names)
        if value is None:
            return list(default)
        items = value if isinstance(value, (list, tuple)) else [value]
        return [self._number(names, v, _to_float) for v in items]


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
