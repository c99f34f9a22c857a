"""A framework that cannot start under the machine's address-space limit is the machine's limit, said
in one line, exit 2 (#48 item 4, found by the round-three fuzz campaign).

Under ``ulimit -v``, ``import torch`` fails to map its libraries ("failed to map segment from shared
object", an ImportError: it was exit 3, an internal error); ``import tensorflow`` failed the same way
and was said to be "not installed"; and with the import done but little address space left, TensorFlow
aborted the process (SIGABRT, exit 134, no message). The limits here are real: ``RLIMIT_AS`` in the child.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT / "tests" / "fuzz" / "seeds"
GIB = 1 << 30


def _convert_limited(route: str, args: list[str], limit: int, cwd: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "convert", route, *args, "-o", str(tmp / "out") + "/",
                           "--no-check", "-q"], cwd=cwd, capture_output=True, text=True, timeout=600,
                          preexec_fn=apply, env=env)


def _one_limit_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = [line for line in result.stderr.splitlines() if line.startswith("convert: error:")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "ulimit -v" in lines[0] and "not a bug in convert" in lines[0], lines[0]
    return lines[0]


@pytest.mark.torch
def test_torch_that_cannot_map_its_libraries_is_the_machines_limit(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    result = _convert_limited("pytorch:onnx", ["m.pt"], GIB, SEEDS / "pytorch", tmp_path)
    assert "failed to map segment" in _one_limit_line(result)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.tensorflow
@pytest.mark.parametrize(("limit", "said"), [(int(0.75 * GIB), "failed to map segment"),
                                             (int(1.6 * GIB), "aborts the process")],
                         ids=["import-fails", "too-little-left"])
def test_tensorflow_under_an_address_space_limit_is_one_line(tmp_path: Path, limit: int, said: str) -> None:
    pytest.importorskip("tensorflow")
    result = _convert_limited("tensorflow:onnx", ["."], limit, SEEDS / "tensorflow", tmp_path)
    line = _one_limit_line(result)
    # on a machine whose import maps more, 1.6 GiB fails at the import: one line all the same
    assert said in line or "failed to map segment" in line, line
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
