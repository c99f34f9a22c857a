"""Replay every input that ever crashed or hung the CLI (``tests/fuzz/crashes/``).

Each folder holds the mutated model files and ``case.json`` (route, files, the mutation steps and
what it did when found). Every one must now end as a success or a clean error: exit 2 with one
line naming the problem, and nothing written. A case whose ``case.json`` has a ``known`` entry is a
crash in a third-party library that convert cannot turn into an error in-process (a segfault in
torch's C++ loader); it is reported as an expected failure with that reason. Cases found by ``fastfuzz.py`` carry a
``found_by`` entry (campaign and case number).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness import CRASHES_DIR, TIMEOUT_S, Case, Seed, preload, run_case

CASES = sorted(p.parent for p in CRASHES_DIR.glob("*/case.json"))


def _case(folder: Path) -> Case:
    meta = json.loads((folder / "case.json").read_text())
    seed = Seed(folder.name, folder, meta["route"], tuple(meta["files"]))
    return Case(seed, seed.read(), list(meta.get("steps", [])))


def _known(folder: Path) -> bool:
    return bool(json.loads((folder / "case.json").read_text()).get("known"))


@pytest.fixture(scope="module", autouse=True)
def _preloaded() -> None:
    preload([_case(f).seed for f in CASES if not _known(f)])  # known ones are not run: no TensorFlow import


@pytest.mark.parametrize("folder", CASES, ids=[p.name for p in CASES])
def test_crash_input_now_fails_cleanly(folder: Path, tmp_path: Path) -> None:
    meta = json.loads((folder / "case.json").read_text())
    if meta["route"].startswith("pytorch"):
        pytest.importorskip("torch")
    if meta.get("known"):
        pytest.xfail(meta["known"])
    # a replay is judged on its outcome, not on the campaign's 20 s: a TensorFlow case beside another test
    # process on two cores took longer (a real hang still shows at 120 s)
    outcome = run_case(_case(folder), tmp_path / "work", timeout=max(TIMEOUT_S, 120.0))
    assert outcome.kind in ("success", "clean"), (
        f"{folder.name} (found as {meta.get('found')}) now: {outcome.kind} {outcome.why}\n{outcome.stderr[-2000:]}"
    )
