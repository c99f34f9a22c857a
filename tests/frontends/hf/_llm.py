"""Helpers of the hf route's tests: the decoder folders of models/llm/decoders.py, loaded once."""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: it reads this once
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[3]

#: Tokens the tests' generation checks make from each prompt (the route's default is 16): the prompts
#: have 7, 9 and 5 real tokens, so 8 more take every sequence past the configs' sliding window of 8.
NEW_TOKENS = 8


def decoders() -> ModuleType:
    """Return models/llm/decoders.py as a module."""
    name = "llm_test_decoders"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "models" / "llm" / "decoders.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@dataclass
class Converted:
    """A model folder of ``models/llm/decoders.py`` and its conversion, checked as the CLI checks it."""

    folder: Path
    out: Path
    result: object

    @property
    def model(self) -> Path:
        return self.out / "model.onnx"


class ConvertedCache:
    """Each architecture's 2-layer folder, written and converted once."""

    def __init__(self, tmp: pytest.TempPathFactory) -> None:
        self.tmp = tmp
        self.done: dict[str, Converted] = {}

    def __call__(self, arch: str) -> Converted:
        """Return ``arch``'s folder converted to ONNX with its check (greedy generation of NEW_TOKENS)."""
        import convert

        if arch not in self.done:
            tmp = self.tmp.mktemp(arch)
            folder = decoders().write_folder(arch, tmp / arch)
            out = tmp / f"{arch}-onnx"
            result = convert.convert(folder, to="onnx", out=out, new_tokens=NEW_TOKENS)
            self.done[arch] = Converted(folder, out, result)
        return self.done[arch]
