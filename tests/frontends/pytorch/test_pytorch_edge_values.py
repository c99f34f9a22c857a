"""The PyTorch ops lowered through a formula, against torch's own kernels on edge values.

Random draws never hit the points where a formula and torch's kernel part (``tests/edge_values.py``):
``remainder(-3.9, 0.1)`` is 0.09999996 in torch and was 0 (``a - floor(a / b) * b``),
``floor_divide(-3.9, 0.1)`` is -40 and was -39 (``floor(a / b)``), ``atan2(-0.0, -1)`` is -pi and was
pi, ``round(x, decimals=2)`` ignored its decimals, ``sign(nan)`` is 0 and was NaN, ``log1p(1e-10)``
and ``expm1(1e-10)`` were 0, and ``-2147483647 // 7`` in int32 came out positive. Each op runs here
on signed zeros, halves, multiples of 0.1 and 2*pi, the largest floats, infinities, NaN and integers
of every sign, captured both ways (the fast trace and torch.export). The audit's verdict per op is
in docs/pytorch.md ("Edge values").
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from _torch_helpers import run_onnx, to_onnx
from edge_values import EDGE_F32, INT_PAIRS, grid, mismatches, multiples

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = pytest.mark.torch


class _Fn(torch.nn.Module):
    def __init__(self, fn: Callable[..., object]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs: object) -> object:
        return self.fn(*xs)


def _run(fn: Callable[..., object], xs: list[np.ndarray], tmp_path: Path,
         export: bool) -> tuple[np.ndarray, np.ndarray]:
    """(torch's result, the converted model's in ONNX Runtime) of ``fn`` on exactly ``xs``."""
    from convert.frontends.pytorch import load_module
    from convert.frontends.pytorch.capture import export_module
    from convert.frontends.pytorch.lower import lower_program
    from convert.ir import Options

    module = _Fn(fn).eval()
    ts = tuple(torch.from_numpy(x.copy()) for x in xs)
    options = Options()
    if export:
        model = lower_program(export_module(module, ts, options, "edge", fast=False), source="edge", options=options)
    else:
        model = load_module(module, ts, options)
    path = to_onnx(model, tmp_path / "m.onnx")
    got = run_onnx(path, {v.name: x for v, x in zip(model.graph.inputs, xs, strict=True)})[0]  # type: ignore[attr-defined]
    with torch.no_grad():
        want = module(*ts).numpy()
    return want, got


def _overflowing_quotient(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairs of finite values whose quotient overflows float32: torch's vectorised fmod returns NaN
    there (its scalar path, and C, the exact remainder, which is what we compute)."""
    with np.errstate(all="ignore"):
        return np.isfinite(a) & np.isfinite(b) & (b != 0) & np.isinf(a.astype(np.float32) / b)


_FLOOR_DIV = lambda p, q: torch.div(p, q, rounding_mode="floor")  # noqa: E731
_TRUNC_DIV = lambda p, q: torch.div(p, q, rounding_mode="trunc")  # noqa: E731

# op -> (function of two tensors, ulps allowed)
BINARY: dict[str, tuple[Callable[[object, object], object], float]] = {
    "remainder": (torch.remainder, 0),
    "fmod": (torch.fmod, 0),
    "floor_divide": (torch.floor_divide, 0),
    "div_floor": (_FLOOR_DIV, 0),
    "div_trunc": (_TRUNC_DIV, 0),
    "atan2": (torch.atan2, 2),
}


@pytest.mark.parametrize("export", [False, True], ids=["trace", "export"])
@pytest.mark.parametrize("op", list(BINARY))
def test_binary_op_at_multiples_of_a_divisor_float32_cannot_hold(op: str, export: bool, tmp_path: Path) -> None:
    """k/10 by 0.1 and k*pi/4 by 2*pi: remainder was off on 73 of these 162, floor_divide on 32."""
    fn, ulps = BINARY[op]
    x, y = multiples()
    want, got = _run(fn, [x, y], tmp_path, export)
    bad = mismatches(want, got, ulps=ulps)
    assert not bad, f"{op}: {len(bad)} of {x.size} differ: {bad[:8]}"


