"""Real Hugging Face ``transformers`` models (tested with transformers 5.17.0), small and offline.

Each model is the library's own class built from a small config (2 layers, hidden size 64) with
seeded random weights: no hub download, no tokenizer, nothing cached (set ``HF_HUB_OFFLINE=1``).
The configs raise ``initializer_range`` from 0.02 to 0.2 so that attention is far from uniform and
a wrong mask or a wrong softmax shows in the outputs.

transformers 5.17.0 is the newest release that installs next to ``click==8.4.0`` of
``constraints/ci.txt`` (5.18 and later pull huggingface-hub>=1.31, which needs click>=8.4.2).

``build(name)`` returns ``(model, inputs(seed))``: the eval-mode model and a function giving its
example inputs for a seed. Text models take int64 ``input_ids`` and an ``attention_mask`` with
padding of another length on each row and seed (right padding on odd rows, left on even ones);
ViT takes ``pixel_values``, the Whisper encoder ``input_features`` (log-mel frames).

    python models/pytorch/hf.py            # list the models with their input shapes
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

__all__ = ["ATTENTION", "HF", "TRANSFORMERS_VERSION", "KeywordInputs", "build", "float_inputs", "text_inputs"]

TRANSFORMERS_VERSION = "5.17.0"
VOCAB = 512
SEQ = 16
INIT = 0.2  # initializer_range (transformers' default is 0.02)
SMALL = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128}


class KeywordInputs(nn.Module):
    """Call ``model`` with its positional inputs passed as keywords ``names``.

    GPT-2's ``forward`` takes ``past_key_values`` second, so ``model(ids, mask)`` would be wrong;
    this adapter is what a user writes to export it with ``(input_ids, attention_mask)``.
    """

    def __init__(self, model: nn.Module, names: tuple[str, ...]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> object:
        """Run the wrapped model on ``input_ids`` and ``attention_mask`` given by keyword."""
        return self.model(**dict(zip(self.names, (input_ids, attention_mask), strict=True)))


def text_inputs(batch: int = 3) -> Callable[[int], tuple[torch.Tensor, torch.Tensor]]:
    """Return ``make(seed) -> (input_ids, attention_mask)``, int64, with padding that differs by seed."""

    def make(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(1, VOCAB, (batch, SEQ), generator=gen)
        mask = torch.ones(batch, SEQ, dtype=torch.int64)
        for b in range(1, batch):  # padding of a different length per row and seed: right, then left
            pad = 2 + (seed + 3 * b) % (SEQ // 2)
            cols = slice(SEQ - pad, SEQ) if b % 2 else slice(0, pad)
            mask[b, cols] = 0
            ids[b, cols] = 0
        return ids, mask

    return make


def float_inputs(*shapes: tuple[int, ...]) -> Callable[[int], tuple[torch.Tensor, ...]]:
    """Return ``make(seed)`` giving seeded normal float32 tensors of ``shapes``."""

    def make(seed: int) -> tuple[torch.Tensor, ...]:
        gen = torch.Generator().manual_seed(seed)
        return tuple(torch.randn(s, generator=gen) for s in shapes)

    return make


def bert() -> nn.Module:
    """``BertModel``: outputs last_hidden_state and the tanh pooler output."""
    from transformers import BertConfig, BertModel

    return BertModel(BertConfig(vocab_size=VOCAB, max_position_embeddings=64, initializer_range=INIT, **SMALL))


def distilbert() -> nn.Module:
    """``DistilBertModel``: attention scores masked with ``masked_fill(finfo.min)``."""
    from transformers import DistilBertConfig, DistilBertModel

    config = DistilBertConfig(vocab_size=VOCAB, max_position_embeddings=64, dim=64, n_layers=2, n_heads=4,
                              hidden_dim=128, initializer_range=INIT)
    return DistilBertModel(config)


def _gpt2_config() -> object:
    from transformers import GPT2Config

    return GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4, use_cache=False,
                      initializer_range=INIT, bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1)


def gpt2() -> nn.Module:
    """``GPT2Model`` (no KV cache): Conv1D addmm, tanh GELU, causal and padding masks."""
    from transformers import GPT2Model

    return KeywordInputs(GPT2Model(_gpt2_config()), ("input_ids", "attention_mask"))  # type: ignore[arg-type]


def gpt2_lm() -> nn.Module:
    """``GPT2LMHeadModel`` (no KV cache): logits through the LM head tied to the token embedding."""
    from transformers import GPT2LMHeadModel

    return KeywordInputs(GPT2LMHeadModel(_gpt2_config()), ("input_ids", "attention_mask"))  # type: ignore[arg-type]


def t5_encoder() -> nn.Module:
    """``T5EncoderModel``: RMS norm, relative-position buckets, unscaled attention."""
    from transformers import T5Config, T5EncoderModel

    config = T5Config(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                      relative_attention_num_buckets=32, relative_attention_max_distance=64, use_cache=False)
    return T5EncoderModel(config)


def vit() -> nn.Module:
    """``ViTModel`` on 32x32 images in 8x8 patches: CLS token, pooler."""
    from transformers import ViTConfig, ViTModel

    return ViTModel(ViTConfig(image_size=32, patch_size=8, num_channels=3, initializer_range=INIT, **SMALL))


def whisper_encoder() -> nn.Module:
    """``WhisperModel(config).get_encoder()``: two Conv1d + GELU over 16 mel bins x 32 frames."""
    from transformers import WhisperConfig, WhisperModel

    config = WhisperConfig(vocab_size=VOCAB, num_mel_bins=16, max_source_positions=16, max_target_positions=16,
                           d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, use_cache=False,
                           init_std=INIT, pad_token_id=VOCAB - 1, bos_token_id=VOCAB - 2, eos_token_id=VOCAB - 2,
                           decoder_start_token_id=VOCAB - 3, suppress_tokens=None, begin_suppress_tokens=None)
    return WhisperModel(config).get_encoder()  # type: ignore[no-any-return]


HF: dict[str, tuple[Callable[[], nn.Module], Callable[[int], tuple[torch.Tensor, ...]]]] = {
    "bert": (bert, text_inputs()),
    "distilbert": (distilbert, text_inputs()),
    "gpt2": (gpt2, text_inputs()),
    "gpt2_lm": (gpt2_lm, text_inputs()),
    "t5_encoder": (t5_encoder, text_inputs()),
    "vit": (vit, float_inputs((2, 3, 32, 32))),
    "whisper_encoder": (whisper_encoder, float_inputs((2, 16, 32))),
}


ATTENTION = ("sdpa", "eager")  # transformers' attention implementations (sdpa: its default on CPU)


def build(name: str, *, seed: int = 0, attention: str = "sdpa"
          ) -> tuple[nn.Module, Callable[[int], tuple[torch.Tensor, ...]]]:
    """Return Hugging Face model ``name`` (seeded random weights, eval mode) and its input maker.

    ``attention`` picks transformers' attention code: ``"sdpa"`` (``scaled_dot_product_attention``
    with a boolean mask) or ``"eager"`` (matmul, additive mask, softmax).
    """
    factory, inputs = HF[name]
    torch.manual_seed(seed)
    model = factory().eval()
    getattr(model, "model", model).set_attn_implementation(attention)  # type: ignore[operator]
    return model, inputs


if __name__ == "__main__":
    import transformers

    print(f"transformers {transformers.__version__}")
    for hf_name in HF:
        _, maker = build(hf_name)
        shapes = ", ".join(f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}" for t in maker(1))
        print(f"{hf_name:16} {shapes}")
