"""Error hierarchy shared by every frontend, pass and exporter.

``ConvertError`` and its subclasses are the user's problem (bad input, unsupported op, a
model that cannot be expressed in the destination format): the CLI prints them as one line
and exits with status 2. Any other exception is a bug and keeps its traceback.

Messages follow the form *what failed: where, why. hint.*
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "ConversionError",
    "ConvertError",
    "ExportError",
    "ModelFormatError",
    "PassError",
    "Unsupported",
    "UnsupportedOpsError",
    "UsageError",
    "printable",
    "shown",
]

# Names come from files: a newline in one would break a one-line message, a megabyte-long one
# would be a megabyte of message. A name is shown escaped and cut in the middle past this length.
NAME_LIMIT = 64
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_LONG_RUN = re.compile(r"\S{241,}")
_MESSAGE_LIMIT = 4000


def _escape(text: str) -> str:
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def _cut(text: str, limit: int) -> str:
    half = max((limit - 1) // 2, 1)
    return f"{text[:half]}...{text[-half:]}"


def shown(name: object, limit: int = NAME_LIMIT) -> str:
    """Return a name taken from a file, quoted for a message: control characters escaped
    (``'a\\nb'``), one longer than ``limit`` cut in the middle with its length said."""
    text = str(name)
    escaped = _escape(text)
    if len(escaped) <= limit:
        return f"'{escaped}'"
    return f"'{_cut(escaped, limit)}' ({len(text):,} characters)"


def printable(message: str) -> str:
    """Return ``message`` fit for one line of a terminal: control characters escaped, any run of
    over 240 characters without a space cut in the middle, the whole cut at 4,000 characters.

    The last guard before a message is printed, for names no converter quoted with :func:`shown`.
    """
    text = _escape(message.strip())
    text = _LONG_RUN.sub(lambda m: f"{_cut(m.group(), 80)} ({len(m.group()):,} characters)", text)
    if len(text) > _MESSAGE_LIMIT:
        text = f"{text[:_MESSAGE_LIMIT]}... ({len(text) - _MESSAGE_LIMIT:,} more characters)"
    return text


class ConvertError(Exception):
    """Base of every error caused by the input or the request, not by a bug."""


class UsageError(ConvertError):
    """The request itself is wrong: unknown route, missing file, bad option value."""


class ModelFormatError(ConvertError):
    """The input file is malformed: truncated, wrong format, inconsistent parts."""


@dataclass(frozen=True, slots=True)
class Unsupported:
    """One unsupported op or layer type, with how often and where it first occurs."""

    op: str
    count: int
    first: str
    reason: str = ""

    def describe(self, *, reason: bool = True) -> str:
        """Return ``'op' x3 (first at where): reason`` (without the reason when ``reason`` is false)."""
        times = f" x{self.count}" if self.count > 1 else ""
        why = f": {self.reason}" if self.reason and reason else ""
        return f"{self.op}{times} (first at {self.first}){why}"


def _listed(items: Sequence[Unsupported]) -> str:
    """The items in order, each reason said once: items that share a reason are listed together
    before it (a missing input shape stops every layer after the input, with the same fix)."""
    groups: dict[str, list[Unsupported]] = {}
    for item in items:
        groups.setdefault(item.reason, []).append(item)
    parts = []
    for why, members in groups.items():
        if len(members) == 1 or not why:
            parts.extend(m.describe() for m in members)
        else:
            parts.append(", ".join(m.describe(reason=False) for m in members) + f": {why}")
    return "; ".join(parts) if any(len(m) > 1 for w, m in groups.items() if w) else ", ".join(parts)


class UnsupportedOpsError(ConvertError):
    """A model uses ops that a frontend or exporter cannot handle; lists all of them at once."""

    def __init__(self, subject: str, items: Sequence[Unsupported], *, what: str = "op", hint: str = "") -> None:
        self.subject = subject
        self.items = tuple(items)
        kinds = f"{len(self.items)} unsupported {what}{'s' if len(self.items) != 1 else ''}"
        listed = _listed(self.items)
        message = f"{subject} uses {kinds}: {listed}."
        if hint:
            message += f" {hint}"
        super().__init__(message)


class ConversionError(ConvertError):
    """Converting one node or layer failed; names it and keeps the original as ``__cause__``."""

    def __init__(self, where: str, why: str) -> None:
        self.where = where
        self.why = why
        super().__init__(f"cannot convert {where}: {why}")


class PassError(ConvertError):
    """A graph pass failed; names the pass and the passes that ran before it."""

    def __init__(self, pass_name: str, previous: Sequence[str], why: str) -> None:
        self.pass_name = pass_name
        self.previous = tuple(previous)
        before = ", ".join(self.previous) if self.previous else "none"
        super().__init__(f"pass '{pass_name}' failed (after: {before}): {why}")


class ExportError(ConvertError):
    """The model cannot be written in the requested format."""
