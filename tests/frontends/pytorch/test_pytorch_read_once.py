"""A PyTorch model file is read once per conversion: check_support and load share one capture, and
the parity reference runs the ExportedProgram torch loaded, unless something of it changed since
(then it reads the file again). The verdict still comes from torch's own run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import convert
from convert.frontends.pytorch import shared
from convert.ir import Options


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.bn(self.conv(x))).mean((2, 3)))


@pytest.fixture(scope="module")
def pt2(tmp_path_factory: pytest.TempPathFactory):
    torch.manual_seed(0)
    net = _Net().eval()
    with torch.no_grad():
        net.bn.running_mean.uniform_(-0.2, 0.2)
        net.bn.running_var.uniform_(0.5, 1.5)
    path = tmp_path_factory.mktemp("read_once") / "net.pt2"
    torch.export.save(torch.export.export(net, (torch.randn(2, 3, 8, 8),)), path)
    return path


def _counting_loads(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    calls: list[object] = []
    real = torch.export.load

    def load(*args: object, **kwargs: object) -> object:
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.export, "load", load)
    return calls


def test_pt2_is_loaded_once_for_check_load_and_reference(pt2, tmp_path, monkeypatch):
    calls = _counting_loads(monkeypatch)
    result = convert.convert(pt2, to="onnx", out=tmp_path / "net.onnx")
    assert len(calls) == 1
    assert result.report is not None and result.report.passed
    (out,) = result.report.outputs
    assert out.ref_std > 0.05 and out.rel_to_scale < 1e-5


def test_reference_reads_again_after_an_in_place_change(pt2):
    options = Options()
    program = torch.export.load(pt2)
    shared.remember_program(options, pt2, program)
    assert shared.recall_program(options, pt2) is program  # untouched: shared
    shared.remember_program(options, pt2, program)
    with torch.no_grad():
        next(iter(program.state_dict.values())).add_(1.0)  # an in-place write bumps the version
    assert shared.recall_program(options, pt2) is None
    shared.remember_program(options, pt2, program)
    pt2.touch()  # the file changed on disk since: another key
    assert shared.recall_program(options, pt2) is None


def test_changed_program_gives_a_fresh_reference_and_a_true_verdict(pt2, tmp_path, monkeypatch):
    """A conversion that (wrongly) changed the loaded program in place: the reference is read again
    from the file, so the check compares with the file's model, not with the changed one."""
    calls = _counting_loads(monkeypatch)
    real_remember = shared.remember_program

    def remember_then_spoil(options: Options, path: object, program: object) -> None:
        real_remember(options, path, program)
        with torch.no_grad():
            program.state_dict["fc.bias"].add_(0.0)  # a write, even of nothing, makes it another version

    monkeypatch.setattr(shared, "remember_program", remember_then_spoil)
    result = convert.convert(pt2, to="onnx", out=tmp_path / "net.onnx")
    assert len(calls) == 2
    assert result.report is not None and result.report.passed


def test_torchscript_is_captured_once(tmp_path, monkeypatch):
    """check_support and load share the TorchScript graph's capture (read directly or converted by torch)."""
    import convert.frontends.pytorch as frontend

    torch.manual_seed(1)
    path = tmp_path / "net.pt"
    torch.jit.save(torch.jit.trace(_Net().eval(), torch.randn(1, 3, 8, 8)), path)
    calls: list[object] = []
    real = frontend._script_program

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(frontend, "_script_program", counting)
    result = convert.convert(path, to="onnx", out=tmp_path / "net.onnx")
    assert len(calls) == 1
    assert result.report is not None and result.report.passed
    assert np.isfinite(result.report.outputs[0].rel_to_scale)
