"""Exact float32 on CUDA, checked where no GPU is: what the sessions ask for, what the report says.

The GPU runs themselves are in benchmarks/bench_gpu.py (CI has no GPU). Here: the providers and
provider options an ONNX Runtime session asks for (TF32 off), the device the report names (read
back from a real session), the fallback when CUDA is missing, PyTorch's and TensorFlow's TF32
switches set for a run and restored after, and an ONNX source kept on the CPU.
"""

from __future__ import annotations

import importlib.util
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from convert.ir import Options, UsageError
from convert.parity import source_options
from convert.parity.runtimes import onnxruntime as ort_runtime
from convert.parity.runtimes._gpu import ORT_CUDA_OPTIONS, torch_exact_fp32

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"


def _tiny(path: Path) -> Path:
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def test_cuda_session_asks_for_tf32_off() -> None:
    providers = ort_runtime.session_providers("auto", [CUDA, CPU])
    assert providers == [(CUDA, {"use_tf32": "0", "enable_skip_layer_norm_strict_mode": "1"}), CPU]
    assert ort_runtime.session_providers("cuda", [CUDA, CPU])[0][1]["use_tf32"] == "0"  # type: ignore[index]
    assert ort_runtime.session_providers("cpu", [CUDA, CPU]) == [CPU]
    assert ort_runtime.session_providers("auto", [CPU]) == [CPU]


def test_option_names_are_ones_onnxruntime_knows() -> None:
    """The option names are ORT's own: its CUDA provider (1.18+) documents both; a misspelt option
    would make every CUDA session fail to start."""
    assert set(ORT_CUDA_OPTIONS) == {"use_tf32", "enable_skip_layer_norm_strict_mode"}
    assert all(v in ("0", "1") for v in ORT_CUDA_OPTIONS.values())


class _Session:
    """Stands in for a CUDA session's two read-back calls (no GPU here); the strings are ORT's."""

    def __init__(self, tf32: str) -> None:
        self.tf32 = tf32

    def get_providers(self) -> list[str]:
        return [CUDA, CPU]

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {CUDA: {"use_tf32": self.tf32, "device_id": "0"}, CPU: {}}


def test_report_names_the_math_mode_read_back() -> None:
    assert ort_runtime.describe_device(_Session("0")) == "CUDAExecutionProvider, fp32 (TF32 off)"
    assert "TF32 ON" in ort_runtime.describe_device(_Session("1"))


def test_cpu_session_is_named_as_it_runs(tmp_path: Path) -> None:
    rt = ort_runtime.OnnxRuntime(_tiny(tmp_path / "m.onnx"), device="cpu")
    assert rt.device == CPU
    out = rt.run({"x": np.array([[-1, 2, -3], [4, -5, 6]], np.float32)})["y"]
    assert out.tolist() == [[0, 2, 0], [4, 0, 6]]


def test_fallback_when_cuda_does_not_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          caplog: pytest.LogCaptureFixture) -> None:
    """ORT lists CUDA but the session comes up without it (missing CUDA libraries): the real CPU
    ORT here is told CUDA is available, asked for it, and falls back; the report says CPU and one
    warning says why, however many sessions the check opens."""
    monkeypatch.setattr(ort, "get_available_providers", lambda: [CUDA, CPU])
    ort_runtime._warn_cuda_fallback.cache_clear()
    with caplog.at_level(logging.WARNING, logger=ort_runtime.__name__):
        first = ort_runtime.OnnxRuntime(_tiny(tmp_path / "a.onnx"), device="auto")
        second = ort_runtime.OnnxRuntime(_tiny(tmp_path / "b.onnx"), device="auto")
    assert first.device == second.device == CPU
    warned = [r.getMessage() for r in caplog.records if "did not load" in r.getMessage()]
    assert len(warned) == 1 and "CPUExecutionProvider" in warned[0]


def test_device_cuda_without_cuda_is_a_usage_error(tmp_path: Path) -> None:
    if CUDA in ort.get_available_providers():
        pytest.skip("this onnxruntime has CUDA")  # not in CI: the core onnxruntime is CPU-only
    with pytest.raises(UsageError, match=r"--device cuda: this onnxruntime has no CUDA provider"):
        ort_runtime.OnnxRuntime(_tiny(tmp_path / "m.onnx"), device="cuda")


