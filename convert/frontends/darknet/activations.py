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

from convert.ir import Registry, Value
from convert.ir.context import FrontendContext

__all__ = ["ACTIVATIONS", "NUMPY_ACTIVATIONS", "emit_activation"]

EmitFn = Callable[[FrontendContext, Value], Value]
ACTIVATIONS: Registry[EmitFn] = Registry("darknet activations")


def _f(ctx: FrontendContext, value: float) -> Value:
    """A float32 scalar constant."""
    return ctx.builder.const(np.array(value, np.float32))


def emit_activation(ctx: FrontendContext, x: Value, activation: str) -> Value:
    """Append ``activation`` applied to ``x`` for the current layer; the caller has checked the name
    is supported. Its nodes are named ``<layer>_<activation>`` (``convolutional_3_leaky``)."""
    fn = ACTIVATIONS.lookup(activation)
    if fn is None:  # check_support lists these before conversion starts
        raise KeyError(activation)
    return fn(ctx, x)


@ACTIVATIONS.register("linear", maps_to="nothing")
def linear(ctx: FrontendContext, x: Value) -> Value:
    """Identity."""
    return x


@ACTIVATIONS.register("leaky", maps_to="LeakyRelu(alpha=0.1)")
def leaky(ctx: FrontendContext, x: Value) -> Value:
    """LeakyRelu with Darknet's 0.1 slope."""
    return ctx.emit("LeakyRelu", [x], {"alpha": 0.1}, suffix="leaky")


@ACTIVATIONS.register("relie", maps_to="LeakyRelu(alpha=0.01)")
def relie(ctx: FrontendContext, x: Value) -> Value:
    """LeakyRelu with slope 0.01."""
    return ctx.emit("LeakyRelu", [x], {"alpha": 0.01}, suffix="relie")


@ACTIVATIONS.register("relu", maps_to="Relu")
def relu(ctx: FrontendContext, x: Value) -> Value:
    """Relu."""
    return ctx.emit("Relu", [x], suffix="relu")


@ACTIVATIONS.register("ramp", maps_to="Relu(x) + 0.1 x")
def ramp(ctx: FrontendContext, x: Value) -> Value:
    """Relu(x) + 0.1 x."""
    r = ctx.emit("Relu", [x], suffix="ramp_relu")
    s = ctx.emit("Mul", [x, _f(ctx, 0.1)], suffix="ramp_scale")
    return ctx.emit("Add", [r, s], suffix="ramp")


@ACTIVATIONS.register("relu6", maps_to="Clip(0, 6)")
def relu6(ctx: FrontendContext, x: Value) -> Value:
    """Clip(0, 6)."""
    return ctx.emit("Clip", [x, _f(ctx, 0), _f(ctx, 6)], suffix="relu6")


@ACTIVATIONS.register("hardtan", maps_to="Clip(-1, 1)")
def hardtan(ctx: FrontendContext, x: Value) -> Value:
    """Clip(-1, 1)."""
    return ctx.emit("Clip", [x, _f(ctx, -1), _f(ctx, 1)], suffix="hardtan")


@ACTIVATIONS.register("logistic", maps_to="Sigmoid")
def logistic(ctx: FrontendContext, x: Value) -> Value:
    """Sigmoid."""
    return ctx.emit("Sigmoid", [x], suffix="logistic")


@ACTIVATIONS.register("loggy", maps_to="2 Sigmoid(x) - 1")
def loggy(ctx: FrontendContext, x: Value) -> Value:
    """2 Sigmoid(x) - 1."""
    s = ctx.emit("Sigmoid", [x], suffix="loggy_sigmoid")
    m = ctx.emit("Mul", [s, _f(ctx, 2)], suffix="loggy_scale")
    return ctx.emit("Sub", [m, _f(ctx, 1)], suffix="loggy")


@ACTIVATIONS.register("tanh", maps_to="Tanh")
def tanh(ctx: FrontendContext, x: Value) -> Value:
    """Tanh."""
    return ctx.emit("Tanh", [x], suffix="tanh")


@ACTIVATIONS.register("elu", maps_to="Elu(alpha=1)")
def elu(ctx: FrontendContext, x: Value) -> Value:
    """Elu(alpha=1)."""
    return ctx.emit("Elu", [x], {"alpha": 1.0}, suffix="elu")


@ACTIVATIONS.register("selu", maps_to="Selu(1.6732, 1.0507)")
def selu(ctx: FrontendContext, x: Value) -> Value:
    """Selu with Darknet's rounded constants."""
    return ctx.emit("Selu", [x], {"alpha": 1.6732, "gamma": 1.0507}, suffix="selu")


@ACTIVATIONS.register("swish", maps_to="x * Sigmoid(x)")
def swish(ctx: FrontendContext, x: Value) -> Value:
    """x * Sigmoid(x)."""
    s = ctx.emit("Sigmoid", [x], suffix="swish_sigmoid")
    return ctx.emit("Mul", [x, s], suffix="swish")


@ACTIVATIONS.register("mish", maps_to="x * Tanh(Softplus(x))")
def mish(ctx: FrontendContext, x: Value) -> Value:
    """x * Tanh(Softplus(x))."""
    sp = ctx.emit("Softplus", [x], suffix="mish_softplus")
    t = ctx.emit("Tanh", [sp], suffix="mish_tanh")
    return ctx.emit("Mul", [x, t], suffix="mish")


@ACTIVATIONS.register("hard_mish", maps_to="x * Clip(x/2 + 1, 0, 1)")
def hard_mish(ctx: FrontendContext, x: Value) -> Value:
    """x * Clip(x/2 + 1, 0, 1)."""
    h = ctx.emit("Mul", [x, _f(ctx, 0.5)], suffix="hard_mish_half")
    h = ctx.emit("Add", [h, _f(ctx, 1)], suffix="hard_mish_shift")
    h = ctx.emit("Clip", [h, _f(ctx, 0), _f(ctx, 1)], suffix="hard_mish_clip")
    return ctx.emit("Mul", [x, h], suffix="hard_mish")


@ACTIVATIONS.register("hardswish", maps_to="HardSwish")
def hardswish(ctx: FrontendContext, x: Value) -> Value:
    """HardSwish."""
    return ctx.emit("HardSwish", [x], suffix="hardswish")


@ACTIVATIONS.register("gelu", maps_to="tanh approximation (Mul/Add/Tanh)")
def gelu(ctx: FrontendContext, x: Value) -> Value:
    """0.5 x (1 + tanh(0.797885 x + 0.035677 x^3))."""
    x3 = ctx.emit("Mul", [ctx.emit("Mul", [x, x], suffix="gelu_sq"), x], suffix="gelu_cube")
    a = ctx.emit("Mul", [x, _f(ctx, 0.797885)], suffix="gelu_lin")
    c = ctx.emit("Mul", [x3, _f(ctx, 0.035677)], suffix="gelu_cub")
    t = ctx.emit("Tanh", [ctx.emit("Add", [a, c], suffix="gelu_arg")], suffix="gelu_tanh")
    t = ctx.emit("Add", [t, _f(ctx, 1)], suffix="gelu_one")
    h = ctx.emit("Mul", [x, _f(ctx, 0.5)], suffix="gelu_half")
    return ctx.emit("Mul", [h, t], suffix="gelu")


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

