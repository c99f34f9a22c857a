"""Darknet activations as ONNX ops, one function per ``activation=`` spelling.

Each entry maps the exact Darknet formula (``src/activations.h`` of both lineages):

==========  ============================================  ==================================
name        Darknet                                       ONNX
==========  ============================================  ==================================
linear      x                                             (nothing)
leaky       x > 0 ? x : 0.1 x                             LeakyRelu(alpha=0.1)
relu        x * (x > 0)                                   Relu
relie       x > 0 ? x : 0.01 x                            LeakyRelu(alpha=0.01)
ramp        x * (x > 0) + 0.1 x                           Relu(x) + 0.1 x
relu6       clamp(x, 0, 6)                                Clip(0, 6)
logistic    1 / (1 + exp(-x))                             Sigmoid
loggy       2 / (1 + exp(-x)) - 1                         2 Sigmoid(x) - 1
tanh        (exp(2x) - 1) / (exp(2x) + 1)                 Tanh
hardtan     clamp(x, -1, 1)                               Clip(-1, 1)
elu         x >= 0 ? x : exp(x) - 1                       Elu(alpha=1)
selu        1.0507 (x >= 0 ? x : 1.6732 (exp(x) - 1))     Selu(alpha=1.6732, gamma=1.0507)
swish       x * logistic(x)                               x * Sigmoid(x)
mish        x * tanh(softplus(x)) (softplus cut at 20)    x * Tanh(Softplus(x))
hard_mish   x > 0 ? x : (x > -2 ? x^2/2 + x : 0)          x * Clip(x/2 + 1, 0, 1)
hardswish   x * relu6(x + 3) / 6                          HardSwish
gelu        0.5x(1 + tanh(0.797885x + 0.035677x^3))       the same formula in Mul/Add/Tanh
==========  ============================================  ==================================

Mish's softplus cut (x > 20 -> x, x < -20 -> exp(x)) differs from ``log1p(exp(x))`` by less than
float32 rounding, so plain Softplus matches.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from convert.ir import GraphBuilder, Provenance, Registry, Value

__all__ = ["ACTIVATIONS", "NUMPY_ACTIVATIONS", "emit_activation"]

EmitFn = Callable[[GraphBuilder, Value, str, Provenance], Value]
ACTIVATIONS: Registry[EmitFn] = Registry("darknet activations")


def _f(b: GraphBuilder, value: float) -> Value:
    """A float32 scalar constant."""
    return b.const(np.array(value, np.float32))


def emit_activation(b: GraphBuilder, x: Value, activation: str, name: str, prov: Provenance) -> Value:
    """Append ``activation`` applied to ``x``; the caller has checked the name is supported."""
    fn = ACTIVATIONS.lookup(activation)
    if fn is None:  # check_support lists these before conversion starts
        raise KeyError(activation)
    return fn(b, x, name, prov)


@ACTIVATIONS.register("linear", maps_to="nothing")
def linear(b: GraphBuilder, x: Value, name: str, prov: Provenance) -> Value:
    """Identity."""
    return x


@ACTIVATIONS.register("leaky", maps_to="LeakyRelu(alpha=0.1)")
def leaky(b: GraphBuilder, x: Value, name: str, prov: Provenance) -> Value:
    """LeakyRelu with Darknet's 0.1 slope."""
    return b.op("LeakyRelu", [x], {"alpha": 0.1}, name=f"{name}_leaky", prov=prov)


@ACTIVATIONS.register("relie", maps_to="LeakyRelu(alpha=0.01)")
def relie(b: GraphBuilder, x: Value, name: str, prov: Provenance) -> Value:
    """LeakyRelu with slope 0.01."""
    return b.op("LeakyRelu", [x], {"alpha": 0.01}, name=f"{name}_relie", prov=prov)


