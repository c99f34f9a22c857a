"""Read Darknet ``.cfg`` files into sections, the way Darknet's own ``read_cfg`` does.

Darknet strips every whitespace character from a line (so ``size = 3`` and ``size=3`` are the
same), skips blank lines and lines starting with ``#`` or ``;``, starts a section at ``[name]``
and otherwise expects ``key=value``. Numbers are read with C's ``atoi``/``atof`` (a trailing
``#comment`` after a value is ignored). When a key repeats, the first value wins.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from convert.ir import ModelFormatError

__all__ = ["Section", "parse_cfg", "parse_cfg_text"]

_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?)")


_C_INT_MAX = 2**31 - 1
# Options that size tensors or loops, bounded far above any published network: a corrupt value
# must be one line at parse time, not a multi-GB allocation or an overflow later.
_LIMITS = {"filters": 65536, "output": 1 << 20, "size": 4096, "stride": 4096, "stride_x": 4096, "stride_y": 4096,
           "pad": 4096, "padding": 4096, "dilation": 4096, "num": 65536, "classes": 1 << 20, "coords": 1024,
           "groups": 65536, "mask": 65536, "side": 4096, "n": 65536, "tiles": 65536, "max_delta": 1 << 20}


def _atoi(text: str) -> int | None:
    m = _INT.match(text)
    return int(m.group(0)) if m else None


def _atof(text: str) -> float | None:
    m = _FLOAT.match(text)
    return float(m.group(0)) if m else None


_Int = int
_Float = float
_T = TypeVar("_T")


@dataclass(slots=True)
class Section:
    """One ``[type]`` block of a cfg: its options, line numbers and which options were read."""

    type: str
    line: int
    file: str
    options: dict[str, str] = field(default_factory=dict)
    option_lines: dict[str, int] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)

    @property
    def where(self) -> str:
        """Return ``file:line`` of the section header."""
        return f"{self.file}:{self.line}"

    def has(self, key: str) -> bool:
        """Return True when the option is present (and mark it read)."""
        self.used.add(key)
        return key in self.options

    def get(self, key: str, default: str | None = None) -> str | None:
        """Return an option's raw text, or ``default``."""
        self.used.add(key)
        return self.options.get(key, default)

    def _bad(self, key: str, what: str) -> ModelFormatError:
        line = self.option_lines.get(key, self.line)
        return ModelFormatError(
            f"{self.file}:{line}: [{self.type}] option '{key}={self.options.get(key)}' is not {what}. "
            "Fix the cfg."
        )

    def int(self, key: str, default: int | None = None) -> int:
        """Return an integer option (C ``atoi`` rules) or ``default``; missing without default is an error.

        Raises:
            ModelFormatError: not an integer, outside a C int (Darknet's own type), or beyond any
                network's size for the options that size tensors (``_LIMITS``).
        """
        raw = self.get(key)
        if raw is None:
            if default is None:
                raise ModelFormatError(f"{self.where}: [{self.type}] needs option '{key}'. Add it to the cfg.")
            return default
        value = _atoi(raw)
        if value is None:
            raise self._bad(key, "an integer")
        return self._bounded(key, value)

    def _bounded(self, key: str, value: int) -> int:
        limit = _LIMITS.get(key, _C_INT_MAX)
        if -_C_INT_MAX - 1 <= value <= _C_INT_MAX and abs(value) <= limit:
            return value
        why = ("is outside a C int (Darknet's own type for it)" if abs(value) > _C_INT_MAX else
               f"is beyond any network's size (at most {limit:,})")
        line = self.option_lines.get(key, self.line)
        raise ModelFormatError(f"{self.file}:{line}: [{self.type}] option '{key}={self.options.get(key)}' {why}. "
                               "Is the cfg corrupt?")

    def float(self, key: str, default: _Float | None = None) -> _Float:
        """Return a float option (C ``atof`` rules) or ``default``."""
        raw = self.get(key)
        if raw is None:
            if default is None:
                raise ModelFormatError(f"{self.where}: [{self.type}] needs option '{key}'. Add it to the cfg.")
            return default
        value = _atof(raw)
        if value is None:
            raise self._bad(key, "a number")
        return value

    def ints(self, key: str, default: Sequence[_Int] | None = None) -> list[_Int]:
        """Return a comma-separated list of integers (empty items skipped), each bounded as ``int``'s."""
        return [self._bounded(key, v) for v in self._list(key, default, _atoi, "a list of integers")]

    def floats(self, key: str, default: Sequence[_Float] | None = None) -> list[_Float]:
        """Return a comma-separated list of floats (empty items skipped)."""
        return self._list(key, default, _atof, "a list of numbers")

    def _list(self, key: str, default: Sequence[_T] | None, parse: Callable[[str], _T | None], what: str) -> list[_T]:
        raw = self.get(key)
        if raw is None:
            if default is None:
                raise ModelFormatError(f"{self.where}: [{self.type}] needs option '{key}'. Add it to the cfg.")
            return list(default)
        out = []
        for item in raw.split(","):
            if not item:
                continue
            value = parse(item)
            if value is None:
                raise self._bad(key, what)
            out.append(value)
        return out


def parse_cfg(path: Path) -> list[Section]:
    """Read ``path`` into sections; a binary file or a file without sections is an error.

    Raises:
        ModelFormatError: the file is not a Darknet cfg.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ModelFormatError(f"{path}: cannot read the cfg: {exc.strerror}.") from exc
    if b"\0" in data[:4096]:
        raise ModelFormatError(
            f"{path.name}: not a Darknet cfg (binary data at the start). Pass the .cfg first, then the .weights."
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    return parse_cfg_text(text, path.name)


def parse_cfg_text(text: str, name: str) -> list[Section]:
    """Parse cfg ``text``; ``name`` is used in messages."""
    sections: list[Section] = []
    current: Section | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = "".join(raw.split())
        if not line or line[0] in "#;":
            continue
        if line[0] == "[":
            end = line.find("]")
            if end < 0:
                raise ModelFormatError(f"{name}:{number}: section header '{raw.strip()}' has no ']'. Fix the cfg.")
            current = Section(type=line[1:end].lower(), line=number, file=name)
            sections.append(current)
            continue
        if current is None:
            raise ModelFormatError(
                f"{name}:{number}: option '{raw.strip()[:40]}' before the first [section]: not a Darknet cfg."
            )
        key, sep, value = line.partition("=")
        if not sep:
            raise ModelFormatError(f"{name}:{number}: expected 'key=value', got '{raw.strip()[:40]}'. Fix the cfg.")
        if key not in current.options:
            current.options[key] = value
            current.option_lines[key] = number
    if not sections:
        raise ModelFormatError(f"{name}: no [section] found: not a Darknet cfg.")
    if sections[0].type not in ("net", "network"):
        raise ModelFormatError(
            f"{name}:{sections[0].line}: the first section is [{sections[0].type}], expected [net]. Fix the cfg."
        )
    return sections
