"""Hostile PyTorch archives: pickles that run code, archive bombs, corrupt files (one line, exit 2)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")


class _RunsAShellCommand:
    """A pickle payload that would create a file if anything unpickled it with the full unpickler."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def _pt2(tmp_path: Path) -> Path:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
    program = torch.export.export(model, (torch.randn(1, 3, 8, 8),))
    path = tmp_path / "m.pt2"
    torch.export.save(program, path)
    return path


def _convert(src: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convert", "pytorch:onnx", str(src), "-o", str(out), *extra],
                          capture_output=True, text=True, timeout=300)


def test_pt2_with_a_code_running_pickle_is_refused(tmp_path: Path) -> None:
    good = _pt2(tmp_path)
    marker = tmp_path / "PWNED"
    evil = tmp_path / "evil.pt2"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(evil, "w") as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename.endswith("/data/sample_inputs/model.pt"):
                buf = io.BytesIO()
                torch.save(_RunsAShellCommand(marker), buf)
                data = buf.getvalue()
            dst.writestr(info, data)
    result = _convert(evil, tmp_path / "o.onnx")
    assert result.returncode == 2, result.stderr
    assert "--trust-pickle" in result.stderr and "Traceback" not in result.stderr
    assert not marker.exists(), "the payload ran"
    assert not (tmp_path / "o.onnx").exists()
    assert _convert(good, tmp_path / "ok.onnx").returncode == 0


def test_archive_bomb_is_refused_in_one_line(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.pt"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        zf.writestr("m/code/__torch__.py", "")
        zf.writestr("m/constants.pkl", b"")
        zf.writestr("m/traced_inputs.pkl", bytes(300 * 2**20))  # 300 MiB of zeros, ~300 KiB packed
    assert bomb.stat().st_size < 2 * 2**20
    result = _convert(bomb, tmp_path / "o.onnx")
    assert result.returncode == 2, result.stderr
    assert "archive bomb" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("cut", [0.3, 0.7], ids=["cut-30%", "cut-70%"])
def test_truncated_pt2_is_one_line(tmp_path: Path, cut: float) -> None:
    data = _pt2(tmp_path).read_bytes()
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(data[: int(len(data) * cut)])
    result = _convert(bad, tmp_path / "o.onnx")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and len([ln for ln in result.stderr.splitlines() if ln.strip()]) <= 2