@pytest.mark.parametrize("export", [False, True], ids=["trace", "export"])
@pytest.mark.parametrize("op", list(BINARY))
def test_binary_op_on_every_pair_of_edge_values(op: str, export: bool, tmp_path: Path) -> None:
    """729 pairs: signed zeros, infinities, NaN, +-3.4e38, 2^24 + 1 by each other."""
    fn, ulps = BINARY[op]
    a, b = grid()
    want, got = _run(fn, [a, b], tmp_path, export)
    skip = _overflowing_quotient(a, b) if op in ("remainder", "fmod") else np.zeros(a.shape, bool)
    bad = mismatches(want[~skip], got[~skip], ulps=ulps)
    assert not bad, f"{op}: {len(bad)} of {int((~skip).sum())} differ: {bad[:8]}"
    if skip.any():  # there ours is the exact remainder, as C's fmod (torch's scalar path) gives it
        exact = np.fmod(a[skip], b[skip])
        if op == "remainder":
            exact = np.where((exact != 0) & ((exact < 0) != (b[skip] < 0)), exact + b[skip], exact)
        assert not mismatches(exact, got[skip], ulps=0)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("op", ["remainder", "fmod", "floor_divide", "div_floor", "div_trunc"])
def test_integer_op_with_negative_operands_and_extremes(op: str, dtype: type, tmp_path: Path) -> None:
    """Every sign of dividend and divisor, and the int32 extremes (-2147483647 // 7 overflowed)."""
    a, b = (v.astype(dtype) for v in INT_PAIRS)
    want, got = _run(BINARY[op][0], [a, b], tmp_path, export=False)
    assert got.dtype == want.dtype and np.array_equal(want, got), (op, dtype, want, got)


_SMALL = np.array([1e-10, -1e-10, 1e-7, -1e-7, 1e-5, -3e-4, 1e-38, 0.0, -0.0, 0.5, -0.5, 80.0, 89.0, -89.0,
                   -1.0, -2.0, np.inf, -np.inf, np.nan], np.float32)

# op -> (function, inputs, ulps allowed)
UNARY: dict[str, tuple[Callable[[object], object], np.ndarray, float]] = {
    "round": (torch.round, EDGE_F32, 0),
    "round_decimals_2": (lambda t: torch.round(t, decimals=2), EDGE_F32, 0),
    "round_decimals_-1": (lambda t: torch.round(t, decimals=-1), EDGE_F32, 0),
    "sign": (torch.sign, EDGE_F32, 0),
    "trunc": (torch.trunc, EDGE_F32, 0),
    "frac": (torch.frac, EDGE_F32, 0),
    "rsqrt": (torch.rsqrt, EDGE_F32, 2),
    "log1p": (torch.log1p, np.concatenate([EDGE_F32, _SMALL]), 2),
    "expm1": (torch.expm1, np.concatenate([EDGE_F32, _SMALL]), 4),
    "log2": (torch.log2, EDGE_F32, 2),
    "log10": (torch.log10, EDGE_F32, 2),
    "relu6": (F.relu6, EDGE_F32, 0),
    "hardtanh": (F.hardtanh, EDGE_F32, 0),
    "clamp": (lambda t: torch.clamp(t, -1, 2), EDGE_F32, 0),
    "selu": (F.selu, np.concatenate([EDGE_F32, _SMALL]), 4),  # its formula: scale * (expm1(x) * alpha)
    "celu": (lambda t: F.celu(t, 0.5), np.concatenate([EDGE_F32, _SMALL]), 4),
    "softplus": (F.softplus, EDGE_F32, 4),
    "mish": (F.mish, EDGE_F32, 8),
}


