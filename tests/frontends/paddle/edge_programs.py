"""Write one-op Paddle programs and their edge-value inputs (run in its own process: Paddle and
TensorFlow cannot share one).

Usage: ``python tests/frontends/paddle/edge_programs.py OUT_DIR`` writes ``OUT_DIR/<op>/inference.*``
(``paddle.jit.save``, PIR) and ``OUT_DIR/<op>/inputs.npz`` for each op of ``PROGRAMS``. Each program
also returns a parameter (times 2), so that Paddle writes the ``.pdiparams`` its runtime needs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from edge_values import EDGE_F32, INT_PAIRS, grid


def programs() -> dict[str, tuple[Callable[..., object], list[np.ndarray]]]:
    """op name -> (a function of one or two tensors, its inputs)."""
    import paddle
    import paddle.nn.functional as F  # noqa: N812

    a, b = grid()
    ints = [INT_PAIRS[0].astype(np.int64), INT_PAIRS[1].astype(np.int64)]
    return {
        "divide": (paddle.divide, [a, b]),
        "divide_int": (paddle.divide, ints),
        "pow": (paddle.pow, [a, b]),
        "maximum": (paddle.maximum, [a, b]),
        "minimum": (paddle.minimum, [a, b]),
        "pow_factor": (lambda x: paddle.pow(x, 2.5), [EDGE_F32]),
        "scale": (lambda x: paddle.scale(x, 3.0, 0.1), [EDGE_F32]),
        "clip": (lambda x: paddle.clip(x, -1.0, 2.0), [EDGE_F32]),
        "relu6": (F.relu6, [EDGE_F32]),
        "relu": (F.relu, [EDGE_F32]),
        "leaky_relu": (lambda x: F.leaky_relu(x, 0.1), [EDGE_F32]),
        "hardswish": (F.hardswish, [EDGE_F32]),
        "hardsigmoid": (F.hardsigmoid, [EDGE_F32]),
        "swish": (F.swish, [EDGE_F32]),
        "gelu": (F.gelu, [EDGE_F32]),
        "gelu_tanh": (lambda x: F.gelu(x, approximate=True), [EDGE_F32]),
        "floor": (paddle.floor, [EDGE_F32]),
        "sqrt": (paddle.sqrt, [EDGE_F32]),
        "log": (paddle.log, [EDGE_F32]),
        "exp": (paddle.exp, [EDGE_F32]),
        "erf": (paddle.erf, [EDGE_F32]),
        "tanh": (paddle.tanh, [EDGE_F32]),
        "sigmoid": (F.sigmoid, [EDGE_F32]),
    }


def main(out: Path) -> int:
    """Write every program under ``out``."""
    import paddle

    class Unary(paddle.nn.Layer):
        def __init__(self, fn: Callable[..., object]) -> None:
            super().__init__()
            self.fn, self.w = fn, self.create_parameter([1])

        def forward(self, x: object) -> object:
            return self.fn(x), self.w * 2.0

    class Binary(Unary):
        def forward(self, x: object, y: object) -> object:  # type: ignore[override]
            return self.fn(x, y), self.w * 2.0

    for name, (fn, xs) in programs().items():
        layer = (Unary if len(xs) == 1 else Binary)(fn)
        spec = [paddle.static.InputSpec(list(x.shape), str(x.dtype), f"x{i}") for i, x in enumerate(xs)]
        paddle.jit.save(paddle.jit.to_static(layer, input_spec=spec, full_graph=True), str(out / name / "inference"))
        np.savez(out / name / "inputs.npz", *xs)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
