"""Ctrl-C and SIGTERM at each phase of a conversion (#29 item 3): the message says what is on disk.

The signal is sent at a controlled point, not after a sleep: the command's test hook
``CONVERT_TEST_SIGNAL=PHASE:SIGNAL`` (convert/_signals.py) for start-up, reading, writing, the
summary and the exit; for the moments inside the API (the rename into place, the parity check) a
wrapper around ``os.replace`` or ``run_parity`` sends it. The matrix:

| phase | on disk | message | status |
|---|---|---|---|
| start-up | nothing | interrupted/terminated while starting; nothing was written | 130/143 |
| read, write | nothing, no .tmp | ...; nothing was left at the output path | 130/143 |
| rename (output in place) | the output | after writing the output: ... kept, but it was NOT checked | 130/143 |
| check (even as BufferError) | the output | ... kept, but it was NOT checked | 130/143 |
| summary | the output | while printing the result: ... written and checked (parity PASS) | 130/143 |
| exit (after the last line) | the output | the summary; the signal changes nothing | 0 |
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import models_onnx
import onnx
import pytest

ROOT = Path(__file__).resolve().parents[1]
WORD = {"SIGINT": ("interrupted", 130), "SIGTERM": ("terminated", 143)}

# Sends the signal right after the output is renamed into place (os.replace onto it), or from inside
# the parity check as a clean-up error that the interrupt caused (BufferError, as a memory map closed
# while a view of it is alive raises), then runs the command as the console script does.
_WRAPPER = """
import os, signal, sys, time
where, sig, target = sys.argv[1], getattr(signal, sys.argv[2]), sys.argv[3]
del sys.argv[1:4]
if where == "rename":
    real = os.replace
    def replace(src, dst, *args, **kwargs):
        real(src, dst, *args, **kwargs)
        if os.fspath(dst) == target:
            os.kill(os.getpid(), sig)
            time.sleep(5)
    os.replace = replace
else:
    import convert.parity
    def run_parity(*args, **kwargs):
        try:
            os.kill(os.getpid(), sig)
            time.sleep(5)
        finally:
            raise BufferError("cannot close exported pointers exist")
    convert.parity.run_parity = run_parity  # the API imports the check where it runs it
from convert.cli import main
main(sys.argv[1:])
"""


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "m.onnx"
    onnx.save(models_onnx.conv_net(), str(path))
    return path


def _convert(tmp_path: Path, phase: str, sig: str, *extra: str) -> subprocess.CompletedProcess[str]:
    args = ["onnx:onnx", "m.onnx", "-o", "out/o.onnx", *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if phase in ("rename", "check"):
        cmd = [sys.executable, "-c", _WRAPPER, phase, sig, "out/o.onnx", *args]
    else:
        cmd = [sys.executable, "-m", "convert", *args]
        env["CONVERT_TEST_SIGNAL"] = f"{phase}:{sig}"
    (tmp_path / "out").mkdir()
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)


def _errors(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("convert: error:")]


@pytest.mark.parametrize(("phase", "sig"), [("start-up", "SIGTERM"), ("read", "SIGINT"), ("write", "SIGTERM")])
def test_before_the_output_is_in_place_nothing_is_left(tmp_path: Path, model: Path, phase: str, sig: str) -> None:
    r = _convert(tmp_path, phase, sig)
    word, code = WORD[sig]
    assert r.returncode == code, r.stderr
    expected = (f"convert: error: {word} while starting; nothing was written" if phase == "start-up" else
                f"convert: error: {word}; nothing was left at the output path")
    assert _errors(r.stderr) == [expected] and "Traceback" not in r.stderr, r.stderr
    assert list((tmp_path / "out").iterdir()) == []  # no output, no .tmp


@pytest.mark.parametrize(("phase", "sig"), [("rename", "SIGINT"), ("check", "SIGINT"), ("check", "SIGTERM")])
def test_once_the_output_is_in_place_it_is_kept_and_said_unchecked(tmp_path: Path, model: Path, phase: str,
                                                                    sig: str) -> None:
    r = _convert(tmp_path, phase, sig)
    word, code = WORD[sig]
    assert r.returncode == code, r.stderr
    errors = _errors(r.stderr)
    assert len(errors) == 1 and "Traceback" not in r.stderr and "BufferError" not in r.stderr, r.stderr
    assert errors[0].startswith(f"convert: error: {word} after writing the output: the output was written and is "
                                "kept, but it was NOT checked: out/o.onnx"), errors[0]
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["o.onnx"]  # kept, and no .tmp beside it


def test_a_signal_while_the_result_is_printed_says_it_was_checked(tmp_path: Path, model: Path) -> None:
    r = _convert(tmp_path, "summary", "SIGINT")
    assert r.returncode == 130, r.stderr
    assert _errors(r.stderr) == ["convert: error: interrupted while printing the result: out/o.onnx was written and "
                                 "checked (parity PASS)"], r.stderr
    assert "PASS" in r.stdout and [p.name for p in (tmp_path / "out").iterdir()] == ["o.onnx"]


def test_a_signal_after_the_last_line_changes_nothing(tmp_path: Path, model: Path) -> None:
    r = _convert(tmp_path, "exit", "SIGTERM", "--no-check")
    assert r.returncode == 0 and _errors(r.stderr) == [], r.stderr
    assert r.stdout.startswith("OK onnx:onnx") and (tmp_path / "out" / "o.onnx").is_file()
