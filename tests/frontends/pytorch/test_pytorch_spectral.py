"""FFT and complex tensors (``ops/spectral.py``) against eager PyTorch, run in ONNX Runtime.

The reference is torch's own FFT (pocketfft) on the same inputs; every case runs two inputs and
each norm torch offers, on even and odd signal lengths (the mirrored half of ``irfft`` differs).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _torch_helpers import rel_to_scale, run_onnx, to_onnx  # noqa: E402

from convert.frontends.pytorch import load_module  # noqa: E402
from convert.ir import Options, UnsupportedOpsError  # noqa: E402
from convert.ir.errors import ConversionError  # noqa: E402

pytestmark = pytest.mark.torch

# FFTs of a few dozen points in float32: the sums round at about 1e-6 of the output's scale
FFT_REL = 1e-5


class SpectralBlock(torch.nn.Module):
    """LaMa's Fourier unit: rfftn, a 1x1 conv on the stacked real and imaginary parts, irfftn."""

    def __init__(self, channels: int, norm: str) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(2 * channels, 2 * channels, 1)
        self.norm = norm

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n, c, h, w = x.shape
        f = torch.fft.rfftn(x, dim=(-2, -1), norm=self.norm)
        f = torch.stack((f.real, f.imag), dim=-1).permute(0, 1, 4, 2, 3).reshape(n, 2 * c, h, f.shape[-1])
        f = torch.relu(self.conv(f)).reshape(n, c, 2, h, -1).permute(0, 1, 3, 4, 2).contiguous()
        y = torch.fft.irfftn(torch.complex(f[..., 0], f[..., 1]), s=(h, w), dim=(-2, -1), norm=self.norm)
        spectrum = torch.fft.rfft(x, norm=self.norm).abs()
        full = torch.view_as_real(torch.fft.fft(x, dim=2, norm=self.norm))
        back = torch.fft.ifftn(torch.fft.fftn(x, dim=(1, 2), norm=self.norm), dim=(1, 2), norm=self.norm).real
        return y, spectrum, full, back


class SpectralFilter(torch.nn.Module):
    """A learned complex filter on the spectrum (FNO/GFNet style): complex * complex, + real, - complex."""

    def __init__(self, h: int, w: int) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(3)
        self.weight = torch.nn.Parameter(torch.randn(h, w // 2 + 1, dtype=torch.complex64, generator=gen))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = torch.fft.rfft2(x, norm="ortho")
        g = f * self.weight + 0.5 * f - f * 2.0 + x.mean() - torch.fft.rfft2(x * x, norm="ortho")
        return torch.fft.irfft2(g, s=x.shape[-2:], norm="ortho")


def _convert(net: torch.nn.Module, shape: tuple[int, ...], path: Path, opset: int | None = None) -> Path:
    from convert.exporters.onnx import EXPORTER
    from convert.ir import passes

    example = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    model = load_module(net, (example,), Options())
    if opset is None:
        return to_onnx(model, path)
    passes.standard_pipeline(validate=True)(model)  # type: ignore[arg-type]
    EXPORTER.save(model, path, Options(opset=opset))  # type: ignore[arg-type]
    return path


def _check(net: torch.nn.Module, path: Path, shape: tuple[int, ...]) -> None:
    for seed in (1, 2):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            refs = net(x)
        refs = refs if isinstance(refs, tuple) else (refs,)
        ours = run_onnx(path, {"x": x.numpy()})
        assert len(ours) == len(refs)
        for i, (a, r) in enumerate(zip(ours, refs, strict=True)):
            assert a.shape == tuple(r.shape), f"output {i}"
            err = rel_to_scale(a, r.numpy())
            assert err <= FFT_REL, f"output {i}: {err:.2e}"


@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
@pytest.mark.parametrize("hw", [(4, 8), (5, 7)])
def test_fourier_unit_matches_eager(norm: str, hw: tuple[int, int], tmp_path: Path) -> None:
    net = SpectralBlock(3, norm).eval()
    shape = (1, 3, *hw)
    _check(net, _convert(net, shape, tmp_path / "fu.onnx"), shape)


@pytest.mark.parametrize("opset", [17, 20])
def test_complex_filter_matches_eager(opset: int, tmp_path: Path) -> None:
    """A complex parameter, complex arithmetic, and DFT written at opset 17 (axis attribute) and 20 (input)."""
    import onnx

    net = SpectralFilter(6, 9).eval()
    shape = (2, 3, 6, 9)
    path = _convert(net, shape, tmp_path / "filter.onnx", opset=opset)
    dft = [n for n in onnx.load(str(path)).graph.node if n.op_type == "DFT"]
    assert dft and all((len(n.input) == 3) == (opset >= 20) for n in dft)
    _check(net, path, shape)


def test_irfft_ignores_imaginary_dc_and_nyquist(tmp_path: Path) -> None:
    """torch's irfft drops the imaginary parts of bins 0 and n/2, which a Hermitian spectrum lacks."""

    class Net(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.fft.irfft(torch.view_as_complex(x), n=8)

    net = Net().eval()
    shape = (3, 5, 2)  # 5 bins of a length-8 signal, real and imaginary parts all random
    _check(net, _convert(net, shape, tmp_path / "irfft.onnx"), shape)
    # the formula, written independently: y[t] = (1/n) * sum_k w_k * Re(X_k e^{2 pi i k t / n})
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    spectrum = x[..., 0] + 1j * x[..., 1]
    t = np.arange(8)
    weights = np.array([1, 2, 2, 2, 1])
    formula = np.einsum("k,bk,kt->bt", weights, spectrum, np.exp(2j * np.pi * np.outer(np.arange(5), t) / 8)).real / 8
    (ours,) = run_onnx(tmp_path / "irfft.onnx", {"x": x})
    assert rel_to_scale(ours, formula) <= FFT_REL


def test_complex_output_is_refused_in_one_line() -> None:
    class Net(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.fft.rfft(x)

    with pytest.raises(ConversionError, match=r"complex tensor.*view_as_real"):
        load_module(Net().eval(), (torch.randn(2, 8),), Options())


def test_ops_on_complex_tensors_are_listed() -> None:
    """An op whose complex form is not written is reported, not run on the [..., 2] pairs as data."""

    class Net(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            f = torch.fft.rfft(x)
            return torch.view_as_real(f.exp() + f.sum(dim=0, keepdim=True))

    with pytest.raises(UnsupportedOpsError) as info:
        load_module(Net().eval(), (torch.randn(2, 8),), Options())
    text = str(info.value)
    assert "aten.exp on a complex tensor" in text and "aten.sum on a complex tensor" in text
