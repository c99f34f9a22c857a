"""The conversion context handed to every layer converter: builder, layer outputs, weights."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from convert.ir import (
    Diagnostics,
    GraphBuilder,
    ModelFormatError,
    Options,
    Provenance,
    Value,
    lazy,
)
from convert.ir.context import FrontendContext

from .activations import NUMPY_ACTIVATIONS, emit_activation
from .cfg import Section
from .weights import ParamRequest, WeightSource

__all__ = ["BN_EPSILON", "DarknetContext", "DecodeHead", "LayerOut"]

# Batch-norm epsilon by lineage: AlexeyAB divides by sqrt(var + 1e-5); the original lineage by
# sqrt(var) + 1e-6, which we express exactly as epsilon 0 over a variance (sqrt(var) + 1e-6)^2.
BN_EPSILON = {"alexeyab": 1e-5, "original": 0.0}


@dataclass(slots=True)
class LayerOut:
    """One Darknet layer's output: the value, its C/H/W, and an estimated mean square."""

    value: Value
    c: int
    h: int
    w: int
    ms: float = 1.0
    kind: str = ""

    @property
    def size(self) -> int:
        """Number of elements per batch item."""
        return self.c * self.h * self.w


@dataclass(frozen=True, slots=True)
class DecodeHead:
    """The current item while ``--decode`` appends the box decoding of head layer ``index``."""

    index: int
    sec: Section


