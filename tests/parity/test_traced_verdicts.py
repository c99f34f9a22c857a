"""Verdicts on traced PyTorch files (#48, verdicts: traced detectors through the CLI).

- A traced graph fixes the dtype of every tensor its code made or cast (``dtype=6``: float32), so
  ``module.double()`` of a traced file met a float32 tensor of its own ("mat1 and mat2 must have
  the same dtype" inside torchvision's ``roi_heads``), the check logged that at INFO and judged
  without its float64 arbiter: a false FAIL wherever float32 rounding alone passes ``tol``. The
  file now runs in float64 as its graph widened (``parity/runtimes/_torch_wide.py``).
- Where no float64 run judges an output, the source's second float32 run (oneDNN off) measures
  rounding, and where nothing does the output is NOT VERIFIED with the reason, never FAIL.
- A single-class detector's labels are constant: they were NOT VERIFIED for want of spread, so
  such a detector never got a PASS. Integer labels are judged exactly on the paired rows.
- ``convert check`` on a traced torchvision detector exited 3 ('Unknown builtin op:
  torchvision::nms'): it did not import torchvision where the conversion does.
- ``locate`` runs on FAIL only, not after a NOT VERIFIED.

Every correct file is checked against a wrong one: a weight scaled by 1.01 must still FAIL.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import sample_models
from onnx import numpy_helper

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[2]
TOL = 2e-7  # below float32 rounding on MobileNetV2 (tests/parity/test_float64_arbiter.py)


class FixedDtypeHead(torch.nn.Module):
    """MobileNetV2 whose features are copied into a buffer made ``dtype=features.dtype`` before the
    classifier, as torchvision's RoI heads fill a tensor of their input's dtype: traced, the
    buffer is float32 whatever the input, and the classifier meets it in float64."""

    def __init__(self) -> None:
        super().__init__()
        net = sample_models.nets().build("mobilenetv2")  # type: ignore[attr-defined]
        self.features, self.head = net.features, torch.nn.Linear(net.classifier[-1].in_features, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.features(x).mean((2, 3))
        buf = torch.zeros(f.shape, dtype=f.dtype)
        buf[:] = f
        return self.head(buf)


def _x(seed: int = 1) -> torch.Tensor:
    return torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(seed))


def _scaled(src: Path, dst: Path, pick: object, factor: float = 1.01) -> str:
    """Write ``src`` with the first initializer ``pick(init)`` chooses scaled by ``factor``; its name."""
    proto = onnx.load(src)
    init = next(i for i in proto.graph.initializer if pick(i))  # type: ignore[operator]
    init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(factor), init.name))
    onnx.save(proto, dst)
    return init.name


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``convert ARGS`` in a fresh process (nothing imported before it: torchvision neither)."""
    return subprocess.run([sys.executable, "-m", "convert", *args], capture_output=True, text=True, timeout=600,
                          cwd=ROOT)


def test_traced_file_runs_in_float64_with_its_graph_widened(tmp_path: Path) -> None:
    """The traced file's float64 run (its graph widened) is the module's own eager float64 run, to
    float64 rounding (numpy, here); at a tol below float32 rounding it arbitrates: ours no farther
    from it than torch's own float32 run (PASS, was FAIL without an arbiter), and a head weight
    scaled by 1.01 FAILs."""
    import convert
    from convert.ir import Options
    from convert.parity.runtimes.torch import open_runtime

    torch.manual_seed(0)
    model = FixedDtypeHead().eval()
    with torch.no_grad():
        torch.jit.save(torch.jit.trace(model, (_x(),)), tmp_path / "m.pt")
        with pytest.raises(RuntimeError, match="dtype"):  # what the check ran before: no float64 run
            copy.deepcopy(torch.jit.load(tmp_path / "m.pt")).double()(_x().double())
    convert.convert(tmp_path / "m.pt", to="onnx", out=tmp_path / "m.onnx", check=False)
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)}
    runtime = open_runtime([tmp_path / "m.pt"], Options())
    runtime.run(feeds)
    (wide,) = runtime.run_float64(feeds).values()  # type: ignore[union-attr]
    with torch.no_grad():
        eager64 = copy.deepcopy(model).double()(torch.from_numpy(feeds["x"]).double()).numpy()
    assert wide.dtype == np.float64
    assert np.abs(wide - eager64).max() / np.abs(eager64).max() < 1e-12

    good = convert.verify(tmp_path / "m.pt", tmp_path / "m.onnx", tol=TOL, locate=False)
    _scaled(tmp_path / "m.onnx", tmp_path / "wrong.onnx", lambda i: tuple(i.dims) in ((10, 64), (64, 10)))
    bad = convert.verify(tmp_path / "m.pt", tmp_path / "wrong.onnx", tol=TOL, locate=False)
    print(good.table(), bad.table(), sep="\n")
    (out,) = good.outputs
    assert out.rel_to_scale > TOL and out.verdict == "PASS" and out.by_float64, good.table()
    assert "float64 run of the source" in out.note and "float32 rounding" in out.note
    (wrong,) = bad.outputs
    assert wrong.verdict == "FAIL" and bad.verdict == "FAIL", bad.table()
    assert "float64 run of the source" in wrong.note and "float32 rounding" not in wrong.note


