"""Random ops (``ops/random.py``): rand, randn, randperm and their _like forms.

No seed makes ONNX Runtime draw torch's numbers, so the converted draws are checked by their
distribution (moments and bounds, with margins of several standard errors over 24,576 draws), and
the parity check is checked to call an output computed from them NOT VERIFIED, never PASS, while
the model's deterministic outputs still PASS.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _torch_helpers import ROOT, to_onnx  # noqa: E402

from convert.frontends.pytorch import load_module  # noqa: E402
from convert.ir import Options  # noqa: E402

pytestmark = pytest.mark.torch

SHAPE = (2, 3, 64, 64)  # 24,576 draws: the standard error of a mean of N(0, 1) draws is 0.0064


class Sampler(torch.nn.Module):
    """A VAE's reparameterisation, a static uniform draw, a permutation, and a deterministic output."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 3, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        mu = self.conv(x)
        z = mu + torch.randn_like(mu) * 0.5
        u = torch.rand(SHAPE)
        return z, u, torch.randperm(100), torch.randn(4, 5, dtype=torch.float64), mu * 2


def test_draws_have_torchs_distributions(tmp_path: Path) -> None:
    net = Sampler().eval()
    x = torch.randn(SHAPE, generator=torch.Generator().manual_seed(0))
    options = Options()
    model = load_module(net, (x,), options)
    assert sum("draws random numbers" in n for n in options.diagnostics.notes) == 4
    ops = {n.op_type for n in model.graph}
    assert {"RandomNormalLike", "RandomUniform", "RandomNormal", "TopK"} <= ops, ops
    path = to_onnx(model, tmp_path / "sampler.onnx")
    with torch.no_grad():
        mu = net.conv(x).numpy()
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    first = session.run(None, {"x": x.numpy()})
    second = session.run(None, {"x": x.numpy()})
    z, u, perm, small, det = first
    noise = (z - mu) / 0.5
    assert abs(noise.mean()) < 0.03 and abs(noise.std() - 1) < 0.03, (noise.mean(), noise.std())
    assert u.dtype == np.float32 and u.shape == SHAPE and u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.std() - 12 ** -0.5) < 0.01
    assert perm.dtype == np.int64 and sorted(perm.tolist()) == list(range(100))
    assert small.dtype == np.float64 and small.shape == (4, 5)
    # each run of a session draws afresh (a new session repeats its first session's sequence: ORT's own seeding)
    assert not np.array_equal(first[0], second[0]) and not np.array_equal(first[2], second[2])
    assert np.abs(det - 2 * mu).max() <= 1e-5 * np.abs(mu).max()


def test_parity_calls_random_outputs_not_verified(tmp_path: Path) -> None:
    """Through the CLI: the random outputs are NOT VERIFIED (shape only), the deterministic one
    PASS, the run is not a PASS (exit 1), and --locate is not run for the random outputs."""
    net = Sampler().eval()
    program = torch.export.export(net, (torch.randn(SHAPE),))
    torch.export.save(program, str(tmp_path / "sampler.pt2"))
    report = tmp_path / "report.json"
    r = subprocess.run([sys.executable, "-m", "convert", "pytorch->onnx", str(tmp_path / "sampler.pt2"),
                        "-o", str(tmp_path / "s.onnx"), "--report", str(report)],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr
    data = json.loads(report.read_text())
    verdicts = [o["verdict"] for o in data["parity"]["outputs"]] if "parity" in data else \
        [o["verdict"] for o in data["outputs"]]
    assert verdicts == ["NOT VERIFIED"] * 4 + ["PASS"], verdicts
    assert "draws random numbers (RandomNormalLike" in r.stdout and "locate:" not in r.stdout
    assert "depend on random draws" in r.stdout


def test_random_ops_are_not_folded_into_constants() -> None:
    """torch.rand of a constant shape has no input: folding it would freeze one draw into the file."""

    class Noise(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.rand(3, 4)

    model = load_module(Noise().eval(), (torch.randn(3, 4),), Options())
    assert "RandomUniform" in {n.op_type for n in model.graph}
    assert not [v for v in model.graph.initializers.values() if v.shape is not None and tuple(v.shape) == (3, 4)]
