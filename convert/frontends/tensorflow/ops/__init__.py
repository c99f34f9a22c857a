"""Op converters, keyed by TensorFlow's op type (``NodeDef.op``).

A converter is ``f(node, ctx) -> None``: it reads inputs through ``ctx`` (in the layout it needs),
emits ONNX nodes at opset 17 and binds every output it produces.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from convert.frontends.tensorflow.context import TFContext
from convert.frontends.tensorflow.graph import TFNode
from convert.ir import Registry

__all__ = ["OPS", "Converter", "register"]


class Converter(Protocol):
    """The signature of an op converter."""

    def __call__(self, node: TFNode, ctx: TFContext) -> None: ...


OPS: Registry[Converter] = Registry("tensorflow ops")


def register(*names: str, maps_to: str, notes: str = "") -> Callable[[Converter], Converter]:
    """Register a converter under every TF op type in ``names`` with its support-table row."""
    return OPS.register(*names, maps_to=maps_to, notes=notes)


from . import controlflow, math, nn, recurrent, tensor  # noqa: E402,F401  (fill the registry)
