"""Ctrl-C during a conversion leaves nothing at the output path."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_interrupt_leaves_nothing_behind(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "models"))
    import large_onnx

    src = large_onnx.build(tmp_path / "src", n=8192, layers=4)  # 1 GiB, sparse
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "convert", "onnx:onnx", str(src), "-o", str(out_dir / "m.onnx"),
         "--external-data", "--no-check"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    # wait until the writer has started (its temporary folder appears), then interrupt
    deadline = time.time() + 60
    while time.time() < deadline and not any(out_dir.iterdir()) and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the conversion finished before the interrupt arrived")
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert list(out_dir.iterdir()) == []
