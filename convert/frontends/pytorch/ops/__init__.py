"""The PyTorch frontend's op table: one module per op family, keyed by ATen op name."""

from __future__ import annotations

from . import (
    activation,
    attention,
    conv,
    creation,
    detection,
    grad,
    index,
    math,
    norm,
    pool,
    random,
    reduce,
    sample,
    spectral,
    tensor,
)
from ._base import OPS, LowerContext, OpCall, TensorMeta, functional_key, lowers, resolve

__all__ = ["OPS", "LowerContext", "OpCall", "TensorMeta", "activation", "attention", "conv", "creation", "detection",
           "functional_key", "grad", "index", "lowers", "math", "norm", "pool", "random", "reduce", "resolve", "sample",
           "spectral", "tensor"]