def _single_class_detector() -> torch.nn.Module:
    """models/pytorch/detectors.py's Faster R-CNN look-alike with one class (its labels all 1) and
    a score threshold that keeps its 16 proposals' detections on the check's default input."""
    detectors = sample_models._load("pytorch_test_detectors",  # type: ignore[attr-defined]
                                    ROOT / "models" / "pytorch" / "detectors.py")
    torch.manual_seed(0)
    return detectors.FasterRCNNLike(classes=1, score_thresh=0.2).eval()  # type: ignore[attr-defined]


def test_single_class_traced_detector_passes_through_the_cli(tmp_path: Path) -> None:
    """A traced single-class detector (torchvision::nms in its graph) converted and checked by the
    CLI, each in a fresh process: PASS (exit 0), its constant labels judged exactly on the paired
    rows beside boxes that vary (was NOT VERIFIED, exit 1, for want of spread); ``convert check`` on
    the same pair reads the file with torchvision's operators (was exit 3); the same file with its
    class-score weights scaled by 1.01 FAILs (exit 1)."""
    pytest.importorskip("torchvision")
    model = _single_class_detector()
    with torch.no_grad():
        torch.jit.save(torch.jit.trace(model, (_x(),), check_trace=False), tmp_path / "det.pt")
    graph = str(torch.jit.load(tmp_path / "det.pt").inlined_graph)
    assert "torchvision::nms" in graph

    converted = _cli("pytorch:onnx", str(tmp_path / "det.pt"), "-o", str(tmp_path / "det.onnx"))
    print(converted.stdout, converted.stderr)
    checked = _cli("check", "pytorch:onnx", str(tmp_path / "det.pt"), "--against", str(tmp_path / "det.onnx"))
    print(checked.stdout, checked.stderr)
    assert checked.returncode != 3 and "torchvision::nms" not in checked.stderr, checked.stderr
    assert converted.returncode == 0, converted.stdout + converted.stderr
    labels = next(line for line in converted.stdout.splitlines() if line.startswith("output2 "))
    assert "PASS" in labels and "judged exactly" in converted.stdout, converted.stdout
    rows = next(line for line in converted.stdout.splitlines() if line.startswith("output0 "))
    assert int(rows.split()[1].split("x")[0]) >= 8  # several detections: boxes that vary
    assert checked.returncode == 0 and "parity PASS" in checked.stdout, checked.stdout + checked.stderr

    _scaled(tmp_path / "det.onnx", tmp_path / "wrong.onnx", lambda i: tuple(i.dims) in ((2, 64), (64, 2)))
    wrong = _cli("check", "pytorch:onnx", str(tmp_path / "det.pt"), "--against", str(tmp_path / "wrong.onnx"),
                 "--no-locate")
    print(wrong.stdout, wrong.stderr)
    assert wrong.returncode == 1 and "parity FAIL" in wrong.stdout, wrong.stdout + wrong.stderr


def test_labels_are_judged_exactly(tmp_path: Path) -> None:
    """An integer output of a set group is right or wrong: one label off on a paired row FAILs even
    where its error relative to its scale is within a loose tol (1 of 3 classes at tol 0.5), and a
    constant one PASSes only when equal on every paired row and the boxes vary."""
    from convert.parity.compare import SetItem, compare_sets, judge_set_integers

    boxes = np.array([[0, 0, 10, 10], [5, 5, 20, 30], [40, 2, 60, 9]], np.float32)
    scores = np.array([0.9, 0.7, 0.4], np.float32)

    def judged(ref_labels: list[int], got_labels: list[int], ref_boxes: np.ndarray = boxes,
               ref_scores: np.ndarray = scores) -> list[str]:
        items = [SetItem("b", ref_boxes, "b", ref_boxes.copy(), 0),
                 SetItem("s", ref_scores, "s", ref_scores.copy(), 0),
                 SetItem("l", np.array(ref_labels, np.int64), "l", np.array(got_labels, np.int64), 0)]
        return [r.verdict for r in judge_set_integers(items, compare_sets(items, "NMS", 1e-4, 1e-3, 0.5))]

    assert judged([1, 2, 3], [1, 2, 3]) == ["PASS"] * 3
    assert judged([1, 2, 3], [1, 2, 2])[2] == "FAIL"  # 1 off of a scale of 3: within tol 0.5, still wrong
    assert judged([1, 1, 1], [1, 1, 1]) == ["PASS"] * 3  # one class: exact, beside boxes that vary
    assert judged([1, 1, 1], [1, 1, 2])[2] == "FAIL"
    same = judged([1, 1, 1], [1, 1, 1], np.repeat(boxes[:1], 3, axis=0), np.repeat(scores[:1], 3))
    assert same[2] == "NOT VERIFIED"  # no row differs from another: nothing beside the labels varies


