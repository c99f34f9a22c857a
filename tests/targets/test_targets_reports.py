"""`--on` in the reports: the parity table's row per target, the JSON report's ``targets`` list, a
JUnit testcase per target in ``convert batch`` (manifest key ``on``), and the exit status, which
counts a target's FAIL like any FAIL: a small Conv net passes on OpenVINO and ncnn (float32, within
1e-5 of ONNX Runtime), a file with ops OpenVINO cannot import (Det, MaxUnpool) FAILs there."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from test_targets_errors import _conv_model, _unsupported_model

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convert", *args], capture_output=True, text=True, timeout=600,
                          cwd=cwd)


def test_json_report_lists_each_target(tmp_path: Path) -> None:
    src = _conv_model(tmp_path / "m.onnx")
    proc = _cli("onnx:onnx", str(src), "-o", str(tmp_path / "out.onnx"), "--on", "openvino,ncnn", "--report",
                str(tmp_path / "r.json"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [ln for ln in proc.stdout.splitlines() if re.match(r"(openvino|ncnn)  ", ln)]  # the table's rows
    assert len(rows) == 2 and all(ln.rstrip().endswith("PASS") for ln in rows), proc.stdout
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["verdict"] == "PASS"
    by = {t["target"]: t for t in data["targets"]}
    assert set(by) == {"openvino", "ncnn"}
    ov = by["openvino"]
    assert ov["toolchain"] == "OpenVINO" and ov["version"].startswith("20") and ov["precision"].startswith("f32")
    assert ov["verdict"] == "PASS" and ov["outputs"][0]["name"] == "y"
    assert 0 <= ov["outputs"][0]["rel_to_scale"] <= 1e-5
    assert by["ncnn"]["precision"] == "fp32" and by["ncnn"]["outputs"][0]["rel_to_scale"] <= 1e-5


def test_batch_takes_targets_per_model(tmp_path: Path) -> None:
    """Two models, one checked on OpenVINO and passing, one whose file OpenVINO cannot import: the
    second row FAILs, the JUnit XML has one testcase per target, the batch exits 1."""
    _conv_model(tmp_path / "good.onnx")
    _unsupported_model(tmp_path / "bad.onnx")
    (tmp_path / "m.toml").write_text(
        'output = "out"\n[defaults]\non = "openvino"\n'
        '[[models]]\nname = "good"\nroute = "onnx:onnx"\nfiles = ["good.onnx"]\n'
        '[[models]]\nname = "bad"\nroute = "onnx:onnx"\nfiles = ["bad.onnx"]\n')
    proc = _cli("batch", "m.toml", "--workers", "1", "--junit", "j.xml", "--report", "b.json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    cases = {c.get("name"): c for c in ET.parse(tmp_path / "j.xml").getroot().iter("testcase")}
    good = [n for n in cases if n.startswith("good [onnx:onnx] on openvino")]
    bad = [n for n in cases if n.startswith("bad [onnx:onnx] on openvino")]
    assert len(good) == 1 and cases[good[0]].find("failure") is None, list(cases)
    assert len(bad) == 1 and "lacks" in (cases[bad[0]].find("failure").get("message") or "")  # type: ignore[union-attr]
    report = json.loads((tmp_path / "b.json").read_text())
    verdicts = {m["name"]: m["verdict"] for m in report["models"]}
    assert verdicts == {"good": "PASS", "bad": "FAIL"}
    targets = {m["name"]: m["parity"]["targets"] for m in report["models"]}
    assert [t["verdict"] for t in targets["good"]] == ["PASS"] and [t["verdict"] for t in targets["bad"]] == ["FAIL"]


def test_manifest_refuses_an_unknown_target(tmp_path: Path) -> None:
    _conv_model(tmp_path / "good.onnx")
    (tmp_path / "m.toml").write_text('[[models]]\nroute = "onnx:onnx"\nfiles = ["good.onnx"]\non = ["movidius"]\n')
    proc = _cli("batch", "m.toml", cwd=tmp_path)
    assert proc.returncode == 2 and "--on movidius: no such target" in proc.stderr, proc.stderr
