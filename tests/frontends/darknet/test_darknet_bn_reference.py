"""The Darknet references compute the conversion's batch norm, whatever their own formula.

pjreddie's libdarknet divides by ``sqrt(v) + 1e-6``, OpenCV's importer by ``sqrt(v + 1e-6)``,
AlexeyAB's Darknet by ``sqrt(v + 1e-5)``. Each reference runs a copy of the weights whose variances
make its formula yield the lineage converted with; these tests check that against the two forks'
formulas written here, on one batch-normalised convolution whose variances span trained values,
and the verdict it leads to both ways: PASS on a right conversion with trained statistics, FAIL on a
conversion made for the other fork, NOT VERIFIED where the reference's formula cannot express the
target's, and the note that says what an assumed lineage means for these weights.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from darknet_helpers import (
    SYSTEM_CFG,
    convert_to_onnx,
    needs_libdarknet,
    needs_opencv,
    sized_cfg,
    trained_like,
    write_cfg,
    write_weights,
)

from convert.frontends.darknet.random_weights import write_random_weights
from convert.ir import Options
from convert.parity import run_parity
from convert.parity.runtimes.darknet import DarknetLib, OpenCVDarknet

ONE_LAYER = """
[net]
width=6
height=6
channels=3

[convolutional]
batch_normalize=1
filters=5
size=1
stride=1
pad=0
activation=linear
"""

# The forks' denominators, as their sources write them (float64 here).
FORK = {"alexeyab": lambda v: np.sqrt(v + 1e-5), "original": lambda v: np.sqrt(v) + 1e-6}


def _one_layer(tmp: Path, variances: list[float]) -> tuple[Path, Path, dict[str, np.ndarray], np.ndarray]:
    rng = np.random.default_rng(3)
    n = len(variances)
    p = {"bias": rng.standard_normal(n), "scale": rng.uniform(0.5, 1.5, n) * 1e-2,
         "mean": rng.standard_normal(n) * 0.1, "var": np.array(variances), "w": rng.standard_normal((n, 3))}
    p = {k: v.astype(np.float32) for k, v in p.items()}
    cfg = write_cfg(tmp, ONE_LAYER.replace("filters=5", f"filters={n}"))
    weights = write_weights(tmp / "net.weights", [p["bias"], p["scale"], p["mean"], p["var"], p["w"]])
    x = np.random.default_rng(4).random((1, 3, 6, 6), dtype=np.float32)
    return cfg, weights, p, x


def _fork_output(p: dict[str, np.ndarray], x: np.ndarray, lineage: str) -> np.ndarray:
    conv = np.einsum("oc,bchw->bohw", p["w"].astype(np.float64), x.astype(np.float64))
    den = FORK[lineage](p["var"].astype(np.float64))

    def col(a: np.ndarray) -> np.ndarray:
        return a.astype(np.float64)[None, :, None, None]

    return (conv - col(p["mean"])) / col(den) * col(p["scale"]) + col(p["bias"])


def _err(ref: np.ndarray, got: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float64) - ref).max() / np.abs(ref).max())


RUNTIMES = [pytest.param(DarknetLib, marks=[needs_libdarknet, pytest.mark.darknet], id="libdarknet"),
            pytest.param(OpenCVDarknet, marks=[needs_opencv, pytest.mark.opencv], id="opencv")]


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("lineage", ["alexeyab", "original"])
def test_reference_computes_the_lineage_converted_with(runtime: type, lineage: str, tmp_path: Path) -> None:
    cfg, weights, p, x = _one_layer(tmp_path, [0.5, 1e-4, 3e-6, 1e-7])
    rt = runtime(cfg, weights, Options(extra={"darknet_lineage": lineage}))
    out = next(iter(rt.run({"data": x}).values()))
    other = "original" if lineage == "alexeyab" else "alexeyab"
    assert _err(_fork_output(p, x, lineage), out) < 1e-5
    assert _err(_fork_output(p, x, other), out) > 0.1  # the two forks differ on these variances
    assert rt.formula_gap == ""


@needs_opencv
@pytest.mark.opencv
def test_variance_opencv_cannot_express_is_not_verified_never_fail(tmp_path: Path) -> None:
    """OpenCV's sqrt(v' + 1e-6) cannot reach pjreddie's sqrt(0) + 1e-6 in float32 (v' cancels)."""
    cfg, weights, _, x = _one_layer(tmp_path, [0.5, 1e-4, 0.0])
    onnx_path, _ = convert_to_onnx(cfg, weights, tmp_path / "net.onnx", darknet_lineage="original")
    options = Options(extra={"darknet_lineage": "original"})
    rt = OpenCVDarknet(cfg, weights, options)
    assert "cannot compute pjreddie's batch norm exactly" in rt.formula_gap
    assert "layer 0 [convolutional]" in rt.formula_gap
    report = run_parity("darknet", [cfg, weights], "onnx", [onnx_path], options=options, source_runtime=rt,
                        inputs={"data": x}, locate=False)
    out = report.outputs[0]
    assert out.rel_to_scale > report.tol  # the reference's own difference is visible ...
    assert report.verdict == "NOT VERIFIED" and out.ref_inexact  # ... and is not blamed on the conversion
    assert "NOT VERIFIED" in report.table()


@needs_libdarknet
@pytest.mark.darknet
def test_trained_statistics_pass_at_default_lineage_and_say_what_the_assumption_means(tmp_path: Path) -> None:
    """A cfg both forks run, default options, trained-like statistics: PASS against libdarknet,
    with a note that pjreddie's batch norm gives other outputs on these weights."""
    cfg = sized_cfg(SYSTEM_CFG / "yolov3-tiny.cfg", tmp_path, 160)
    weights = trained_like(cfg, write_random_weights(cfg, tmp_path / "r.weights"), tmp_path / "t.weights")
    onnx_path, _ = convert_to_onnx(cfg, weights, tmp_path / "net.onnx")
    report = run_parity("darknet", [cfg, weights], "onnx", [onnx_path], options=Options())
    assert report.verdict == "PASS", report.table()
    assert max(o.rel_to_scale for o in report.outputs) < 1e-4
    said = " ".join(report.notes)
    assert "rewritten so that this yields AlexeyAB's sqrt(v + 1e-5)" in " ".join(report.method)
    assert "lineage ASSUMED AlexeyAB's" in said and "--darknet-lineage original" in said


@needs_libdarknet
@pytest.mark.darknet
def test_conversion_for_the_other_fork_fails_and_is_recognised(tmp_path: Path) -> None:
    """A model converted for pjreddie's fork, checked as AlexeyAB's: FAIL, and the note says which
    fork the converted model does match."""
    cfg = sized_cfg(SYSTEM_CFG / "yolov3-tiny.cfg", tmp_path, 160)
    weights = trained_like(cfg, write_random_weights(cfg, tmp_path / "r.weights"), tmp_path / "t.weights")
    onnx_path, _ = convert_to_onnx(cfg, weights, tmp_path / "net.onnx", darknet_lineage="original")
    report = run_parity("darknet", [cfg, weights], "onnx", [onnx_path], options=Options(), locate=False)
    assert report.verdict == "FAIL"
    assert min(o.rel_to_scale for o in report.outputs) > 1e-3
    assert any("matches pjreddie's batch norm" in n for n in report.notes), report.notes
