"""Mutation fuzzing of every input format through the CLI (hypothesis draws the mutations).

Each seed under ``tests/fuzz/seeds/`` (a small valid model per input form; ``make_seeds.py``
regenerates them) gets ``CONVERT_FUZZ_EXAMPLES`` mutated cases (default 20): one or two
mutations of its files (bit flips, truncation, huge integers and varints, spliced ranges,
non-UTF-8/NUL bytes in names, structure-aware protobuf field deletion and odd values, text
numbers and lines, JSON keys, types and deep nesting, zip members of a .pt). Every case runs
``convert ROUTE FILES -o OUT/ --no-check -q`` in a forked child (see ``harness.py``) and must end
as a success or a clean error (exit 2, one line, nothing written); a crash or a hang fails the
test, which names the stored case.

CI runs the default budget with a fixed derandomized sequence (about a minute on 2 cores).
A longer, random campaign that also stores every crashing input under ``tests/fuzz/crashes/``
(replayed by ``test_crash_corpus.py``) and prints the counts is one command::

    CONVERT_FUZZ_EXAMPLES=500 CONVERT_FUZZ_RANDOM=1 CONVERT_FUZZ_SAVE=1 \
        python -m pytest tests/fuzz/test_fuzz.py -s -p no:cacheprovider

Counts before and after the fixes of #11, the crash classes found and their tests: docs/fuzzing.md.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from pathlib import Path

import pytest
from harness import CRASHES_DIR, Case, Outcome, Seed, load_seeds, mutate, mutators_for, preload, run_case, save_case
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("CONVERT_FUZZ_EXAMPLES", "20"))
RANDOM = bool(os.environ.get("CONVERT_FUZZ_RANDOM"))
SAVE = bool(os.environ.get("CONVERT_FUZZ_SAVE"))
STATS = os.environ.get("CONVERT_FUZZ_STATS")  # a JSON file the counts are added to

SEEDS = load_seeds()


def _available(seed: Seed) -> bool:
    src = seed.route.partition(":")[0]
    try:
        if src == "pytorch":
            import torch  # noqa: F401
        if seed.route.endswith(":caffe") or src == "caffe":
            import google.protobuf  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module", autouse=True)
def _preloaded() -> None:
    preload([s for s in SEEDS if _available(s)])


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS, ids=[s.name for s in SEEDS])
def test_mutated_inputs_fail_cleanly(seed: Seed, tmp_path: Path) -> None:
    if not _available(seed):
        pytest.skip(f"{seed.route.partition(':')[0]} is not installed")
    tally: Counter[str] = Counter()
    bad: list[tuple[Outcome, Path | None]] = []
    names = sorted(seed.read())
    store = CRASHES_DIR if SAVE else tmp_path / "crashes"

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=not RANDOM, database=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(st.data())
    def one(data: st.DataObject) -> None:
        case = Case(seed, seed.read())
        for _ in range(data.draw(st.integers(1, 2), label="mutations")):
            file = data.draw(st.sampled_from(names), label="file")
            mutator = data.draw(st.sampled_from(mutators_for(file)), label="mutator")
            rnd = random.Random(data.draw(st.integers(0, 2**32 - 1), label="rng"))
            mutate(case, file, mutator, rnd)
        outcome = run_case(case, tmp_path / "work")
        tally[outcome.kind] += 1
        if outcome.kind in ("crash", "hang"):
            bad.append((outcome, save_case(case, outcome, store)))

    one()
    total = sum(tally.values())
    print(f"\nfuzz {seed.name}: {total} cases, {tally['success']} success, {tally['clean']} clean errors, "
          f"{tally['crash']} crashes, {tally['hang']} hangs")
    if STATS:
        path = Path(STATS)
        stats = json.loads(path.read_text()) if path.exists() else {}
        stats[seed.name] = {"cases": total, **{k: tally[k] for k in ("success", "clean", "crash", "hang")},
                            "bad": [f"{p.name if p else '-'}: {o.kind}: {o.why}" for o, p in bad]}
        path.write_text(json.dumps(stats, indent=1) + "\n")
    assert not bad, "\n".join(f"{o.kind} ({o.why}) -> {p}" for o, p in bad[:10])
