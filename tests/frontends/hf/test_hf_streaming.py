"""Weights are streamed: a conversion's memory does not grow with the model's weights.

Two Llama folders of the same widths (hidden 1024, MLP 8192, vocabulary 8192, bf16 shards of
100 MiB) with 1 and 4 layers: 88 and 256 MiB of bf16 weights, written to float32 (176 and
512 MiB, every weight cast chunk by chunk). Each is converted in its own process (the check off:
its reference would load the model), and the peak resident memory of the conversion (VmHWM,
reset after the imports) is compared: growing the weights by 336 MiB of output may grow it by at
most 64 MiB (measured: the 1-layer conversion peaks 323 MiB over its imports, the 4-layer one
4.0 MiB more; 2 and 8 layers of MLP 4096, as this test had first, cost more capture time for the
same result: 9.4 MiB). A conversion that held the weights, as the peers do
(benchmarks/bench_llm.py), grows by at least the 168 MiB of bf16 it reads.

What the bound is not: a tensor larger than one chunk (``CHUNK_BYTES``, 64 MiB of source bytes)
is cast one chunk at a time, so the peak holds one chunk and its cast (up to 192 MiB from bf16 to
float32) whatever the model's size; here every tensor is under a chunk.
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
    return {"hidden_size": 1024, "intermediate_size": 8192, "num_hidden_layers": layers, "num_attention_heads": 8,
            "num_key_value_heads": 8, "vocab_size": 8192, "max_position_embeddings": 512,
            "tie_word_embeddings": False}


def _convert(layer_counts: tuple[int, ...], tmp: Path) -> list[dict[str, int]]:
    """Write a folder of each layer count, then convert them side by side, each in its own process (its
    own peak: the conversions do not share memory; two at once halve the wall time on two cores)."""
    sources = [decoders().write_random_folder(_dims(n), tmp / f"src{n}", dtype="bf16", shard_bytes=100 << 20,
                                              fast=True) for n in layer_counts]
    procs = [subprocess.Popen([sys.executable, "-c", _CONVERT, str(src), str(tmp / f"out{n}")], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n, src in zip(layer_counts, sources, strict=True)]
    found = []
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-3000:]
        found.append(json.loads(out.strip().splitlines()[-1]))
    return found


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux only (/proc/self/clear_refs)")
def test_memory_does_not_grow_with_the_weights(tmp_path: Path) -> None:
    small, large = _convert((1, 4), tmp_path)
    assert large["written"] - small["written"] > 5 * BOUND  # 336 MiB more written
    assert large["growth"] - small["growth"] < BOUND, (small, large)
