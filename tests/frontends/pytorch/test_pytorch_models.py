"""Whole networks: ResNet-, MobileNetV2-, ViT- and YOLO-style, saved as TorchScript,
ExportedProgram and pickled module, converted to ONNX (ONNX Runtime) and to Caffe (OpenCV DNN),
compared with PyTorch eager on seeded inputs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _torch_helpers import REL_TO_SCALE, nets, rel_to_scale, run_onnx, to_onnx

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

SIZE = 64
NAMES = ("resnet", "mobilenetv2", "vit", "yolo")
# The Caffe dialect OpenCV reads for each net: 'ssd' has ReLU6 and ceil_mode pooling; 'bvlc'
# writes nearest upsampling as a Deconvolution, which OpenCV runs (it has no 'Upsample' layer).
CAFFE = {"resnet": "bvlc", "mobilenetv2": "bvlc", "yolo": "bvlc"}  # the default flavor serves every net


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    """Build each net once; save it in the three formats; keep the eager reference output."""
    out = tmp_path_factory.mktemp("pytorch_nets")
    x = torch.rand(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))
    result: dict[str, dict[str, object]] = {}
    for name in NAMES:
        model = nets().build(name, size=SIZE)
        with torch.no_grad():
            ref = model(x).numpy()
        paths = {"pt": out / f"{name}.pt", "pt2": out / f"{name}.pt2", "pth": out / f"{name}.pth"}
        torch.jit.save(torch.jit.trace(model, (x,)), paths["pt"])
        torch.export.save(torch.export.export(model, (x,)), paths["pt2"])
        torch.save(model, paths["pth"])
        result[name] = {"model": model, "x": x, "ref": ref, **paths}
    return result


def _load(path: Path) -> object:
    from convert.frontends.pytorch import load
    from convert.ir import Options

    options = Options(input_shapes={"x": (1, 3, SIZE, SIZE)}, extra={"trust_pickle": True})
    return load([path], options)


@pytest.mark.parametrize("fmt", ["pt", "pt2", "pth"], ids=["torchscript", "exported_program", "pickled"])
@pytest.mark.parametrize("name", NAMES)
def test_to_onnx(saved: dict[str, dict[str, object]], name: str, fmt: str, tmp_path: Path) -> None:
    case = saved[name]
    model = _load(case[fmt])  # type: ignore[arg-type]
    onnx_path = to_onnx(model, tmp_path / f"{name}.onnx")
    (ours,) = run_onnx(onnx_path, {"x": case["x"].numpy()})  # type: ignore[union-attr]
    assert rel_to_scale(ours, case["ref"]) <= REL_TO_SCALE  # type: ignore[arg-type]


def test_high_level_ops_stay_single_nodes(saved: dict[str, dict[str, object]]) -> None:
    """Conv and BatchNormalization arrive as single nodes (not a cloud of arithmetic)."""
    from convert.frontends.pytorch import load_module

    case = saved["resnet"]
    model = load_module(case["model"], (case["x"],))  # type: ignore[arg-type]
    ops = [n.op_type for n in model.graph]
    assert ops.count("Conv") == ops.count("BatchNormalization") > 10
    assert "Gemm" in ops and "GlobalAveragePool" in ops and "MaxPool" in ops
    vit = load_module(saved["vit"]["model"], (saved["vit"]["x"],))  # type: ignore[arg-type]
    vit_ops = {n.op_type for n in vit.graph}
    assert {"LayerNormalization", "Softmax", "MatMul", "Erf"} <= vit_ops


def test_provenance_names_module_and_line(saved: dict[str, dict[str, object]]) -> None:
    from convert.frontends.pytorch import load_module
    from convert.ir import get_provenance

    case = saved["resnet"]
    model = load_module(case["model"], (case["x"],))  # type: ignore[arg-type]
    conv = next(n for n in model.graph if n.op_type == "Conv" and "layers.1" in n.name)
    prov = get_provenance(conv)
    # torch.export records conv2d, a trace (the fast capture, frontends/pytorch/traced.py) _convolution
    assert prov.layer.startswith("layers.1.") and prov.kind in ("aten.conv2d", "aten._convolution")
    assert prov.file == "nets.py" and prov.line is not None



def test_torchscript_provenance_names_no_line_of_convert(saved: dict[str, dict[str, object]]) -> None:
    """A TorchScript file carries no Python source: its nodes name the file and the layer, never a
    line of convert's own code (was ``__init__.py:144`` on every node)."""
    from convert.ir import get_provenance

    model = _load(saved["resnet"]["pt"])  # type: ignore[arg-type]
    provs = [get_provenance(n) for n in model.graph]  # type: ignore[attr-defined]
    assert provs and all(p.file == Path(str(saved["resnet"]["pt"])).name and p.line is None for p in provs), \
        {(p.file, p.line) for p in provs}