@dataclass(eq=False)
class DarknetContext(FrontendContext):
    """State shared by the layer converters of one conversion; the current item is the section
    (``[convolutional]``) of layer ``index``."""

    b: GraphBuilder
    cfg_name: str
    weights: WeightSource
    options: Options
    lineage: str
    net_w: int
    net_h: int
    layers: list[LayerOut] = field(default_factory=list)
    heads: list[tuple[int, Section, LayerOut]] = field(default_factory=list)
    index: int = 0
    input: LayerOut | None = None
    next_kind: str = ""

    def __post_init__(self) -> None:
        FrontendContext.__init__(self, self.b)

    @property
    def diagnostics(self) -> Diagnostics:
        """Where warnings go (errors under --strict)."""
        return self.options.diagnostics

    # -- places and errors (convert.ir.context.FrontendContext) -------------------------------
    def provenance(self, item: Section | DecodeHead) -> Provenance:
        """The cfg, layer index, section type and line of the nodes of the current layer (of the
        head a decoding belongs to)."""
        if isinstance(item, DecodeHead):
            return Provenance(file=self.cfg_name, layer=str(item.index), kind=item.sec.type, line=item.sec.line)
        return Provenance(file=self.cfg_name, layer=str(self.index), kind=item.type, line=item.line)

    def node_name(self, item: Section | DecodeHead, op_type: str, suffix: str = "") -> str:
        """``<type>_<index>``, plus ``_<suffix>`` for a layer's other nodes (``convolutional_3_leaky``);
        ``decode_<index>[_<suffix>]`` for the decoding of a head."""
        base = f"decode_{item.index}" if isinstance(item, DecodeHead) else self.name(item)
        return base + (f"_{suffix}" if suffix else "")

    def prov(self, sec: Section) -> Provenance:
        """Provenance of the nodes of the current layer."""
        return self.provenance(sec)

    def name(self, sec: Section) -> str:
        """Base name of the current layer's nodes and weights: ``<type>_<index>``."""
        return f"{sec.type}_{self.index}"

    def error(self, sec: Section, why: str, hint: str = "Fix the cfg.") -> ModelFormatError:
        """Return a ModelFormatError naming the layer and its cfg line."""
        return ModelFormatError(f"layer {self.index} [{sec.type}] ({sec.where}): {why}. {hint}")

    # -- layer outputs ------------------------------------------------------------------------
    @property
    def prev(self) -> LayerOut:
        """The previous layer's output (the network input for layer 0)."""
        if self.index == 0:
            assert self.input is not None
            return self.input
        return self.layers[self.index - 1]

    def resolve(self, sec: Section, key: str, raw: int) -> int:
        """Turn a cfg layer reference (negative = relative) into an absolute index, checked."""
        idx = self.index + raw if raw < 0 else raw
        if idx < 0 or idx >= self.index:
            raise self.error(
                sec,
                f"'{key}={sec.options.get(key)}' refers to layer {idx}, which does not exist before layer "
                f"{self.index}",
                "Use a negative offset or the index of an earlier layer.",
            )
        return idx

    def refs(self, sec: Section, key: str) -> list[LayerOut]:
        """Return the outputs of the layers listed in option ``key``."""
        raws = sec.ints(key)
        if not raws:
            raise self.error(sec, f"'{key}' lists no layers")
        return [self.layers[self.resolve(sec, key, r)] for r in raws]

    # -- parameters ---------------------------------------------------------------------------
    def param(
        self,
        sec: Section,
        suffix: str,
        role: str,
        shape: Sequence[int],
        *,
        fan_in: int = 1,
        in_ms: float = 1.0,
        out_ms: float = 1.0,
    ) -> Value:
        """Take the next parameter from the weights and add it as an initializer."""
        name = f"{self.name(sec)}.{suffix}"
        req = ParamRequest(name, role, tuple(int(d) for d in shape), self.index, f"[{sec.type}] ({sec.where})",
                           fan_in=fan_in, in_ms=in_ms, out_ms=out_ms)
        return self.b.initializer(self.weights.take(req), name)

    def batch_norm(self, sec: Section, x: Value, n: int, out_ms: float,
                   gain_ms: float = 1.0) -> tuple[Value, Value, Value, Value]:
        """Read BN scales, rolling mean and variance (in file order) and return the BN inputs.

        ``gain_ms`` is the mean square random scales aim for (small before a residual add).
        Returns (scale, mean, variance, epsilon-adjusted variance). The bias is read by the caller.
        """
        scale = self.param(sec, "bn_scale", "scale", (n,), out_ms=gain_ms)
        mean = self.param(sec, "bn_mean", "mean", (n,), out_ms=out_ms)
        var = self.param(sec, "bn_var", "variance", (n,), out_ms=out_ms)
        return scale, mean, var, self.adjusted_var(sec, var, n)

    def adjusted_var(self, sec: Section, var: Value, n: int) -> Value:
        """Return the variance to give BatchNormalization for this lineage (lazy for 'original')."""
        if self.lineage != "original":
            return var
        tensor = var.const_value
        assert tensor is not None

        def compute() -> np.ndarray:
            v = tensor.numpy().astype(np.float32)
            return np.square(np.sqrt(np.maximum(v, 0)) + np.float32(1e-6)).astype(np.float32)

        name = f"{self.name(sec)}.bn_var_orig"
        return self.b.initializer(lazy(compute, "float32", (n,), name=name), name)

    def emit_bn(self, sec: Section, x: Value, scale: Value, bias: Value, mean: Value, var: Value) -> Value:
        """Append a BatchNormalization with the lineage's epsilon."""
        return self.emit("BatchNormalization", [x, scale, bias, mean, var],
                         {"epsilon": BN_EPSILON[self.lineage]}, suffix="bn")

    def activate(self, sec: Section, x: Value, activation: str, ms: float) -> tuple[Value, float]:
        """Apply ``activation``; return the value and its estimated mean square."""
        y = emit_activation(self, x, activation)
        return y, self.act_ms(activation, ms)

    @staticmethod
    def act_ms(activation: str, ms: float) -> float:
        """Estimate E[act(x)^2] for x ~ N(0, ms) (deterministic sample)."""
        fn = NUMPY_ACTIVATIONS.get(activation)
        if fn is None:
            return ms
        sample = np.random.default_rng(1234).standard_normal(4096) * np.sqrt(ms)
        return float(np.mean(np.square(fn(sample)))) or 1e-6

    # -- shapes -------------------------------------------------------------------------------
    def reshape(self, sec: Section, x: Value, dims: Sequence[int], suffix: str = "reshape") -> Value:
        """Append a Reshape to ``(batch, *dims)`` (batch copied with 0)."""
        shape = self.b.const(np.array([0, *dims], dtype=np.int64), name=f"{self.name(sec)}_{suffix}_shape")
        return self.emit("Reshape", [x, shape], suffix=suffix)

    def slice(self, sec: Section, x: Value, axes: Sequence[int], starts: Sequence[int], ends: Sequence[int],
              steps: Sequence[int] | None = None, suffix: str = "slice") -> Value:
        """Append a Slice with constant parameters."""
        b = self.b
        ins = [x, b.const(np.array(starts, np.int64)), b.const(np.array(ends, np.int64)),
               b.const(np.array(axes, np.int64))]
        if steps is not None:
            ins.append(b.const(np.array(steps, np.int64)))
        return self.emit("Slice", ins, suffix=suffix)
