"""Hostile or corrupt ONNX input: one line, exit 2, no hang, nothing overwritten."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def _model(tensor: onnx.TensorProto) -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], [tensor])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _weight() -> onnx.TensorProto:
    return numpy_helper.from_array(np.ones((2, 2), np.float32), "w")


def _external(location: str, **extra: str) -> onnx.TensorProto:
    t = _weight()
    t.data_location = TensorProto.EXTERNAL
    t.ClearField("raw_data")
    for key, value in {"location": location, **extra}.items():
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return t


def _convert(src: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convert", "onnx:onnx", str(src), "-o", str(out), *extra],
                          capture_output=True, text=True, timeout=60)


def _negative_dims(tmp: Path) -> onnx.TensorProto:
    t = _weight()
    t.dims[:] = [-2, -2]  # product 4, as the stored bytes: used to loop forever while framing
    return t


def _dims_past_bytes(tmp: Path) -> onnx.TensorProto:
    t = _weight()
    t.dims[:] = [4, 4]
    return t


def _fifo(tmp: Path) -> onnx.TensorProto:
    os.mkfifo(tmp / "pipe")
    return _external("pipe")


def _negative_offset(tmp: Path) -> onnx.TensorProto:
    (tmp / "d.bin").write_bytes(bytes(16))
    return _external("d.bin", offset="-5")


def _non_integer_offset(tmp: Path) -> onnx.TensorProto:
    (tmp / "d.bin").write_bytes(bytes(16))
    return _external("d.bin", offset="ten")


def _dims_past_the_data_file(tmp: Path) -> onnx.TensorProto:
    (tmp / "d.bin").write_bytes(bytes(16))
    t = _external("d.bin")
    t.dims[:] = [100, 100]
    return t


CASES = {
    "negative-dims": (_negative_dims, "negative dimension"),
    "dims-past-bytes": (_dims_past_bytes, "need 64 bytes"),
    "fifo-external-data": (_fifo, "not a regular file"),
    "negative-offset": (_negative_offset, "negative external data offset"),
    "non-integer-offset": (_non_integer_offset, "must be integers"),
    "dims-past-data-file": (_dims_past_the_data_file, "which has only 16 bytes"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_corrupt_tensor_is_one_line_exit_2(tmp_path: Path, case: str) -> None:
    make, words = CASES[case]
    src = tmp_path / "m.onnx"
    onnx.save(_model(make(tmp_path)), src)
    result = _convert(src, tmp_path / "out.onnx")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and words in result.stderr
    assert not (tmp_path / "out.onnx").exists()


def test_output_over_the_external_data_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(_model(_weight()), src, save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    data = tmp_path / "m.onnx.data"
    before = data.read_bytes()
    result = _convert(src, data)
    assert result.returncode == 2 and "refusing to write" in result.stderr, result.stderr
    assert data.read_bytes() == before


def test_caffe_companion_over_the_input_caffemodel_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(_model(_weight()), src)
    ok = subprocess.run([sys.executable, "-m", "convert", "onnx:caffe", str(src), "-o", str(tmp_path / "net.prototxt"),
                         "--no-check"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    (tmp_path / "a.prototxt").write_text((tmp_path / "net.prototxt").read_text())
    before = (tmp_path / "net.caffemodel").read_bytes()
    result = subprocess.run([sys.executable, "-m", "convert", "caffe:caffe", str(tmp_path / "a.prototxt"),
                             str(tmp_path / "net.caffemodel"), "-o", str(tmp_path / "net.prototxt")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "refusing to write" in result.stderr, result.stderr
    assert (tmp_path / "net.caffemodel").read_bytes() == before


def test_report_over_an_input_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(_model(_weight()), src)
    before = src.read_bytes()
    result = _convert(src, tmp_path / "o.onnx", "--report", str(src))
    assert result.returncode == 2 and "refusing to write the report" in result.stderr, result.stderr
    assert src.read_bytes() == before
