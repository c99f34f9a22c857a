"""Exact float32 on CUDA for the parity runtimes: every math shortcut that changes fp32 results off.

NVIDIA GPUs since Ampere multiply float32 matrices in TF32 (10-bit mantissa) when a library allows
it, and ONNX Runtime's CUDA provider, PyTorch's cuDNN convolutions and TensorFlow all allow it by
default. A TF32 run of a deep net is 1e-3 to 1e-1 of scale from the float32 one (ResNet-152 0.15 on
an H100), so a check run that way fails correct conversions. Each runtime here switches it off for
its own run and says so in the report's device column (``CUDAExecutionProvider, fp32 (TF32 off)``).

The switches, per runtime:

* ONNX Runtime: the CUDA provider options ``use_tf32=0`` (convolutions and GEMMs in IEEE fp32) and
  ``enable_skip_layer_norm_strict_mode=1`` (a LayerNorm fused with its residual Add accumulates as
  the unfused pair does).
* PyTorch: ``fp32_precision = "ieee"`` on ``torch.backends.cuda.matmul``, ``cudnn`` and its
  ``conv``/``rnn`` (which default to "tf32" and do not inherit), and oneDNN's (torch >= 2.9), else
  ``allow_tf32 = False``; restored after the run, so a process that converts and then trains keeps
  its own settings.
* TensorFlow: ``tf.config.experimental.enable_tensor_float_32_execution(False)``, restored after.
* Paddle: ``paddle.base.core.set_cublas_switch(False)`` and ``set_cudnn_switch(False)`` (Paddle's
  ``phi::SetAllowTF32Cublas``/``SetAllowTF32Cudnn``), restored after.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = [
    "CUDA_EP",
    "EXACT_FP32",
    "ORT_CUDA_OPTIONS",
    "paddle_exact_fp32",
    "tensorflow_exact_fp32",
    "torch_exact_fp32",
]

CUDA_EP = "CUDAExecutionProvider"
#: What the report says of a CUDA run with the switches below.
EXACT_FP32 = "fp32 (TF32 off)"
#: ONNX Runtime's CUDA provider options for an exact float32 run.
ORT_CUDA_OPTIONS: dict[str, str] = {"use_tf32": "0", "enable_skip_layer_norm_strict_mode": "1"}


# torch >= 2.9: every backend and per-op switch of float32 math; the per-op ones do not inherit a
# parent's setting when set themselves (``cudnn.conv`` and ``cudnn.rnn`` default to "tf32"), so each is set.
_TORCH_FP32_SWITCHES = ("cuda.matmul", "cudnn", "cudnn.conv", "cudnn.rnn", "mkldnn", "mkldnn.matmul",
                        "mkldnn.conv", "mkldnn.rnn")


@contextlib.contextmanager
def torch_exact_fp32() -> Iterator[None]:
    """Run the block with PyTorch's reduced-precision float32 paths off (TF32 on CUDA matmul and
    cuDNN convolutions and RNNs; oneDNN's bf32/tf32 on the CPU), restoring every switch after.

    The flags are process-wide host settings: setting them needs no GPU.
    """
    import torch

    switches = []
    for path in _TORCH_FP32_SWITCHES:
        obj: object = torch.backends
        for part in path.split("."):
            obj = getattr(obj, part, None)
        if obj is not None and hasattr(obj, "fp32_precision"):
            switches.append(obj)
    if switches:  # torch >= 2.9: the legacy allow_tf32 flags warn
        saved = [b.fp32_precision for b in switches]  # type: ignore[attr-defined]
        try:
            for b in switches:
                b.fp32_precision = "ieee"  # type: ignore[attr-defined]
            yield
        finally:
            for b, value in zip(switches, saved, strict=True):
                b.fp32_precision = value  # type: ignore[attr-defined]
        return
    backends = [torch.backends.cuda.matmul, torch.backends.cudnn]
    legacy = [b.allow_tf32 for b in backends]
    try:
        for b in backends:
            b.allow_tf32 = False
        yield
    finally:
        for b, value in zip(backends, legacy, strict=True):
            b.allow_tf32 = value


@contextlib.contextmanager
def tensorflow_exact_fp32() -> Iterator[None]:
    """Run the block with TensorFlow's TensorFloat-32 execution off, restoring it after."""
    import tensorflow as tf

    config = tf.config.experimental
    saved = bool(config.tensor_float_32_execution_enabled())
    config.enable_tensor_float_32_execution(False)
    try:
        yield
    finally:
        config.enable_tensor_float_32_execution(saved)


@contextlib.contextmanager
def paddle_exact_fp32() -> Iterator[None]:
    """Run the block with Paddle's TF32 paths off (cuBLAS and cuDNN), restoring them after."""
    from paddle.base import core

    if not hasattr(core, "set_cublas_switch"):  # an older Paddle: no switch to turn
        yield
        return
    saved = (bool(core.get_cublas_switch()), bool(core.get_cudnn_switch()))
    core.set_cublas_switch(False)
    core.set_cudnn_switch(False)
    try:
        yield
    finally:
        core.set_cublas_switch(saved[0])
        core.set_cudnn_switch(saved[1])
