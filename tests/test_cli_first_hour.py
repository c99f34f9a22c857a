"""What a new user trips on first: output folders, the summary line, the report's seed, typos."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model(path: Path) -> Path:
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    del cwd  # run from the checkout, whose `convert` is the one under test
    return subprocess.run([sys.executable, "-m", "convert", *args], capture_output=True, text=True, timeout=120)


def test_output_folder_with_trailing_slash_is_made_and_filled(tmp_path: Path) -> None:
    src = _model(tmp_path / "m.onnx")
    for route, names in (("onnx:onnx", ["m.onnx"]), ("onnx:caffe", ["m.caffemodel", "m.prototxt"])):
        out = tmp_path / route.replace(":", "_")
        result = _run(route, str(src), "-o", f"{out}/", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert sorted(p.name for p in out.iterdir()) == names


def test_summary_names_every_written_file(tmp_path: Path) -> None:
    src = _model(tmp_path / "m.onnx")
    result = _run("onnx:caffe", str(src), "-o", str(tmp_path / "net.prototxt"), cwd=tmp_path)
    last = result.stdout.strip().splitlines()[-1]
    assert "net.prototxt" in last and "net.caffemodel" in last
    # A one-layer net: OpenCV names that layer after its top, the parity runtime must still find it.
    assert result.returncode == 0 and "parity PASS" in last, result.stdout + result.stderr


def test_report_records_the_seed(tmp_path: Path) -> None:
    src = _model(tmp_path / "m.onnx")
    result = _run("onnx:onnx", str(src), "-o", str(tmp_path / "o.onnx"), "--seed", "5", "--report",
                  str(tmp_path / "r.json"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "r.json").read_text())["seed"] == 5


def test_typo_shows_the_tools_usage_not_an_internal_command(tmp_path: Path) -> None:
    src = _model(tmp_path / "m.onnx")
    result = _run("onnx:onnx", str(src), "--opste", "13", cwd=tmp_path)
    assert result.returncode == 2
    assert "convert to" not in result.stderr
    assert "Usage: convert ROUTE" in result.stderr and "Try 'convert --help'" in result.stderr
