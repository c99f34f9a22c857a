"""Fixtures of the hf route's tests."""

from __future__ import annotations

import pytest
from _llm import ConvertedCache


@pytest.fixture(scope="session")
def converted(tmp_path_factory: pytest.TempPathFactory) -> ConvertedCache:
    """``converted(arch)``: the architecture's folder and its checked conversion, made once per session
    and shared by the tests that read it (a conversion is a torch.export capture: 5-20 s)."""
    return ConvertedCache(tmp_path_factory)