def test_weights_are_not_copied(saved: dict[str, dict[str, object]]) -> None:
    """Initializers share memory with the module's parameters."""
    from convert.frontends.pytorch import load_module

    case = saved["resnet"]
    module = case["model"]
    model = load_module(module, (case["x"],))  # type: ignore[arg-type]
    weight = model.graph.initializers["fc.weight"].const_value
    assert np.shares_memory(weight.numpy(), module.fc.weight.detach().numpy())  # type: ignore[union-attr]


@pytest.mark.parametrize("fmt", ["pt", "pth"], ids=["torchscript", "pickled"])
@pytest.mark.parametrize("name", sorted(CAFFE))
def test_to_caffe(saved: dict[str, dict[str, object]], name: str, fmt: str, tmp_path: Path) -> None:
    pytest.importorskip("cv2")
    import convert.exporters.caffe as caffe
    from convert.ir import Options, passes
    from convert.parity.runtimes.opencv_caffe import open_runtime

    case = saved[name]
    model = _load(case[fmt])  # type: ignore[arg-type]
    passes.standard_pipeline(validate=True)(model)  # type: ignore[arg-type]
    options = Options(extra={"caffe_flavor": CAFFE[name]})
    paths = caffe.EXPORTER.save(model, tmp_path / f"{name}.prototxt", options)
    runtime = open_runtime(paths, options)
    outs = runtime.run({runtime.inputs()[0].name: case["x"].numpy()})  # type: ignore[union-attr]
    (ours,) = outs.values()
    assert rel_to_scale(ours, case["ref"]) <= REL_TO_SCALE  # type: ignore[arg-type]


def test_vit_to_caffe_names_what_caffe_lacks(saved: dict[str, dict[str, object]]) -> None:
    """Attention and LayerNorm have no Caffe layer: the export lists them, it does not crash."""
    import convert.exporters.caffe as caffe
    from convert.frontends.pytorch import load_module
    from convert.ir import Options, UnsupportedOpsError, passes

    case = saved["vit"]
    model = load_module(case["model"], (case["x"],))  # type: ignore[arg-type]
    passes.standard_pipeline()(model)
    with pytest.raises(UnsupportedOpsError, match="LayerNormalization"):
        caffe.EXPORTER.save(model, Path("/nonexistent/never.prototxt"), Options())


@pytest.mark.parametrize("dest,suffix", [("caffe", ".pt2"), ("onnx", ".pt2"), ("caffe", ".pt")],
                         ids=["caffe-pt2", "onnx-pt2", "caffe-torchscript"])
