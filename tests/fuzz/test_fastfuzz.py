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


# ---- the round-three structural mutators (#48): each does to its input what it says
def test_zip_structure_mutations_are_what_they_claim() -> None:
    import io
    import random
    import zipfile

    import harness

    seed = {s.name: s for s in load_seeds(campaign=True)}["pytorch_pt2"]
    data = seed.read()["m.pt2"]
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    seen: set[str] = set()
    for i in range(200):
        out = harness.zip_structure(data, "m.pt2", random.Random(i))
        assert out != data
        try:
            got = zipfile.ZipFile(io.BytesIO(out)).namelist()
        except zipfile.BadZipFile:
            continue
        if len(got) > len(set(got)):
            seen.add("duplicate")
        if len({n.lower() for n in got}) < len(set(got)):
            seen.add("case")
        if any(n.startswith("other/") for n in got):
            seen.add("root")
        if sorted(got) == sorted(names) and got != names:
            seen.add("reorder")
        if out[:4] != b"PK\x03\x04":
            seen.add("prefix")
    assert seen == {"duplicate", "case", "root", "reorder", "prefix"}


def _reaches(edges: dict[int, set[int]], a: int, b: int, stack: tuple[int, ...] = ()) -> bool:
    return b in edges[a] or any(_reaches(edges, c, b, (*stack, a)) for c in edges[a] if c not in stack)


def test_proto_swap_and_graph_cycle_change_onnx_structure() -> None:
    import random

    import harness
    import onnx

    seed = {s.name: s for s in load_seeds(campaign=True)}["onnx"]
    data = seed.read()["m.onnx"]
    changed = sum(harness.proto_swap(data, "m.onnx", random.Random(i)) != data for i in range(50))
    assert changed >= 35  # a swap of a field with itself, a renumbering to its own number: unchanged
    cyclic = 0
    for i in range(20):
        model = onnx.load_from_string(harness.graph_cycle(data, "m.onnx", random.Random(i)))
        produced = {o: n for n, node in enumerate(model.graph.node) for o in node.output}
        # a cycle: some node reads a value produced by itself or by a node that (transitively) reads it
        edges = {n: {produced[i] for i in node.input if i in produced} for n, node in enumerate(model.graph.node)}

        cyclic += any(_reaches(edges, n, n) for n in edges)
    assert cyclic >= 15
