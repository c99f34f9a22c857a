"""Bilinear resizing with align_corners=False (DeepLabV3, LRASPP) -> Caffe, in every flavor.

The exporter writes it as edge replication (Slice + Concat) and a fixed-weight grouped
Deconvolution (integer upsampling) or Convolution (integer downsampling): BVLC 1.0 layers, so
the file loads in real Caffe and OpenCV whatever the flavor. Other ratios and coordinate modes
are the separable interpolation matrices as InnerProduct layers (with Permute in ssd). Oracles: torch eager
(``F.interpolate``) and ONNX Runtime on the ONNX source; the written files run in real Caffe and
OpenCV DNN.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import test_caffe_exporter as ex

from convert.exporters.caffe.resize import half_pixel_kernel
from convert.ir import UnsupportedOpsError, serde

torch = pytest.importorskip("torch")
F = torch.nn.functional
nn = torch.nn

RTOL = 1e-5
FLAVORS = ("ssd", "bvlc", "pspnet")

# (input H, W) -> (output H, W): up by 2, 3, 8, by 4 and 1, from one pixel, down by 2 and by 3 and 3
SIZES = [((5, 7), (10, 14)), ((4, 4), (12, 12)), ((3, 3), (24, 24)), ((2, 3), (8, 3)), ((1, 1), (6, 6)),
         ((6, 6), (3, 3)), ((9, 6), (3, 2))]
IDS = [f"{a[0]}x{a[1]}-{b[0]}x{b[1]}" for a, b in SIZES]


def _rel(ours: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(ours.reshape(ref.shape) - ref).max() / np.abs(ref).max())


def test_kernel_is_the_half_pixel_tent() -> None:
    """Factor 2: taps 1/4, 3/4, 3/4, 1/4 starting one sample left; factor 3: 1/3, 2/3, 1, 2/3, 1/3."""
    taps, u_min = half_pixel_kernel(2)
    np.testing.assert_allclose(taps, [0.25, 0.75, 0.75, 0.25])
    assert u_min == -1
    taps, u_min = half_pixel_kernel(3)
    np.testing.assert_allclose(taps, [1 / 3, 2 / 3, 1, 2 / 3, 1 / 3])
    assert u_min == -1


@pytest.mark.parametrize(("size", "out"), SIZES, ids=IDS)
def test_resize_half_pixel_in_every_flavor(size: tuple[int, int], out: tuple[int, int], tmp_path: Path) -> None:
    import onnxruntime as ort

    (h, w), (oh, ow) = size, out
    src = ex._model(ex.HEAD + f"""
    g (float[1, 3, {h}, {w}] x) => (float[1, 3, {oh}, {ow}] y) {{
        y = Resize <mode = "linear", coordinate_transformation_mode = "pytorch_half_pixel"> (x, , , sz)
    }}""", {"sz": np.array([1, 3, oh, ow], np.int64)})
    x = np.random.default_rng(0).standard_normal((1, 3, h, w)).astype(np.float32)
    ref = F.interpolate(torch.from_numpy(x), size=(oh, ow), mode="bilinear", align_corners=False).numpy()
    onnx_ref = ort.InferenceSession(src.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert _rel(onnx_ref, ref) <= RTOL  # the ONNX source is the torch op
    for flavor in FLAVORS:
        paths = ex._export(src, tmp_path / flavor, flavor)
        text = paths[0].read_text()
        assert "Interp" not in text and "Upsample" not in text and "BilinearInterpolate" not in text
        for name, rt in (("real Caffe", ex._real(paths)), ("OpenCV", ex._opencv(paths))):
            got = rt.run({"x": x})["y"]  # type: ignore[attr-defined]
            assert _rel(got, ref) <= RTOL, (flavor, name)


# (H, W) -> (H', W'), coordinate mode: ratios no (de)convolution gives, and align_corners
MATRIX_CASES = [((5, 5), (7, 7), "half_pixel"), ((7, 6), (3, 10), "pytorch_half_pixel"),
                ((6, 4), (11, 9), "align_corners"), ((4, 5), (6, 5), "asymmetric")]


@pytest.mark.parametrize(("size", "out", "mode"), MATRIX_CASES, ids=[c[2] for c in MATRIX_CASES])
def test_other_ratios_and_modes_as_interpolation_matrices(size: tuple[int, int], out: tuple[int, int], mode: str,
                                                          tmp_path: Path) -> None:
    """InnerProduct on the width; the height via Permute (ssd) or a Kronecker InnerProduct (bvlc, pspnet)."""
    import onnxruntime as ort

    (h, w), (oh, ow) = size, out
    src = ex._model(ex.HEAD + f"""
    g (float[1, 3, {h}, {w}] x) => (float[1, 3, {oh}, {ow}] y) {{
        y = Resize <mode = "linear", coordinate_transformation_mode = "{mode}"> (x, , , sz)
    }}""", {"sz": np.array([1, 3, oh, ow], np.int64)})
    x = np.random.default_rng(0).standard_normal((1, 3, h, w)).astype(np.float32)
    ref = ort.InferenceSession(src.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    if mode in ("half_pixel", "align_corners"):  # torch eager agrees with the ONNX source
        torch_ref = F.interpolate(torch.from_numpy(x), size=(oh, ow), mode="bilinear",
                                  align_corners=mode == "align_corners").numpy()
        assert _rel(ref, torch_ref) <= RTOL
    for flavor in FLAVORS:
        paths = ex._export(src, tmp_path / flavor, flavor)
        text = paths[0].read_text()
        if flavor == "pspnet" and mode == "align_corners":
            assert 'type: "Interp"' in text  # PSPNet's own layer; real Caffe lacks it: OpenCV runs it
        else:
            assert 'type: "InnerProduct"' in text and ("Permute" in text) == (flavor == "ssd")
        runtimes = [("OpenCV", ex._opencv(paths))]
        if "Interp" not in text:
            runtimes.append(("real Caffe", ex._real(paths)))
        for name, rt in runtimes:
            got = rt.run({"x": x})["y"]  # type: ignore[attr-defined]
            assert _rel(got, ref) <= RTOL, (flavor, name)


def test_large_maps_without_permute_are_refused_with_the_reason(tmp_path: Path) -> None:
    src = ex._model(ex.HEAD + """
    g (float[1, 3, 40, 40] x) => (float[1, 3, 97, 97] y) {
        y = Resize <mode = "linear", coordinate_transformation_mode = "half_pixel"> (x, , , sz)
    }""", {"sz": np.array([1, 3, 97, 97], np.int64)})
    for flavor in ("bvlc", "pspnet"):
        with pytest.raises(UnsupportedOpsError, match=r"\[40, 40\] to \[97, 97\]: without Permute.*"
                                                      r"139 MiB.*--caffe-flavor ssd"):
            ex._export(src, tmp_path / flavor, flavor)
    paths = ex._export(src, tmp_path / "ssd", "ssd")
    x = np.random.default_rng(2).standard_normal((1, 3, 40, 40)).astype(np.float32)
    ref = F.interpolate(torch.from_numpy(x), size=(97, 97), mode="bilinear", align_corners=False).numpy()
    assert _rel(ex._real(paths).run({"x": x})["y"], ref) <= RTOL  # type: ignore[attr-defined]


class _DeepLabV3Like(nn.Module):
    """DeepLabV3's shape: a stride-4 backbone, ASPP with an image-pooling branch upsampled from 1x1,
    and the logits upsampled to the input size (both align_corners=False)."""

    def __init__(self, classes: int = 5) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.Conv2d(8, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU())
        self.aspp = nn.ModuleList([nn.Conv2d(16, 8, 1), nn.Conv2d(16, 8, 3, padding=2, dilation=2)])
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(16, 8, 1), nn.ReLU())
        self.project = nn.Conv2d(24, 8, 1)
        self.head = nn.Conv2d(8, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.backbone(x)
        branches = [conv(f) for conv in self.aspp]
        branches.append(F.interpolate(self.pool(f), size=f.shape[-2:], mode="bilinear", align_corners=False))
        y = self.head(F.relu(self.project(torch.cat(branches, 1))))
        return F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)


class _LRASPPLike(nn.Module):
    """LRASPP's shape: low (stride 2) and high (stride 4) features; high * sigmoid(pooled scale),
    upsampled to the low size, classifiers summed and upsampled to the input."""

    def __init__(self, classes: int = 4) -> None:
        super().__init__()
        self.low = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.Hardswish())
        self.high = nn.Sequential(nn.Conv2d(8, 16, 3, 2, 1), nn.Hardswish())
        self.cbr = nn.Sequential(nn.Conv2d(16, 8, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.scale = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(16, 8, 1, bias=False), nn.Sigmoid())
        self.low_cls = nn.Conv2d(8, classes, 1)
        self.high_cls = nn.Conv2d(8, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        low = self.low(x)
        high = self.high(low)
        y = self.cbr(high) * self.scale(high)
        y = F.interpolate(y, size=low.shape[-2:], mode="bilinear", align_corners=False)
        y = self.low_cls(low) + self.high_cls(y)
        return F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)


@pytest.mark.torch
@pytest.mark.parametrize("net", [_DeepLabV3Like, _LRASPPLike], ids=["deeplabv3", "lraspp"])
def test_segmentation_heads_match_torch_in_real_caffe(net: type[nn.Module], tmp_path: Path) -> None:
    from convert import api

    torch.manual_seed(0)
    model = net().eval()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        ref = model(x).numpy()
    assert float(ref.std()) > 1e-3
    for flavor in FLAVORS:
        result = api.convert(model, (x,), to="caffe", out=tmp_path / flavor / "net", caffe_flavor=flavor, check=False)
        paths = result.outputs
        for name, rt in (("real Caffe", ex._real(paths)), ("OpenCV", ex._opencv(paths))):
            got = next(iter(rt.run({rt.inputs()[0].name: x.numpy()}).values()))  # type: ignore[attr-defined]
            assert _rel(got, ref) <= RTOL, (flavor, name)


def test_resize_reads_back_through_the_frontend(tmp_path: Path) -> None:
    """The written layers read back (Caffe -> IR) to the same function (ONNX Runtime vs torch)."""
    import onnxruntime as ort

    from convert.frontends.caffe import FRONTEND
    from convert.ir import Options

    src = ex._model(ex.HEAD + """
    g (float[1, 2, 3, 4] x) => (float[1, 2, 6, 8] y) {
        y = Resize <mode = "linear", coordinate_transformation_mode = "half_pixel"> (x, , sc)
    }""", {"sc": np.array([1, 1, 2, 2], np.float32)})
    paths = ex._export(src, tmp_path / "b", "bvlc")
    back = serde.serialize_model(FRONTEND.load(paths, Options()))
    x = np.random.default_rng(1).standard_normal((1, 2, 3, 4)).astype(np.float32)
    got = ort.InferenceSession(back.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    ref = F.interpolate(torch.from_numpy(x), scale_factor=2, mode="bilinear", align_corners=False).numpy()
    assert _rel(got, ref) <= RTOL
