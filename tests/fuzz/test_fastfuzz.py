"""The fuzz classifiers: exit 3 is a failure like a traceback (#29), and the in-process fast mode
(``fastfuzz.py``) tells success, clean errors, internal errors, hangs, blow-ups and leftovers apart."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import fastfuzz
import pytest
from harness import _classify, load_seeds

from convert.ir import ModelFormatError


def test_exit_3_is_a_crash_like_a_traceback(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    bug = ("convert: error: internal error: ValueError: x\nconvert: error: this is a bug in convert, not a problem "
           "with your model: please report it\n")
    assert _classify(3, bug, out).kind == "crash"
    assert _classify(3, bug, out).why.startswith("exit 3")
    assert _classify(2, "convert: error: m.onnx: bad\n", out).kind == "clean"
    assert _classify(2, "Traceback (most recent call last):\nconvert: error: x\n", out).kind == "crash"
    (out / "m.onnx").write_bytes(b"x")
    assert _classify(2, "convert: error: m.onnx: bad\n", out).kind == "crash"  # exit 2 but left a file


def _raising(exc: BaseException | None = None, *, write: bool = False, sleep: float = 0.0):  # type: ignore[no-untyped-def]
    def fake(paths: object, *, out: str, **kw: object) -> None:
        if write:
            Path(out, "half.onnx").write_bytes(b"x")
        if sleep:
            time.sleep(sleep)
        if exc is not None:
            raise exc

    return fake


@pytest.mark.parametrize(("fake", "kind"), [
    (_raising(), "success"),
    (_raising(ModelFormatError("m.onnx: bad")), "clean"),
    (_raising(ValueError("boom")), "internal"),
    (_raising(MemoryError()), "blowup"),
    (_raising(ModelFormatError("m.onnx: bad"), write=True), "leftover"),
    (_raising(sleep=5), "hang"),
], ids=["success", "clean", "internal", "blowup", "leftover", "hang"])
def test_in_process_outcomes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: object, kind: str) -> None:
    from convert import api

    monkeypatch.setattr(api, "convert", fake)
    old = signal.signal(signal.SIGALRM, fastfuzz._on_alarm)
    try:
        result = fastfuzz.run_one("onnx:onnx", [str(tmp_path / "m.onnx")], tmp_path / "out", 0.5)
    finally:
        signal.signal(signal.SIGALRM, old)
    assert result["kind"] == kind, result
    if kind == "internal":
        assert str(result["sig"]).startswith("ValueError ") and "boom" in str(result["why"])


def test_a_short_campaign_runs_every_case_once() -> None:
    """Two workers, 40 numbered cases of the Darknet seed: every case answered, none failing."""
    seed = next(s for s in load_seeds() if s.name == "darknet")
    row = fastfuzz.campaign_for(seed, cases=40, minutes=2, workers=2, campaign=1, limit=10, save=False, log=False)
    assert row["cases"] == 40
    assert row["success"] + row["clean"] == 40, row["classes"]
    again = fastfuzz.make_case(seed, seed.read(), 1, 7)
    assert again.contents == fastfuzz.make_case(seed, seed.read(), 1, 7).contents  # a case is its number
