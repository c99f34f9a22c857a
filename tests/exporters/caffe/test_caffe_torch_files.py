"""Files written by PyTorch (torch.onnx's TorchScript exporter, torch.jit.trace) -> Caffe, run in real Caffe.

torch.onnx's TorchScript exporter writes ``chunk``/``split``/``view`` sizes as ``Shape -> Gather -> Div -> Slice``
chains even for a static input; each link becomes static only once the one before it is folded
and shapes are inferred again (``FoldShapeChains``). ShuffleNetV2 has 13 such chains.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sample_models

from convert import api
from convert.parity.runtimes.caffe_runtime import find_caffe

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

pytestmark = [pytest.mark.torch]


@pytest.fixture(scope="module")
def shufflenet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """torchvision's ShuffleNetV2 x0.5 (random weights, BatchNorm statistics from a batch), exported
    by torch.onnx's TorchScript exporter at opset 13 on a static 1x3x64x64 input."""
    torch.manual_seed(0)
    model = torchvision.models.shufflenet_v2_x0_5(num_classes=10)
    model.train()
    with torch.no_grad():  # running statistics from data: the outputs keep their spread
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.momentum = None
        model(torch.rand(8, 3, 64, 64))
    model.eval()
    path = tmp_path_factory.mktemp("shufflenet") / "shufflenet.onnx"
    torch.onnx.export(model, (torch.rand(1, 3, 64, 64),), str(path), opset_version=13, dynamo=False)
    return path


@pytest.mark.parametrize("flavor", ["ssd", "bvlc"])
def test_torch_onnx_shufflenet_converts_to_caffe_and_passes_in_real_caffe(flavor: str, shufflenet: Path,
                                                                          tmp_path: Path) -> None:
    if find_caffe(flavor) is None:
        pytest.skip(f"real Caffe ({flavor}) is not built here: run scripts/build_caffe")
    import onnx

    ops = [n.op_type for n in onnx.load(str(shufflenet)).graph.node]
    assert ops.count("Shape") >= 10 and "Slice" in ops  # the chains are there to fold
    result = api.convert([shufflenet], to="caffe", out=tmp_path / "s", caffe_flavor=flavor)
    report = result.report
    assert report is not None and report.verdict == "PASS", report.table()
    assert report.dest_runtime.startswith("Caffe (brocolli" if flavor == "ssd" else "Caffe (BVLC")
    out = report.outputs[0]
    assert out.ref_std > 1e-3 * out.ref_scale and out.rel_to_scale < 1e-5, report.table()
    text = result.outputs[0].read_text()
    assert 'type: "Shape"' not in text
    np.testing.assert_equal(report.inputs, {"input.1": [1, 3, 64, 64]})


def _zoo() -> object:
    return sample_models.vision_zoo()


@pytest.mark.slow
def test_traced_efficientnet_pt_converts_to_caffe_with_its_input_shape(tmp_path: Path) -> None:
    """torchvision's EfficientNet-B0 traced to a TorchScript .pt: torch hands the frontend the
    input's channels as a SymInt specialised to 3; it is a static size (was: "'x' has a symbolic
    dimension (3) ... fix it with --input-shape x=1,?,?,?", with or without --input-shape)."""
    if find_caffe("ssd") is None:
        pytest.skip("real Caffe is not built here: run scripts/build_caffe")
    model, inputs = _zoo().build("tv:efficientnet_b0")  # type: ignore[attr-defined]
    (x,) = inputs(1)
    shape = tuple(x.shape)
    torch.jit.save(torch.jit.trace(model, (x,)), tmp_path / "eff.pt")
    result = api.convert([tmp_path / "eff.pt"], to="caffe", out=tmp_path / "e", input_shapes={"x": shape})
    report = result.report
    assert report is not None and report.verdict == "PASS", report.table()
    assert report.dest_runtime.startswith("Caffe (brocolli")
    assert "dim: 3" in result.outputs[0].read_text()  # the input's channels, static
