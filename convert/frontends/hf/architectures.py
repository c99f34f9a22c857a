"""The decoder architectures the ``hf`` route converts, one entry per ``model_type``.

Each entry says how the model is captured (the attention implementation torch.export sees) and how
onnxruntime-genai names its type, and refuses in one line a config the route cannot express.
Registered are the architectures tested in CI at a 2-layer config (``models/llm/decoders.py``).
Their transformers code (5.17) was read for uses of a layer's index: each uses it to pick its cache
entry and its ``config.layer_types`` entry, and GPT-2 to scale its scores when
``scale_attn_by_inverse_layer_idx`` (an attribute set when built, which replicate.py compares), so
all are ``replicable``; register a new one with ``replicable=False`` until its code is read.
"""

from __future__ import annotations

from dataclasses import dataclass

from convert.ir import ConversionError, Registry

__all__ = ["ARCHITECTURES", "Architecture", "architecture_of"]


@dataclass(frozen=True, slots=True)
class Architecture:
    """How one architecture is captured and run."""

    model_type: str
    #: transformers' attention implementation for the capture: "sdpa" (one scaled_dot_product_attention
    #: op) or "eager" (matmul, softmax: needed where scores are soft-capped, which SDPA cannot do).
    attention: str = "sdpa"
    #: the model type onnxruntime-genai knows it by ("decoder": its generic decoder-only model).
    genai_type: str = "decoder"
    #: whether a few captured decoder layers may be cloned to the config's depth (replicate.py): set
    #: where transformers' code for the architecture was read and its layers use their index only to
    #: pick their cache entry (or through ``config.layer_types`` and attributes set when built).
    replicable: bool = False


ARCHITECTURES: Registry = Registry("hf architectures")

_DATA_DEPENDENT_ROPE = {"dynamic": "recomputes its frequencies from the longest sequence seen so far",
                        "longrope": "switches between two sets of frequencies on the sequence length"}


def _rope_type(config: object) -> str:
    for key in ("rope_parameters", "rope_scaling"):
        params = getattr(config, key, None)
        if isinstance(params, dict):
            if "rope_type" in params or "type" in params:
                return str(params.get("rope_type", params.get("type")))
            inner = [v for v in params.values() if isinstance(v, dict)]  # per layer type (Gemma 3)
            for v in inner:
                kind = str(v.get("rope_type", v.get("type", "default")))
                if kind != "default":
                    return kind
    return "default"


def _check_common(config: object, model_type: str) -> None:
    rope = _rope_type(config)
    if rope in _DATA_DEPENDENT_ROPE:
        raise ConversionError(f"{model_type} config", f"rope type '{rope}' {_DATA_DEPENDENT_ROPE[rope]} in Python, "
                              "which one graph for every length cannot hold; this route converts fixed rope "
                              "scalings (default, linear, llama3, yarn)")
    kinds = set(getattr(config, "layer_types", None) or [])
    other = kinds - {"full_attention", "sliding_attention"}
    if other:
        raise ConversionError(f"{model_type} config", f"layer types {', '.join(sorted(other))} keep a state that "
                              "is not a key/value cache; this route converts attention-only decoders")


def _register(model_type: str, *, attention: str = "sdpa", genai_type: str = "decoder", notes: str = "",
              replicable: bool = True) -> None:
    arch = Architecture(model_type, attention, genai_type, replicable)

    def make(config: object) -> Architecture:
        _check_common(config, model_type)
        if getattr(config, "attn_logit_softcapping", None) and arch.attention != "eager":
            return Architecture(model_type, "eager", arch.genai_type, arch.replicable)  # SDPA cannot soft-cap
        return arch

    ARCHITECTURES.register(model_type, maps_to="decoder with KV cache", notes=notes)(make)


_register("llama", genai_type="llama", notes="GQA, rope scaling (llama3, linear, yarn)")
_register("qwen2", genai_type="qwen2", notes="q/k/v biases, tied embeddings")
_register("qwen3", genai_type="qwen3", notes="q/k norms")
_register("mistral", genai_type="mistral", notes="sliding window (as a mask over the whole cache)")
_register("phi3", genai_type="phi3", notes="fused qkv and gate/up projections; not longrope (Phi-3 128k)")
_register("gemma2", attention="eager", genai_type="gemma2",
          notes="attention and final logit soft-capping, sliding layers (eager attention)")
_register("gemma3_text", genai_type="gemma3_text",
          notes="sliding layers with their own rope base, q/k norms (text-only Gemma 3)")
_register("gpt2", genai_type="decoder", notes="Conv1D projections, learned positions")
_register("gpt_neox", genai_type="decoder", notes="partial rotary, parallel residual")
_register("opt", genai_type="decoder", notes="learned positions with an offset of 2")

_REFUSED = {
    "gemma3": "Gemma 3 with its vision tower (Gemma3ForConditionalGeneration); convert a text-only Gemma 3 "
              "(model_type gemma3_text, such as gemma-3-1b)",
}


def architecture_of(config: object, source: str) -> Architecture:
    """Return how to capture ``config``'s model.

    Raises:
        ConversionError: the architecture is not one this route converts, or its config uses what
            the route cannot express; the message names it.
    """
    model_type = str(getattr(config, "model_type", ""))
    if model_type in _REFUSED:
        raise ConversionError(source, f"model_type '{model_type}' is {_REFUSED[model_type]}")
    make = ARCHITECTURES.lookup(model_type)
    if make is None:
        known = ", ".join(sorted(str(k) for k in ARCHITECTURES.keys()))  # noqa: SIM118 (a Registry)
        raise ConversionError(source, f"model_type '{model_type}' is not an architecture this route converts "
                              f"({known}). Run `convert ops hf` for what each covers")
    return make(config)  # type: ignore[no-any-return]
