"""`convert batch` end to end: real conversions of small sample models, the table, exit status and reports.

References are the real runtimes (ONNX Runtime, PyTorch eager, real Caffe or OpenCV's Caffe importer).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from batch_helpers import ROOT, run_cli, write_zoo

from convert.batch import SCHEMA

VERDICTS = {"cnn": "PASS", "simple-caffe": "PASS", "sample": "PASS", "missing": "ERROR", "nocheck": "CONVERTED",
            "tight": "FAIL"}


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    """One batch of the five sample models on two workers, with every report."""
    folder = tmp_path_factory.mktemp("batch")
    write_zoo(folder)
    (folder / "step.md").write_text("earlier step\n")
    r = run_cli("batch", "models.toml", "-j", "2", "--junit", "junit.xml", "--report", "batch.json",
                "--summary", "summary.md", cwd=folder, env={"GITHUB_STEP_SUMMARY": str(folder / "step.md")})
    return folder, r


def test_table_and_exit_status(full_run: tuple[Path, object]) -> None:
    folder, r = full_run
    assert r.returncode == 2, r.stderr  # a model could not be converted
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["model", "route", "verdict", "worst", "err/scale", "time", "peak", "RSS"]
    rows = {line.split()[0]: line.split() for line in lines[2:8]}
    assert {name: row[2] for name, row in rows.items()} == VERDICTS
    assert rows["sample"][1] == "pytorch:onnx" and rows["simple-caffe"][1] == "onnx:caffe"
    assert rows["cnn"][1] == rows["missing"][1] == "onnx:onnx"  # no 'from': guessed from the file names
    assert float(rows["cnn"][3]) < 1e-6  # ONNX Runtime against itself (BatchNorm folded)
    assert float(rows["sample"][3]) < 1e-4 and 0 < float(rows["tight"][3]) < 1e-4
    assert any("missing: " in line and "no-such-model.onnx: no such file" in line for line in lines)
    assert "worst element [" in r.stdout and "first bad layer:" in r.stdout
    assert lines[-1].startswith("ERROR batch | 6 models: 1 ERROR, 1 FAIL, 3 PASS, 1 CONVERTED | ")
    assert lines[-1].endswith("| 2 worker(s)")
    # not a terminal: one line per finished model
    progress = [line for line in r.stderr.splitlines() if line.startswith("[")]
    assert len(progress) == 6 and {p.split()[2] for p in progress} == set(VERDICTS)
    assert (folder / "out" / "cnn" / "cnn.onnx").exists()
    assert (folder / "out" / "simple-caffe" / "simple.prototxt").exists()
    assert (folder / "out" / "simple-caffe" / "simple.caffemodel").exists()
    assert not (folder / "out" / "missing").exists()
    prototxt = (folder / "out" / "simple-caffe" / "simple.prototxt").read_text()
    assert prototxt.startswith("# Written by convert-toolkit, Caffe flavor 'bvlc'.")  # the model's options


def test_junit(full_run: tuple[Path, object]) -> None:
    folder, _ = full_run
    root = ET.parse(folder / "junit.xml").getroot()
    assert root.tag == "testsuites"
    assert [root.get(k) for k in ("tests", "failures", "errors", "skipped")] == ["6", "1", "1", "1"]
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert set(cases) == {"cnn [onnx:onnx] output 'y'", "simple-caffe [onnx:caffe] output 'y'",
                          "sample [pytorch:onnx] output 'output'", "missing [onnx:onnx]",
                          "nocheck [onnx:onnx]", "tight [onnx:caffe] output 'y'"}
    assert cases["nocheck [onnx:onnx]"].find("skipped") is not None
    failure = cases["tight [onnx:caffe] output 'y'"].find("failure")
    assert failure is not None and failure.get("type") == "parity"
    message = failure.get("message", "")
    assert "err/scale" in message and "(tol 1e-12)" in message and "worst element [0," in message
    # At tol 1e-12 the first layer whose error is above it is named: the Conv 'c' where real Caffe's
    # convolution rounds differently from ONNX Runtime's on this CPU, else the Gemm 'y' after it
    # (on some CPUs both compute the convolution bit for bit alike).
    assert re.search(r"first bad layer: simple\.onnx \[(Conv\] 'c'|Gemm\] 'y')", message), message
    assert "locate: compared" in (failure.text or "")
    error = cases["missing [onnx:onnx]"].find("error")
    assert error is not None and "no-such-model.onnx: no such file" in error.get("message", "")
    assert cases["cnn [onnx:onnx] output 'y'"].find("failure") is None
    assert "PASS: 1/1 outputs" in (cases["cnn [onnx:onnx] output 'y'"].findtext("system-out") or "")


def test_json_report(full_run: tuple[Path, object]) -> None:
    folder, _ = full_run
    data = json.loads((folder / "batch.json").read_text())
    assert data["schema"] == SCHEMA and data["exit_status"] == 2
    assert data["runner"] == {"kind": "local", "workers": 2}
    assert data["counts"] == {"ERROR": 1, "FAIL": 1, "UNCHECKED": 0, "REGRESSED": 0, "PASS": 3, "CONVERTED": 1}
    models = {m["name"]: m for m in data["models"]}
    assert list(models) == list(VERDICTS)  # manifest order, whatever order they finished in
    assert {n: m["verdict"] for n, m in models.items()} == VERDICTS
    for m in models.values():
        assert m["seconds"] > 0 and 30 << 20 < m["peak_rss_bytes"] < 8 << 30 and m["attempts"] == 1
    tight = models["tight"]["parity"]  # the single command's --report, unchanged
    assert {"source", "dest", "outputs", "passed", "location", "criterion"} <= set(tight)
    out = tight["outputs"][0]
    assert models["tight"]["worst_error"] == out["rel_to_scale"] and out["verdict"] == "FAIL"
    assert out["max_abs"] == pytest.approx(abs(out["worst_ref"] - out["worst_got"]), rel=1e-6)
    assert tight["location"]["first_bad"]["layer"] in ("c", "y")  # see test_junit
    assert models["missing"]["parity"] is None and "no such file" in models["missing"]["error"]
    assert models["simple-caffe"]["outputs"][0].endswith("out/simple-caffe/simple.prototxt")
    cnn = models["cnn"]["parity"]  # parity inputs from the manifest's .npz, not seeded
    assert cnn["seed"] is None and cnn["inputs"] == {"x": [1, 3, 32, 32]}
    assert models["nocheck"]["parity"] is None and models["nocheck"]["outputs"][0].endswith("out/nocheck/cnn.onnx")
    doc = (ROOT / "docs" / "batch.md").read_text()  # the schema documented there names every field
    for key in [*data, *models["tight"]]:
        assert f'"{key}"' in doc, key


def test_markdown_summary_and_github_step_summary(full_run: tuple[Path, object]) -> None:
    folder, _ = full_run
    text = (folder / "summary.md").read_text()
    assert "| model | route | verdict | worst err/scale | time | peak RSS |" in text
    assert "| tight | onnx:caffe | ❌ FAIL |" in text and "| missing | onnx:onnx | 💥 ERROR | – |" in text
    step = (folder / "step.md").read_text()
    assert step.startswith("earlier step\n") and text.strip() in step  # appended, not replaced


def test_parity_failure_alone_exits_1(full_run: tuple[Path, object]) -> None:
    folder, _ = full_run
    r = run_cli("batch", "models.toml", "--model", "cnn", "--model", "tight", "-o", "out1", "-q", cwd=folder)
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines()[-1].startswith("FAIL batch | 2 models: 1 FAIL, 1 PASS | ")


def test_baseline_accept_then_regression(full_run: tuple[Path, object]) -> None:
    """A run within tolerance fails when its error grew past factor x the accepted baseline's."""
    folder, _ = full_run
    args = ("batch", "models.toml", "--model", "simple-caffe", "-o", "out2", "-q", "--baseline", "base.json")
    r = run_cli(*args, "--accept", cwd=folder)
    assert r.returncode == 0, r.stderr
    assert "accepted this run as the baseline base.json" in r.stderr
    # accepting a subset keeps the other models' accepted entries
    r = run_cli("batch", "models.toml", "--model", "cnn", "-o", "out2", "-q", "--baseline", "base.json", "--accept",
                cwd=folder)
    assert r.returncode == 0, r.stderr
    base = json.loads((folder / "base.json").read_text())
    assert [m["name"] for m in base["models"]] == ["cnn", "simple-caffe"]
    assert "kept the accepted entries of 1 model(s) not run: simple-caffe" in base["notes"]
    output = base["models"][1]["parity"]["outputs"][0]
    err = output["rel_to_scale"]
    assert 1e-8 < err < 1e-4, "the test needs a conversion with a small non-zero error"
    output["rel_to_scale"] = err / 1000  # an earlier run that was 1000 times closer
    (folder / "base.json").write_text(json.dumps(base))
    r = run_cli(*args, "--regression-floor", "1e-12", "--junit", "j.xml", cwd=folder)
    assert r.returncode == 1, r.stderr
    assert "REGRESSED" in r.stdout.splitlines()[2] and "(limit 10 x max(baseline, 1e-12)" in r.stdout
    failure = ET.parse(folder / "j.xml").getroot().find(".//failure")
    assert failure is not None and failure.get("type") == "regression"
    # the default floor (1e-6) treats the improved baseline as float32 noise: no regression
    r = run_cli(*args, cwd=folder)
    assert r.returncode == 0, r.stdout


def test_regression_option_defaults_are_the_reports() -> None:
    """`check` and `batch` share one pair of --regression-* options; their defaults are the reports' own."""
    from convert.batch.reports import DEFAULT_FACTOR, DEFAULT_FLOOR
    from convert.cli import cli

    for name in ("check", "batch"):
        params = {p.name: p.default for p in cli.commands[name].params}  # type: ignore[attr-defined]
        assert (params["regression_factor"], params["regression_floor"]) == (DEFAULT_FACTOR, DEFAULT_FLOOR)
