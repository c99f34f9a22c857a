"""The PyTorch frontend's op table: one module per op family, keyed by ATen op name."""

from __future__ import annotations

from . import activation, attention, conv, math, norm, pool, tensor
from ._base import OPS, LowerContext, OpCall, TensorMeta, lowers

__all__ = ["OPS", "LowerContext", "OpCall", "TensorMeta", "activation", "attention", "conv", "lowers", "math",
           "norm", "pool", "tensor"]
