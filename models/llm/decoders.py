"""Decoder-only language models as downloaded folders, small and offline, for the ``hf`` route.

Each architecture of ``CONFIGS`` is the transformers class (tested with 5.17.0) built from a small
config (2 layers, hidden size 64, vocabulary 512) with seeded random weights, written with
``save_pretrained`` as a model folder (``config.json``, ``model.safetensors`` or shards with
``model.safetensors.index.json``, ``generation_config.json``). Nothing is downloaded.

The configs keep what each architecture does that a converter must get right: grouped-query
attention (2 key/value heads for 4 query heads) and Llama 3 rope scaling; Qwen2's q/k/v biases and
tied embeddings; Qwen3's q/k norms and a head size that is not hidden/heads; Mistral's sliding
window; Phi-3's fused qkv and gate/up projections; Gemma 2's attention and final logit
soft-capping, query scaling and alternating sliding layers; Gemma 3's sliding layers with their own
rope base and q/k norms; GPT-2's Conv1D and learned positions; GPT-NeoX's partial rotary and
parallel residual; OPT's learned positions with an offset. Sliding windows are 8 tokens, shorter
than a prompt plus 16 generated tokens, so the window shows. ``initializer_range`` is 0.2 (not
0.02) so attention is far from uniform and logits far from ties.

    python models/llm/decoders.py OUT_DIR [--arch llama ...] [--dtype bf16] [--shards 2]
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["CONFIGS", "TRANSFORMERS_VERSION", "VOCAB", "build_config", "write_folder", "write_random_folder"]

TRANSFORMERS_VERSION = "5.17.0"
VOCAB = 512
INIT = 0.2
_COMMON = {"vocab_size": VOCAB, "initializer_range": INIT, "bos_token_id": 1, "eos_token_id": 2,
           "pad_token_id": 0}
_ROPE_LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64, "rope_theta": 500000.0}

#: model_type -> the config's keyword arguments.
CONFIGS: dict[str, dict[str, object]] = {
    "llama": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "max_position_embeddings": 256, "rope_parameters": _ROPE_LLAMA3,
              "tie_word_embeddings": False},
    "qwen2": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "max_position_embeddings": 256, "tie_word_embeddings": True},
    "qwen3": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 32, "max_position_embeddings": 256,
              "tie_word_embeddings": True},
    "mistral": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "max_position_embeddings": 256, "sliding_window": 8,
                "tie_word_embeddings": False},
    "phi3": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "max_position_embeddings": 256, "original_max_position_embeddings": 256,
             "tie_word_embeddings": False},
    "gemma2": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 256, "sliding_window": 8,
               "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "query_pre_attn_scalar": 16,
               "layer_types": ["sliding_attention", "full_attention"]},
    "gemma3_text": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                    "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 256, "sliding_window": 8,
                    "query_pre_attn_scalar": 16, "layer_types": ["sliding_attention", "full_attention"]},
    "gpt2": {"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 256, "n_inner": 128},
    "gpt_neox": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                 "max_position_embeddings": 256, "rotary_pct": 0.25, "use_parallel_residual": True,
                 "tie_word_embeddings": False},
    "opt": {"hidden_size": 64, "ffn_dim": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "word_embed_proj_dim": 64, "max_position_embeddings": 256, "enable_bias": True,
            "do_layer_norm_before": True},
}


def build_config(arch: str, **overrides: object) -> object:
    """Return the transformers config of ``arch`` (a key of ``CONFIGS``) with ``overrides``."""
    from transformers import AutoConfig

    kwargs = {**_COMMON, **CONFIGS[arch], **overrides}
    return AutoConfig.for_model(arch, **kwargs)


def build_model(arch: str, *, seed: int = 0, **overrides: object) -> object:
    """Return the eval-mode ``AutoModelForCausalLM`` of ``arch`` with seeded random float32 weights."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(build_config(arch, **overrides), dtype=torch.float32)
    return model.eval()


def write_folder(arch: str, out: Path, *, seed: int = 0, dtype: str = "fp32", shards: int = 1,
                 **overrides: object) -> Path:
    """Write ``arch``'s model folder to ``out`` (``shards`` > 1: that many safetensors shards and an index).

    Returns:
        ``out``.
    """
    import torch

    model = build_model(arch, seed=seed, **overrides)
    torch_dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    model = model.to(torch_dtype)
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    shard = f"{max(1, math.ceil(size / shards / 1024))}KB" if shards > 1 else "50GB"
    model.save_pretrained(out, max_shard_size=shard)
    return out


