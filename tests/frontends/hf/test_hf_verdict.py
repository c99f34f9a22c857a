"""The verdict of a converted language model: what passes, what fails, what cannot be decided.

The rule (convert/parity/generation.py) on made-up logits first: identical tokens and logits pass;
a token that differs where the source's two candidates are far apart in its float64 run fails,
naming the step and both tokens; one at a float64 near tie is NOT VERIFIED from that step; logits
off by more than float32 rounding fail. Then on real conversions: a file with one weight changed by
1 % FAILs (generation) and the block-by-block check names that block alone; the block-by-block
regime passes a good file and says it is its own regime.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from _llm import NEW_TOKENS, ConvertedCache

pytest.importorskip("torch")
pytest.importorskip("transformers")

from convert import ir
from convert.parity.generation import _Arbiter, check_converted, judge_prompt

TOL = 1e-4


def _logits(steps: int = 4, batch: int = 1, vocab: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((steps, batch, vocab)).astype(np.float32) * 5


def _greedy(logits: np.ndarray) -> np.ndarray:
    return logits.argmax(-1).T.copy()


def test_identical_generation_passes() -> None:
    ref = _logits()
    row = judge_prompt("p", _greedy(ref), ref, _greedy(ref), ref + 1e-6, TOL, None)
    assert row.result == "PASS" and row.matched == 4 and row.first_diff is None


def test_a_token_that_differs_clearly_fails_naming_step_and_tokens() -> None:
    ref = _logits()
    got = ref.copy()
    top = int(ref[2, 0].argmax())
    other = int(np.argsort(ref[2, 0])[-3])  # the third candidate: far from the first
    got[2, 0, other] = ref[2, 0, top] + 1.0
    arbiter = _Arbiter(ref.astype(np.float64), "float64")
    row = judge_prompt("p", _greedy(ref), ref, _greedy(got), got, TOL, arbiter)
    assert row.result == "FAIL" and row.matched == 2
    assert row.first_diff == {"step": 2, "row": 0, "source_token": top, "our_token": other}


def test_a_first_difference_at_a_float64_near_tie_is_not_verified_from_that_step() -> None:
    ref = _logits()
    ref64 = ref.astype(np.float64)
    a, b = np.argsort(ref[1, 0])[-2:][::-1]
    ref64[1, 0, b] = ref64[1, 0, a] - 1e-7  # the two candidates 1e-7 apart in float64
    ref[1, 0, b] = np.float32(ref64[1, 0, a] - 1e-7)
    got = ref.copy()
    got[1, 0, b] = ref[1, 0, a] + 2e-7  # float32 rounding puts ours the other way
    got[1, 0, a] = ref[1, 0, a] - 1e-7
    row = judge_prompt("p", _greedy(ref), ref, _greedy(got), got, TOL, _Arbiter(ref64, "float64"))
    assert row.result == "NOT VERIFIED", row.note
    assert row.undecided_from == 1 and row.first_diff is not None and row.first_diff["step"] == 1
    assert "near tie" in row.note


def test_logits_off_by_more_than_rounding_fail_even_with_the_same_tokens() -> None:
    ref = _logits()
    got = ref * (1 + 1e-3)
    row = judge_prompt("p", _greedy(ref), ref, _greedy(got), got, TOL, _Arbiter(ref.astype(np.float64), "float64"))
    assert row.result == "FAIL" and row.first_diff is None


def test_logits_past_tol_within_float32_rounding_pass_by_the_float64_rule() -> None:
    ref64 = _logits().astype(np.float64)
    ref = (ref64 * (1 + 3e-4)).astype(np.float32)  # the source's own float32 run is 3e-4 off
    got = (ref64 * (1 - 3e-4)).astype(np.float32)  # ours as far on the other side: 6e-4 from the source
    row = judge_prompt("p", _greedy(ref), ref, _greedy(got), got, TOL, _Arbiter(ref64, "float64"))
    assert row.result == "PASS", row.note
    assert "float64" in row.note


@pytest.fixture(scope="module")
def llama(converted: ConvertedCache) -> tuple[Path, Path]:
    """The llama folder and its conversion, shared with test_hf_decoders.py (converted once)."""
    done = converted("llama")
    return done.folder, done.model


def _options(check_by: str) -> ir.Options:
    opts = ir.Options()
    opts.extra["check_by"] = check_by
    opts.extra["new_tokens"] = NEW_TOKENS
    return opts


def _damaged(good: Path, tmp_path: Path, weight: str) -> Path:
    """A copy of the converted folder with ``weight`` scaled by 1.01 in its external data."""
    out = Path(shutil.copytree(good.parent, tmp_path / "bad"))
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    tensor = next(t for t in model.graph.initializer if t.name == weight)
    info = {e.key: e.value for e in tensor.external_data}
    offset, length = int(info["offset"]), int(info["length"])
    with open(out / info["location"], "r+b") as fh:
        fh.seek(offset)
        values = np.frombuffer(fh.read(length), dtype=np.float32) * np.float32(1.01)
        fh.seek(offset)
        fh.write(values.tobytes())
    return out / "model.onnx"


def test_a_conversion_one_weight_off_fails_and_the_blocks_name_its_block(llama: tuple[Path, Path],
                                                                        tmp_path: Path) -> None:
    folder, good = llama
    bad = _damaged(good, tmp_path, "lm.model.layers.1.mlp.down_proj.weight")
    report = check_converted([folder], [bad], _options("generation"))
    assert report.verdict == "FAIL", report.table()
    blocks = check_converted([folder], [bad], _options("blocks"))
    results = {r.name: r.result for r in blocks.rows}
    assert results == {"embeddings": "PASS", "block 0": "PASS", "block 1": "FAIL", "head (norm, lm_head)": "PASS"}
    assert blocks.verdict == "FAIL"


def test_the_block_by_block_regime_passes_a_good_file_as_its_own_regime(llama: tuple[Path, Path]) -> None:
    folder, good = llama
    before = _resident()
    report = check_converted([folder], [good], _options("blocks"))
    assert report.regime == "blocks" and report.verdict == "PASS", report.table()
    assert [r.name for r in report.rows] == ["embeddings", "block 0", "block 1", "head (norm, lm_head)"]
    assert all(r.max_err < 1e-5 for r in report.rows)
    assert "not a check of generation" in report.table()
    # the check's peak over what this test process already held (earlier test files in one worker)
    assert report.peak_rss > 0 and report.peak_rss - before < 4 * 2**30, (report.peak_rss, before)


def _resident() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))


def test_convert_check_runs_the_generation_check(llama: tuple[Path, Path]) -> None:
    """``convert check FOLDER --against model.onnx`` judges a converted folder as the conversion did."""
    from click.testing import CliRunner

    from convert.cli import cli

    folder, good = llama
    result = CliRunner().invoke(cli, ["check", str(folder), "--against", str(good)])  # 16 tokens: no --new-tokens
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    assert "prompt 2 (left-padded)" in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("OK check hf:onnx")
    assert "greedy generation, 16 new tokens" in result.stdout


def test_convert_check_takes_the_generation_options(llama: tuple[Path, Path], tmp_path: Path) -> None:
    """``convert check FOLDER --against ... --new-tokens N --check-by blocks`` as ``convert hf:onnx`` takes
    them; given for another source, they are refused in one line."""
    from click.testing import CliRunner

    from convert.cli import cli

    folder, good = llama
    result = CliRunner().invoke(cli, ["check", str(folder), "--against", str(good), "--new-tokens", "3"])
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    assert "greedy generation, 3 new tokens" in result.stdout
    result = CliRunner().invoke(cli, ["check", str(folder), "--against", str(good), "--check-by", "blocks"])
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    assert "block 1" in result.stdout and "not a check of generation" in result.stdout
    result = CliRunner().invoke(cli, ["check", str(good), "--against", str(good), "--new-tokens", "3"])
    assert result.exit_code == 2 and result.stderr.strip().splitlines() == [
        "convert: error: --new-tokens applies to a language-model folder (hf), the generation check"], result.stderr
