"""The ncnn target: the ONNX file brought into ncnn by pnnx and run by ncnn on the CPU.

pnnx (Tencent's converter, the package ``pnnx``) turns the ONNX file into ncnn's ``.param`` and
``.bin``; ncnn (the package ``ncnn``) runs them as on a phone, here on the CPU in float32 (pnnx's
``fp16=0``; ncnn's fp16 storage and arithmetic off). Every layer type of the written ``.param``
that ncnn has no layer for is listed, all at once, before anything runs (pnnx names such layers
after the ONNX op they came from, so each is traced back to the file's nodes of that type and
their source layers). ncnn keeps no batch axis: outputs are read back in the file's declared
shape. No intermediate values are compared (pnnx renames and fuses the graph's values).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from convert.ir import Options

from .base import OnnxFile, WorkerRun, run_worker

__all__ = ["NcnnToolchain", "toolchain"]

_WORKER = Path(__file__).with_name("_ncnn_worker.py")


class NcnnToolchain:
    """pnnx and ncnn, run by ``_ncnn_worker`` in convert's own Python."""

    target = "ncnn"
    toolchain = "ncnn"
    exposes_layers = False
    precision = "fp32"
    device = "CPU"

    def __init__(self) -> None:
        """Start without a file."""
        self._shapes: list[list[int] | None] = []
        self._external: list[str] = []

    def inputs(self, dest_format: str, paths: Sequence[Path], onnx_file: OnnxFile | None) -> list[object]:
        """Return the file's inputs (and remember its declared output shapes)."""
        assert onnx_file is not None  # check_available refuses other formats
        self._shapes = []
        for v in onnx_file.model.graph.outputs:
            dims = list(v.shape) if v.shape is not None else None
            self._shapes.append(dims if dims is not None and all(isinstance(d, int) for d in dims) else None)
        return list(onnx_file.inputs())

    def outputs(self, dest_format: str, paths: Sequence[Path], onnx_file: OnnxFile | None) -> list[str]:
        """Return the file's outputs, in order."""
        assert onnx_file is not None
        return list(onnx_file.output_names)

    def run(self, dest_format: str, paths: Sequence[Path], feeds: Mapping[str, np.ndarray], *,
            configs: Sequence[str] = ("fp32",)) -> WorkerRun:
        """Convert with pnnx and run in ncnn, in the worker."""
        model = next((p for p in paths if str(p).endswith(".onnx")), paths[0])
        onnx_file = OnnxFile(Path(model))
        self.inputs(dest_format, paths, onnx_file)
        return run_worker(sys.executable, _WORKER, {"model": str(model), "output_names": onnx_file.output_names,
                                                    "output_shapes": self._shapes}, feeds, "ncnn (pnnx)")

    def results(self, run: WorkerRun, order: Sequence[str]
                ) -> Iterator[tuple[str, str, str, dict[str, np.ndarray], list[str]]]:
        """Yield the one float32 run."""
        computed = {n: run.arrays[f"fp32|{n}"] for n in order if f"fp32|{n}" in run.arrays}
        pnnx = run.info.get("pnnx")
        notes = [f"brought in by pnnx {pnnx} (fp16=0: float32 weights)"] if pnnx else []
        yield "fp32", "fp32", "CPU", computed, notes

    @staticmethod
    def parity_precision(label: str) -> str:
        """ncnn runs in float32 here."""
        return "fp32"


def toolchain(options: Options) -> NcnnToolchain:
    """Return the ncnn toolchain."""
    return NcnnToolchain()