@pytest.mark.parametrize("export", [False, True], ids=["trace", "export"])
@pytest.mark.parametrize("op", list(UNARY))
def test_unary_op_on_edge_values(op: str, export: bool, tmp_path: Path) -> None:
    fn, values, ulps = UNARY[op]
    want, got = _run(fn, [values], tmp_path, export)
    bad = mismatches(want, got, ulps=ulps)
    assert not bad, f"{op}: {len(bad)} of {values.size} differ: {bad[:8]}"


def test_floor_division_of_a_symbolic_size_rounds_towards_minus_infinity(tmp_path: Path) -> None:
    """``(n - 5) // 3`` of a free batch n is -1 at n = 4 in Python; ONNX's Div truncates it to 0."""
    from convert.frontends.pytorch import load_module
    from convert.ir import Options

    class SizeArithmetic(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * ((x.shape[0] - 5) // 3) + x * ((x.shape[0] - 5) % 3)

    module = SizeArithmetic().eval()
    options = Options()
    options.dynamic_batch = True
    model = load_module(module, (torch.randn(8, 3),), options)
    assert not options.diagnostics.warnings, options.diagnostics.warnings  # the batch stayed free
    path = to_onnx(model, tmp_path / "m.onnx")
    for batch in (8, 4, 3, 2, 1):
        x = torch.randn(batch, 3)
        got = run_onnx(path, {model.graph.inputs[0].name: x.numpy()})[0]  # type: ignore[attr-defined]
        assert np.array_equal(got, module(x).numpy()), batch


@pytest.mark.parametrize("export", [False, True], ids=["trace", "export"])
def test_variance_of_values_far_from_zero(export: bool, tmp_path: Path) -> None:
    """var/std of rows whose mean float32 cannot hold: [1e8, 1e8, 1e8 + 8] was 32 (torch 21.33), and a
    constant row stays 0 (not NaN)."""
    rows = np.array([[1e4, 1e4 + 1, 1e4 + 2], [1, 2, 3], [1e8, 1e8, 1e8 + 8], [0.1, 0.1, 0.1], [-7e6, -7e6 + 1, -7e6]],
                    np.float32)
    want, got = _run(lambda t: torch.stack([torch.var(t, dim=1), torch.std(t, dim=1, correction=0)]), [rows],
                     tmp_path, export)
    assert not mismatches(want, got, ulps=8), mismatches(want, got, ulps=8)


@pytest.mark.parametrize("op", ["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"])
def test_bitwise_op_on_integers_is_refused_in_one_line(op: str) -> None:
    """ONNX's And/Or/Xor/Not take booleans (the file written before did not load); Bitwise* is opset 18."""
    from convert.frontends.pytorch import load_module
    from convert.ir import ConversionError, Options

    fn = getattr(torch, op)
    module = _Fn((lambda p, q: fn(p)) if op == "bitwise_not" else fn)
    ints = torch.tensor([5, -6, 7], dtype=torch.int32)
    with pytest.raises(ConversionError, match=rf"aten.{op} on int32 tensors.*opset 18"):
        load_module(module, (ints, ints), Options())
    bools = ints > 0  # on booleans it is the logical op, converted
    load_module(module, (bools, bools), Options())


@pytest.mark.parametrize("op", ["logical_and", "logical_or", "logical_xor"])
def test_logical_op_reads_any_dtype_as_nonzero(op: str, tmp_path: Path) -> None:
    """logical_* of integers and floats (NaN is true): the file had And on int32, which does not load."""
    fn = getattr(torch, op)
    ints = np.array([5, -6, 7, 0, 12, 0], np.int32)
    floats = np.array([1.5, np.nan, -0.0, 0.0, -2.0, 0.0], np.float32)
    want, got = _run(lambda p, q: fn(p, q), [ints, floats], tmp_path, export=False)
    assert got.dtype == np.bool_ and np.array_equal(want, got), (want, got)
