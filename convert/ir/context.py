"""One emission API for every frontend's conversion context.

A converter emits nodes for the *current source item* (a Paddle op, a Caffe layer, a Darknet
section, a TensorFlow node): ``ctx.emit(op, inputs, attrs) -> Value`` for one output,
``ctx.emit_multi(op, inputs, attrs, outputs=n) -> tuple[Value, ...]`` for several. The loader sets
the item (``ctx.item = ...``, or ``with ctx.at(item):``); each frontend's context says what the
item's provenance and node names are (``provenance``, ``node_name``) and where it is for error
messages (``where``). Nodes so emitted always carry the item's provenance.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import onnx_ir as _ir

from .builder import GraphBuilder
from .provenance import Provenance

__all__ = ["FrontendContext"]


class FrontendContext:
    """The builder, the current source item, and ``emit`` / ``emit_multi`` for it."""

    def __init__(self, builder: GraphBuilder) -> None:
        self.builder = builder
        self.item: Any = None

    # -- what a frontend says about its items ------------------------------------------------
    def provenance(self, item: Any) -> Provenance:
        """Return the provenance of the nodes emitted for ``item``."""
        return Provenance()

    def node_name(self, item: Any, op_type: str, suffix: str = "") -> str:
        """Return the base name of a node emitted for ``item`` (made unique by the builder): by
        default the suffix the converter gave, else the op type."""
        return suffix or op_type

    def where(self, item: Any) -> str:
        """Return where ``item`` is in the source, for messages."""
        return self.provenance(item).where()

    # -- the current item ---------------------------------------------------------------------
    def current(self) -> Any:
        """Return the item being converted; emitting outside a converter is a bug."""
        if self.item is None:
            raise RuntimeError("emit() outside a converter: no current source item")
        return self.item

    @contextmanager
    def at(self, item: Any) -> Iterator[Any]:
        """Make ``item`` the current item for the duration of the block."""
        before, self.item = self.item, item
        try:
            yield item
        finally:
            self.item = before

    # -- emission -------------------------------------------------------------------------------
    def emit_multi(self, op_type: str, inputs: Sequence[_ir.Value | None], attrs: Mapping[str, object] | None = None,
                   *, outputs: int = 1, domain: str = "", suffix: str = "") -> tuple[_ir.Value, ...]:
        """Append one node for the current item and return its ``outputs`` outputs.

        The node is named ``node_name(item, op_type, suffix)``.
        """
        item = self.current()
        return self.builder.op_multi(op_type, inputs, attrs, name=self.node_name(item, op_type, suffix),
                                     outputs=outputs, domain=domain, prov=self.provenance(item))

    def emit(self, op_type: str, inputs: Sequence[_ir.Value | None], attrs: Mapping[str, object] | None = None,
             *, domain: str = "", suffix: str = "") -> _ir.Value:
        """Append a one-output node for the current item and return its output."""
        return self.emit_multi(op_type, inputs, attrs, domain=domain, suffix=suffix)[0]
