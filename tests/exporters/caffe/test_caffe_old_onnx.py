"""ONNX -> Caffe on old-layout ONNX files (IR 3, opsets 7-9, initializers listed as graph inputs).

Early model-zoo files list every weight as a graph input too and compute some weights with
ConstantOfShape. The Caffe file must either compute what ONNX Runtime computes on the original
file, or be refused naming the op; pool sizes that differ between floor and ceil rounding
(54 -> 26 under ONNX's floor, 27 under Caffe's default ceil) are the trap.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

cv2 = pytest.importorskip("cv2")

BOUND = 1e-5  # README: ONNX -> Caffe, max|caffe - ort| / max|ort|
MIN_SPREAD = 1e-3  # the reference must vary: a near-constant output proves nothing


class _Net:
    """A tiny builder for old-layout graphs; weights are seeded initializers."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.inits: list[onnx.TensorProto] = []
        self.nodes: list[onnx.NodeProto] = []
        self.n = 0

    def _name(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def weight(self, shape: tuple[int, ...], scale: float | None = None) -> str:
        fan = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        arr = self.rng.standard_normal(shape) * (scale if scale is not None else (2.0 / fan) ** 0.5)
        name = self._name("w")
        self.inits.append(numpy_helper.from_array(arr.astype(np.float32), name))
        return name

    def const_of_shape_weight(self, shape: tuple[int, ...]) -> str:
        """A weight computed in the graph: ConstantOfShape(shape) + a seeded initializer (opset 9)."""
        dims = self._name("dims")
        self.inits.append(numpy_helper.from_array(np.array(shape, np.int64), dims))
        base = self.op("ConstantOfShape", [dims], value=numpy_helper.from_array(np.array([0.02], np.float32)))
        return self.op("Add", [base, self.weight(shape)])

    def op(self, op_type: str, inputs: list[str], **attrs: object) -> str:
        out = self._name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int, *, stride: int = 1, pad: int = 0,
             relu: bool = True, computed: bool = False) -> str:
        w = self.const_of_shape_weight((cout, cin, k, k)) if computed else self.weight((cout, cin, k, k))
        y = self.op("Conv", [x, w, self.weight((cout,), 0.1)], kernel_shape=[k, k], strides=[stride, stride],
                    pads=[pad] * 4)
        return self.op("Relu", [y]) if relu else y

    def model(self, x_shape: list[object] | None, out: str, opset: int) -> onnx.ModelProto:
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
        inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in self.inits]
        outputs = [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)]
        graph = helper.make_graph(self.nodes, "old", inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 3
        return model


def squeezenet(opset: int, x_shape: list[object] | None = None) -> onnx.ModelProto:
    b = _Net(1)
    x = b.conv("x", 3, 16, 3, stride=2)  # 64 -> 31
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2])  # 31 -> 15
    for cin, squeeze, expand in ((16, 8, 16), (32, 8, 16)):
        s = b.conv(x, cin, squeeze, 1)
        x = b.op("Concat", [b.conv(s, squeeze, expand, 1), b.conv(s, squeeze, expand, 3, pad=1)], axis=1)
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2])  # 15 -> 7
    x = b.op("Dropout", [x], ratio=0.5)
    x = b.conv(x, 32, 10, 1)
    x = b.op("GlobalAveragePool", [x])
    # As the zoo's SqueezeNet ends: Softmax on the [N, C, 1, 1] scores with the pre-13 default axis 1.
    return b.model(x_shape or [1, 3, 64, 64], b.op("Softmax", [x]), opset)


def vgg(opset: int, x_shape: list[object] | None = None) -> onnx.ModelProto:
    b = _Net(2)
    x, c = "x", 3
    for cout in (8, 16, 16):
        x = b.conv(x, c, cout, 3, pad=1, computed=opset >= 9)
        c = cout
        x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2])  # 54 -> 26 -> 12 -> 5 (ceil: 27, 13, 6)
    shape = "flat_shape"
    b.inits.append(numpy_helper.from_array(np.array([1, -1], np.int64), shape))
    x = b.op("Reshape", [x, shape])
    # The classifier weight is stored transposed and turned by a Transpose node, as some exporters did.
    # 400 x 48 floats (75 KiB) is more than shape-only constant folding takes on.
    w = b.op("Transpose", [b.weight((16 * 5 * 5, 48))], perm=[1, 0])
    x = b.op("Relu", [b.op("Gemm", [x, w, b.weight((48,), 0.1)], transB=1)])
    x = b.op("Gemm", [x, b.weight((10, 48)), b.weight((10,), 0.1)], transB=1)
    return b.model(x_shape or [1, 3, 54, 54], x, opset)


