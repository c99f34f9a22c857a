"""What users hand us that we refuse or handle specially, and the errors they get."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from _torch_helpers import REL_TO_SCALE, ROOT, nets, rel_to_scale, run_onnx, to_onnx

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

from convert.frontends.pytorch import load, load_module  # noqa: E402
from convert.ir import (  # noqa: E402
    ConversionError,
    ModelFormatError,
    Options,
    UnsupportedOpsError,
    UsageError,
)

SHAPE = (1, 3, 32, 32)


def _small() -> nn.Module:
    torch.manual_seed(0)
    return nets().build("branchy", size=32)


def test_import_does_not_import_torch() -> None:
    code = "import sys, convert.frontends.pytorch as p; p.supported_ops(); assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_pickled_module_is_refused_without_trust(tmp_path: Path) -> None:
    path = tmp_path / "whole.pth"
    torch.save(nets().build("mobilenetv2", size=32), path)
    with pytest.raises(UsageError, match="--trust-pickle") as info:
        load([path], Options(input_shapes={"x": SHAPE}))
    assert "runs code from the file" in str(info.value)


def test_pickled_module_with_missing_class_names_it(tmp_path: Path) -> None:
    pkg = tmp_path / "gone_models.py"
    pkg.write_text(textwrap.dedent("""
        import torch
        class GoneNet(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Conv2d(3, 4, 3)
            def forward(self, x):
                return self.conv(x)
    """))
    sys.path.insert(0, str(tmp_path))
    try:
        import gone_models

        torch.save(gone_models.GoneNet(), tmp_path / "gone.pth")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("gone_models", None)
    pkg.unlink()
    with pytest.raises(ModelFormatError, match="gone_models"):
        load([tmp_path / "gone.pth"], Options(input_shapes={"x": SHAPE}, extra={"trust_pickle": True}))


def test_state_dict_points_to_model_factory(tmp_path: Path) -> None:
    path = tmp_path / "weights.pth"
    torch.save(nets().build("mobilenetv2", size=32).state_dict(), path)
    with pytest.raises(UsageError, match=r"--model package\.module:factory") as info:
        load([path], Options(input_shapes={"x": SHAPE}))
    assert "weights only" in str(info.value)


def test_state_dict_with_factory_converts(tmp_path: Path) -> None:
    module = nets().build("mobilenetv2", size=32)
    path = tmp_path / "weights.pth"
    torch.save(module.state_dict(), path)
    x = torch.rand(SHAPE)
    options = Options(input_shapes={"input0": SHAPE}, extra={"torch_factory": "pytorch_test_nets:MobileNetV2"})
    model = load([path], options)
    (ours,) = run_onnx(to_onnx(model, tmp_path / "m.onnx"), {"x": x.numpy()})
    with torch.no_grad():
        assert rel_to_scale(ours, module(x).numpy()) <= REL_TO_SCALE


def test_factory_errors_are_usage_errors(tmp_path: Path) -> None:
    path = tmp_path / "weights.pth"
    torch.save(nn.Linear(2, 2).state_dict(), path)
    for spec, words in [("nocolon", "package.module:factory"), ("no_such_pkg_xyz:f", "cannot import"),
                        ("pytorch_test_nets:Nope", "no attribute")]:
        with pytest.raises(UsageError, match=words):
            load([path], Options(input_shapes={"x": (1, 2)}, extra={"torch_factory": spec}))


def test_traced_torchscript_brings_its_input_shapes(tmp_path: Path) -> None:
    path = tmp_path / "m.pt"
    torch.jit.save(torch.jit.trace(nets().build("mobilenetv2", size=32), (torch.rand(SHAPE),)), path)
    options = Options()
    model = load([path], options)
    assert [d for d in model.graph.inputs[0].shape] == list(SHAPE)
    assert any("traced with" in n for n in options.diagnostics.notes)


def test_missing_input_shape_says_which_flag(tmp_path: Path) -> None:
    path = tmp_path / "m.pt"
    torch.jit.save(torch.jit.script(_small()), path)
    with pytest.raises(UsageError, match=r"--input-shape x=1,3,224,224"):
        load([path], Options())
    with pytest.raises(UsageError, match="'y'"):
        load([path], Options(input_shapes={"x": SHAPE, "y": SHAPE}))


def test_not_a_torch_file(tmp_path: Path) -> None:
    path = tmp_path / "junk.pt"
    path.write_bytes(b"not a model")
    with pytest.raises(UsageError, match="not a PyTorch file"):
        load([path], Options())


class _Head(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.kthvalue(x, 2, -1, keepdim=True)[0] + torch.cdist(x, x)


class _Unsupported(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
        self.head = _Head()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.logcumsumexp(self.backbone(x), 2))


def test_unsupported_ops_listed_at_once_with_module_paths() -> None:
    with pytest.raises(UnsupportedOpsError) as info:
        load_module(_Unsupported(), (torch.rand(SHAPE),))
    text = str(info.value)
    # cdist itself has no converter either, but torch's decompositions lower it (matmul form)
    for op in ("aten.kthvalue", "aten.logcumsumexp"):
        assert op in text
    assert "'head'" in text and "test_pytorch_errors.py:" in text
    assert "convert ops pytorch" in text


class _Adaptive(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveMaxPool2d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def test_conversion_error_names_op_and_module() -> None:
    with pytest.raises(ConversionError, match=r"aten\.adaptive_max_pool2d in 'pool'.*not divisible"):
        load_module(_Adaptive(), (torch.rand(1, 3, 7, 7),))


def test_data_dependent_guard_is_refused_or_frozen_on_request(tmp_path: Path) -> None:
    """A Python branch on a tensor's value (nets.py's Branchy): refused, naming its line; with
    ``freeze_data_branches`` draft export settles it from the example, and the note says so."""
    module = _small()
    x = torch.rand(SHAPE)
    with pytest.raises(ConversionError, match=r"nets\.py:238 `if y\.mean\(\) > -1e9:.*` \(the example: True\)"):
        load_module(module, (x,), Options())
    options = Options(extra={"freeze_data_branches": True})
    model = load_module(module, (x,), options)
    notes = options.diagnostics.notes
    assert any("draft_export froze 1" in n and "nets.py:238" in n for n in notes), notes
    (ours,) = run_onnx(to_onnx(model, tmp_path / "b.onnx"), {"x": x.numpy()})
    with torch.no_grad():
        assert rel_to_scale(ours, module(x).numpy()) <= REL_TO_SCALE


class _CountsFromData(torch.nn.Module):
    """Keeps the values above a threshold, at most 6 of them (a detector's score filter and top-k)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = x[x > 0.5]
        if kept.numel() >= 6:  # a branch on a count: settled from the example
            kept = torch.topk(kept, 6)[0]
        return kept * 3.0


def test_parity_runs_on_the_example_a_capture_took_sizes_from(tmp_path: Path) -> None:
    """A branch on a count (at least 6 values) is refused by default; frozen on request, the file
    holds for inputs like the example: the parity check runs on that example (not on N(0, 1) noise,
    which may have fewer than 6 values above 0.5 and fail at run time), says so, and passes on the
    example's branch; given inputs are still used."""
    import convert

    x = torch.rand(40, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ConversionError, match=r"`if kept\.numel\(\) >= 6:` \(the example: True\)"):
        convert.convert(_CountsFromData(), (x,), to="onnx", out=tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()
    result = convert.convert(_CountsFromData(), (x,), to="onnx", out=tmp_path / "m.onnx", freeze_data_branches=True)
    assert result.report is not None and result.report.passed, (result.parity_error, result.notes)
    assert result.report.verdict == "PASS on the example's branch", result.report.table()
    assert any("parity check ran on the example inputs" in n for n in result.notes), result.notes
    assert result.report.seed is None
    other = torch.rand(40, generator=torch.Generator().manual_seed(1))
    given = convert.convert(_CountsFromData(), (x,), to="onnx", out=tmp_path / "g.onnx",
                            inputs={"x": other.numpy()}, freeze_data_branches=True)
    assert given.report is not None and given.report.passed
    assert not any("parity check ran on the example inputs" in n for n in given.notes)


def test_non_contiguous_weight_is_copied_with_a_note() -> None:
    module = nn.Linear(4, 3)
    with torch.no_grad():
        module.weight = nn.Parameter(torch.randn(4, 3).t())  # a transposed view: not contiguous
    options = Options()
    model = load_module(module, (torch.rand(2, 4),), options)
    weight = model.graph.initializers["weight"].const_value
    np.testing.assert_array_equal(weight.numpy(), module.weight.detach().numpy())
    assert any("not contiguous" in n for n in options.diagnostics.notes)


def test_torch_runtime_names_match_the_converted_graph(tmp_path: Path) -> None:
    from convert.parity.runtimes.torch import open_runtime

    module = nets().build("yolo", size=32)
    path = tmp_path / "y.pt2"
    torch.export.save(torch.export.export(module, (torch.rand(SHAPE),)), path)
    runtime = open_runtime([path], Options())
    model = load([path], Options())
    assert [s.name for s in runtime.inputs()] == [v.name for v in model.graph.inputs]
    assert list(runtime.outputs()) == [v.name for v in model.graph.outputs]


def test_scripted_torchscript(tmp_path: Path) -> None:
    """torch.jit.script output converts; its data-dependent `if` (torch.cond after torch's converter) is an If."""
    module = nets().build("mobilenetv2", size=32)
    path = tmp_path / "scripted.pt"
    torch.jit.save(torch.jit.script(module), path)
    x = torch.rand(SHAPE)
    model = load([path], Options(input_shapes={"x": SHAPE}))
    (ours,) = run_onnx(to_onnx(model, tmp_path / "s.onnx"), {"x": x.numpy()})
    with torch.no_grad():
        assert rel_to_scale(ours, module(x).numpy()) <= REL_TO_SCALE
    branchy = tmp_path / "branchy.pt"
    small = _small().eval()
    torch.jit.save(torch.jit.script(small), branchy)
    model = load([branchy], Options(input_shapes={"x": SHAPE}))
    assert "If" in [n.op_type for n in model.graph]
    (ours,) = run_onnx(to_onnx(model, tmp_path / "b.onnx"), {"x": x.numpy()})
    with torch.no_grad():
        assert rel_to_scale(ours, small(x).numpy()) <= REL_TO_SCALE


def _rezip(src: Path, dst: Path, damage: object) -> Path:
    """Copy the zip archive ``src`` to ``dst`` with every member passed through ``damage(name, data)``."""
    import zipfile

    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, damage(info.filename, zin.read(info.filename)))  # type: ignore[operator]
    return dst


def _damaged_files(tmp: Path) -> dict[str, tuple[Path, list[str]]]:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
    x = torch.randn(1, 3, 8, 8)
    files: dict[str, tuple[Path, list[str]]] = {}
    legacy = tmp / "legacy.pth"
    torch.save(model.state_dict(), legacy, _use_new_zipfile_serialization=False)
    data = legacy.read_bytes()
    (tmp / "truncated.pth").write_bytes(data[: len(data) // 2])
    files["legacy pickle, truncated"] = (tmp / "truncated.pth", ["--trust-pickle"])
    (tmp / "magic.pth").write_bytes(data[:2] + bytes(8) + data[10:])
    files["legacy pickle, wrong magic number"] = (tmp / "magic.pth", ["--trust-pickle"])
    torch.export.save(torch.export.export(model, (x,)), tmp / "good.pt2")

    def garble_json(name: str, body: bytes) -> bytes:
        return body[: len(body) // 3] if name.endswith(".json") else body

    files[".pt2, a member cut short"] = (_rezip(tmp / "good.pt2", tmp / "cut.pt2", garble_json), [])
    torch.jit.save(torch.jit.trace(model, x), tmp / "good.pt")

    def garble_code(name: str, body: bytes) -> bytes:
        return body.replace(b"def forward", b"def f0rward") if name.endswith(".py") else body

    files["TorchScript, code damaged"] = (_rezip(tmp / "good.pt", tmp / "code.pt", garble_code), [])
    return files


def test_damaged_files_are_the_files_fault(tmp_path: Path) -> None:
    """What torch's own loaders raise on a damaged file (EOFError with no message, AssertionError,
    KeyError, RuntimeError...) is one line naming the file, exit 2, never an internal error."""
    for what, (path, extra) in _damaged_files(tmp_path).items():
        out = tmp_path / f"{path.stem}.onnx"
        done = subprocess.run([sys.executable, "-m", "convert", "pytorch:onnx", str(path), "-o", str(out), *extra],
                              capture_output=True, text=True, timeout=300, cwd=ROOT)
        err = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
        assert done.returncode == 2, (what, done.stderr)
        assert path.name in err and "internal error" not in done.stderr and "Traceback" not in done.stderr, (what, err)
        assert not out.exists(), what
