"""Edge values for the ops the frontends lower through a formula, and how a result is judged on them.

Random draws never land on the points where a formula and a framework's kernel part: exact
multiples of a divisor float32 cannot hold (0.1, 2*pi), signed zeros, infinities and NaN, halves
(rounding), magnitudes where a quotient overflows or a sum drops the smaller term. The tests in
``tests/frontends/*/test_*_edge_values.py`` run the framework's own kernel and the converted model
on these values and count the elements that differ (``mismatches``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["EDGE_F32", "INT_PAIRS", "grid", "mismatches", "multiples"]

#: Signed zeros, halves, values float32 cannot hold (0.1, 0.3), the largest finite values, the edges of
#: float32's integers (2^23 + 1, 2^24 + 1), infinities and NaN. No subnormals: TensorFlow flushes them
#: to zero on the CPU (its own choice, not a formula's).
EDGE_F32 = np.array([0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 1.0, -1.0, 7.0, -7.0, 0.1, -0.1, 0.3, -0.3,
                     1e-30, -1e-30, 1e10, -1e10, 8388609.0, 16777217.0, 3.4e38, -3.4e38,
                     np.inf, -np.inf, np.nan], np.float32)

#: Integer dividends and divisors of every sign, with the int32 extremes (no zero divisor: an integer
#: division by zero is an error in every framework, not a value).
INT_PAIRS = (np.array([-7, -6, -1, 0, 1, 6, 7, 7, -7, 2**31 - 1, -(2**31) + 1, 5, -5], np.int32),
             np.array([3, -3, 3, -3, 2, 4, -4, -7, 7, 7, 7, -1, 1], np.int32))


def grid(values: np.ndarray = EDGE_F32) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of ``values``: (dividends, divisors), each flat."""
    a, b = np.meshgrid(values, values)
    return a.ravel().copy(), b.ravel().copy()


def multiples() -> tuple[np.ndarray, np.ndarray]:
    """``k/10`` by 0.1 and ``k*pi/4`` by ``2*pi`` (phase wrapping), k = -40..40, as float32 pairs."""
    k = np.arange(-40, 41)
    tenths = (k / 10).astype(np.float32)
    phases = (k * (np.float32(np.pi) / np.float32(4))).astype(np.float32)
    x = np.concatenate([tenths, phases])
    y = np.concatenate([np.full(k.size, 0.1, np.float32), np.full(k.size, 2 * np.pi, np.float32)])
    return x, y


def mismatches(want: np.ndarray, got: np.ndarray, *, ulps: float = 4, atol: float = 0.0,
               ftz: bool = False) -> list[str]:
    """The elements where ``got`` is not ``want``: NaN on one side only, another infinity, or a
    finite value more than ``ulps`` float32 units in the last place (plus ``atol``) away. ``ftz``:
    values below float32's smallest normal count as zero (TensorFlow flushes them). Returns one line
    per element (index, both values), empty when they agree."""
    w = np.asarray(want, np.float64).ravel()
    g = np.asarray(got, np.float64).ravel()
    assert w.shape == g.shape, (w.shape, g.shape)
    if ftz:
        tiny = float(np.finfo(np.float32).tiny)
        w = np.where(np.abs(w) < tiny, 0.0, w)
        g = np.where(np.abs(g) < tiny, 0.0, g)
    same = (w == g) | (np.isnan(w) & np.isnan(g))
    finite = np.isfinite(w) & np.isfinite(g)
    with np.errstate(invalid="ignore"):
        near = finite & (np.abs(w - g) <= ulps * np.spacing(np.abs(w).astype(np.float32)).astype(np.float64) + atol)
    return [f"[{i}] want {w[i]!r} got {g[i]!r}" for i in np.flatnonzero(~(same | near))]
