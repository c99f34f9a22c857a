"""Op converters, keyed by Paddle's spelling of the op type (both ProgramDesc and PIR names).

A converter is ``f(op, ctx) -> None``: it reads inputs through ``ctx``, emits ONNX nodes at
opset 17 (``CANONICAL_OPSET``) and binds every output it produces.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from convert.frontends.paddle.context import PaddleContext
from convert.frontends.paddle.program import Op
from convert.ir import OpSupport, Registry

__all__ = ["OPS", "SUPPORT", "Converter", "doc", "register"]


class Converter(Protocol):
    """The signature of an op converter."""

    def __call__(self, op: Op, ctx: PaddleContext) -> None: ...


OPS: Registry[Converter] = Registry("paddle ops")
# Paddle op -> (ONNX ops it maps to, notes), for `convert ops paddle` and docs/paddle.md.
SUPPORT: dict[str, OpSupport] = {}


def doc(maps_to: str, notes: str = "", *names: str) -> None:
    """Record the support-table row of ``names``."""
    for name in names:
        SUPPORT[name] = OpSupport(name, maps_to, notes)


def register(*names: str, maps_to: str, notes: str = "") -> Callable[[Converter], Converter]:
    """Register a converter under every spelling in ``names`` and record its table row."""
    doc(maps_to, notes, *names)
    return OPS.register(*names)


from . import math, nn, tensor  # noqa: E402,F401  (fill the registry)
