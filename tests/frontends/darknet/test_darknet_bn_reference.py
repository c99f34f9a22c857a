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
def test_trained_statistics_at_an_assumed_lineage_are_not_verified_until_the_lineage_is_given(tmp_path: Path
                                                                                               ) -> None:
    """A cfg both forks run, default options, trained-like statistics: the conversion computes
    AlexeyAB's batch norm within tol of libdarknet made to compute it, but pjreddie's gives outputs far
    from it on these weights and no check can tell which fork trained them: NOT VERIFIED naming
    --darknet-lineage (was PASS, exit 0, a guess). Given the lineage, the check decides: PASS."""
    cfg = sized_cfg(SYSTEM_CFG / "yolov3-tiny.cfg", tmp_path, 160)
    weights = trained_like(cfg, write_random_weights(cfg, tmp_path / "r.weights"), tmp_path / "t.weights")
    onnx_path, _ = convert_to_onnx(cfg, weights, tmp_path / "net.onnx")
    report = run_parity("darknet", [cfg, weights], "onnx", [onnx_path], options=Options())
    assert report.verdict == "NOT VERIFIED", report.table()
    assert max(o.rel_to_scale for o in report.outputs) < 1e-4  # ours is AlexeyAB's function ...
    assert "rewritten so that this yields AlexeyAB's sqrt(v + 1e-5)" in " ".join(report.method)
    for out in report.outputs:  # ... and pjreddie's differs: which one the weights need is the user's to say
        assert "lineage was ASSUMED AlexeyAB's" in out.undecided and "--darknet-lineage original" in out.undecided
    assert report.location is None
    given = run_parity("darknet", [cfg, weights], "onnx", [onnx_path],
                       options=Options(extra={"darknet_lineage": "alexeyab"}))
    assert given.verdict == "PASS" and max(o.rel_to_scale for o in given.outputs) < 1e-4, given.table()


@needs_libdarknet
@pytest.mark.darknet
def test_the_check_takes_the_lineage_the_file_was_converted_with(tmp_path: Path) -> None:
    """A model converted with --darknet-lineage original, then checked without the flag: the check
    takes pjreddie's lineage from the file's record and passes (it assumed AlexeyAB's, failed, and a
    note said AlexeyAB's was the lineage 'it was converted with'). A file without that record is NOT
    VERIFIED naming the flag (and `convert check --darknet-lineage original` passes it); checked
    explicitly as AlexeyAB's, it fails."""
    import subprocess
    import sys

    import onnx

    cfg = sized_cfg(SYSTEM_CFG / "yolov3-tiny.cfg", tmp_path, 160)
    weights = trained_like(cfg, write_random_weights(cfg, tmp_path / "r.weights"), tmp_path / "t.weights")
    onnx_path, _ = convert_to_onnx(cfg, weights, tmp_path / "net.onnx", darknet_lineage="original")
    report = run_parity("darknet", [cfg, weights], "onnx", [onnx_path], options=Options())
    assert report.verdict == "PASS" and max(o.rel_to_scale for o in report.outputs) < 1e-4, report.table()
    assert any("lineage: pjreddie's, as the converted file records" in m for m in report.method)
    assert not any("converted with" in n for n in report.notes), report.notes
    bare = onnx.load(str(onnx_path))
    del bare.metadata_props[:]
    unrecorded = tmp_path / "bare.onnx"
    onnx.save(bare, str(unrecorded))
    report = run_parity("darknet", [cfg, weights], "onnx", [unrecorded], options=Options(), locate=False)
    assert report.verdict == "NOT VERIFIED", report.table()
    for out in report.outputs:
        assert out.rel_to_scale > 1e-3  # far from AlexeyAB's function, which the check assumed ...
        assert "computes pjreddie's batch norm" in out.undecided and "which the check ASSUMED" in out.undecided
        assert "--darknet-lineage original" in out.undecided  # ... and the flag that decides
    report = run_parity("darknet", [cfg, weights], "onnx", [onnx_path], locate=False,
                        options=Options(extra={"darknet_lineage": "alexeyab"}))
    assert report.verdict == "FAIL" and min(o.rel_to_scale for o in report.outputs) > 1e-3
    done = subprocess.run([sys.executable, "-m", "convert", "check", str(cfg), str(weights), "--against",
                           str(unrecorded), "--darknet-lineage", "original"], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0 and "parity PASS" in done.stdout, done.stdout + done.stderr
