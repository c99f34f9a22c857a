"""A small generic registry: decorator registration keyed by the source spelling of an op.

Every frontend and exporter owns one instance. Keys may carry a *since* version (the opset or
format version where the handler's behaviour starts); ``lookup(key, version)`` returns the
handler with the largest ``since`` not above ``version``.

An entry also carries what ``convert ops`` and docs/SUPPORTED_OPS.md print for it: what it maps
to and its limits (``register(..., maps_to=, notes=)`` or ``describe``); ``support()`` is the table.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

from .plugins import OpSupport

__all__ = ["Registry"]

F = TypeVar("F", bound=Callable[..., object])


class Registry(Generic[F]):
    """Map keys (op names, layer types) to handler functions."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._entries: dict[Hashable, dict[int, F]] = {}
        self._described: dict[Hashable, tuple[str, str]] = {}

    def register(self, *keys: Hashable, since: int = 1, maps_to: str = "", notes: str = "") -> Callable[[F], F]:
        """Register the decorated function under every key in ``keys`` (and describe them, when given).

        Raises:
            ValueError: when a key is already registered with the same ``since``.
        """
        if not keys:
            raise ValueError(f"{self.name}: register() needs at least one key")

        def decorate(func: F) -> F:
            for key in keys:
                versions = self._entries.setdefault(key, {})
                if since in versions:
                    raise ValueError(
                        f"{self.name}: {key!r} (since {since}) is registered twice: "
                        f"{versions[since].__qualname__} and {func.__qualname__}"
                    )
                versions[since] = func
                if maps_to or notes:
                    self.describe(key, maps_to, notes)
            return func

        return decorate

    def describe(self, key: Hashable, maps_to: str, notes: str = "") -> None:
        """Record what ``key`` maps to and its limits, for the support table."""
        self._described[key] = (maps_to, notes)

    def support(self, *, sort: bool = False) -> list[OpSupport]:
        """Return the support table: one row per key (registration order, or sorted by name)."""
        keys = sorted(self._entries, key=str) if sort else list(self._entries)
        return [OpSupport(str(k), *self._described.get(k, ("", ""))) for k in keys]

    def lookup(self, key: Hashable, version: int | None = None) -> F | None:
        """Return the handler for ``key`` valid at ``version`` (newest if None), or None."""
        versions = self._entries.get(key)
        if not versions:
            return None
        if version is None:
            return versions[max(versions)]
        eligible = [v for v in versions if v <= version]
        return versions[max(eligible)] if eligible else None

    def versions(self, key: Hashable) -> list[int]:
        """Return the ``since`` versions registered for ``key``, ascending (the versions where it changed)."""
        return sorted(self._entries.get(key, {}))

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def keys(self) -> list[Hashable]:
        """Return every registered key, in registration order."""
        return list(self._entries)

    def items(self) -> list[tuple[Hashable, F]]:
        """Return ``(key, newest handler)`` pairs, in registration order."""
        return [(k, v[max(v)]) for k, v in self._entries.items()]

    def missing(self, keys: Iterable[Hashable]) -> list[Hashable]:
        """Return the keys (deduplicated, in first-seen order) that have no handler."""
        seen: dict[Hashable, None] = {}
        for key in keys:
            if key not in self._entries:
                seen.setdefault(key, None)
        return list(seen)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.name!r}, {len(self)} keys)"