def test_headline_cli(tmp_path: Path, dest: str, suffix: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`convert pytorch->caffe sample.pt2` (the README's first demo) converts and passes parity; the sample
    is written with torch.export (no TorchScript deprecation warning, #52 item 3); the TorchScript
    route is still tested."""
    if dest == "caffe":
        pytest.importorskip("cv2")
    import importlib.util

    from convert.cli import main

    spec = importlib.util.spec_from_file_location("make_sample", Path(__file__).resolve().parents[3]
                                                  / "models" / "pytorch" / "make_sample.py")
    assert spec is not None and spec.loader is not None
    make_sample = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_sample)
    sample = tmp_path / f"sample{suffix}"
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make_sample.main(sample)
    deprecated = [str(w.message) for w in caught if "deprecated" in str(w.message)]
    assert (not deprecated) if suffix == ".pt2" else deprecated, deprecated  # TorchScript's warn, as said
    with pytest.raises(SystemExit) as info:
        main([f"pytorch->{dest}", str(sample), "-o", str(tmp_path / "out")])
    out = capsys.readouterr()
    assert info.value.code == 0, out.err + out.out
    assert f"OK pytorch:{dest}" in out.out + out.err and "PASS" in out.out + out.err


@pytest.mark.parametrize("name", ["vit", "yolo"])
def test_dynamic_batch(saved: dict[str, dict[str, object]], name: str, tmp_path: Path) -> None:
    """--dynamic-batch: one ONNX file runs batches 1 and 3 (reshape/expand targets stay symbolic)."""
    from convert.frontends.pytorch import load_module
    from convert.ir import Options

    module = saved[name]["model"]
    options = Options(dynamic_batch=True)
    model = load_module(module, (saved[name]["x"],), options)  # type: ignore[arg-type]
    assert not options.diagnostics.warnings
    assert str(model.graph.inputs[0].shape[0]) == "batch"
    path = to_onnx(model, tmp_path / f"{name}_dyn.onnx")
    for batch in (1, 3):
        x = torch.rand(batch, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(batch))
        (ours,) = run_onnx(path, {"x": x.numpy()})
        with torch.no_grad():
            assert rel_to_scale(ours, module(x).numpy()) <= REL_TO_SCALE  # type: ignore[operator]


def test_python_api_in_memory_module(saved: dict[str, dict[str, object]], tmp_path: Path) -> None:
    """convert.convert(module, example_inputs, to=...) converts and checks parity against the module."""
    import convert

    case = saved["mobilenetv2"]
    result = convert.convert(case["model"], case["x"], to="onnx", out=tmp_path / "m.onnx")
    assert result.report is not None and result.report.passed
    (ours,) = run_onnx(tmp_path / "m.onnx", {"x": case["x"].numpy()})  # type: ignore[union-attr]
    assert rel_to_scale(ours, case["ref"]) <= REL_TO_SCALE  # type: ignore[arg-type]


class _CachesOnFirstCall(torch.nn.Module):
    """A head that builds a grid on its first call and keeps it, over a class attribute (as
    ultralytics' Detect does with its anchors: torch.export restores instance attributes only)."""

    grid = torch.empty(0)
    shape: tuple[int, ...] | None = None

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.shape != x.shape:
            ys, xs = torch.meshgrid(torch.arange(x.shape[2]), torch.arange(x.shape[3]), indexing="ij")
            self.grid = (ys * 0.5 + xs).to(x.dtype)
            self.shape = x.shape
        return self.conv(x) + self.grid


def test_converting_leaves_the_module_usable(tmp_path: Path) -> None:
    """torch.export runs forward on fake tensors: what forward caches on the module is put back after."""
    from convert.frontends.pytorch import load_module
    from convert.ir import Options

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 3, 1), _CachesOnFirstCall()).eval()
    x = torch.randn(1, 3, 6, 7)
    ir_model = load_module(model, (x,), Options())
    assert "grid" not in vars(model[1]) and model[1].shape is None  # as before: no fake tensor kept
    with torch.no_grad():
        ref = model(x).numpy()  # the first eager call, after the conversion
    ys, xs = np.meshgrid(np.arange(6), np.arange(7), indexing="ij")
    assert np.array_equal(model[1].grid.numpy(), (ys * 0.5 + xs).astype(np.float32))
    (ours,) = run_onnx(to_onnx(ir_model, tmp_path / "m.onnx"), {ir_model.graph.inputs[0].name: x.numpy()})
    assert rel_to_scale(ours, ref) <= REL_TO_SCALE
