"""What each PyTorch route needs of torch (the [torch] extra allows 2.6 - 2.14.1).

Measured on torch 2.4.1 (installed beside the suite's torch, not in CI: an 800 MB wheel and 3 GB of
CUDA libraries): modules and ``.pt2`` files convert to ONNX and Caffe and pass, while TorchScript
``.pt`` files cannot be converted, as torch's TorchScript converter lacks the API the frontend
drives before 2.6 (read from the 2.5.1 and 2.6.0 wheels). Below 2.6 a ``.pt`` is refused in one line
naming the version and what to do, not an AttributeError from inside torch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.torch]


class _Gate(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # the name the test's shapes use
        y = self.conv(input)
        if bool(y.mean() > 0):
            y = y.relu()
        return y


def test_torchscript_file_on_a_torch_before_2_6_is_one_clear_line(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from convert import api
    from convert.ir import UsageError

    # scripted with a branch on data, which only torch's converter reads; a plain trace is read
    # directly (frontends/pytorch/traced.py) and converts on any torch
    torch.jit.save(torch.jit.script(_Gate()), tmp_path / "m.pt")
    monkeypatch.setattr(torch, "__version__", "2.5.1+cpu")
    with pytest.raises(UsageError) as caught:
        api.convert([tmp_path / "m.pt"], to="onnx", out=tmp_path / "m.onnx", check=False,
                    input_shapes={"input": (1, 3, 8, 8)})
    message = str(caught.value)
    assert "needs torch>=2.6" in message and "torch 2.5.1+cpu" in message and "torch.export.save" in message
    assert not (tmp_path / "m.onnx").exists()
    monkeypatch.setattr(torch, "__version__", "2.14.1+cpu")  # the same file on the suite's torch converts
    result = api.convert([tmp_path / "m.pt"], to="onnx", out=tmp_path / "m.onnx", check=False,
                         input_shapes={"input": (1, 3, 8, 8)})
    assert result.outputs[0].exists()


def test_pt2_written_by_torch_2_6_converts(tmp_path: Path) -> None:
    """torch 2.6 and earlier lay a ``.pt2`` out with ``serialized_exported_program.json`` at its top
    (``models/pytorch/make_torch26_pt2.py`` wrote this one under torch 2.6.0): it is an
    ExportedProgram, not "not a PyTorch file", and converts within 1e-5 of the program as the suite's
    torch runs it."""
    import numpy as np
    import onnxruntime as ort

    from convert import api

    src = Path(__file__).resolve().parents[3] / "models" / "pytorch" / "torch26_convnet.pt2"
    result = api.convert([src], to="onnx", out=tmp_path / "m.onnx", check=False)
    x = np.random.default_rng(0).random((1, 3, 16, 16), dtype=np.float32)
    with torch.no_grad():
        ref = torch.export.load(src).module()(torch.from_numpy(x)).numpy()
    sess = ort.InferenceSession(str(result.outputs[0]), providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    scale = float(np.abs(ref).max())
    assert ref.shape == (1, 5) and float(ref.std()) > 1e-2 * scale
    assert float(np.abs(got - ref).max()) <= 1e-5 * scale
