"""Helpers of the hf route's tests: the decoder folders of models/llm/decoders.py, loaded once."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: it reads this once
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[3]


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
