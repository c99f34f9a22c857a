"""Every architecture of the hf route, at a 2-layer config, converts and generates as transformers does.

Each model folder is written by models/llm/decoders.py (the transformers class from a small config,
seeded random weights, save_pretrained; nothing downloaded), converted with ``convert.convert`` and
checked by the route's own verdict: greedy generation of 16 tokens from a batch-1 prompt and a
left-padded batch of 2, through the KV-cache loop in ONNX Runtime, against transformers'
``generate(do_sample=False)`` (tokens identical, each step's logits within 1e-4 of their scale),
and the output folder run by onnxruntime-genai. The graph's inputs and outputs are the deployed
layout.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from _llm import decoders

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxruntime_genai")

import convert

pytestmark = [pytest.mark.torch, pytest.mark.transformers]

ARCHS = list(decoders().CONFIGS)
TOL = 1e-4
#: float32 rounding of these 2-layer models: measured 2.2e-6 at most over every step (llama).
LOGITS_ERR = 2e-5


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[object, Path]]:
    return {}


def _convert(arch: str, tmp: Path, cache: dict[str, tuple[object, Path]]) -> tuple[object, Path]:
    if arch not in cache:
        folder = decoders().write_folder(arch, tmp / arch)
        result = convert.convert(folder, to="onnx", out=tmp / f"{arch}-onnx")
        cache[arch] = (result, tmp / f"{arch}-onnx")
    return cache[arch]


@pytest.mark.parametrize("arch", ARCHS)
def test_generates_as_transformers(arch: str, tmp_path_factory: pytest.TempPathFactory,
                                   converted: dict[str, tuple[object, Path]]) -> None:
    result, out = _convert(arch, tmp_path_factory.mktemp(arch), converted)
    report = result.report  # type: ignore[attr-defined]
    assert report is not None and report.verdict == "PASS", report.table()
    names = [r.name for r in report.rows]
    assert names == ["prompt 1", "prompt 2 (left-padded)", "onnxruntime-genai (genai_config.json)"]
    for row in report.rows[:2]:
        assert row.matched == row.steps == 16
        assert row.ref_tokens == row.got_tokens
        assert row.max_err <= LOGITS_ERR, row
    genai = report.rows[2]
    assert genai.got_tokens[0][:16] == report.rows[0].ref_tokens[0]
    assert sorted(p.name for p in out.iterdir()) == ["genai_config.json", "model.onnx", "model.onnx.data"]


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_deployed_layout(arch: str, tmp_path_factory: pytest.TempPathFactory,
                         converted: dict[str, tuple[object, Path]]) -> None:
    """Inputs and outputs as onnxruntime-genai and optimum name and shape them; weights external."""
    _, out = _convert(arch, tmp_path_factory.mktemp(arch), converted)
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)

    def dims(value: onnx.ValueInfoProto) -> list[object]:
        return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]

    ins = {v.name: dims(v) for v in model.graph.input}
    outs = {v.name: dims(v) for v in model.graph.output}
    assert list(ins)[:3] == ["input_ids", "attention_mask", "position_ids"]
    assert ins["input_ids"] == ["batch", "sequence"] and ins["attention_mask"] == ["batch", "total_sequence"]
    assert ins["past_key_values.1.value"][0] == "batch" and ins["past_key_values.1.value"][2] == "past_sequence"
    assert next(iter(outs)) == "logits" and outs["logits"] == ["batch", "sequence", 512]
    assert outs["present.0.key"][2] == "total_sequence"
    assert len(ins) == 3 + 4 and len(outs) == 1 + 4
    inline = [t.name for t in model.graph.initializer
              if t.data_location != onnx.TensorProto.EXTERNAL and int(np.prod(t.dims)) * 4 > 1024]
    assert not inline, inline  # every weight over 1 KiB is in model.onnx.data
    config = json.loads((out / "genai_config.json").read_text())
    decoder = config["model"]["decoder"]
    assert decoder["filename"] == "model.onnx" and decoder["num_hidden_layers"] == 2
    assert decoder["inputs"]["past_key_names"] == "past_key_values.%d.key"
    assert decoder["outputs"]["present_value_names"] == "present.%d.value"
    assert config["search"]["past_present_share_buffer"] is False
