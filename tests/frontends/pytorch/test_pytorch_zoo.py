"""The zoo of public-architecture look-alikes (models/pytorch/zoo.py) converts and matches eager.

Each model is converted once from its seed-1 inputs and compared with PyTorch eager on the seed-1
and seed-2 inputs (text models: other token ids and other padding lengths), error relative to the
output's scale, every output of the model.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from _torch_helpers import REL_TO_SCALE, ROOT, rel_to_scale, run_onnx, to_onnx

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch


def _zoo() -> object:
    name = "pytorch_test_zoo"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "models" / "pytorch" / "zoo.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# The op each model is here for: it must be in the converted graph (alternatives: torch.export's form
# or a trace's, frontends/pytorch/traced.py, whichever captured the model).
SIGNATURE_OPS = {
    "bert": "aten.index", "distilbert": "aten.masked_fill", "gpt2": "aten.addmm", "t5_encoder": "aten.rsqrt",
    "whisper_encoder": ("aten.conv1d", "aten._convolution"),
    "mobilenetv3": "aten.hardswish_", "raft": "aten.grid_sampler", "yolov8_head": "aten.softmax",
}


@pytest.mark.parametrize("name", list(SIGNATURE_OPS))
def test_zoo_model_matches_eager(name: str, tmp_path: Path) -> None:
    from convert.frontends.pytorch import load_module

    zoo = _zoo()
    model, inputs = zoo.build(name)  # type: ignore[attr-defined]
    ir_model = load_module(model, inputs(1))
    wanted = SIGNATURE_OPS[name]
    assert any(op in ir_model.meta["convert:aten_ops"] for op in ((wanted,) if isinstance(wanted, str) else wanted))
    path = to_onnx(ir_model, tmp_path / f"{name}.onnx")
    for seed in (1, 2):
        xs = inputs(seed)
        with torch.no_grad():
            refs = model(*xs)
        refs = list(refs) if isinstance(refs, (tuple, list)) else [refs]
        outs = run_onnx(path, {v.name: x.numpy() for v, x in zip(ir_model.graph.inputs, xs, strict=True)})
        assert len(outs) == len(refs)
        for ours, ref in zip(outs, refs, strict=True):
            assert rel_to_scale(ours, ref.numpy()) <= REL_TO_SCALE


@pytest.mark.parametrize("name", list(SIGNATURE_OPS))
def test_zoo_models_take_the_fast_capture(name: str) -> None:
    """Each look-alike is traced (frontends/pytorch/traced.py), not exported: DistilBERT's
    math.sqrt of a size, GPT-2's split by a size and RAFT's InstanceNorm checks included (the
    conversions above match eager whichever capture ran; this keeps the fast one in use)."""
    from convert.frontends.pytorch.capture import export_module
    from convert.frontends.pytorch.traced import TracedProgram
    from convert.ir import Options

    model, inputs = _zoo().build(name)  # type: ignore[attr-defined]
    assert isinstance(export_module(model, inputs(1), Options(), name), TracedProgram)


def test_zoo_lists_every_model() -> None:
    assert set(_zoo().ZOO) == set(SIGNATURE_OPS)  # type: ignore[attr-defined]


@pytest.mark.parametrize("suffix", [".pt", ".pt2"], ids=["torchscript", "exported_program"])
def test_text_model_files_keep_int64_inputs(suffix: str, tmp_path: Path) -> None:
    """A traced or exported BERT file converts with its int64 inputs; the parity runtime feeds int64 too."""
    from convert.frontends.pytorch import load
    from convert.ir import Options
    from convert.parity.runtimes.torch import open_runtime

    model, inputs = _zoo().build("bert")  # type: ignore[attr-defined]
    path = tmp_path / f"bert{suffix}"
    with torch.no_grad():
        if suffix == ".pt":
            torch.jit.save(torch.jit.trace(model, inputs(1), check_trace=False), path)
        else:
            torch.export.save(torch.export.export(model, inputs(1)), path)
    ir_model = load([path], Options())
    assert [str(v.dtype) for v in ir_model.graph.inputs] == ["INT64", "INT64"]
    assert [s.dtype.name for s in open_runtime([path], Options()).inputs()] == ["int64", "int64"]
    onnx_path = to_onnx(ir_model, tmp_path / "bert.onnx")
    for seed in (1, 2):
        xs = inputs(seed)
        with torch.no_grad():
            refs = model(*xs)
        outs = run_onnx(onnx_path, {v.name: x.numpy() for v, x in zip(ir_model.graph.inputs, xs, strict=True)})
        for ours, ref in zip(outs, refs, strict=True):
            assert rel_to_scale(ours, ref.numpy()) <= REL_TO_SCALE


@pytest.mark.parametrize("name", list(SIGNATURE_OPS))
def test_zoo_model_dynamic_batch(name: str, tmp_path: Path) -> None:
    """Under --dynamic-batch each zoo model runs on another batch size than its example's."""
    from convert.frontends.pytorch import load_module
    from convert.ir import Options

    zoo = _zoo()
    model, inputs = zoo.build(name)  # type: ignore[attr-defined]
    ir_model = load_module(model, inputs(1), Options(dynamic_batch=True))
    assert all(str(v.shape).startswith("[batch,") for v in ir_model.graph.inputs)
    path = to_onnx(ir_model, tmp_path / f"{name}.onnx")
    xs = inputs(2)
    xs = tuple(x[:2] if x.shape[0] > 2 else torch.cat([x, x.flip(-1)]) for x in xs)  # a different batch
    with torch.no_grad():
        refs = model(*xs)
    refs = list(refs) if isinstance(refs, (tuple, list)) else [refs]
    outs = run_onnx(path, {v.name: x.numpy() for v, x in zip(ir_model.graph.inputs, xs, strict=True)})
    for ours, ref in zip(outs, refs, strict=True):
        assert rel_to_scale(ours, ref.numpy()) <= REL_TO_SCALE
