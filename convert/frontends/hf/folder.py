"""A Hugging Face model folder as users download it: ``config.json``, the weights as safetensors
(one file, or shards named by ``model.safetensors.index.json``), ``generation_config.json``.

Reading a folder never runs code from it. A config that names code of its own (``auto_map``: the
classes ``trust_remote_code=True`` would import from the folder's ``.py`` files) is refused,
naming the file; weights only in pickles (``pytorch_model.bin``, which unpickling runs) are
refused too. Everything is checked here, before any capture: a missing shard, a shard cut short, a
header longer than its file, a dtype safetensors does not define, a tensor named twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from convert.ir import ModelFormatError, UsageError, shown

from .safetensors import TensorEntry, read_header

__all__ = ["INDEX_NAME", "ModelFolder", "is_model_folder", "read_folder"]

INDEX_NAME = "model.safetensors.index.json"
_PICKLES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.ckpt.index", "tf_model.h5",
            "flax_model.msgpack")
#: Files a tokenizer is made of; copied beside the converted model so onnxruntime-genai can load it.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja")


@dataclass(slots=True)
class ModelFolder:
    """What a model folder holds: its config, where each tensor is, its generation settings."""

    path: Path
    config: dict[str, object]
    tensors: dict[str, TensorEntry]
    generation: dict[str, object] = field(default_factory=dict)
    shards: list[Path] = field(default_factory=list)

    @property
    def weight_bytes(self) -> int:
        """Return the bytes of every tensor in the files."""
        return sum(t.nbytes for t in self.tensors.values())


def is_model_folder(path: Path) -> bool:
    """Whether ``path`` looks like a Hugging Face model folder (a folder with config.json)."""
    return path.is_dir() and (path / "config.json").is_file()


def _read_json(path: Path, what: str) -> dict[str, object]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelFormatError(f"{path.parent.name}/{path.name}: cannot read it ({exc})") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelFormatError(f"{path.parent.name}/{path.name}: not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ModelFormatError(f"{path.parent.name}/{path.name}: {what} is a JSON {type(data).__name__}, not an "
                               "object")
    return data


def remote_code_file(config: dict[str, object], folder: Path) -> str | None:
    """Return the folder's file that ``trust_remote_code`` would import for this config, or None.

    ``auto_map`` maps an Auto class to ``module.Class`` (``repo--module.Class`` for code in another
    repository): the module is ``module.py`` of the folder.
    """
    auto_map = config.get("auto_map")
    if not auto_map:
        return None
    refs = list(auto_map.values()) if isinstance(auto_map, dict) else [auto_map]
    flat: list[str] = []
    for ref in refs:
        flat.extend(r for r in (ref if isinstance(ref, (list, tuple)) else [ref]) if isinstance(r, str) and r)
    for ref in flat:
        module = ref.split("--")[-1].rsplit(".", 1)[0]
        return f"{module.replace('.', '/')}.py"
    return "the code auto_map names"


def read_folder(path: Path) -> ModelFolder:
    """Read and check a model folder (config, index, every shard's header); no tensor values are read.

    Raises:
        UsageError: ``path`` is not a folder.
        ModelFormatError: no config.json, remote code, no safetensors, a missing or damaged shard.
    """
    if not path.is_dir():
        raise UsageError(f"{path}: not a folder (a Hugging Face model folder holds config.json and *.safetensors)")
    name = path.name or str(path)
    cfg_path = path / "config.json"
    if not cfg_path.is_file():
        raise ModelFormatError(f"{name}: no config.json; a Hugging Face model folder holds config.json beside its "
                               "*.safetensors")
    config = _read_json(cfg_path, "config.json")
    code = remote_code_file(config, path)
    if code is not None:
        raise ModelFormatError(
            f"{name}/config.json: the model's code is '{name}/{code}' (auto_map), which loading it would run "
            "(trust_remote_code); convert never runs code from a model folder. Use a model whose architecture "
            "transformers ships")
    if not isinstance(config.get("model_type"), str):
        raise ModelFormatError(f"{name}/config.json: no 'model_type', so the architecture is unknown")
    generation: dict[str, object] = {}
    if (path / "generation_config.json").is_file():
        generation = _read_json(path / "generation_config.json", "generation_config.json")
    index = path / INDEX_NAME
    if index.is_file():
        data = _read_json(index, INDEX_NAME)
        weight_map = data.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ModelFormatError(f"{name}/{INDEX_NAME}: no 'weight_map' naming each tensor's shard")
        files: list[str] = []
        for tensor, shard in weight_map.items():
            if not isinstance(shard, str) or "/" in shard or "\\" in shard or shard in (".", ".."):
                raise ModelFormatError(f"{name}/{INDEX_NAME}: tensor {shown(tensor)} is in {shown(str(shard))}, not "
                                       "a file of the folder")
            if shard not in files:
                files.append(shard)
        for shard in files:
            if not (path / shard).is_file():
                raise ModelFormatError(f"{name}/{INDEX_NAME}: names the shard '{shard}', which is missing from the "
                                       "folder (an interrupted download?)")
    else:
        weight_map = None
        files = sorted(p.name for p in path.glob("*.safetensors"))
    if not files:
        pickles = [p for p in _PICKLES if (path / p).exists()]
        if pickles:
            raise ModelFormatError(f"{name}: the weights are only in {pickles[0]}, which loading would unpickle (run "
                                   "code from); convert reads safetensors. Save the model with "
                                   "save_pretrained(safe_serialization=True) first")
        raise ModelFormatError(f"{name}: no *.safetensors weights in the folder")
    tensors: dict[str, TensorEntry] = {}
    shards = []
    for shard in files:
        shard_path = path / shard
        shards.append(shard_path)
        entries, _ = read_header(shard_path)
        for key, entry in entries.items():
            if weight_map is not None and weight_map.get(key, shard) != shard:
                continue  # the index says another shard holds it (the copies it does not name are unused)
            if key in tensors:
                raise ModelFormatError(f"{name}: tensor {shown(key)} is in both {tensors[key].path.name} and "
                                       f"{shard}")
            tensors[key] = entry
    if weight_map is not None:
        missing = [k for k, shard in weight_map.items() if k not in tensors]
        if missing:
            raise ModelFormatError(f"{name}/{INDEX_NAME}: tensor {shown(missing[0])} is not in "
                                   f"'{weight_map[missing[0]]}', where the index puts it"
                                   + (f" ({len(missing)} tensors missing)" if len(missing) > 1 else ""))
    return ModelFolder(path=path, config=config, tensors=tensors, generation=generation, shards=shards)
