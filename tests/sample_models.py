"""The sample-model scripts under models/pytorch, imported once each under a fixed module name
(pickled modules and the tests that share them find them by that name)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path) -> object:
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def nets() -> object:
    """models/pytorch/nets.py as module 'pytorch_test_nets'."""
    return _load("pytorch_test_nets", ROOT / "models" / "pytorch" / "nets.py")


def vision_zoo() -> object:
    """models/pytorch/vision_zoo.py as module 'pytorch_test_vision_zoo'."""
    return _load("pytorch_test_vision_zoo", ROOT / "models" / "pytorch" / "vision_zoo.py")
