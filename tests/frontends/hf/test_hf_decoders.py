"""Every architecture of the hf route, at a 2-layer config, converts and generates as transformers does.

Each model folder is written by models/llm/decoders.py (the transformers class from a small config,
seeded random weights, save_pretrained; nothing downloaded), converted with ``convert.convert`` and
checked by the route's own verdict: greedy generation of 8 tokens (``NEW_TOKENS``; the route's
default is 16) from a batch-1 prompt and a left-padded batch of 2, through the KV-cache loop in
ONNX Runtime, against transformers' ``generate(do_sample=False)`` (tokens identical, each step's
logits within 1e-4 of their scale), and the output folder run by onnxruntime-genai. The graph's
inputs and outputs are the deployed layout. Each folder is converted once per session
(``conftest.converted``); test_hf_verdict.py reads the same llama conversion.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from _llm import NEW_TOKENS, ConvertedCache, decoders

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxruntime_genai")

pytestmark = [pytest.mark.torch, pytest.mark.transformers]

ARCHS = list(decoders().CONFIGS)
TOL = 1e-4
#: float32 rounding of these 2-layer models: measured 2.2e-6 at most over every step (llama).
LOGITS_ERR = 2e-5


@pytest.mark.parametrize("arch", ARCHS)
def test_generates_as_transformers(arch: str, converted: ConvertedCache) -> None:
    done = converted(arch)
    result, out = done.result, done.out
    report = result.report  # type: ignore[attr-defined]
    assert report is not None and report.verdict == "PASS", report.table()
    names = [r.name for r in report.rows]
    assert names == ["prompt 1", "prompt 2 (left-padded)", "onnxruntime-genai (genai_config.json)"]
    for row in report.rows[:2]:
        assert row.matched == row.steps == NEW_TOKENS
        assert row.ref_tokens == row.got_tokens
        assert row.max_err <= LOGITS_ERR, row
    genai = report.rows[2]
    assert genai.got_tokens[0][:NEW_TOKENS] == report.rows[0].ref_tokens[0]
    assert sorted(p.name for p in out.iterdir()) == ["genai_config.json", "model.onnx", "model.onnx.data"]


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_deployed_layout(arch: str, converted: ConvertedCache) -> None:
    """Inputs and outputs as onnxruntime-genai and optimum name and shape them; weights external."""
    out = converted(arch).out
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
