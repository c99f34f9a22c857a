"""Op converters, keyed by Paddle's spelling of the op type (both ProgramDesc and PIR names).

A converter is ``f(op, ctx) -> None``: it reads inputs through ``ctx``, emits ONNX nodes at
opset 17 (``CANONICAL_OPSET``) and binds every output it produces.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from convert.frontends.paddle.context import PaddleContext
from convert.frontends.paddle.program import Op
from convert.ir import Registry

__all__ = ["OPS", "Converter", "register"]


class Converter(Protocol):
    """The signature of an op converter."""

    def __call__(self, op: Op, ctx: PaddleContext) -> None: ...


OPS: Registry[Converter] = Registry("paddle ops")


def register(*names: str, maps_to: str, notes: str = "") -> Callable[[Converter], Converter]:
    """Register a converter under every spelling in ``names`` with its support-table row."""
    return OPS.register(*names, maps_to=maps_to, notes=notes)


from . import math, nn, tensor  # noqa: E402,F401  (fill the registry)