@ACTIVATIONS.register("relu", maps_to="Relu")
def relu(b: GraphBuilder, x: Value, name: str, prov: Provenance) -> Value:
    """Relu."""
    return b.op("Relu", [x], name=f"{name}_relu", prov=prov)


@ACTIVATIONS.register("ramp", maps_to="Relu(x) + 0.1 x")
def ramp(b: GraphBuilder, x: Value, name: str, prov: Provenance) -> Value:
    """Relu(x) + 0.1 x."""
    r = b.op("Relu", [x], name=f"{name}_ramp_relu", prov=prov)
    s = b.op("Mul", [x, _f(b, 0.1)], name=f"{name}_ramp_scale", prov=prov)
    return b.op("Add", [r, s], name=f"{name}_ramp", prov=prov)


@ACTIVATIONS.register("relu6", maps_to="Clip(0, 6)")
def relu6(b: GraphBuilder, x: Value, name: str, prov: Provenance) -> Value:
    """Clip(0, 6)."""
    return b.op("Clip", [x, _f(b, 0), _f(b, 6)], name=f"{name}_relu6", prov=prov)


@ACTIVATIONS.register("hardtan", maps_to="Clip(-1, 1)")
def hardtan(b: GraphBuilder, x: Value, name: str, prov: Provenance) -> Value:
    """Clip(-1, 1)."""
    return b.op("Clip", [x, _f(b, -1), _f(b, 1)], name=f"{name}_hardtan", prov=prov)


@ACTIVATIONS.register("logistic", maps_to="Sigmoid")
def logistic(b: GraphBuilder, x: Value, name: str, prov: Provenance) -> Value:
    """Sigmoid."""
    return b.op("Sigmoid", [x], name=f"{name}_logistic", prov=prov)


@ACTIVATIONS.register("loggy", maps_to="2 Sigmoid(x) - 1")
def loggy(b: GraphBuilder, x: Value, name: str, prov: Provenance) -> Value:
    """2 Sigmoid(x) - 1."""
    s = b.op("Sigmoid", [x], name=f"{name}_loggy_sigmoid", prov=prov)
    m = b.op("Mul", [s, _f(b, 2)], name=f"{name}_loggy_scale", prov=prov)
    return b.op("Sub", [m, _f(b, 1)], name=f"{name}_loggy", prov=prov)


@ACTIVATIONS.register("tanh", maps_to="Tanh")
def tanh(b: GraphBuilder, x: Value, name: str, prov: Provenance) -> Value:
    """Tanh."""
    return b.op("Tanh", [x], name=f"{name}_tanh", prov=prov)


@ACTIVATIONS.register("elu", maps_to="Elu(alpha=1)")
def elu(b: GraphBuilder, x: Value, name: str, prov: Provenance) -> Value:
    """Elu(alpha=1)."""
    return b.op("Elu", [x], {"alpha": 1.0}, name=f"{name}_elu", prov=prov)


@ACTIVATIONS.register("selu", maps_to="Selu(1.6732, 1.0507)")
def selu(b: GraphBuilder, x: Value, name: str, prov: Provenance) -> Value:
    """Selu with Darknet's rounded constants."""
    return b.op("Selu", [x], {"alpha": 1.6732, "gamma": 1.0507}, name=f"{name}_selu", prov=prov)


@ACTIVATIONS.register("swish", maps_to="x * Sigmoid(x)")
def swish(b: GraphBuilder, x: Value, name: str, prov: Provenance) -> Value:
    """x * Sigmoid(x)."""
    s = b.op("Sigmoid", [x], name=f"{name}_swish_sigmoid", prov=prov)
    return b.op("Mul", [x, s], name=f"{name}_swish", prov=prov)


@ACTIVATIONS.register("mish", maps_to="x * Tanh(Softplus(x))")
def mish(b: GraphBuilder, x: Value, name: str, prov: Provenance) -> Value:
    """x * Tanh(Softplus(x))."""
    sp = b.op("Softplus", [x], name=f"{name}_mish_softplus", prov=prov)
    t = b.op("Tanh", [sp], name=f"{name}_mish_tanh", prov=prov)
    return b.op("Mul", [x, t], name=f"{name}_mish", prov=prov)


