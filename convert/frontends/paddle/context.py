"""The conversion context handed to every op converter (no globals).

It maps Paddle variable names to IR values, emits nodes with provenance (Paddle op type and
output variable names), reads small constant inputs (shapes, axes, scales) and records
constant values produced by ``full``/``fill_constant``-style ops so later ops can use them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from convert.ir import GraphBuilder, Options, Provenance, RefusedError, Value
from convert.ir.context import FrontendContext

from .program import Op, Program

__all__ = ["PaddleContext"]

_SMALL = 1 << 16


def layer_key(op: Op) -> str:
    """Return the source-layer key of a Paddle op: its first output names (the localisation reads it)."""
    return ",".join(op.output_names()[:4])


class PaddleContext(FrontendContext):
    """State of one conversion: builder, value table, program, options; the current item is the Paddle op."""

    def __init__(self, builder: GraphBuilder, program: Program, options: Options) -> None:
        super().__init__(builder)
        self.program = program
        self.options = options
        self.diagnostics = options.diagnostics
        self.values: dict[str, Value] = {}
        self.consts: dict[str, np.ndarray] = {}
        self._bound: set[int] = set()
        # Makes the initializer of a parameter on first use (set by the loader).
        self.param_factory: Callable[[str], Value | None] = lambda name: None

    # -- reading inputs -------------------------------------------------------------------
    def has(self, op: Op, slot: str) -> bool:
        """Return True when ``slot`` is present and non-empty."""
        return bool(op.inputs.get(slot))

    def input(self, op: Op, slot: str, index: int = 0) -> Value:
        """Return the IR value of input ``slot`` (its ``index``-th argument)."""
        names = op.inputs.get(slot) or []
        if index >= len(names):
            raise RefusedError(f"input slot '{slot}' is missing")
        return self.value(names[index])

    def inputs(self, op: Op, slot: str) -> list[Value]:
        """Return every value of input ``slot`` (empty when absent)."""
        return [self.value(n) for n in op.inputs.get(slot) or []]

    def value(self, name: str) -> Value:
        """Return the IR value of Paddle variable ``name``, making constants on demand."""
        if name in self.values:
            return self.values[name]
        if name in self.consts:
            v = self.builder.const(self.consts[name], name=name)
            self.values[name] = v
            return v
        param = self.param_factory(name)
        if param is not None:
            self.values[name] = param
            return param
        raise RefusedError(f"variable '{name}' is used before it is defined")

    def static(self, op: Op, slot: str) -> np.ndarray | None:
        """Return the values of a constant input (a list slot is concatenated), or None."""
        names = op.inputs.get(slot) or []
        if not names:
            return None
        parts = []
        for name in names:
            arr = self.static_var(name)
            if arr is None:
                return None
            parts.append(arr.reshape(-1))
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def static_var(self, name: str) -> np.ndarray | None:
        """Return the value of variable ``name`` when it is a small known constant."""
        if name in self.consts:
            return self.consts[name]
        value = self.values.get(name)
        if value is not None and value.const_value is not None and value.const_value.nbytes <= _SMALL:
            return value.const_value.numpy()
        return None

    def shape(self, op: Op, slot: str, index: int = 0) -> tuple[int, ...] | None:
        """Return the declared shape of an input (-1 for free dims) or None."""
        names = op.inputs.get(slot) or []
        return self.program.var(names[index]).shape if index < len(names) else None

    def out_shape(self, op: Op, slot: str = "Out") -> tuple[int, ...] | None:
        """Return the declared shape of an output or None."""
        names = op.outputs.get(slot) or []
        return self.program.var(names[0]).shape if names else None

    def rank(self, op: Op, slot: str, index: int = 0) -> int | None:
        """Return the rank of an input, when known."""
        shape = self.shape(op, slot, index)
        return len(shape) if shape is not None else None

    # -- emitting -------------------------------------------------------------------------
    def provenance(self, item: Op) -> Provenance:
        """The Paddle op's type and its first output names."""
        return Provenance(layer=layer_key(item), kind=item.type)

    def node_name(self, item: Op, op_type: str, suffix: str = "") -> str:
        """Node names live beside value names: "<first output>/<OpType or suffix>" keeps the
        Paddle variable name free for the value that binds it."""
        return f"{(item.output_names() or [item.type])[0]}/{suffix or op_type}"

    def const(self, array: np.ndarray | np.generic | Sequence[int] | Sequence[float] | float | int,
              dtype: np.dtype | type | str | None = None) -> Value:
        """Return a small shared constant."""
        return self.builder.const(np.asarray(array, dtype=dtype) if dtype is not None else np.asarray(array))

    def bind(self, op: Op, slot: str, value: Value, index: int = 0) -> None:
        """Make ``value`` the IR value of output ``slot`` and name it after the Paddle variable."""
        names = op.outputs.get(slot) or []
        if index >= len(names):
            raise RefusedError(f"output slot '{slot}' is missing")
        name = names[index]
        producer = value.producer()
        if producer is not None and id(value) not in self._bound:
            value.name = self.builder.names.fresh(name)
            self._bound.add(id(value))
        self.values[name] = value

    def bind_const(self, op: Op, slot: str, array: np.ndarray) -> None:
        """Record a constant output (materialised only if a node reads it)."""
        names = op.outputs.get(slot) or []
        if names:
            self.consts[names[0]] = array
