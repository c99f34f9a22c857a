"""The parity verdict: error relative to the output's scale, and no PASS on a degenerate reference.

Each case runs two real ONNX files in ONNX Runtime through `convert check` and recomputes the
expected numbers with numpy here, independently of the product's comparison code.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

TOL = 1e-4  # the documented default of --tol


def _mlp(path: Path, w: np.ndarray, b: np.ndarray) -> None:
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def _check(src: Path, against: Path, tmp_path: Path, *extra: str) -> tuple[int, dict, str]:
    report = tmp_path / "r.json"
    np.savez(tmp_path / "x.npz", x=_seeded_x())
    result = subprocess.run([sys.executable, "-m", "convert", "check", "onnx:onnx", str(src), "--against",
                             str(against), "--report", str(report), "--inputs", str(tmp_path / "x.npz"), *extra],
                            capture_output=True, text=True, timeout=120)
    data = json.loads(report.read_text()) if report.exists() else {}
    return result.returncode, data, result.stdout + result.stderr


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _seeded_x() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)


def test_small_error_on_a_near_zero_element_passes(tmp_path: Path) -> None:
    """One element near zero off by more than atol + rtol*|ref|, the output right to 1e-6 of its scale."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32) * 100  # scale ~100: float32 rounding is ~1e-5 absolute
    w[0] *= 1e-4  # output column 0 stays near zero
    b[0] = 0.0
    _mlp(tmp_path / "a.onnx", w, b)
    b2 = b.copy()
    b2[0] += 2e-4  # elementwise: 2e-4 > atol 1e-4 where |ref| is small; relative to the scale: ~2e-6
    _mlp(tmp_path / "b.onnx", w, b2)
    x = _seeded_x()
    ref, got = _run(tmp_path / "a.onnx", x), _run(tmp_path / "b.onnx", x)
    expected = float(np.abs(got - ref).max() / np.abs(ref).max())
    assert expected < TOL
    code, data, text = _check(tmp_path / "a.onnx", tmp_path / "b.onnx", tmp_path)
    out = data["outputs"][0]
    assert code == 0, text
    assert out["verdict"] == "PASS"
    assert out["allclose_bad"] >= 1, "the case must be one the elementwise rule fails"
    assert abs(out["rel_to_scale"] - expected) <= 1e-3 * expected
    why = next(line for line in text.splitlines() if line.startswith("why PASS beside allclose 'no'"))
    assert f"reaches {float(np.abs(ref).max()):.3g} (its scale)" in why, why  # the table says why PASS is right


