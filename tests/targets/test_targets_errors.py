"""`--on TARGET`: what is refused before anything runs, and what a target says when it cannot take
the file: an unknown name, a package that is not installed, a toolchain that reads no file of this
format, TensorRT without a GPU (each one line, exit 2, nothing written), ops a toolchain's importer
lacks (all of them, with the source layer each came from; FAIL, exit 1), a worker killed by a
signal (that target FAILs naming the signal; the other targets still run).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from convert import api

REPO = Path(__file__).resolve().parents[2]


def _conv_model(path: Path) -> Path:
    """A Conv + Relu on 1x3x8x8 (ONNX Runtime, OpenVINO, ncnn and RKNN all take it)."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _unsupported_model(path: Path) -> Path:
    """A correct file (ONNX Runtime runs it) with two ops OpenVINO 2026.4's ONNX frontend has no
    conversion rule for: Det (of each 4x4 map of a Conv) and MaxUnpool (SegNet's upsampling)."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((2, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Det", ["c"], ["det"], name="det_of_maps"),
             helper.make_node("MaxPool", ["c"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
             helper.make_node("MaxUnpool", ["p", "i"], ["up"], kernel_shape=[2, 2], strides=[2, 2], name="unpool")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                              [helper.make_tensor_value_info("det", TensorProto.FLOAT, [1, 2]),
                               helper.make_tensor_value_info("up", TensorProto.FLOAT, [1, 2, 4, 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _convert(*args: str, hide: str = "") -> subprocess.CompletedProcess[str]:
    code = ("import sys\n" + (f"sys.modules[{hide!r}] = None\n" if hide else "")
            + "from convert.cli import main\nsys.argv = ['convert', *sys.argv[1:]]\nmain()\n")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600,
                          cwd=REPO)


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_unknown_target_is_refused_before_converting(tmp_path: Path) -> None:
    src = _conv_model(tmp_path / "m.onnx")
    proc = _convert("onnx:onnx", str(src), "-o", str(tmp_path / "out.onnx"), "--on", "openvino,jetson,npu")
    line = _one_error_line(proc)
    assert "--on jetson,npu: no such targets" in line and "openvino, rknn, ncnn, tensorrt" in line
    assert not (tmp_path / "out.onnx").exists()


def test_missing_package_names_the_extra(tmp_path: Path) -> None:
    """openvino hidden from this process (as if not installed): one line naming the extra."""
    src = _conv_model(tmp_path / "m.onnx")
    proc = _convert("onnx:onnx", str(src), "-o", str(tmp_path / "out.onnx"), "--on", "openvino", hide="openvino")
    line = _one_error_line(proc)
    assert "OpenVINO is not installed" in line and "pip install 'convert-toolkit[openvino]'" in line
    assert not (tmp_path / "out.onnx").exists()


def test_tensorrt_without_a_gpu_is_one_line(tmp_path: Path) -> None:
    src = _conv_model(tmp_path / "m.onnx")
    proc = _convert("check", str(src), "--against", str(src), "--on", "tensorrt")
    line = _one_error_line(proc)
    assert "--on tensorrt" in line and "GPU" in line


def test_a_target_that_reads_no_caffe_is_refused(tmp_path: Path) -> None:
    src = _conv_model(tmp_path / "m.onnx")
    proc = _convert("onnx:caffe", str(src), "-o", str(tmp_path / "out.prototxt"), "--on", "openvino")
    line = _one_error_line(proc)
    assert "OpenVINO does not read caffe files" in line
    assert not (tmp_path / "out.prototxt").exists()


def test_targets_need_the_check(tmp_path: Path) -> None:
    src = _conv_model(tmp_path / "m.onnx")
    proc = _convert("onnx:onnx", str(src), "-o", str(tmp_path / "out.onnx"), "--no-check", "--on", "ncnn")
    assert "needs the parity check" in _one_error_line(proc)


def test_every_op_the_importer_lacks_is_listed_with_its_source_layer(tmp_path: Path) -> None:
    """OpenVINO's frontend has no rule for Det nor MaxUnpool: both are named, each with the
    node and source layer it came from, and nothing is run on OpenVINO; the usual check (ONNX
    Runtime) passes, the target FAILs, the exit status is 1."""
    src = _unsupported_model(tmp_path / "m.onnx")
    out = tmp_path / "out.onnx"
    proc = _convert("onnx:onnx", str(src), "-o", str(out), "--on", "openvino")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    text = proc.stdout
    assert "OpenVINO's importer lacks 2 ops of this file" in text, text
    assert "Det x1 (node 'det_of_maps' (Det) from m.onnx [Det] 'det_of_maps')" in text, text
    assert "MaxUnpool x1 (node 'unpool' (MaxUnpool) from m.onnx [MaxUnpool] 'unpool')" in text, text
    report = api.verify(src, out, on="openvino")
    assert [o.verdict for o in report.outputs] == ["PASS", "PASS"]  # ONNX Runtime runs the file
    (target,) = report.targets
    assert target.verdict == "FAIL" and target.report is None and len(target.unsupported) == 2
    assert report.verdict == "FAIL" and not report.passed


def test_a_worker_killed_by_a_signal_fails_that_target_only(tmp_path: Path) -> None:
    """The RKNN worker is killed (SIGKILL, as the kernel's OOM killer does) while it builds: the
    rknn target FAILs naming the signal, OpenVINO's still runs and passes."""
    src = _conv_model(tmp_path / "m.onnx")
    out = tmp_path / "out.onnx"
    killed: list[int] = []

    def kill_the_worker() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not killed:
            found = subprocess.run(["pgrep", "-f", "_rknn_worker.py"], capture_output=True, text=True).stdout.split()
            for pid in found:  # only this process's own child: the worker convert started
                if _parent_of(int(pid)) == os.getpid():
                    os.kill(int(pid), signal.SIGKILL)
                    killed.append(int(pid))
            time.sleep(0.05)

    thread = threading.Thread(target=kill_the_worker, daemon=True)
    thread.start()
    result = api.convert(src, to="onnx", out=out, on="rknn,openvino")
    thread.join(timeout=5)
    assert killed, "the RKNN worker was never seen"
    assert result.report is not None and not result.ok
    rknn, ov = result.report.targets
    assert rknn.verdict == "FAIL" and "its worker died of SIGKILL" in rknn.refused, rknn.refused
    assert ov.target == "openvino" and ov.verdict == "PASS" and ov.worst() is not None and ov.worst() <= 1e-5
    assert "died of SIGKILL" in result.report.table()


def _parent_of(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


@pytest.mark.parametrize("spec", ["openvino, ncnn", ["ncnn", "openvino", "ncnn"]])
def test_target_lists(spec: object) -> None:
    from convert.targets import parse_targets

    assert parse_targets(spec) in (["openvino", "ncnn"], ["ncnn", "openvino"])  # type: ignore[arg-type]
