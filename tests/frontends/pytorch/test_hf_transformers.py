"""Real Hugging Face transformers models (models/pytorch/hf.py) convert to ONNX and match eager.

The models are transformers' own classes (BertModel, DistilBertModel, GPT2Model, GPT2LMHeadModel,
T5EncoderModel, ViTModel, Whisper's encoder) built from small configs with seeded random weights;
nothing is downloaded (HF_HUB_OFFLINE=1). Each is converted once from its seed-1 inputs and compared
with PyTorch eager on the seed-1 and seed-2 inputs (text models: other token ids and other padding),
error relative to the output's scale, every output of the model, with both of transformers'
attention implementations (sdpa and eager).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
from _torch_helpers import REL_TO_SCALE, ROOT, rel_to_scale, run_onnx, to_onnx

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported: it reads this once
os.environ["TRANSFORMERS_OFFLINE"] = "1"

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = [pytest.mark.torch, pytest.mark.transformers]


def _hf() -> object:
    name = "pytorch_test_hf"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "models" / "pytorch" / "hf.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# The op each model is here for: it must be in the converted graph.
# The op each model is here for (alternatives: torch.export's form or a trace's, whichever captured it).
SIGNATURE_OPS = {
    "bert": "aten.index", "distilbert": "aten.index", "gpt2": "aten.addmm",
    "gpt2_lm": "aten.addmm", "t5_encoder": "aten.rsqrt", "vit": ("aten.conv2d", "aten._convolution"),
    "whisper_encoder": ("aten.conv1d", "aten._convolution"),
}
# The fast capture (frontends/pytorch/traced.py) takes every one: T5's encoder writes its relative
# position buckets in place (+=) with constants, which the trace folds as eager wrote them.
TRACED = list(SIGNATURE_OPS)
TEXT = ["bert", "distilbert", "gpt2", "gpt2_lm", "t5_encoder"]


def _leaves(value: object) -> list[torch.Tensor]:
    """Every tensor of a model's output (a ModelOutput, tuple or tensor), in pytree order."""
    return [t for t in torch.utils._pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def _compare(model: object, ir_model: object, path: Path, inputs: object, seeds: tuple[int, ...] = (1, 2)
             ) -> list[float]:
    """Return the worst error relative to scale of each seed's inputs, over every output."""
    worst = []
    for seed in seeds:
        xs = inputs(seed)  # type: ignore[operator]
        with torch.no_grad():
            refs = _leaves(model(*xs))  # type: ignore[operator]
        outs = run_onnx(path, {v.name: x.numpy() for v, x in zip(ir_model.graph.inputs, xs, strict=True)})  # type: ignore[attr-defined]
        assert len(outs) == len(refs)
        worst.append(max(rel_to_scale(ours, ref.numpy()) for ours, ref in zip(outs, refs, strict=True)))
    return worst


def test_hf_lists_every_model() -> None:
    assert set(_hf().HF) == set(SIGNATURE_OPS)  # type: ignore[attr-defined]


def test_text_inputs_pad_differently_and_the_mask_matters() -> None:
    """The two inputs differ in ids and padding, and the padding changes the unpadded tokens' outputs."""
    hf = _hf()
    (ids1, mask1), (ids2, mask2) = hf.text_inputs()(1), hf.text_inputs()(2)  # type: ignore[attr-defined]
    assert ids1.dtype == mask1.dtype == torch.int64
    assert not torch.equal(ids1, ids2) and not torch.equal(mask1, mask2)
    assert (mask1 == 0).any() and (mask2 == 0).any()
    for name in TEXT:
        model, inputs = hf.build(name)  # type: ignore[attr-defined]
        ids, mask = inputs(1)
        with torch.no_grad():
            padded = _leaves(model(ids, mask))[0]
            unmasked = _leaves(model(ids, torch.ones_like(mask)))[0]
        keep = mask.bool()
        assert float((padded - unmasked).abs()[keep].max()) > 1e-2 * float(padded.abs().max()), name


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("name", list(SIGNATURE_OPS))
def test_hf_model_matches_eager(name: str, attention: str, tmp_path: Path) -> None:
    from convert.frontends.pytorch import load_module

    model, inputs = _hf().build(name, attention=attention)  # type: ignore[attr-defined]
    ir_model = load_module(model, inputs(1))
    ops = ir_model.meta["convert:aten_ops"]
    wanted = SIGNATURE_OPS[name]
    assert any(op in ops for op in ((wanted,) if isinstance(wanted, str) else wanted))
    assert ("aten.scaled_dot_product_attention" in ops) == (attention == "sdpa")
    path = to_onnx(ir_model, tmp_path / f"{name}.onnx")
    errors = _compare(model, ir_model, path, inputs)
    assert max(errors) <= REL_TO_SCALE, errors


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("name", TRACED)
def test_hf_models_take_the_fast_capture(name: str, attention: str) -> None:
    """A ModelOutput is traced (flattened as torch.export's pytree flattens it), and so are the
    sizes transformers makes Python numbers and its torch.tensor(0.0) mask constants; the
    conversions above match eager whichever capture ran, this keeps the fast one in use."""
    from convert.frontends.pytorch.capture import export_module
    from convert.frontends.pytorch.traced import TracedProgram
    from convert.ir import Options

    model, inputs = _hf().build(name, attention=attention)  # type: ignore[attr-defined]
    assert isinstance(export_module(model, inputs(1), Options(), name), TracedProgram)


@pytest.mark.parametrize("name", list(SIGNATURE_OPS))
def test_hf_model_dynamic_batch(name: str, tmp_path: Path) -> None:
    """Under --dynamic-batch each model runs on another batch size than its example's."""
    from convert.frontends.pytorch import load_module
    from convert.ir import Options

    model, inputs = _hf().build(name)  # type: ignore[attr-defined]
    options = Options(dynamic_batch=True)
    ir_model = load_module(model, inputs(1), options)
    assert not options.diagnostics.warnings
    assert all(str(v.shape).startswith("[batch,") for v in ir_model.graph.inputs)
    path = to_onnx(ir_model, tmp_path / f"{name}.onnx")

    def other_batch(seed: int) -> tuple[torch.Tensor, ...]:
        return tuple(x[:2] if x.shape[0] > 2 else torch.cat([x, x.flip(-1)]) for x in inputs(seed))

    assert max(_compare(model, ir_model, path, other_batch, seeds=(2,))) <= REL_TO_SCALE


@pytest.mark.parametrize("suffix", [".pt", ".pt2"], ids=["torchscript", "exported_program"])
@pytest.mark.parametrize("name", ["bert", "gpt2_lm", "t5_encoder", "whisper_encoder"])
def test_hf_model_files(name: str, suffix: str, tmp_path: Path) -> None:
    """A traced (.pt) or exported (.pt2) file of the model converts from the file, int64 inputs kept."""
    from convert.frontends.pytorch import load
    from convert.ir import Options

    model, inputs = _hf().build(name)  # type: ignore[attr-defined]
    path = tmp_path / f"{name}{suffix}"
    with torch.no_grad():
        if suffix == ".pt":
            torch.jit.save(torch.jit.trace(model, inputs(1), check_trace=False, strict=False), path)
        else:
            torch.export.save(torch.export.export(model, inputs(1)), path)
    ir_model = load([path], Options())
    assert [str(v.dtype) for v in ir_model.graph.inputs] == (["INT64", "INT64"] if name in TEXT else ["FLOAT"])
    errors = _compare(model, ir_model, to_onnx(ir_model, tmp_path / f"{name}.onnx"), inputs)
    assert max(errors) <= REL_TO_SCALE, errors


@pytest.mark.parametrize("name", ["bert", "gpt2_lm", "vit"])
def test_hf_model_parity_check(name: str, tmp_path: Path) -> None:
    """convert.convert(module, example, to='onnx') with the project's parity check on other inputs passes."""
    import convert

    model, inputs = _hf().build(name)  # type: ignore[attr-defined]
    xs = inputs(2)
    names = ["input_ids", "attention_mask"] if name in TEXT else ["pixel_values"]
    result = convert.convert(model, inputs(1), to="onnx", out=tmp_path / f"{name}.onnx",
                             inputs={n: x.numpy() for n, x in zip(names, xs, strict=True)})
    assert result.ok and result.report is not None and result.report.passed, result.report
    with torch.no_grad():
        assert len(result.report.outputs) == len(_leaves(model(*xs)))