def write_tokenizer(folder: Path, vocab: int) -> None:
    """Write a word-level tokenizer of ``vocab`` tokens ("<unk>", "<s>", "</s>", then "w3"...) to ``folder``:
    tools that insist on a tokenizer (onnxruntime-genai's builder) find one; its words mean nothing."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, vocab)}}
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="<unk>")
    fast.save_pretrained(folder)


# -- large folders without building the model (benchmarks: 1B and 7B dimensions) ---------------------
#: Llama-family dimensions of public models (for benchmarks/bench_llm.py).
DIMS: dict[str, dict[str, object]] = {
    "tinyllama-1.1b": {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
                       "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000,
                       "max_position_embeddings": 2048, "rope_theta": 10000.0, "tie_word_embeddings": False},
    "llama-2-7b": {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                   "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
                   "max_position_embeddings": 4096, "rope_theta": 10000.0, "tie_word_embeddings": False},
}


def _tensors(config: object) -> Iterator[tuple[str, tuple[int, ...]]]:
    """Yield ``(name, shape)`` of every weight the config's model has, in state_dict order (meta device)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    seen = set()
    for name, tensor in model.state_dict().items():
        if id(tensor) in seen or not name.endswith(("weight", "bias")):
            continue
        seen.add(id(tensor))
        yield name, tuple(tensor.shape)


def write_random_folder(dims: str | dict[str, object], out: Path, *, dtype: str = "bf16",
                        shard_bytes: int = 5 * 10**9, seed: int = 0, fast: bool = False,
                        progress: Callable[[int, int], None] | None = None) -> Path:
    """Write a Llama folder of ``DIMS[dims]`` (or of the config keywords ``dims``) with seeded random
    weights, streamed (never the whole model).

    Weights are N(0, 0.02) (norms 1), written shard by shard as safetensors with an index; memory stays
    near one tensor. ``fast`` (bf16 only): uniform random bit patterns of bf16 values in [2^-7, 2^-6)
    instead, ten times quicker to draw (for tests of the conversion, not of what a model computes).
    Returns ``out``.
    """
    import numpy as np
    from transformers import LlamaConfig

    kwargs = {**_COMMON, "initializer_range": 0.02, **(DIMS[dims] if isinstance(dims, str) else dims)}
    config = LlamaConfig(architectures=["LlamaForCausalLM"], **kwargs)  # as a downloaded config names it
    out.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out)
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2,
                                                            "pad_token_id": 0, "do_sample": False}))
    np_dtype = {"fp32": np.float32, "fp16": np.float16, "bf16": np.uint16}[dtype]
    st_dtype = {"fp32": "F32", "fp16": "F16", "bf16": "BF16"}[dtype]
    itemsize = np.dtype(np_dtype).itemsize
    tensors = list(_tensors(config))
    total = sum(math.prod(s) * itemsize for _, s in tensors)
    groups: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    size = 0
    for name, shape in tensors:
        nbytes = math.prod(shape) * itemsize
        if groups[-1] and size + nbytes > shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append((name, shape))
        size += nbytes
    rng = np.random.default_rng(seed)
    weight_map = {}
    done = 0
    for i, group in enumerate(groups):
        fname = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        header: dict[str, object] = {"__metadata__": {"format": "pt"}}
        pos = 0
        for name, shape in group:
            nbytes = math.prod(shape) * itemsize
            header[name] = {"dtype": st_dtype, "shape": list(shape), "data_offsets": [pos, pos + nbytes]}
            pos += nbytes
            weight_map[name] = fname
        raw = json.dumps(header).encode()
        raw += b" " * (-len(raw) % 8)
        with open(out / fname, "wb") as fh:
            fh.write(len(raw).to_bytes(8, "little"))
            fh.write(raw)
            for name, shape in group:
                rows = shape[0]
                cols = math.prod(shape[1:])
                step = max(1, (64 << 20) // max(1, cols * 4))
                for r in range(0, rows, step):
                    n = min(step, rows - r)
                    if fast and dtype == "bf16":
                        data = rng.integers(0x3C00, 0x3C80, size=(n, cols), dtype=np.uint16)
                        fh.write(data.tobytes())
                        done += data.nbytes
                        continue
                    if name.endswith("norm.weight"):
                        chunk = np.ones((n, cols), np.float32)
                    else:
                        chunk = rng.standard_normal((n, cols), dtype=np.float32)
                        chunk *= 0.02
                    if dtype == "bf16":
                        data = (chunk.view(np.uint32) >> 16).astype(np.uint16)  # truncated: random anyway
                    else:
                        data = chunk.astype(np_dtype)
                    fh.write(data.tobytes())
                    done += data.nbytes
                    if progress is not None:
                        progress(done, total)
    (out / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
    return out


def main() -> None:
    """Write the model folders named on the command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--arch", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--dtype", default="fp32", choices=("fp32", "fp16", "bf16"))
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--dims", choices=list(DIMS), help="write a large random Llama folder instead")
    args = parser.parse_args()
    if args.dims:
        print(write_random_folder(args.dims, args.out, dtype=args.dtype))
        return
    for arch in args.arch:
        print(write_folder(arch, args.out / arch, dtype=args.dtype, shards=args.shards))


if __name__ == "__main__":
    main()