def inception(opset: int, x_shape: list[object] | None = None) -> onnx.ModelProto:
    b = _Net(3)
    x = b.conv("x", 3, 16, 3, stride=2, pad=1)  # 46 -> 23
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2])  # 23 -> 11
    branches = [
        b.conv(x, 16, 8, 1),
        b.conv(b.conv(x, 16, 8, 1), 8, 8, 3, pad=1),
        b.conv(b.conv(x, 16, 4, 1), 4, 8, 5, pad=2),
        b.conv(b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]), 16, 8, 1),
    ]
    x = b.op("Concat", branches, axis=1)  # 32 x 11 x 11
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2])  # 11 -> 5
    # GoogLeNet's last pool as the zoo files write it: a 7x7 window over a smaller map, end-padded.
    x = b.op("AveragePool", [x], kernel_shape=[6, 6], strides=[1, 1], pads=[0, 0, 1, 1])
    x = b.op("Flatten", [x])
    x = b.op("Gemm", [x, b.weight((10, 32)), b.weight((10,), 0.1)], transB=1)
    return b.model(x_shape or [1, 3, 46, 46], b.op("Softmax", [x]), opset)


def resnet(opset: int, x_shape: list[object] | None = None) -> onnx.ModelProto:
    b = _Net(4)
    x = b.conv("x", 3, 8, 3, pad=1, computed=opset >= 9)
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2])  # 54 -> 26
    for _ in range(2):
        y = b.conv(b.conv(x, 8, 8, 3, pad=1), 8, 8, 3, pad=1, relu=False)
        x = b.op("Relu", [b.op("Add", [x, y])])
    x = b.op("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2])  # 26 -> 13
    x = b.op("Flatten", [x])
    return b.model(x_shape or [1, 3, 54, 54],
                   b.op("Gemm", [x, b.weight((10, 8 * 13 * 13)), b.weight((10,), 0.1)], transB=1), opset)


NETS = {"squeezenet": squeezenet, "vgg": vgg, "inception": inception, "resnet": resnet}
CASES = [(name, opset) for name in NETS for opset in (7, 8, 9)]


def _convert(src: Path, out: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convert", "onnx:caffe", str(src), "-o", str(out), *extra],
                          capture_output=True, text=True, timeout=300,
                          env=None if env is None else {**os.environ, **env})


def _opencv(prototxt: Path, x: np.ndarray) -> np.ndarray:
    net = cv2.dnn.readNetFromCaffe(str(prototxt), str(prototxt.with_suffix(".caffemodel")))
    net.setInput(x)
    # the net's output, not the Silence layer that ends the tops nothing reads (a Slice's unused pieces)
    (out,) = [n for n in net.getUnconnectedOutLayersNames() if net.getLayer(n).type != "Silence"]
    return np.asarray(net.forward(out)).reshape(-1)


@pytest.mark.parametrize(("name", "opset"), CASES, ids=[f"{n}-opset{o}" for n, o in CASES])
def test_old_layout_to_caffe_matches_onnxruntime(tmp_path: Path, name: str, opset: int) -> None:
    model = NETS[name](opset)
    if opset < 9:  # ConstantOfShape is opset 9: the earlier files hold every weight as an initializer
        assert not any(n.op_type == "ConstantOfShape" for n in model.graph.node)
    src = tmp_path / f"{name}.onnx"
    onnx.save(model, src)
    # The ssd dialect is what OpenCV reads as written (bvlc's round_mode needs a translation).
    result = _convert(src, tmp_path / f"{name}.prototxt", "--caffe-flavor", "ssd")
    assert result.returncode == 0, result.stderr
    assert "PASS" in result.stdout

    x = np.random.default_rng(5).standard_normal([int(d.dim_value) for d in
                                                  model.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)
    session = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    feeds = {"x": x}  # the weights listed as inputs keep their initializer values
    ref = session.run(None, feeds)[0].reshape(-1)
    assert float(ref.max() - ref.min()) > MIN_SPREAD * max(float(np.abs(ref).max()), 1e-12), "degenerate reference"
    ours = _opencv(tmp_path / f"{name}.prototxt", x)
    err = float(np.abs(ours - ref).max() / np.abs(ref).max())
    assert err <= BOUND, f"{name} opset {opset}: max error {err:.2e} of the output's scale"


def test_pool_rounding_written_as_onnx_floors(tmp_path: Path) -> None:
    """54 -> 26 under ONNX's floor: the written Pooling must not use Caffe's default ceil."""
    src = tmp_path / "vgg.onnx"
    onnx.save(vgg(9), src)
    result = _convert(src, tmp_path / "vgg.prototxt")
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "vgg.prototxt").read_text()
    assert text.count("ceil_mode: false") == 3 and "round_mode" not in text  # the default ssd dialect
    assert "AS WRITTEN DOES NOT LOAD" not in result.stdout
    from convert.parity.runtimes.caffe_runtime import find_caffe

    (tmp_path / "b").mkdir()  # the CLI refuses a missing folder for every exporter (-o b/ would make it)
    result = _convert(src, tmp_path / "b" / "vgg.prototxt", "--caffe-flavor", "bvlc")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "b" / "vgg.prototxt").read_text().count("round_mode: FLOOR") == 3
    if find_caffe("bvlc") is not None:  # checked in BVLC master, the file as written
        assert "Caffe (BVLC master 99bd997)" in result.stdout and "DOES NOT LOAD" not in result.stdout
    else:
        assert "AS WRITTEN DOES NOT LOAD" in result.stdout
    # OpenCV cannot parse round_mode: the check runs a translated copy, and says so
    (tmp_path / "c").mkdir()
    result = _convert(src, tmp_path / "c" / "vgg.prototxt", "--caffe-flavor", "bvlc",
                      env={"CONVERT_CAFFE_RUNTIME": "opencv"})
    assert result.returncode == 0, result.stderr
    assert "OpenCV" in result.stdout and "AS WRITTEN DOES NOT LOAD" in result.stdout, result.stdout


