"""Make a program lowerable with torch's own rewrites: functionalization and Core ATen decompositions.

When an op has no converter, or an in-place op writes through a view, the program goes through
``ExportedProgram.run_decompositions(table)``: torch functionalizes it (in-place ops become their
functional forms, writes through views become ``*_scatter`` ops) and decomposes the ops the table
names into Core ATen. The table is torch's default one minus every op our op table lowers, so
conv, the norms, linear, attention, upsampling and the rest stay whole and keep their direct
lowering. When a converter refuses a call (an argument it does not handle), the lowering asks
again with that op decomposed too (``also``).

Part of the lowering (``__init__``'s "the path a model takes"): ``lower.py`` calls it, and it
imports only the op table below it.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from .ops import resolve
from .torchenv import quiet_torch

__all__ = ["decomposable", "decompose", "decomposition_table"]

logger = logging.getLogger(__name__)


def _key(op: object) -> str:
    name = op.name() if callable(getattr(op, "name", None)) else str(op)  # type: ignore[attr-defined]
    return str(name).split(".", 1)[0].replace("::", ".")


def decomposition_table(also: Collection[str] = ()) -> object:
    """Return torch's default decomposition table without the ops we lower ourselves.

    Args:
        also: op keys (``aten.softplus``) decomposed even though a converter exists: the calls of
            them that the converter refused (a ``beta`` it does not handle, say).
    """
    import torch

    table = torch.export.default_decompositions()
    for op in list(table.keys()):
        key = _key(op)
        if key not in also and resolve(key) is not None:
            del table[op]
    return table


def decomposable(key: str) -> bool:
    """Return True when torch's default table can decompose op ``key``."""
    import torch

    return any(_key(op) == key for op in torch.export.default_decompositions().keys())  # noqa: SIM118


def decompose(program: object, also: Collection[str] = ()) -> object:
    """Return ``program`` functionalized, with every op we cannot lower (and ``also``) decomposed."""
    import torch

    with torch.no_grad(), quiet_torch():
        return program.run_decompositions(decomposition_table(also))  # type: ignore[attr-defined]
