"""Fold elementwise arithmetic on constants in NumPy, as the converters reach it.

A SavedModel's weights arrive as constants that grappler never saw (they stay in the mapped
variables file), so the arithmetic Keras builds on them is still in the graph: a batch norm is
``Rsqrt(variance + eps) * gamma`` and ``beta - mean * that``. Those are per-channel vectors; the
``Mul``/``Add`` converters then take them into the convolution before as its weight scale and bias.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .context import TFContext
from .graph import TFNode

__all__ = ["FOLDS", "fold_constant"]

_Fold = Callable[[list[np.ndarray], dict[str, object]], np.ndarray]

FOLDS: dict[str, _Fold] = {
    "Add": lambda v, _: v[0] + v[1],
    "AddV2": lambda v, _: v[0] + v[1],
    "Sub": lambda v, _: v[0] - v[1],
    "Mul": lambda v, _: v[0] * v[1],
    "RealDiv": lambda v, _: v[0] / v[1],
    "Maximum": lambda v, _: np.maximum(v[0], v[1]),
    "Minimum": lambda v, _: np.minimum(v[0], v[1]),
    "Neg": lambda v, _: -v[0],
    "Square": lambda v, _: v[0] * v[0],
    "Sqrt": lambda v, _: np.sqrt(v[0]),
    "Rsqrt": lambda v, _: np.reciprocal(np.sqrt(v[0])),
    "Reciprocal": lambda v, _: np.reciprocal(v[0]),
    "Cast": lambda v, attrs: v[0].astype(attrs["DstT"]),  # type: ignore[call-overload]
    # Shape-only ops (Keras reshapes a convolution's bias to [1, 1, 1, C] and squeezes it back):
    # views of the input, so a mapped weight stays mapped.
    "Reshape": lambda v, _: v[0].reshape([int(d) for d in v[1].reshape(-1)]),
    "Squeeze": lambda v, attrs: _squeeze(v[0], attrs.get("squeeze_dims")),
    "ExpandDims": lambda v, _: np.expand_dims(v[0], int(v[1].reshape(-1)[0])),
}


_ARITHMETIC = frozenset(("Add", "AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum", "Neg", "Square", "Sqrt",
                         "Rsqrt", "Reciprocal"))


def _squeeze(array: np.ndarray, dims: object) -> np.ndarray:
    axes = tuple(int(d) for d in dims) if isinstance(dims, list) and dims else None
    return np.squeeze(array, axis=axes)


def fold_constant(node: TFNode, ctx: TFContext) -> bool:
    """Bind ``node``'s output as a constant when it is a foldable op of constants; return whether it was."""
    fold = FOLDS.get(node.op)
    if fold is None or not node.inputs:
        return False
    values = [ctx.const(name) for name in node.inputs]
    if any(v is None for v in values):
        return False
    dtype = node.dtypes[0] if node.dtypes else None
    if dtype == np.float32 and node.op in _ARITHMETIC:
        # Computed in float64 and kept so: a batch norm's chain (add, rsqrt, multiply, subtract)
        # is rounded once, where the Conv's weight and bias take it (or where the builder makes
        # a float32 initializer of it), not at each step.
        values = [v.astype(np.float64) if v.dtype == np.float32 else v for v in values]  # type: ignore[union-attr]
        dtype = np.dtype(np.float64)
    with np.errstate(all="ignore"):  # TensorFlow gives inf/nan as well, without a warning
        result = np.asarray(fold(values, node.attrs))  # type: ignore[arg-type]
    ctx.bind_const(result.astype(dtype or result.dtype, copy=False))
    return True
