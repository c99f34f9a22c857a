"""The op table of the PyTorch frontend and what every converter receives.

Converters are keyed by the ATen op name as torch.export spells it (``"aten.conv2d"``), one
function for all overloads of an op: arguments are bound by their schema names, so
``call["stride"]`` works whether the caller passed it positionally, by keyword or left the
default. A converter returns an IR value, a tuple of values (multi-output ops), a Python scalar
(shape arithmetic) or ``None`` (ops with no result such as assertions).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from convert.ir import (
    ConversionError,
    DataType,
    Diagnostics,
    GraphBuilder,
    Options,
    Provenance,
    Registry,
    Value,
    from_array,
)
from convert.ir.context import FrontendContext

__all__ = ["OPS", "LowerContext", "OpCall", "TensorMeta", "functional_key", "lowers", "resolve"]


@dataclass(frozen=True, slots=True)
class TensorMeta:
    """Static facts about a tensor taken from torch.export's fake values: shape and dtype."""

    shape: tuple[int | str, ...]  # a str is a symbolic dim ('batch' under --dynamic-batch)
    dtype: DataType

    @property
    def is_static(self) -> bool:
        """Return True when every dimension is a number."""
        return all(isinstance(d, int) for d in self.shape)

    def dim(self, i: int) -> int:
        """Return dimension ``i`` as a number; raise when it is symbolic (``--dynamic-batch``)."""
        d = self.shape[i]
        if not isinstance(d, int):
            raise ConversionError(f"dimension {i} ('{d}')", "a static size is needed here; drop --dynamic-batch")
        return d

    def dims(self, start: int = 0) -> list[int]:
        """Return dimensions ``start:`` as numbers (see ``dim``)."""
        return [self.dim(i) for i in range(start, self.rank)]

    @property
    def rank(self) -> int:
        """Return the number of dimensions."""
        return len(self.shape)


@dataclass(slots=True)
class OpCall:
    """One ATen call: the op, its arguments bound by schema name, and what it produces."""

    op: str
    overload: str
    args: dict[str, object]
    metas: dict[str, object]
    out: object
    where: str
    module: str = ""
    prov: Provenance = field(default_factory=Provenance)
    used: frozenset[int] | None = None  # the results of a multi-result op later nodes read; None: all

    def uses(self, index: int) -> bool:
        """Return True when result ``index`` of the call is read later."""
        return self.used is None or index in self.used

    def __getitem__(self, name: str) -> object:
        return self.args[name]

    def get(self, name: str, default: object = None) -> object:
        """Return argument ``name``, or ``default`` when it is absent or None."""
        value = self.args.get(name)
        return default if value is None else value

    def tensor(self, name: str) -> Value:
        """Return argument ``name`` as an IR value; raise when it is not a tensor."""
        value = self.args.get(name)
        if not isinstance(value, Value):
            raise ConversionError(self.where, f"argument '{name}' is {type(value).__name__}, expected a tensor")
        return value

    def meta(self, name: str) -> TensorMeta:
        """Return the shape and dtype of tensor argument ``name``."""
        meta = self.metas.get(name)
        if not isinstance(meta, TensorMeta):
            raise ConversionError(self.where, f"no static shape is known for argument '{name}'")
        return meta

    @property
    def out_meta(self) -> TensorMeta:
        """Return the shape and dtype of the (first) output."""
        out = self.out
        if isinstance(out, (list, tuple)):
            out = out[0]
        if not isinstance(out, TensorMeta):
            raise ConversionError(self.where, "the op's output is not a tensor")
        return out

    def unsupported(self, why: str, hint: str = "") -> ConversionError:
        """Return an error saying this call cannot be converted, for ``raise``."""
        return ConversionError(self.where, why + (f". {hint}" if hint else ""))


