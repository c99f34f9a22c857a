"""The one conversion loop every frontend and exporter runs: look up, convert, name the place, report.

A frontend or exporter supplies its items (layers, ops, nodes) in order, a registry of handlers,
how to key and place an item, and how to call a handler; ``convert_all`` does the rest:

- ``GapCollector`` gathers every unsupported item (count, first place, reason) so a model's gaps
  are listed at once, before any work, by ``UnsupportedOpsError``;
- ``convert_all`` calls each item's handler in order, reports progress, lets the user's errors
  (``ConvertError``: malformed or inexpressible input) through with their own message, and turns any
  other exception, which is a bug in a handler, into ``InternalError``: it names the item and
  keeps the original as ``__cause__``, so the CLI prints it as an internal error (exit 3) and
  ``--debug`` shows the handler's traceback. A bug is never dressed up as the user's bad input.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar

from .errors import ConversionError, ConvertError, Unsupported, UnsupportedOpsError
from .plugins import Options
from .registry import Registry

__all__ = ["GapCollector", "InternalError", "RefusedError", "convert_all"]

T = TypeVar("T")
R = TypeVar("R")


class InternalError(Exception):
    """A handler failed on something that is not the user's fault: a bug in convert, named by place.

    Deliberately not a ``ConvertError``: the CLI reports it as an internal error (exit 3).
    """

    def __init__(self, where: str, cause: BaseException) -> None:
        self.where = where
        super().__init__(f"while converting {where}: {type(cause).__name__}: {cause}")


class RefusedError(ConvertError):
    """A handler refuses its item: the model uses a form of the op it cannot convert, or is malformed there.

    Raise it with the reason only; ``convert_all`` adds the place (``ConversionError``, exit 2).
    """


class GapCollector:
    """Collects unsupported items: one entry per op (and reason), with a count and the first place.

    With ``by_reason=False`` an op refused for several reasons is one entry with the first reason.
    """

    def __init__(self, *, by_reason: bool = True) -> None:
        self._by_reason = by_reason
        self._found: dict[tuple[str, str], list[object]] = {}

    def add(self, op: str, where: str, reason: str = "") -> None:
        """Record one occurrence of ``op`` at ``where`` (the first place and reason are kept)."""
        entry = self._found.setdefault((op, reason if self._by_reason else ""), [0, where, reason])
        entry[0] = int(entry[0]) + 1  # type: ignore[call-overload]

    def __bool__(self) -> bool:
        return bool(self._found)

    def items(self) -> list[Unsupported]:
        """Return the gaps in first-seen order."""
        return [Unsupported(op, int(count), str(first), str(reason))  # type: ignore[call-overload]
                for (op, _), (count, first, reason) in self._found.items()]

    def raise_if_any(self, subject: str, *, what: str = "op", hint: str = "") -> None:
        """Raise ``UnsupportedOpsError`` listing every gap, when there is one."""
        if self._found:
            raise UnsupportedOpsError(subject, self.items(), what=what, hint=hint)


def convert_all(
    items: Iterable[T],
    registry: Registry,
    *,
    key: Callable[[T], Hashable],
    where: Callable[[T], str],
    call: Callable[[Callable[..., R], T], R],
    options: Options | None = None,
    stage: str = "",
    total: int | None = None,
) -> list[R]:
    """Convert every item with its registered handler and return the handlers' results in order.

    ``call(handler, item)`` runs one handler (a frontend passes its context along). Items without a
    handler must have been reported by a ``GapCollector`` first: meeting one here is a bug.

    Raises:
        ConversionError: a handler raised ``RefusedError``; names the item.
        ConvertError: any other of the user's errors from a handler, unchanged.
        InternalError: any other exception of a handler, naming the item (``where``).
    """
    seq = items if isinstance(items, list) else list(items)
    count = len(seq) if total is None else total
    step = max(1, count // 200)  # progress at most ~200 times: a callback per op costs on big graphs
    results: list[R] = []
    for i, item in enumerate(seq):
        handler = registry.lookup(key(item))
        try:
            if handler is None:
                raise LookupError(f"no handler for {key(item)!r} (the support check should have listed it)")
            results.append(call(handler, item))
        except RefusedError as exc:
            raise ConversionError(where(item), str(exc)) from exc
        except ConvertError:
            raise
        except Exception as exc:
            raise InternalError(where(item), exc) from exc
        if options is not None and stage and ((i + 1) % step == 0 or i + 1 == count):
            options.progress(stage, i + 1, count)
    return results