class NarrowOutput(torch.nn.Module):
    """A net whose forward casts its result to float32 itself: its float64 run stores it in float32,
    too coarse an arbiter at this tol (``FLOAT32_ARBITER_MIN_TOL``)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = sample_models.nets().build("mobilenetv2")  # type: ignore[attr-defined]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).float()


def test_without_a_float64_run_the_second_float32_run_measures_rounding(tmp_path: Path) -> None:
    """No float64 run judges the output: torch's second float32 run (oneDNN off) measures what
    rounding costs, and the verdict says so. Ours is within twice the two runs' distance of the
    nearer one (recomputed here in numpy): PASS (was a FAIL for want of an arbiter); the classifier's
    weight scaled by 1.01: FAIL."""
    import convert
    from convert.ir import Options
    from convert.parity import run_parity
    from convert.parity.runtimes.torch import module_runtime

    model = NarrowOutput().eval()
    result = convert.convert(model, _x(), to="onnx", out=tmp_path / "m.onnx", tol=TOL, locate=False)
    (out,) = result.report.outputs
    print(result.report.table())
    assert out.rel_to_scale > TOL and out.verdict == "PASS" and out.by_second and not out.by_float64, out
    assert "no float64 run of the source" in out.note and "oneDNN off" in out.note
    assert "nearer of the source's two float32 runs" in result.report.table()
    x = _x().numpy()
    with torch.no_grad():
        first = model(torch.from_numpy(x)).numpy().astype(np.float64)
        with torch.backends.mkldnn.flags(enabled=False):
            second = model(torch.from_numpy(x)).numpy().astype(np.float64)
    import onnxruntime as ort

    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    ours = session.run(None, {session.get_inputs()[0].name: x})[0].astype(np.float64)
    scale = np.abs(first).max()
    apart = np.abs(first - second).max() / scale
    nearer = min(np.abs(ours - first).max(), np.abs(ours - second).max()) / scale
    assert 0 < apart <= 10 * TOL and nearer <= 2 * apart, (apart, nearer)

    gemm = _scaled(tmp_path / "m.onnx", tmp_path / "wrong.onnx", lambda i: tuple(i.dims) in ((10, 64), (64, 10)))
    assert gemm
    wrong = run_parity("pytorch", [], "onnx", [tmp_path / "wrong.onnx"], source_runtime=module_runtime(
        model, (_x(),), Options()), inputs={"x": x}, tol=TOL, locate=False)
    (bad,) = wrong.outputs
    assert bad.verdict == "FAIL" and not bad.by_second, wrong.table()
    assert "second float32 run" in bad.note


class ConstantBeside(torch.nn.Module):
    """A convolution's output beside one that is constant whatever the input."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.conv(x), x.sum() * 0 + 1


def test_locate_runs_on_fail_not_on_not_verified(tmp_path: Path) -> None:
    """docs/verdict.md: the layer-by-layer run is for a FAIL. A NOT VERIFIED check (an output
    without spread) no longer runs it (Keypoint R-CNN: 374 s and 2.8 GB of the check's 515 s and
    4.9 GB); a FAIL still does."""
    import convert

    torch.manual_seed(0)
    model = ConstantBeside().eval()
    x = _x()
    with torch.no_grad():
        torch.jit.save(torch.jit.trace(model, (x,)), tmp_path / "m.pt")
    convert.convert(tmp_path / "m.pt", to="onnx", out=tmp_path / "m.onnx", check=False)
    unsure = convert.verify(tmp_path / "m.pt", tmp_path / "m.onnx")
    assert unsure.verdict == "NOT VERIFIED" and unsure.location is None, unsure.table()
    _scaled(tmp_path / "m.onnx", tmp_path / "wrong.onnx", lambda i: tuple(i.dims) == (4, 3, 3, 3))
    failed = convert.verify(tmp_path / "m.pt", tmp_path / "wrong.onnx")
    assert failed.verdict == "FAIL" and failed.location is not None, failed.table()


def test_float64_run_computes_only_the_outputs_asked_for(tmp_path: Path) -> None:
    """The float64 run of a traced file is asked for the outputs the verdict needs: the others are
    not returned (their code is dropped from the widened graph), and those returned are the full
    run's."""
    from convert.ir import Options
    from convert.parity.runtimes.torch import open_runtime

    torch.manual_seed(0)
    with torch.no_grad():
        torch.jit.save(torch.jit.trace(ConstantBeside().eval(), (_x(),)), tmp_path / "m.pt")
    runtime = open_runtime([tmp_path / "m.pt"], Options())
    feeds = {"x": _x().numpy()}
    runtime.run(feeds)
    both = runtime.run_float64(feeds)
    one = runtime.run_float64(feeds, needed={"output0"})
    assert both is not None and one is not None and set(both) == {"output0", "output1"} and set(one) == {"output0"}
    assert one["output0"].dtype == np.float64 and np.array_equal(one["output0"], both["output0"])
