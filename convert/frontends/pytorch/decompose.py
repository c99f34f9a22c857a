"""Make a program lowerable with torch's own rewrites: functionalization and Core ATen decompositions.

When an op has no converter, or an in-place op writes through a view, the program goes through
``ExportedProgram.run_decompositions(table)``: torch functionalizes it (in-place ops become their
functional forms, writes through views become ``*_scatter`` ops) and decomposes the ops the table
names into Core ATen. The table is torch's default one minus every op our op table lowers, so
conv, the norms, linear, attention, upsampling and the rest stay whole and keep their direct
lowering.
"""

from __future__ import annotations

import logging

from .ops import resolve

__all__ = ["decompose", "decomposition_table"]

logger = logging.getLogger(__name__)


def _key(op: object) -> str:
    name = op.name() if callable(getattr(op, "name", None)) else str(op)  # type: ignore[attr-defined]
    return str(name).split(".", 1)[0].replace("::", ".")


def decomposition_table() -> object:
    """Return torch's default decomposition table without the ops we lower ourselves."""
    import torch

    table = torch.export.default_decompositions()
    for op in list(table.keys()):
        if resolve(_key(op)) is not None:
            del table[op]
    return table


def decompose(program: object) -> object:
    """Return ``program`` functionalized, with every op we cannot lower decomposed by torch."""
    import torch

    from .capture import quiet_torch

    with torch.no_grad(), quiet_torch():
        return program.run_decompositions(decomposition_table())  # type: ignore[attr-defined]