@pytest.mark.parametrize("name", ["vgg", "resnet"])
def test_computed_weights_are_folded_not_refused(tmp_path: Path, name: str) -> None:
    model = NETS[name](9)
    assert {"ConstantOfShape", "Transpose"} & {n.op_type for n in model.graph.node}
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    result = _convert(src, tmp_path / "m.prototxt")
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "m.prototxt").read_text()
    assert "ConstantOfShape" not in text and "Permute" not in text


@pytest.mark.parametrize("x_shape", [None, ["N", 3, "H", "W"]], ids=["no-shape", "symbolic"])
def test_unknown_input_shape_is_refused_then_converts_with_input_shape(tmp_path: Path, x_shape: object) -> None:
    model = vgg(9)
    dims = model.graph.input[0].type.tensor_type
    if x_shape is None:
        dims.ClearField("shape")
    else:
        model.graph.input[0].CopyFrom(helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape))
    src = tmp_path / "vgg.onnx"
    onnx.save(model, src)
    out = tmp_path / "vgg.prototxt"
    result = _convert(src, out)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "MaxPool" in result.stderr and "--input-shape" in result.stderr
    assert list(tmp_path.iterdir()) == [src], "nothing may be written when the export is refused"

    result = _convert(src, out, "--input-shape", "x=1,3,54,54")
    assert result.returncode == 0, result.stderr
    assert "PASS" in result.stdout
    assert (tmp_path / "vgg.prototxt").read_text().count("ceil_mode: false") == 3


