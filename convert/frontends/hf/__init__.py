"""The ``hf`` frontend: a Hugging Face model folder (or an in-memory ``PreTrainedModel``) -> the
decoder graph deployments run, with its key/value cache.

``convert hf:onnx FOLDER -o out/`` writes ``out/model.onnx``, its weights in ``out/model.onnx.data``
and ``out/genai_config.json`` (onnxruntime-genai runs the folder). The folder is read without
running any of its code (``folder.py``); the model is captured on the meta device and its weights
streamed from the safetensors shards into the external data (``capture.py``, ``weights.py``). The
check is greedy generation against transformers (``convert.parity.generation``), or block by block
for a model larger than half the memory (``convert.parity.blockwise``).

Importing this package imports neither torch nor transformers.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from convert.ir import FrontendSpec, Model, OpSupport, Options, OptionSpec, UsageError, sparing_existing_objects

__all__ = ["FRONTEND", "INFO_KEY", "load", "load_model", "supported_ops"]

#: ``model.meta`` key: the captured graph's ``DeployedInfo``, the generation settings and the folder.
INFO_KEY = "convert:hf"

OPTIONS = (
    OptionSpec("--logits", "logits", "hf: logits for every position of the input ('all', as optimum and "
               "onnxruntime-genai's builder export them) or for the last only ('last': a smaller prefill)",
               default="all", choices=("all", "last")),
    OptionSpec("--new-tokens", "new_tokens", "hf: tokens the check generates greedily from each prompt",
               type=int, default=16, metavar="N"),
    OptionSpec("--check-by", "check_by", "hf: the check: 'generation' (greedy generation against transformers), "
               "'blocks' (decoder block by decoder block, for a model larger than half the memory) or 'auto'",
               default="auto", choices=("auto", "generation", "blocks")),
)


@sparing_existing_objects
def load(paths: Sequence[Path], options: Options) -> Model:
    """Read a model folder into the IR: the deployed graph, weights as slices of its shards."""
    from .capture import capture_folder
    from .folder import read_folder

    if len(paths) != 1:
        raise UsageError("hf: give one model folder (config.json, *.safetensors)")
    folder = read_folder(Path(paths[0]))
    if options.external_data is None:  # a language model's weights go to external data, whatever their size
        options.external_data = True
    model, info = capture_folder(folder, options)
    model.meta[INFO_KEY] = (info, dict(folder.generation), folder.path)
    return model


@sparing_existing_objects
def load_model(module: object, example_inputs: object, options: Options) -> Model:
    """Convert an in-memory ``PreTrainedModel`` (``example_inputs`` is not used: the graph takes any)."""
    from .capture import capture_module

    if options.external_data is None:
        options.external_data = True
    model, info = capture_module(module, options)  # type: ignore[arg-type]
    gen = getattr(module, "generation_config", None)
    generation = gen.to_dict() if gen is not None and hasattr(gen, "to_dict") else {}
    model.meta[INFO_KEY] = (info, generation, None)
    return model


def _claims(obj: object) -> bool:
    """A transformers causal language model (a ``PreTrainedModel`` that generates)."""
    transformers = sys.modules.get("transformers")
    if transformers is None:
        return False
    base = getattr(transformers, "PreTrainedModel", None)
    mixin = getattr(transformers, "GenerationMixin", None)
    return base is not None and mixin is not None and isinstance(obj, base) and isinstance(obj, mixin)


def _write_beside(model: Model, written: Sequence[Path], options: Options) -> list[Path]:
    from .genai import write_beside

    info, generation, folder = model.meta[INFO_KEY]
    return write_beside(info, written, generation, folder)


def _verdict(source: object, written: Sequence[Path], options: Options, **kwargs: object) -> object:
    from convert.parity.generation import check_converted  # lazily: imports torch and transformers

    return check_converted(source, written, options, **kwargs)


def supported_ops() -> list[OpSupport]:
    """Return the support table: one row per architecture (``model_type``)."""
    from .architectures import ARCHITECTURES

    return ARCHITECTURES.support(sort=True)


def _sniff(path: Path) -> bool:
    from .folder import is_model_folder

    return is_model_folder(path)


FRONTEND = FrontendSpec(
    name="hf",
    description="Hugging Face model folder (config.json, *.safetensors): the decoder with its KV cache",
    suffixes=(),
    load=load,
    sniff=_sniff,
    ops=supported_ops,
    options=OPTIONS,
    load_object=load_model,
    claims_object=_claims,
    write_beside=_write_beside,
    verdict=_verdict,
)
