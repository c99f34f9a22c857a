"""Paddle Inference (``paddle.inference`` Config/Predictor) as the parity reference for Paddle models.

Runs on the CPU with oneDNN and IR fusion passes off, so the reference computes the program as
written (oneDNN also rejects some PIR attributes, e.g. interpolation scales as double arrays);
on a CUDA build of Paddle with a GPU (``--device auto``/``cuda``) it runs on the GPU, TF32 off.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from convert.ir import ModelFormatError, Options, UsageError
from convert.parity.runtime import TensorSpec

from ._gpu import EXACT_FP32, paddle_exact_fp32

__all__ = ["PaddleRuntime", "open_runtime"]


class PaddleRuntime:
    """A Paddle inference model loaded in a Paddle Inference predictor."""

    def __init__(self, paths: Sequence[Path], *, device: str = "auto", threads: int = 1) -> None:
        try:
            with warnings.catch_warnings():  # Paddle warns "No ccache found" at import, about building C++ ops
                warnings.filterwarnings("ignore", message="No ccache found")
                import paddle
                import paddle.inference as pi
        except ImportError as exc:
            raise UsageError("the Paddle parity check needs PaddlePaddle: pip install "
                             "'convert-toolkit[paddle]' (or paddlepaddle)") from exc
        from convert.frontends.paddle.loader import read_program, resolve

        files = resolve([Path(p) for p in paths])
        if files.params is None:
            raise UsageError(f"{files.program.name}: the Paddle reference needs a combined .pdiparams file")
        self._program = read_program(files.program)
        config = pi.Config(str(files.program), str(files.params))
        cuda_build = bool(paddle.is_compiled_with_cuda())  # type: ignore[attr-defined]
        use_gpu = device in ("auto", "cuda") and cuda_build and paddle.device.cuda.device_count() > 0
        if device == "cuda" and not use_gpu:
            raise UsageError("--device cuda: this PaddlePaddle build has no usable CUDA device")
        if use_gpu:
            config.enable_use_gpu(256, 0)
        else:
            config.disable_gpu()
            config.disable_mkldnn()
            config.set_cpu_math_library_num_threads(threads)
        config.switch_ir_optim(False)
        config.disable_glog_info()
        try:
            self.predictor = pi.create_predictor(config)
        except Exception as exc:  # Paddle raises its own error types for bad models
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelFormatError(f"Paddle Inference cannot load {files.program.name}: {first}") from exc
        self.name = f"Paddle Inference {paddle.__version__}"  # type: ignore[attr-defined]
        self.device = f"gpu:0, {EXACT_FP32}" if use_gpu else "cpu"

    def inputs(self) -> Sequence[TensorSpec]:
        """Return the feed inputs, with -1 dims as free (None)."""
        specs = []
        for name in self.predictor.get_input_names():
            var = self._program.var(name)
            dtype = var.dtype if var.dtype is not None else np.dtype(np.float32)
            shape = tuple(None if d < 0 else int(d) for d in (var.shape or ()))
            specs.append(TensorSpec(name, np.dtype(dtype), shape))
        return specs

    def outputs(self) -> Sequence[str]:
        """Return the output names as Paddle Inference reports them."""
        return list(self.predictor.get_output_names())

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once on ``feeds`` and return every output by name."""
        for name in self.predictor.get_input_names():
            if name not in feeds:
                raise UsageError(f"no value for Paddle input '{name}'")
            handle = self.predictor.get_input_handle(name)
            handle.reshape(list(np.shape(feeds[name])))
            handle.copy_from_cpu(np.ascontiguousarray(feeds[name]))
        with paddle_exact_fp32():
            self.predictor.run()
        return {n: self.predictor.get_output_handle(n).copy_to_cpu() for n in self.outputs()}


def open_runtime(paths: Sequence[Path], options: Options) -> PaddleRuntime:
    """Open the Paddle model given as a folder, prefix, or .json/.pdmodel (+ .pdiparams)."""
    return PaddleRuntime([Path(p) for p in paths], device=str(options.get("device", "auto")))
