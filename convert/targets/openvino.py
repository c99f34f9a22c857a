"""The OpenVINO target: the ONNX file read by OpenVINO's ONNX frontend and run by its CPU plugin.

Checked twice where that differs: at the plugin's default inference precision (f32 on CPUs
without bf16 or fp16 arithmetic, bf16 on those with AMX/AVX512-BF16: the table says which ran) and
with ``INFERENCE_PRECISION_HINT=f32``. Where the default is f32 it is run once. A half-precision
run (bf16/f16) is judged by the half-precision rule (docs/precision.md). Ops OpenVINO's ONNX
frontend cannot convert are listed from its partial conversion, all at once, before anything runs.
Intermediate values are exposed for the localisation as extra outputs of the file.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from convert.ir import Options

from .base import OnnxFile, WorkerRun, run_worker

__all__ = ["OpenVinoToolchain", "toolchain"]

_WORKER = Path(__file__).with_name("_openvino_worker.py")
_PRECISIONS = {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}


class OpenVinoToolchain:
    """OpenVINO's CPU plugin, run by ``_openvino_worker`` in convert's own Python."""

    target = "openvino"
    toolchain = "OpenVINO"
    exposes_layers = True
    precision = "-"
    device = "CPU"

    def inputs(self, dest_format: str, paths: Sequence[Path], onnx_file: OnnxFile | None) -> list[object]:
        """Return the file's inputs."""
        assert onnx_file is not None  # check_available refuses other formats
        return list(onnx_file.inputs())

    def outputs(self, dest_format: str, paths: Sequence[Path], onnx_file: OnnxFile | None) -> list[str]:
        """Return the file's outputs, in order."""
        assert onnx_file is not None
        return list(onnx_file.output_names)

    def run(self, dest_format: str, paths: Sequence[Path], feeds: Mapping[str, np.ndarray], *,
            configs: Sequence[str] = ("default", "f32")) -> WorkerRun:
        """Query, compile and run the file in the worker."""
        model = next((p for p in paths if str(p).endswith(".onnx")), paths[0])
        return run_worker(sys.executable, _WORKER, {"model": str(model), "configs": list(configs)}, feeds,
                          self.toolchain)

    def results(self, run: WorkerRun, order: Sequence[str]
                ) -> Iterator[tuple[str, str, str, dict[str, np.ndarray], list[str]]]:
        """Yield ``(config, precision, device, outputs, notes)`` per precision that ran; the default
        is left out (and said) where it is the f32 run."""
        configs: dict[str, dict[str, str]] = run.info.get("configs", {})  # type: ignore[assignment]
        default = configs.get("default", {}).get("precision")
        for config, said in configs.items():
            precision = said.get("precision", "?")
            notes = []
            if config == "default" and "f32" in configs and precision == "f32":
                continue  # the same run as the f32 hint's
            if config == "f32":
                label = "f32"
                if default == "f32":
                    label = "f32 (default)"
                    notes.append("the CPU plugin's default inference precision on this CPU is f32: "
                                 "INFERENCE_PRECISION_HINT=f32 changes nothing, so it ran once")
            else:
                label = f"{precision} (default)"
            computed = {n: run.arrays[f"{config}|{n}"] for n in order if f"{config}|{n}" in run.arrays}
            yield config, label, "CPU", computed, notes

    @staticmethod
    def parity_precision(label: str) -> str:
        """The precision the verdict's half rule uses for a run labelled ``label``."""
        return _PRECISIONS.get(label.split()[0], "fp32")


def toolchain(options: Options) -> OpenVinoToolchain:
    """Return the OpenVINO toolchain."""
    return OpenVinoToolchain()