@ACTIVATIONS.register("hard_mish", maps_to="x * Clip(x/2 + 1, 0, 1)")
def hard_mish(b: GraphBuilder, x: Value, name: str, prov: Provenance) -> Value:
    """x * Clip(x/2 + 1, 0, 1)."""
    h = b.op("Mul", [x, _f(b, 0.5)], name=f"{name}_hard_mish_half", prov=prov)
    h = b.op("Add", [h, _f(b, 1)], name=f"{name}_hard_mish_shift", prov=prov)
    h = b.op("Clip", [h, _f(b, 0), _f(b, 1)], name=f"{name}_hard_mish_clip", prov=prov)
    return b.op("Mul", [x, h], name=f"{name}_hard_mish", prov=prov)


@ACTIVATIONS.register("hardswish", maps_to="HardSwish")
def hardswish(b: GraphBuilder, x: Value, name: str, prov: Provenance) -> Value:
    """HardSwish."""
    return b.op("HardSwish", [x], name=f"{name}_hardswish", prov=prov)


@ACTIVATIONS.register("gelu", maps_to="tanh approximation (Mul/Add/Tanh)")
def gelu(b: GraphBuilder, x: Value, name: str, prov: Provenance) -> Value:
    """0.5 x (1 + tanh(0.797885 x + 0.035677 x^3))."""
    x3 = b.op("Mul", [b.op("Mul", [x, x], name=f"{name}_gelu_sq", prov=prov), x], name=f"{name}_gelu_cube", prov=prov)
    a = b.op("Mul", [x, _f(b, 0.797885)], name=f"{name}_gelu_lin", prov=prov)
    c = b.op("Mul", [x3, _f(b, 0.035677)], name=f"{name}_gelu_cub", prov=prov)
    t = b.op("Tanh", [b.op("Add", [a, c], name=f"{name}_gelu_arg", prov=prov)], name=f"{name}_gelu_tanh", prov=prov)
    t = b.op("Add", [t, _f(b, 1)], name=f"{name}_gelu_one", prov=prov)
    h = b.op("Mul", [x, _f(b, 0.5)], name=f"{name}_gelu_half", prov=prov)
    return b.op("Mul", [h, t], name=f"{name}_gelu", prov=prov)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-x)))


# Reference formulas in numpy: used to estimate activation statistics for random weights and
# as test oracles.
NUMPY_ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "linear": lambda x: x,
    "leaky": lambda x: np.where(x > 0, x, 0.1 * x),
    "relie": lambda x: np.where(x > 0, x, 0.01 * x),
    "relu": lambda x: np.maximum(x, 0),
    "ramp": lambda x: np.maximum(x, 0) + 0.1 * x,
    "relu6": lambda x: np.clip(x, 0, 6),
    "hardtan": lambda x: np.clip(x, -1, 1),
    "logistic": _sigmoid,
    "loggy": lambda x: 2 * _sigmoid(x) - 1,
    "tanh": np.tanh,
    "elu": lambda x: np.where(x >= 0, x, np.expm1(np.minimum(x, 0))),
    "selu": lambda x: 1.0507 * np.where(x >= 0, x, 1.6732 * np.expm1(np.minimum(x, 0))),
    "swish": lambda x: x * _sigmoid(x),
    "mish": lambda x: x * np.tanh(np.logaddexp(0, x)),
    "hard_mish": lambda x: np.where(x > 0, x, np.where(x > -2, x * x / 2 + x, 0)),
    "hardswish": lambda x: x * np.clip(x + 3, 0, 6) / 6,
    "gelu": lambda x: 0.5 * x * (1 + np.tanh(0.797885 * x + 0.035677 * x**3)),
}

