"""A module over 2 GiB (a few large Linear layers) to ONNX with external data, memory-checked."""

from __future__ import annotations

import itertools
import shutil
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from _torch_helpers import to_onnx

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.torch, pytest.mark.large,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")]

# Three 16384 x 12288 float32 layers: 2.25 GiB of weights.
IN, OUT, LAYERS = 16384, 12288, 3
# Anonymous memory the conversion may add on top of the loaded model.
MAX_EXTRA_MIB = 400


def _rss_anon_mib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no RssAnon")


class _Peak:
    """Sample RssAnon every few milliseconds in a thread; keep the maximum."""

    def __init__(self) -> None:
        self.peak = _rss_anon_mib()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss_anon_mib())
            time.sleep(0.005)

    def __enter__(self) -> _Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_anon_mib())


class _Big(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        dims = [IN] + [OUT if i % 2 == 0 else IN for i in range(LAYERS)]
        self.layers = torch.nn.Sequential(*[torch.nn.Linear(a, b, bias=False) for a, b in itertools.pairwise(dims)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def test_over_2gib_module_to_onnx_with_external_data(tmp_path: Path) -> None:
    if shutil.disk_usage(tmp_path).free < 8 * 2**30:
        pytest.skip("needs 8 GiB of free disk")
    import onnx

    from convert.frontends.pytorch import load_module

    with torch.no_grad():
        module = _Big().eval()
        for layer in module.layers:
            layer.weight.uniform_(-0.01, 0.01)
    total = sum(p.numel() * 4 for p in module.parameters())
    assert total > 2 * 2**30
    base = _rss_anon_mib()
    with _Peak() as peak:
        model = load_module(module, (torch.rand(1, IN),))
        out = to_onnx(model, tmp_path / "big.onnx")
    extra = peak.peak - base
    assert extra < MAX_EXTRA_MIB, f"conversion added {extra:.0f} MiB of anonymous memory"

    proto = onnx.load(str(out), load_external_data=False)
    assert out.stat().st_size < 1 << 20
    data_files = {e.value for t in proto.graph.initializer for e in t.external_data if e.key == "location"}
    assert len(data_files) == 1
    data = tmp_path / data_files.pop()
    assert data.stat().st_size >= total
    # Spot-check one weight against the module through a memory map of the data file.
    init = {t.name: t for t in proto.graph.initializer}
    tensor = init["layers.1.weight"]
    meta = {e.key: e.value for e in tensor.external_data}
    mapped = np.memmap(data, dtype=np.float32, mode="r", offset=int(meta["offset"]), shape=tuple(tensor.dims))
    expect = module.layers[1].weight.detach().numpy()
    np.testing.assert_array_equal(mapped[::997], expect[::997])
