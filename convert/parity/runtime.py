"""The interface every parity runtime implements.

A runtime module (``convert.parity.runtimes.<name>``) exposes
``open_runtime(paths: Sequence[Path], options: Options) -> Runtime``. It imports its framework
inside that function, never at module level, and raises ``UsageError`` naming the package to
install when the framework is missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

__all__ = ["Runtime", "TensorSpec"]


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """A model input: name, numpy dtype, and shape (None or a string for a free dimension)."""

    name: str
    dtype: np.dtype
    shape: tuple[int | str | None, ...]


class Runtime(Protocol):
    """A loaded model that can run on numpy inputs."""

    #: What ran, for the report: "ONNX Runtime 1.31.1", "OpenCV DNN 4.14.0", "PyTorch 2.13.0".
    name: str
    #: Where it ran: "CPUExecutionProvider", "CUDAExecutionProvider", "cpu".
    device: str

    def inputs(self) -> Sequence[TensorSpec]:
        """Return the model's inputs in order."""
        ...

    def outputs(self) -> Sequence[str]:
        """Return the model's output names in order."""
        ...

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once and return every output by name, in ``outputs()`` order."""
        ...
