"""PReLU with one shared slope (torch's nn.PReLU() default) in a form every Caffe loads.

Real Caffe wants a 0-axis slope blob with channel_shared and aborts on a [1] blob; OpenCV cannot
load a 0-axis blob. The exporter writes the slope repeated per channel, which both read.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from convert._proto import caffe_pb2

cv2 = pytest.importorskip("cv2")


def test_shared_slope_is_written_per_channel_and_computes_prelu(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    slope = np.array([0.25], np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("PRelu", ["c", "s"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(slope, "s")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "m.onnx")
    out = tmp_path / "net.prototxt"
    result = subprocess.run([sys.executable, "-m", "convert", "onnx:caffe", str(tmp_path / "m.onnx"), "-o", str(out),
                             "--caffe-flavor", "ssd"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr

    net = caffe_pb2.NetParameter()
    net.ParseFromString((tmp_path / "net.caffemodel").read_bytes())
    (layer,) = [ly for ly in net.layer if ly.type == "PReLU"]
    assert list(layer.blobs[0].shape.dim) == [4]
    assert not layer.prelu_param.channel_shared

    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    cv = cv2.dnn.readNetFromCaffe(str(out), str(tmp_path / "net.caffemodel"))
    cv.setInput(x)
    got = cv.forward()
    conv = np.zeros((1, 4, 6, 6), np.float64)  # independent oracle: direct convolution, then PReLU
    for i in range(6):
        for j in range(6):
            conv[0, :, i, j] = np.tensordot(w, x[0, :, i:i + 3, j:j + 3], axes=([1, 2, 3], [0, 1, 2]))
    ref = np.where(conv > 0, conv, 0.25 * conv)
    assert float(np.abs(got - ref).max() / np.abs(ref).max()) < 1e-5