class LowerContext(FrontendContext):
    """What converters use: ``emit`` / ``emit_multi`` for the current ATen call (``item``, also
    ``call``), small constants, options and notes. Nodes are named after the call's module path
    (``layer1.0.conv1``), else their op type, and carry the call's provenance."""

    def __init__(self, builder: GraphBuilder, options: Options) -> None:
        super().__init__(builder)
        self.options = options
        self.diagnostics: Diagnostics = options.diagnostics
        self._scalars: dict[tuple[str, bytes], Value] = {}

    @property
    def call(self) -> OpCall | None:
        """The ATen call being converted (the current item)."""
        return self.item  # type: ignore[no-any-return]

    @call.setter
    def call(self, value: OpCall | None) -> None:
        self.item = value

    def provenance(self, item: OpCall) -> Provenance:
        """The call's module path, ATen op and source line."""
        return item.prov

    def node_name(self, item: OpCall, op_type: str, suffix: str = "") -> str:
        """The converter's suffix, else the call's module path, else the op type."""
        return suffix or item.module or op_type

    def const(self, array: object, dtype: DataType | np.dtype | type | None = None, name: str = "const") -> Value:
        """Add a small constant; ``dtype`` may be an IR ``DataType``."""
        if isinstance(dtype, DataType):
            dtype = dtype.numpy()
        return self._const(np.asarray(array, dtype=dtype), name)

    def ints(self, values: Sequence[int] | int, name: str = "const") -> Value:
        """Add a small int64 constant (shapes, axes, split sizes)."""
        return self._const(np.asarray(values, dtype=np.int64), name)

    def _const(self, arr: np.ndarray, name: str) -> Value:
        if arr.ndim:
            return self.builder.const(arr, name=name)
        # GraphBuilder.const passes arrays through np.ascontiguousarray, which turns a 0-d array
        # into shape (1,); scalars (Gather indices) must stay 0-d, so they are added here.
        key = (arr.dtype.str, arr.tobytes())
        value = self._scalars.get(key)
        if value is None:
            value = self.builder.initializer(from_array(arr.copy(), name=name), name)
            self._scalars[key] = value
        return value

    def shape_value(self, shape: Sequence[int | str], *, like: TensorMeta | None = None,
                    sizes: object = None, expand: bool = False) -> Value:
        """Return the target-shape input of a Reshape (or, with ``expand``, an Expand) node.

        Static shapes are constants. A symbolic dim at the position where ``like`` (the input)
        has the same dim becomes 0 for Reshape (copy the input's dim) or 1 for Expand (keep it);
        one other symbolic dim becomes -1 for Reshape. Otherwise the shape is assembled at run
        time from ``sizes``, the op's size argument whose symbolic entries are int64 values.
        """
        if all(isinstance(d, int) for d in shape):
            return self.ints([int(d) for d in shape])
        target: list[int] = []
        unknown = 0
        for i, d in enumerate(shape):
            if isinstance(d, int):
                target.append(d)
            elif like is not None and i < like.rank and like.shape[i] == d and not expand:
                target.append(0)
            elif like is not None and expand and like.rank - len(shape) + i >= 0 \
                    and like.shape[like.rank - len(shape) + i] == d:
                target.append(1)
            else:
                unknown += 1
                target.append(-1)
        if unknown == 0 or (unknown == 1 and not expand):
            return self.ints(target)
        if isinstance(sizes, (list, tuple)) and len(sizes) == len(shape):
            parts = []
            for s in sizes:
                if isinstance(s, Value):  # a size computed at run time: as one int64 element
                    parts.append(self.emit("Reshape", [self.emit("Cast", [s], {"to": DataType.INT64}), self.ints([1])]))
                else:
                    n = int(s)
                    parts.append(self.ints([1 if (expand and n == -1) else n]))
            return self.emit("Concat", parts, {"axis": 0})
        where = self.call.where if self.call is not None else "?"
        raise ConversionError(where, f"cannot express the symbolic shape {tuple(shape)}")

    def scalar_like(self, value: float | int | bool, meta: TensorMeta) -> Value:
        """Add a 0-d constant with the dtype of ``meta`` (a Python scalar operand)."""
        return self.const(np.asarray(value, dtype=meta.dtype.numpy()))


class Converter(Protocol):
    """The signature of every converter."""

    def __call__(self, call: OpCall, ctx: LowerContext) -> object: ...


OPS: Registry[Callable[[OpCall, LowerContext], object]] = Registry("pytorch ops")


def lowers(*keys: str, to: str, notes: str = "") -> Callable[[Callable[[OpCall, LowerContext], object]],
                                                             Callable[[OpCall, LowerContext], object]]:
    """Register a converter for ``keys`` with its support-table row (what it maps to, its limits)."""
    return OPS.register(*keys, maps_to=to, notes=notes)


def functional_key(key: str) -> str:
    """Return the key of the op an in-place variant stands for: ``aten.relu_`` -> ``aten.relu``.

    Dunder ops (``aten.__and__``) and keys without the trailing underscore are returned unchanged.
    """
    if key.endswith("_") and not key.endswith("__"):
        return key[:-1]
    return key


def resolve(key: str) -> Callable[[OpCall, LowerContext], object] | None:
    """Return the converter of ``key``: its own, else (in-place ``aten.op_``) the functional op's.

    ``out=`` overloads share the functional op's key already (an overload is not part of the key);
    the lowering rebinds every argument the schema marks as written (``Tensor(a!)``) to the result.
    """
    func = OPS.lookup(key)
    if func is None:
        base = functional_key(key)
        if base != key:
            func = OPS.lookup(base)
    return func


def norm_axis(axis: int, rank: int) -> int:
    """Return ``axis`` in ``[0, rank)``."""
    return axis + rank if axis < 0 else axis


def as_list(value: object, n: int) -> list[int]:
    """Return an int or a list of ints as a list of ``n`` ints (a one-element list is repeated)."""
    if isinstance(value, (list, tuple)):
        items = [int(v) for v in value]
        return items * n if len(items) == 1 else items
    return [int(value)] * n  # type: ignore[call-overload]