def test_two_percent_weight_error_fails(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    w = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    _mlp(tmp_path / "a.onnx", w, b)
    w2 = w.copy()
    w2[3, 5] *= 1.02
    _mlp(tmp_path / "b.onnx", w2, b)
    x = _seeded_x()
    ref, got = _run(tmp_path / "a.onnx", x), _run(tmp_path / "b.onnx", x)
    expected = float(np.abs(got - ref).max() / np.abs(ref).max())
    assert expected > TOL
    code, data, text = _check(tmp_path / "a.onnx", tmp_path / "b.onnx", tmp_path)
    assert code == 1, text
    assert data["outputs"][0]["verdict"] == "FAIL" and data["passed"] is False and data["verdict"] == "FAIL"


def test_degenerate_reference_is_not_verified(tmp_path: Path) -> None:
    """Zero weights: both models output the constant bias, so agreement proves nothing."""
    w = np.zeros((8, 16), np.float32)
    b = np.full(8, 0.5, np.float32)
    _mlp(tmp_path / "a.onnx", w, b)
    _mlp(tmp_path / "b.onnx", w, b)
    ref = _run(tmp_path / "a.onnx", _seeded_x())
    assert float(ref.std()) == 0.0
    code, data, text = _check(tmp_path / "a.onnx", tmp_path / "b.onnx", tmp_path)
    assert code == 1, text
    assert data["outputs"][0]["verdict"] == "NOT VERIFIED" and data["verdict"] == "NOT VERIFIED"
    assert "NOT VERIFIED" in text and "--inputs" in text
    # no output failed, so the summary says NOT VERIFIED (exit 1 all the same), not FAIL
    assert "NOT VERIFIED: 0/1 outputs" in text and "parity NOT VERIFIED" in text, text


def test_free_dimensions_get_realistic_sizes_and_are_reported(tmp_path: Path) -> None:
    """No --input-shape: batch 1, free height/width 224 (not 1), and the shapes used are in the report."""
    w = numpy_helper.from_array(np.random.default_rng(4).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, "H", "W"])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "a.onnx")
    report = tmp_path / "r.json"
    result = subprocess.run([sys.executable, "-m", "convert", "onnx:onnx", str(tmp_path / "a.onnx"), "-o",
                             str(tmp_path / "b.onnx"), "--report", str(report)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(report.read_text())["inputs"] == {"x": [1, 3, 224, 224]}
    assert "inputs: x 1x3x224x224" in result.stdout


def test_degenerate_reference_with_a_clear_difference_fails(tmp_path: Path) -> None:
    """A constant reference proves nothing when both agree, but a converted output 20% off is a FAIL."""
    w = np.zeros((8, 16), np.float32)
    _mlp(tmp_path / "a.onnx", w, np.full(8, 0.5, np.float32))
    _mlp(tmp_path / "b.onnx", w, np.full(8, 0.6, np.float32))
    code, data, text = _check(tmp_path / "a.onnx", tmp_path / "b.onnx", tmp_path)
    assert code == 1, text
    assert data["outputs"][0]["verdict"] == "FAIL"


def test_quantized_output_verdict_by_steps_and_by_the_references_own_spread() -> None:
    """A quantized output: within 2 steps passes; farther is FAIL unless the reference's own two
    kernel paths are farther apart than the allowance and ours is within twice their gap (NOT
    VERIFIED: rounding decides it). Expected verdicts written out by hand."""
    from convert.parity.compare import compare_one

    step = 0.1
    ref = np.arange(-50, 50, dtype=np.float64).astype(np.float32) * step  # spans 100 steps
    cases = [  # (offset in steps, the reference's own spread in steps, verdict)
        (1.0, 0.0, "PASS"), (2.0, 0.0, "PASS"), (3.0, 0.0, "FAIL"),
        (5.0, 1.0, "FAIL"),          # the reference is stable: 5 steps is a real difference
        (5.0, 4.0, "NOT VERIFIED"),  # its kernels differ by 4 steps; ours by 5 (<= 8)
        (9.0, 4.0, "FAIL"),          # farther than twice the reference's own gap
        (1.0, 30.0, "PASS"),         # within the allowance: the spread does not matter
    ]
    for offset, spread, verdict in cases:
        got = ref.copy()
        got[7] += offset * step
        result = compare_one("y", ref, "y", got, 1e-4, 1e-3, step=step, spread=spread * step)
        assert result.verdict == verdict, (offset, spread, result.verdict, result.note)
        assert result.passed == (verdict == "PASS")
    # With the second implementation's output: ours within twice the spread of either is NOT VERIFIED.
    second = ref.copy()
    second[7] += 4 * step  # the optimised kernels, 4 steps from the reference
    cases = [  # (offset in steps from the reference, verdict)
        (11.0, "NOT VERIFIED"),  # 11 > 8 from the reference, 7 <= 8 from the optimised kernels
        (12.0, "NOT VERIFIED"),  # 8 from the optimised kernels: the bound
        (13.0, "FAIL"),          # 9 from the optimised kernels, 13 from the reference
        (-5.0, "NOT VERIFIED"),  # 5 from the reference (9 from the other)
        (-9.0, "FAIL"),          # 9 and 13
    ]
    for offset, verdict in cases:
        got = ref.copy()
        got[7] += offset * step
        result = compare_one("y", ref, "y", got, 1e-4, 1e-3, step=step, spread=4 * step, second=second)
        assert result.verdict == verdict, (offset, result.verdict, result.note)


def test_random_output_is_not_verified_never_pass() -> None:
    """An output the converted model draws at random: NOT VERIFIED when its shape agrees (even if,
    by chance or by a constant draw, the values happen to agree), FAIL when its shape does not."""
    from convert.parity.compare import compare_one

    ref = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    source = "RandomNormalLike 'eps' from aten.randn_like at vae.py:9"
    for got in (np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32), ref.copy()):
        result = compare_one("z", ref, "z", got, 1e-4, 1e-3, random=source)
        assert result.verdict == "NOT VERIFIED" and not result.passed and source in result.note
    wrong = compare_one("z", ref, "z", np.zeros((3, 8), np.float32), 1e-4, 1e-3, random=source)
    assert wrong.verdict == "FAIL"


def test_constant_integer_output_is_not_verified_and_says_why() -> None:
    """A single-class detector's labels are constant whatever the input: NOT VERIFIED (agreement
    proves nothing), with a note that says it is an integer output, and the summary tells the user
    that more inputs will not change it. The report is NOT VERIFIED, not FAIL, as no output failed."""
    from convert.parity.compare import ParityReport, compare_one

    labels = np.ones(30, dtype=np.int64)
    boxes = np.random.default_rng(0).random((30, 4)).astype(np.float32)
    report = ParityReport("pytorch", "PyTorch", "cpu", "onnx", "ONNX Runtime", "cpu", 1e-4, 1e-3)
    report.outputs = [compare_one("boxes", boxes, "boxes", boxes.copy(), 1e-4, 1e-3),
                      compare_one("labels", labels, "labels", labels.copy(), 1e-4, 1e-3)]
    assert [o.verdict for o in report.outputs] == ["PASS", "NOT VERIFIED"]
    assert "integer output" in report.outputs[1].note
    text = report.table()
    # the verdict line follows the table and its numbered long notes
    assert report.verdict == "NOT VERIFIED" and text.splitlines()[6].startswith("NOT VERIFIED: 1/2 outputs"), text
    assert "single-class detector's labels" in text


def _detector_like(path: Path) -> None:
    """Rows of x above a threshold (NonZero + Gather): empty on N(0, 1) input, rows on a real one."""
    nodes = [
        helper.make_node("ReduceMax", ["x"], ["peak"], axes=[1], keepdims=0),
        helper.make_node("Greater", ["peak", "thr"], ["hit"]),
        helper.make_node("NonZero", ["hit"], ["idx"]),
        helper.make_node("Squeeze", ["idx", "zero"], ["rows"]),
        helper.make_node("Gather", ["x", "rows"], ["y"], axis=0),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 16])],
        [numpy_helper.from_array(np.array(10.0, np.float32), "thr"),
         numpy_helper.from_array(np.array([0], np.int64), "zero")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def test_empty_output_is_not_verified_never_pass(tmp_path: Path) -> None:
    """Nothing compared is not a PASS: an output empty on both sides is NOT VERIFIED (exit 1) with a
    hint; the same model on inputs that give rows passes."""
    src = tmp_path / "det.onnx"
    _detector_like(src)
    x = _seeded_x()
    sess = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    assert sess.run(None, {"x": x})[0].shape == (0, 16)  # the oracle: ONNX Runtime finds no row
    code, data, out = _check(src, src, tmp_path)
    assert code == 1 and data["verdict"] == "NOT VERIFIED", out
    assert "nothing was compared" in out and "--inputs" in out
    hot = x.copy()
    hot[1, 3] = 50.0
    assert sess.run(None, {"x": hot})[0].shape == (1, 16)
    np.savez(tmp_path / "hot.npz", x=hot)
    report = tmp_path / "hot.json"
    r = subprocess.run([sys.executable, "-m", "convert", "check", "onnx:onnx", str(src), "--against", str(src),
                        "--report", str(report), "--inputs", str(tmp_path / "hot.npz")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and json.loads(report.read_text())["verdict"] == "PASS", r.stdout + r.stderr
