"""A >2 GiB model converted through the IR with streamed external data, in bounded memory."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
RSS_LIMIT = 300 * 1024**2


@pytest.mark.large
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RssAnon is Linux-only")
def test_over_2gib_streams_in_bounded_memory(tmp_path: Path) -> None:
    if shutil.disk_usage(tmp_path).free < 8 * 1024**3:
        pytest.skip("needs 8 GiB of free disk")
    sys.path.insert(0, str(ROOT / "models"))
    import large_onnx

    src = large_onnx.build(tmp_path / "src", n=14336, layers=3)  # 3 x 784 MiB = 2.30 GiB
    out = tmp_path / "out" / "large.onnx"
    out.parent.mkdir()
    # Convert in a fresh process so that its RssAnon belongs to the conversion alone.
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / 'tests')!r})
        import convert, rss
        with rss.PeakRssAnon() as peak:
            convert.convert({str(src)!r}, to="onnx", out={str(out)!r}, check=False)
        print("PEAK", peak.peak)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    peak = int(r.stdout.split("PEAK")[1])
    print(f"peak RssAnon during conversion: {peak / 1024**2:.1f} MiB")
    assert peak < RSS_LIMIT
    data = out.parent / "large.onnx.data"
    assert data.exists() and data.stat().st_size == 3 * 14336 * 14336 * 4
    assert out.stat().st_size < 1024**2  # the proto itself stays small

    import onnx
    import onnxruntime as ort

    onnx.checker.check_model(str(out))
    x = np.random.default_rng(0).standard_normal((1, 14336)).astype(np.float32)
    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert float(np.abs(ref).max()) > 0.1
    assert float(np.abs(got - ref).max()) / float(np.abs(ref).max()) <= 1e-6
