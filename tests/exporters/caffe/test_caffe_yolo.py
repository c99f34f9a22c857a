"""YOLOv8's decoded detect head -> Caffe in every flavor (the decode written with Caffe layers).

The head as Ultralytics writes it: per level box (4 x 16 DFL bins) and class convolutions, the
levels flattened and concatenated, DFL (softmax over the bins, expectation by a fixed 1x1
convolution after a Transpose), ``dist2bbox`` (``anchor - lt``, ``anchor + rb``, centre and size),
times the stride, and the sigmoid class scores. BVLC and PSPNet have no Permute: the DFL is
rewritten as a softmax over the bin axis and a grouped 1x1 convolution. ``anchor - lt`` is a
Scale of -1 with the anchors as bias. Oracle: torch eager; the files run in real Caffe and OpenCV.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import test_caffe_exporter as ex

torch = pytest.importorskip("torch")
nn = torch.nn

ROOT = Path(__file__).resolve().parents[3]
RTOL = 1e-5
FLAVORS = ("ssd", "bvlc", "pspnet")


class _Detect(nn.Module):
    """Ultralytics' Detect.forward at inference (export form): decoded boxes (xywh, pixels) + scores."""

    def __init__(self, classes: int = 6, bins: int = 16, strides: tuple[int, ...] = (8, 16)) -> None:
        super().__init__()
        self.bins, self.classes, self.strides = bins, classes, strides
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.SiLU(), nn.Conv2d(16, 16, 3, 2, 1), nn.SiLU(),
                                  nn.Conv2d(16, 16, 3, 2, 1), nn.SiLU())
        self.down = nn.Sequential(nn.Conv2d(16, 16, 3, 2, 1), nn.SiLU())
        self.box = nn.ModuleList(nn.Sequential(nn.Conv2d(16, 16, 3, 1, 1), nn.SiLU(), nn.Conv2d(16, 4 * bins, 1))
                                 for _ in strides)
        self.cls = nn.ModuleList(nn.Sequential(nn.Conv2d(16, 16, 3, 1, 1), nn.SiLU(), nn.Conv2d(16, classes, 1))
                                 for _ in strides)
        self.dfl = nn.Conv2d(bins, 1, 1, bias=False).requires_grad_(False)
        self.dfl.weight.data[:] = torch.arange(bins, dtype=torch.float).view(1, bins, 1, 1)

    def _anchors(self, feats: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        points, strides = [], []
        for f, s in zip(feats, self.strides, strict=True):
            h, w = f.shape[2:]
            sy, sx = torch.meshgrid(torch.arange(h) + 0.5, torch.arange(w) + 0.5, indexing="ij")
            points.append(torch.stack((sx, sy), -1).view(-1, 2))
            strides.append(torch.full((h * w, 1), float(s)))
        return torch.cat(points).transpose(0, 1), torch.cat(strides).transpose(0, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p3 = self.stem(x)
        feats = [p3, self.down(p3)]
        no = 4 * self.bins + self.classes
        outs = [torch.cat((self.box[i](f), self.cls[i](f)), 1) for i, f in enumerate(feats)]
        flat = torch.cat([o.view(1, no, -1) for o in outs], 2)
        box, cls = flat.split((4 * self.bins, self.classes), 1)
        a = box.shape[2]
        dist = self.dfl(box.view(1, 4, self.bins, a).transpose(2, 1).softmax(1)).view(1, 4, a)
        anchors, strides = self._anchors(feats)
        lt, rb = dist.chunk(2, 1)
        x1y1 = anchors.unsqueeze(0) - lt
        x2y2 = anchors.unsqueeze(0) + rb
        dbox = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * strides
        return torch.cat((dbox, cls.sigmoid()), 1)


def _zoo_head() -> nn.Module:
    sys.path.insert(0, str(ROOT / "models" / "pytorch"))
    import zoo

    return zoo.build("yolov8_head")[0]


@pytest.mark.torch
@pytest.mark.parametrize("net", ["ultralytics_detect", "zoo_yolov8_head"])
def test_yolov8_decoded_head_in_every_flavor(net: str, tmp_path: Path) -> None:
    from convert import api

    torch.manual_seed(0)
    model = (_Detect() if net == "ultralytics_detect" else _zoo_head()).eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        ref = model(x).numpy()
    assert float(ref.std()) > 1e-2
    for flavor in FLAVORS:
        result = api.convert(model, (x,), to="caffe", out=tmp_path / flavor / "net", caffe_flavor=flavor, check=False)
        text = result.outputs[0].read_text()
        if flavor != "ssd":
            assert "Permute" not in text
        for name, rt in (("real Caffe", ex._real(result.outputs)), ("OpenCV", ex._opencv(result.outputs))):
            got = next(iter(rt.run({rt.inputs()[0].name: x.numpy()}).values()))  # type: ignore[attr-defined]
            err = float(np.abs(got.reshape(ref.shape) - ref).max() / np.abs(ref).max())
            assert err <= RTOL, (flavor, name, err)


def test_constant_minus_tensor_is_a_scale(tmp_path: Path) -> None:
    """Sub(c, x) with c varying over axes 1..2 -> Scale(-1, bias c) (ONNX Runtime is the oracle)."""
    import onnxruntime as ort

    src = ex._model(ex.HEAD + """
    g (float[1, 2, 6] x) => (float[1, 2, 6] y) { y = Sub (c, x) }""",
                    {"c": np.arange(12, dtype=np.float32).reshape(1, 2, 6) / 4})
    paths = ex._export(src, tmp_path / "s", "bvlc")
    assert 'type: "Scale"' in paths[0].read_text()
    feeds = ex._feeds(src)
    ref = ort.InferenceSession(src.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    for rt in (ex._real(paths), ex._opencv(paths)):
        got = rt.run(feeds)["y"]  # type: ignore[attr-defined]
        np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=0, atol=1e-6)
