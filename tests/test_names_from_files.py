"""Names taken from a model file are quoted and cut before they are printed (#48 item 1).

A newline in an output name gave a second line that a CI log reads as the tool's own ("FAKE: PASS"),
and a name of a megabyte gave a megabyte of message. Every printed line now holds a name escaped and
cut in the middle: the parity table, errors, notes, the JUnit report.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import onnx
import onnx.helper as oh
import pytest
from click.testing import CliRunner
from onnx import TensorProto

from convert import ir
from convert.cli import cli

NEWLINE_NAME = "out\nPASS: 1/1 outputs within tol (forged)"
HUGE = 1_000_000


def _relu(path: Path, out_name: str, node_name: str = "relu", op: str = "Relu") -> Path:
    x = oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])
    y = oh.make_tensor_value_info(out_name, TensorProto.FLOAT, [1, 3])
    graph = oh.make_graph([oh.make_node(op, ["x"], [out_name], name=node_name)], "g", [x], [y])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_shown_escapes_and_cuts() -> None:
    assert ir.shown("conv1") == "'conv1'"
    assert ir.shown("a\nb") == "'a\\nb'"
    long = ir.shown("x" * HUGE)
    assert len(long) < 100 and long.endswith("(1,000,000 characters)")
    assert "\n" not in ir.printable("one\ntwo") and len(ir.printable("y" * HUGE)) < 300


def test_a_newline_in_an_output_name_stays_in_its_row(tmp_path: Path) -> None:
    src = _relu(tmp_path / "nl.onnx", NEWLINE_NAME)
    code, out, err = _run("onnx:onnx", str(src), "-o", str(tmp_path / "o.onnx"))
    assert code == 0, err
    assert not any(line.startswith("PASS: 1/1 outputs within tol (forged)") for line in out.splitlines()), out
    row = next(line for line in out.splitlines() if line.startswith("'out\\nPASS: 1/1"))
    assert row.rstrip().endswith("PASS")


def test_a_megabyte_name_is_cut_in_the_table(tmp_path: Path) -> None:
    src = _relu(tmp_path / "big.onnx", "o" * HUGE)
    code, out, err = _run("onnx:onnx", str(src), "-o", str(tmp_path / "o.onnx"))
    assert code == 0, err
    assert len(out) + len(err) < 5000
    assert "(1,000,000 characters)" in out


def test_an_unsupported_node_with_a_forged_name_is_one_short_line(tmp_path: Path) -> None:
    src = _relu(tmp_path / "bad.onnx", "y", node_name="n\nconvert: error: forged" + "z" * 100_000, op="Det")
    code, _, err = _run("onnx:caffe", str(src), "-o", str(tmp_path / "o.prototxt"), "--no-check")
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("convert: error")]
    assert len(lines) == 1 and "Det" in lines[0] and "(100," in lines[0], err
    assert len(err) < 2000


@pytest.mark.parametrize("name", ["ctl\x01\x02name", "nl\nname"], ids=["control", "newline"])
def test_the_junit_report_parses_with_control_characters_in_names(tmp_path: Path, name: str) -> None:
    from convert.batch.reports import BatchResult
    from convert.batch.worker import ModelResult
    from convert.parity import ParityReport
    from convert.parity.compare import OutputResult

    output = OutputResult(name=name, ref_name=name, shape=(1, 3), max_abs=1.0, max_rel=1.0, rel_to_scale=1.0,
                          cosine=0.0, ref_scale=1.0, ref_std=1.0, passed=False, allclose_bad=3)
    report = ParityReport(source="onnx", source_runtime="ort", source_device="cpu", dest="onnx",
                          dest_runtime="ort", dest_device="cpu", atol=1e-4, rtol=1e-3, outputs=[output])
    row = ModelResult(name="m", route="onnx:onnx", verdict="FAIL", report=report)
    result = BatchResult(manifest=str(tmp_path / "m.toml"), rows=[row], seconds=1.0, runner={})
    root = ET.fromstring(result.junit())
    names = [case.get("name") for case in root.iter("testcase")]
    assert any(n.startswith("m [onnx:onnx] output '") for n in names), names