def test_no_both_installed_warning_when_cuda_is_not_wanted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        ort_runtime.OnnxRuntime(_tiny(tmp_path / "m.onnx"), device="cpu")
    assert not [r for r in caplog.records if "onnxruntime-gpu" in r.getMessage()]


def test_onnx_source_runs_on_the_cpu() -> None:
    """onnx->onnx: the reference session must not share the converted model's GPU mode."""
    opts = Options(extra={"device": "cuda"})
    assert source_options("onnx", opts).get("device") == "cpu"
    assert opts.get("device") == "cuda"  # the caller's options are left as they were
    assert source_options("pytorch", opts) is opts
    assert source_options("onnx", Options(extra={"device": "cpu"})).get("device") == "cpu"


def test_torch_tf32_switches_off_and_back() -> None:
    torch = pytest.importorskip("torch")
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    conv = cudnn.conv  # torch's default for cuDNN convolutions is "tf32", whatever cudnn's own is
    before = (matmul.fp32_precision, cudnn.fp32_precision, conv.fp32_precision)
    matmul.fp32_precision = "tf32"  # a user who enabled TF32 for training
    try:
        with torch_exact_fp32():
            assert matmul.fp32_precision == cudnn.fp32_precision == conv.fp32_precision == "ieee"
            assert cudnn.rnn.fp32_precision == "ieee"
        assert (matmul.fp32_precision, conv.fp32_precision) == ("tf32", before[2])
        with pytest.raises(RuntimeError), torch_exact_fp32():
            raise RuntimeError("a failing run restores too")
        assert matmul.fp32_precision == "tf32"
    finally:
        matmul.fp32_precision, cudnn.fp32_precision, conv.fp32_precision = before


def test_tensorflow_tf32_switches_off_and_back() -> None:
    """In a child process: TensorFlow imported before Paddle in one process crashes Paddle's import."""
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("tensorflow is not installed")
    code = (
        "import tensorflow as tf\n"
        "from convert.parity.runtimes._gpu import tensorflow_exact_fp32\n"
        "c = tf.config.experimental\n"
        "assert c.tensor_float_32_execution_enabled()\n"  # TensorFlow's default
        "with tensorflow_exact_fp32():\n"
        "    assert not c.tensor_float_32_execution_enabled()\n"
        "assert c.tensor_float_32_execution_enabled()\n"
        "print('restored')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "restored" in r.stdout, r.stderr[-2000:]


def test_paddle_tf32_switches_off_and_back() -> None:
    pytest.importorskip("paddle")
    from paddle.base import core

    from convert.parity.runtimes._gpu import paddle_exact_fp32

    before = (core.get_cublas_switch(), core.get_cudnn_switch())
    core.set_cublas_switch(True)  # TF32 allowed, as on Paddle's CUDA builds
    core.set_cudnn_switch(True)
    try:
        with paddle_exact_fp32():
            assert not core.get_cublas_switch() and not core.get_cudnn_switch()
        assert core.get_cublas_switch() and core.get_cudnn_switch()
    finally:
        core.set_cublas_switch(before[0])
        core.set_cudnn_switch(before[1])


def test_torch_runtime_names_its_device_and_leaves_the_callers_module() -> None:
    torch = pytest.importorskip("torch")
    from convert.parity.runtimes.torch import module_runtime

    net = torch.nn.Sequential(torch.nn.Linear(4, 3)).eval()
    rt = module_runtime(net, torch.zeros(2, 4), Options(extra={"device": "auto"}))
    assert rt.device == "cpu"
    out = rt.run({rt.inputs()[0].name: np.ones((2, 4), np.float32)})
    with torch.no_grad():
        expected = net(torch.ones(2, 4)).numpy()
    assert np.array_equal(next(iter(out.values())), expected)
    assert next(net.parameters()).device.type == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match="--device cuda: this PyTorch sees no CUDA device"):
            module_runtime(net, torch.zeros(2, 4), Options(extra={"device": "cuda"}))
