"""``genai_config.json``: what onnxruntime-genai reads to run a folder as it runs its builder's output.

The file (onnxruntime-genai's configuration format) names the decoder's file, its input and output
names (``past_key_values.%d.key`` ...), the cache's dimensions, the special tokens and the search
settings. The cache is not shared between past and present (the graph appends this call's keys to
the past: ``past_present_share_buffer`` false). Search settings come from ``generation_config.json``.
The tokenizer's files of the source folder, where there are any, are copied beside it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .capture import DeployedInfo
from .folder import TOKENIZER_FILES

__all__ = ["GENAI_CONFIG", "genai_config", "write_beside"]

GENAI_CONFIG = "genai_config.json"


def genai_config(info: DeployedInfo, filename: str, generation: dict[str, object]) -> dict[str, object]:
    """Return the genai_config.json content for a graph of ``info`` in ``filename``."""

    def search(key: str, default: object) -> object:
        value = generation.get(key)
        return default if value is None else value

    decoder = {
        "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
        "filename": filename,
        "head_size": info.head_dim,
        "hidden_size": info.hidden,
        "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask", "position_ids": "position_ids",
                   "past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value"},
        "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value"},
        "num_attention_heads": info.heads,
        "num_hidden_layers": info.layers,
        "num_key_value_heads": info.kv_heads,
    }
    eos = info.eos_token_id
    pad = info.pad_token_id if info.pad_token_id is not None else (eos[0] if isinstance(eos, list) and eos else eos)
    return {
        "model": {
            "bos_token_id": info.bos_token_id,
            "context_length": info.context_length,
            "decoder": decoder,
            "eos_token_id": eos,
            "pad_token_id": pad,
            "type": info.genai_type,
            "vocab_size": info.vocab,
        },
        "search": {
            "diversity_penalty": 0.0,
            "do_sample": bool(search("do_sample", False)),
            "early_stopping": True,
            "length_penalty": float(search("length_penalty", 1.0)),  # type: ignore[arg-type]
            "max_length": info.context_length,
            "min_length": 0,
            "no_repeat_ngram_size": int(search("no_repeat_ngram_size", 0)),  # type: ignore[call-overload]
            "num_beams": 1,
            "num_return_sequences": 1,
            "past_present_share_buffer": False,
            "repetition_penalty": float(search("repetition_penalty", 1.0)),  # type: ignore[arg-type]
            "temperature": float(search("temperature", 1.0)),  # type: ignore[arg-type]
            "top_k": int(search("top_k", 50)),  # type: ignore[call-overload]
            "top_p": float(search("top_p", 1.0)),  # type: ignore[arg-type]
        },
    }


def _write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as open() would make it (mkstemp makes 0600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_beside(info: DeployedInfo, written: Sequence[Path], generation: dict[str, object],
                 source_folder: Path | None) -> list[Path]:
    """Write genai_config.json (and copy the tokenizer's files) beside the model ``written[0]``."""
    model_path = Path(written[0])
    folder = model_path.parent if str(model_path.parent) else Path(".")
    config = genai_config(info, model_path.name, generation)
    out = folder / GENAI_CONFIG
    _write_text(out, json.dumps(config, indent=4) + "\n")
    files = [out]
    if source_folder is not None:
        for name in TOKENIZER_FILES:
            src = source_folder / name
            if src.is_file() and src.resolve() != (folder / name).resolve():
                shutil.copyfile(src, folder / name)
                files.append(folder / name)
    return files
