"""The hf route's options: precision from a bf16 sharded checkpoint, logits of the last position, and
an in-memory PreTrainedModel through the Python API.

* A bf16 checkpoint in shards (3 or more, with an index) converts to float32 (every weight cast
  chunk by chunk) and passes generation; to fp16, judged as docs/precision.md says (against the
  float32 source, each step within 2x the source's own fp16 run) and passes, as does its
  block-by-block check (each block within 2x the source's own fp16 run of that block); to bf16,
  its weights are the shards' bytes, copied (the RMS norms stay float32), and the check says NOT
  VERIFIED: ONNX Runtime's CPU provider has no bf16 kernels.
* ``logits="last"`` gives logits [batch, 1, vocab] and generates the same tokens.
* ``convert.convert(model, to="onnx")`` on a transformers model in memory writes model.onnx with
  genai_config.json and passes.

The checks generate ``NEW_TOKENS`` (8) tokens from each prompt, not the route's 16: test time.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import onnx
import pytest
from _llm import NEW_TOKENS, decoders

pytest.importorskip("torch")
pytest.importorskip("transformers")

import convert
from convert import ir
from convert.parity.generation import check_converted

pytestmark = [pytest.mark.torch, pytest.mark.transformers]


@pytest.fixture(scope="module")
def bf16_shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = decoders().write_folder("qwen2", tmp_path_factory.mktemp("bf16") / "qwen2", dtype="bf16", shards=3)
    assert (folder / "model.safetensors.index.json").is_file() and len(list(folder.glob("*.safetensors"))) >= 3
    return folder


def _tensors(shards: list[Path]) -> dict[str, tuple[str, bytes]]:
    found = {}
    for path in shards:
        raw = path.read_bytes()
        n = struct.unpack("<Q", raw[:8])[0]
        for name, info in json.loads(raw[8:8 + n]).items():
            if name != "__metadata__":
                begin, end = info["data_offsets"]
                found[name] = (info["dtype"], raw[8 + n + begin:8 + n + end])
    return found


def _initializers(model_path: Path) -> dict[str, tuple[int, bytes]]:
    model = onnx.load(str(model_path), load_external_data=False)
    data = (model_path.parent / "model.onnx.data").read_bytes()
    found = {}
    for t in model.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            info = {e.key: e.value for e in t.external_data}
            found[t.name] = (t.data_type, data[int(info["offset"]):int(info["offset"]) + int(info["length"])])
    return found


def test_bf16_shards_to_float32_pass(bf16_shards: Path, tmp_path: Path) -> None:
    result = convert.convert(bf16_shards, to="onnx", out=tmp_path / "fp32", new_tokens=NEW_TOKENS)
    assert result.ok and result.report.verdict == "PASS", result.report.table()
    types = {t for t, _ in _initializers(result.outputs[0]).values()}
    assert types == {onnx.TensorProto.FLOAT}


def test_bf16_shards_to_fp16_pass_by_the_half_rule(bf16_shards: Path, tmp_path: Path) -> None:
    result = convert.convert(bf16_shards, to="onnx", out=tmp_path / "fp16", precision="fp16",
                             new_tokens=NEW_TOKENS)
    report = result.report
    assert result.ok and report.verdict == "PASS" and report.precision == "fp16", report.table()
    assert all(r.matched == NEW_TOKENS for r in report.rows[:2])
    inits = _initializers(result.outputs[0])
    assert sum(t == onnx.TensorProto.FLOAT16 for t, _ in inits.values()) >= len(inits) - 5  # norms stay float32
    options = ir.Options()
    options.extra["check_by"] = "blocks"
    blocks = check_converted([bf16_shards], result.outputs, options)  # each block against its own fp16 run
    assert blocks.verdict == "PASS" and len(blocks.rows) == 4, blocks.table()


def test_bf16_shards_to_bf16_copy_the_bytes_and_are_not_verified_on_the_cpu(bf16_shards: Path,
                                                                          tmp_path: Path) -> None:
    result = convert.convert(bf16_shards, to="onnx", out=tmp_path / "bf16", precision="bf16")
    assert not result.ok and result.report.verdict == "NOT VERIFIED"
    assert "no bf16 kernels" in result.report.table()
    source = _tensors(sorted(bf16_shards.glob("*.safetensors")))
    written = _initializers(result.outputs[0])
    copied = {data for t, data in written.values() if t == onnx.TensorProto.BFLOAT16}
    weights = {name: data for name, (_, data) in source.items() if len(data) > 1024 and "norm" not in name}
    assert len(weights) >= 14
    for name, data in weights.items():  # each weight over 1 KiB (not the RMS norms, kept float32): its bytes
        assert data in copied, name


def test_logits_of_the_last_position(tmp_path: Path) -> None:
    folder = decoders().write_folder("mistral", tmp_path / "mistral")
    result = convert.convert(folder, to="onnx", out=tmp_path / "last", logits="last", new_tokens=NEW_TOKENS)
    assert result.ok, result.report.table()
    model = onnx.load(str(result.outputs[0]), load_external_data=False)
    logits = model.graph.output[0]
    assert [d.dim_param or d.dim_value for d in logits.type.tensor_type.shape.dim] == ["batch", 1, 512]


def test_an_in_memory_pretrained_model(tmp_path: Path) -> None:
    model = decoders().build_model("phi3", seed=3)
    result = convert.convert(model, to="onnx", out=tmp_path / "phi3", new_tokens=NEW_TOKENS)
    assert result.ok and result.report.verdict == "PASS", result.report.table()
    assert result.route == "hf:onnx"
    assert sorted(p.name for p in (tmp_path / "phi3").iterdir()) == ["genai_config.json", "model.onnx",
                                                                    "model.onnx.data"]