@pytest.mark.parametrize("opset", [7, 9])
def test_weights_listed_as_inputs_are_constants_not_inputs(tmp_path: Path, opset: int) -> None:
    """Initializers listed as graph inputs are weights: neither output file nor the parity check takes them."""
    model = resnet(opset)
    assert len(model.graph.input) > 1 + len(model.graph.initializer) // 2
    src = tmp_path / "resnet.onnx"
    onnx.save(model, src)
    result = _convert(src, tmp_path / "resnet.prototxt")
    assert result.returncode == 0, result.stderr
    assert "inputs: x 1x3x54x54" in result.stdout  # the parity check fed one input
    text = (tmp_path / "resnet.prototxt").read_text()
    assert text.count('type: "Input"') == 1
    out = tmp_path / "resnet2.onnx"
    result = subprocess.run([sys.executable, "-m", "convert", "onnx:onnx", str(src), "-o", str(out)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert [i.name for i in onnx.load(out).graph.input] == ["x"]
    assert [i.name for i in ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).get_inputs()] == ["x"]

    result = _convert(src, tmp_path / "w.prototxt", "--input-shape", f"{model.graph.initializer[0].name}=1,2")
    assert result.returncode == 2
    assert "weight (initializer)" in result.stderr and "inputs: x" in result.stderr


def test_old_softmax_over_several_axes_is_refused(tmp_path: Path) -> None:
    """Softmax before opset 13 normalises over every dim from its axis on; Caffe's over one axis only."""
    b = _Net(6)
    x = b.conv("x", 3, 4, 3, pad=1)
    model = b.model([1, 3, 8, 8], b.op("Softmax", [x]), 9)
    src = tmp_path / "sm.onnx"
    onnx.save(model, src)
    result = _convert(src, tmp_path / "sm.prototxt")
    assert result.returncode == 2, result.stdout
    assert "Softmax" in result.stderr and "normalises over one axis only" in result.stderr
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == [src]


def mobilenet(opset: int, x_shape: list[object] | None = None) -> onnx.ModelProto:
    """Pre-opset-11 operand attributes: Clip(0, 6) bounds, Pad pads, Slice starts/ends/axes."""
    b = _Net(7)
    x = b.conv("x", 3, 8, 3, stride=2, pad=1, relu=False)  # 30 -> 15
    x = b.op("Clip", [x], min=0.0, max=6.0)
    dw = b.op("Conv", [x, b.weight((8, 1, 3, 3)), b.weight((8,), 0.1)], kernel_shape=[3, 3], pads=[1] * 4, group=8)
    x = b.op("Clip", [dw], min=-1.0, max=4.0)
    x = b.op("Slice", [x], starts=[0, 1], ends=[1000, 13], axes=[1, 2])  # channels 0..7, rows 1..12
    x = b.op("Pad", [x], pads=[0, 0, 1, 1, 0, 0, 1, 1], mode="constant")
    x = b.op("AveragePool", [x], kernel_shape=[3, 3], strides=[2, 2])  # 14x17 -> 6x8 (ceil: 7x8)
    x = b.op("Flatten", [x])
    return b.model(x_shape or [1, 3, 30, 30], b.op("Gemm", [x, b.weight((10, 8 * 6 * 8)), b.weight((10,), 0.1)],
                                                  transB=1), opset)


@pytest.mark.parametrize("opset", [7, 8, 9])
@pytest.mark.parametrize("flavor", ["bvlc", "ssd"])
def test_attribute_operands_of_old_opsets(tmp_path: Path, opset: int, flavor: str) -> None:
    model = mobilenet(opset)
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    result = _convert(src, tmp_path / "m.prototxt", "--caffe-flavor", flavor)
    assert result.returncode == 0, result.stderr
    assert "PASS" in result.stdout
    x = np.random.default_rng(8).standard_normal([1, 3, 30, 30]).astype(np.float32)
    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0].reshape(-1)
    assert float(ref.max() - ref.min()) > MIN_SPREAD * float(np.abs(ref).max()), "degenerate reference"
    if flavor == "ssd":
        err = float(np.abs(_opencv(tmp_path / "m.prototxt", x) - ref).max() / np.abs(ref).max())
        assert err <= BOUND, f"opset {opset}: max error {err:.2e} of the output's scale"


@pytest.mark.parametrize("op", ["AveragePool", "MaxPool"])
def test_pool_size_no_caffe_rounding_gives_max_is_cropped_average_refused(tmp_path: Path, op: str) -> None:
    """End-only pads: ONNX gives 10 from 10 (kernel 3, stride 1, pads 0/2); Caffe's symmetric pad 0 gives 8.

    A MaxPool is then padded 2 on both sides and cropped (exact, -inf pads either way); an
    AveragePool with count_include_pad=1 is refused.
    """
    b = _Net(9)
    x = b.conv("x", 3, 4, 1)
    attrs = {"count_include_pad": 1} if op == "AveragePool" else {}
    x = b.op(op, [x], kernel_shape=[3, 3], strides=[1, 1], pads=[0, 0, 2, 2], **attrs)
    model = b.model([1, 3, 10, 10], b.op("Flatten", [x]), 9)
    src = tmp_path / "p.onnx"
    onnx.save(model, src)
    assert ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.zeros((1, 3, 10, 10), np.float32)})[0].shape == (1, 4 * 10 * 10)
    result = _convert(src, tmp_path / "p.prototxt")
    if op == "MaxPool":
        assert result.returncode == 0 and "PASS" in result.stdout, result.stdout + result.stderr
        text = (tmp_path / "p.prototxt").read_text()
        assert 'type: "Crop"' in text and "pad: 2" in text
        return
    assert result.returncode == 2, result.stdout
    assert "Traceback" not in result.stderr
    assert f"({op})" in result.stderr and "no Caffe rounding reproduces it" in result.stderr
    assert "[10, 10] from [10, 10]" in result.stderr and "[8, 8] rounding up" in result.stderr
    assert list(tmp_path.iterdir()) == [src]
