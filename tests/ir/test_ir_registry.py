"""The generic registry: decorator registration, duplicates rejected, versioned lookup, missing()."""

from __future__ import annotations

import pytest

from convert.ir import Registry


def test_register_lookup_and_missing() -> None:
    reg: Registry = Registry("demo")

    @reg.register("Conv", "ConvTranspose")
    def conv() -> str:
        return "conv"

    @reg.register("Split", since=13)
    def split13() -> str:
        return "13"

    @reg.register("Split", since=18)
    def split18() -> str:
        return "18"

    assert reg.lookup("Conv") is conv and reg.lookup("ConvTranspose") is conv
    assert reg.lookup("Split", 17) is split13 and reg.lookup("Split", 21) is split18
    assert reg.lookup("Split", 12) is None and reg.lookup("Nope") is None
    assert reg.missing(["Conv", "A", "B", "A"]) == ["A", "B"]
    assert "Conv" in reg and len(reg) == 3
    assert reg.versions("Split") == [13, 18] and reg.versions("Conv") == [1] and reg.versions("Nope") == []


def test_duplicate_key_is_an_error() -> None:
    reg: Registry = Registry("demo")
    reg.register("Relu")(lambda: None)
    with pytest.raises(ValueError, match=r"'Relu' .* registered twice"):
        reg.register("Relu")(lambda: None)
