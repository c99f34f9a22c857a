"""Weights are streamed: a conversion's memory does not grow with the model's weights.

Two Llama folders of the same widths (hidden 1024, MLP 4096, vocabulary 8192, bf16 shards of
100 MiB) with 2 and 8 layers: 100 and 300 MiB of bf16 weights, written to float32 (200 and
600 MiB, every weight cast chunk by chunk). Each is converted in its own process (the check off:
its reference would load the model), and the peak resident memory of the conversion (VmHWM,
reset after the imports) is compared: growing the weights by 400 MiB of output may grow it by at
most 64 MiB (measured: the 2-layer conversion peaks 334 MiB over its imports, the 8-layer one
9.4 MiB more). A conversion that held the weights, as the peers do (benchmarks/bench_llm.py),
grows by at least the 200 MiB of bf16 it reads.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _llm import ROOT, decoders

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = [pytest.mark.torch, pytest.mark.transformers, pytest.mark.slow]

BOUND = 64 << 20

_CONVERT = r"""
import json, sys
import convert, torch, transformers  # the imports first: their memory is not the conversion's
from convert.frontends.hf import capture  # noqa: F401
open("/proc/self/clear_refs", "w").write("5")  # reset the peak
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0
start = hwm()
result = convert.convert(sys.argv[1], to="onnx", out=sys.argv[2], check=False)
print(json.dumps({"growth": hwm() - start, "written": result.weight_bytes}))
"""


def _dims(layers: int) -> dict[str, object]:
    return {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": layers, "num_attention_heads": 8,
            "num_key_value_heads": 8, "vocab_size": 8192, "max_position_embeddings": 512,
            "tie_word_embeddings": False}


def _convert(layers: int, tmp: Path) -> dict[str, int]:
    src = decoders().write_random_folder(_dims(layers), tmp / f"src{layers}", dtype="bf16", shard_bytes=100 << 20,
                                         fast=True)
    run = subprocess.run([sys.executable, "-c", _CONVERT, str(src), str(tmp / f"out{layers}")], cwd=ROOT,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux only (/proc/self/clear_refs)")
def test_memory_does_not_grow_with_the_weights(tmp_path: Path) -> None:
    small, large = _convert(2, tmp_path), _convert(8, tmp_path)
    assert large["written"] - small["written"] > 6 * BOUND  # 400 MiB more written
    assert large["growth"] - small["growth"] < BOUND, (small, large)
