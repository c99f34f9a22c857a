"""``--precision fp16/bf16``: the rule (which ops stay float32), the numbers, and the verdict both ways.

Oracles we did not write: PyTorch's float32 run of the source and its own half-precision run
(``module.half()`` / ``.to(torch.bfloat16)``), measured here with numpy; ONNX Runtime (fp16, its CPU
provider computes the ops it has no fp16 kernel for in float32 between fp16 tensors) and onnx's
reference evaluator (bf16: ONNX Runtime's CPU provider has no bf16 kernels) run the files.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import sample_models
from onnx import TensorProto, numpy_helper

import convert
from convert.ir import Options
from convert.parity import run_parity

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[3]
HALF_MARGIN = 2.0  # the stated rule: at most 2x as far from the float32 source as torch's own half run


def _nets() -> object:
    return sample_models.nets()


def _x(seed: int = 1) -> torch.Tensor:
    return torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(seed))


def _rel(a: np.ndarray, ref: np.ndarray) -> float:
    ref = ref.astype(np.float64)
    return float(np.abs(a.astype(np.float64) - ref).max() / np.abs(ref).max())


def _ort(path: Path, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


RULE_MODEL = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,4,8,8] x) => (float[1,4,16,16] y, float[1,4,8,8] m)
<float[4,4,3,3] w, float[4] b, float[8] ln_s, float[8] ln_b, float[4] scales, float mask>
{
    c = Conv <pads = [1,1,1,1]> (x, w, b)
    r = Relu (c)
    n = LayerNormalization <axis = -1> (r, ln_s, ln_b)
    s = Softmax <axis = -1> (n)
    k = Add (s, r)
    mean = ReduceMean <axes = [-1], keepdims = 1> (k)
    d = Sub (k, mean)
    f = Cast <to = 1> (d)
    masked = Add (f, mask)
    m = Mul (masked, r)
    y = Resize <mode = "nearest"> (d, , scales)
}
"""


def _rule_model(path: Path) -> Path:
    model = onnx.parser.parse_model(RULE_MODEL)
    rng = np.random.default_rng(0)
    values = {"w": rng.standard_normal((4, 4, 3, 3)) * 0.3, "b": rng.standard_normal(4) * 0.1,
              "ln_s": rng.random(8) + 0.5, "ln_b": rng.standard_normal(8) * 0.1,
              "scales": np.array([1, 1, 2, 2]), "mask": np.array(-3.4e38)}
    model.graph.initializer.extend(numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in values.items())
    onnx.save(model, path)
    return path


def _producer(model: onnx.ModelProto, name: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if name in n.output)


def _dtype(model: onnx.ModelProto, name: str) -> int:
    inits = {i.name: i.data_type for i in model.graph.initializer}
    if name in inits:
        return inits[name]
    inferred = onnx.shape_inference.infer_shapes(model)
    for vi in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        if vi.name == name:
            return vi.type.tensor_type.elem_type
    raise KeyError(name)


def test_rule_which_ops_stay_fp32(tmp_path: Path) -> None:
    src = _rule_model(tmp_path / "rule.onnx")
    out = tmp_path / "half.onnx"
    result = convert.convert(src, to="onnx", out=out, check=False, precision="fp16")
    assert any("--precision fp16" in n for n in result.notes)
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    nodes = {n.op_type: n for n in model.graph.node if not n.name.endswith("_to_fp32")}
    inits = {i.name: i for i in model.graph.initializer}
    # graph inputs and outputs stay float32 (a drop-in replacement)
    assert [i.type.tensor_type.elem_type for i in model.graph.input] == [TensorProto.FLOAT]
    assert all(o.type.tensor_type.elem_type == TensorProto.FLOAT for o in model.graph.output)
    # the convolution's weights and bias in fp16
    conv = nodes["Conv"]
    assert inits[conv.input[1]].data_type == TensorProto.FLOAT16
    assert inits[conv.input[2]].data_type == TensorProto.FLOAT16
    # LayerNormalization, Softmax and ReduceMean read float32 (a half input cast up), and their
    # weights stay float32; Softmax reads LayerNormalization's float32 output with no cast between
    for op in ("LayerNormalization", "Softmax", "ReduceMean"):
        assert _dtype(model, nodes[op].input[0]) == TensorProto.FLOAT, op
    for op in ("LayerNormalization", "ReduceMean"):
        feeder = _producer(model, nodes[op].input[0])
        assert feeder.op_type == "Cast" and feeder.attribute[0].i == TensorProto.FLOAT, op
    assert _producer(model, nodes["Softmax"].input[0]).op_type == "LayerNormalization"
    assert inits[nodes["LayerNormalization"].input[1]].data_type == TensorProto.FLOAT
    # Resize's scales are float32 by ONNX's schema, whatever the precision
    assert inits[nodes["Resize"].input[2]].data_type == TensorProto.FLOAT
    # Cast(to=float) makes the model's float: half
    casts = [n for n in model.graph.node if n.op_type == "Cast" and n.input[0] == "d"]
    assert any(c.attribute[0].i == TensorProto.FLOAT16 for c in casts)
    # -3.4e38 clamped to fp16's finite range: 0 * mask stays finite
    mask = numpy_helper.to_array(inits["mask"])
    assert mask.dtype == np.float16 and float(mask) == -65504.0
    # and the file runs, close to the float32 one
    x = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)
    sess32 = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    sess16 = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (y32, _), (y16, m16) = sess32.run(None, {"x": x}), sess16.run(None, {"x": x})
    assert y16.dtype == m16.dtype == np.float32 and np.isfinite(m16).all()  # the mask: no inf, no NaN
    assert _rel(y16, y32) < 2e-2


def test_half_io(tmp_path: Path) -> None:
    src = _rule_model(tmp_path / "rule.onnx")
    out = tmp_path / "half_io.onnx"
    convert.convert(src, to="onnx", out=out, check=False, precision="fp16", half_io=True)
    model = onnx.load(out)
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT16
    assert {o.type.tensor_type.elem_type for o in model.graph.output} == {TensorProto.FLOAT16}


@pytest.mark.parametrize("name", ["mobilenetv2", "vit", "resnet"])
def test_torch_nets_fp16_within_torchs_own_half_run(name: str, tmp_path: Path) -> None:
    net = _nets().build(name, size=64)  # type: ignore[attr-defined]
    x = _x()
    out32, out16 = tmp_path / "fp32.onnx", tmp_path / "fp16.onnx"
    convert.convert(net, (x,), to="onnx", out=out32, check=False)
    result = convert.convert(net, (x,), to="onnx", out=out16, precision="fp16")
    assert result.report is not None and result.report.verdict == "PASS", result.report.table()
    assert result.report.precision == "fp16" and result.report.outputs[0].by_half
    # the same judgement, computed here from the framework's runs
    with torch.no_grad():
        ref = net(x).numpy()
        half = copy.deepcopy(net).half()(x.half()).float().numpy()
    ours = _ort(out16, x.numpy())
    assert ours.dtype == np.float32
    assert _rel(ours, ref) <= HALF_MARGIN * _rel(half, ref)
    assert _rel(ours, ref) > 1e-5  # it really computed in half
    # weights in half: the file is about half the size
    assert out16.stat().st_size < 0.6 * out32.stat().st_size


def test_a_wrong_half_model_fails(tmp_path: Path) -> None:
    """A half model whose last layer is off by 2 % is farther than half precision explains: FAIL."""
    net = _nets().build("mobilenetv2", size=64)  # type: ignore[attr-defined]
    x = _x()
    pt = tmp_path / "net.pt"
    torch.jit.save(torch.jit.trace(net, (x,)), pt)
    out = tmp_path / "net.onnx"
    good = convert.convert(pt, to="onnx", out=out, precision="fp16")
    assert good.report is not None and good.report.verdict == "PASS", good.report.table()
    model = onnx.load(out)
    last = max((i for i in model.graph.initializer if i.data_type == TensorProto.FLOAT16 and len(i.dims) == 2),
               key=lambda i: list(model.graph.initializer).index(i))
    bad = numpy_helper.to_array(last) * np.float16(1.02)
    last.CopyFrom(numpy_helper.from_array(bad, last.name))
    onnx.save(model, out)
    report = run_parity("pytorch", [pt], "onnx", [out], options=Options())
    assert report.verdict == "FAIL", report.table()
    assert "fp16 model" in report.outputs[0].note


def test_no_half_run_of_the_source_is_not_verified(tmp_path: Path) -> None:
    """An ONNX source has no half-precision run of its own: a miss is NOT VERIFIED, never a PASS
    on a looser tolerance, and never a FAIL."""
    net = _nets().build("resnet", size=64)  # type: ignore[attr-defined]
    src = tmp_path / "fp32.onnx"
    convert.convert(net, (_x(),), to="onnx", out=src, check=False)
    result = convert.convert(src, to="onnx", out=tmp_path / "fp16.onnx", precision="fp16")
    assert result.report is not None and result.report.verdict == "NOT VERIFIED", result.report.table()
    assert "no fp16 run of the source" in result.report.outputs[0].note
    assert "NOT VERIFIED" in result.report.table() and not result.ok


def test_bf16_rule_and_numbers(tmp_path: Path) -> None:
    """bf16: ONNX's Conv has no bf16, so convolutions stay float32; matrix products are bf16. The
    file is run by onnx's reference evaluator (ORT's CPU provider has no bf16 kernels)."""
    from onnx.reference import ReferenceEvaluator

    net = _nets().build("vit", size=64)  # type: ignore[attr-defined]
    x = _x()
    out = tmp_path / "bf16.onnx"
    result = convert.convert(net, (x,), to="onnx", out=out, precision="bf16")
    assert "no CPU kernel" in result.parity_error and not result.ok  # said, not a verdict
    model = onnx.load(out)
    inits = {i.name: i.data_type for i in model.graph.initializer}
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    assert inits[conv.input[1]] == TensorProto.FLOAT
    matmul_weights = [inits[i] for n in model.graph.node if n.op_type == "MatMul" for i in n.input if i in inits]
    assert matmul_weights and set(matmul_weights) == {TensorProto.BFLOAT16}
    with torch.no_grad():
        ref = net(x).numpy()
        half = copy.deepcopy(net).to(torch.bfloat16)(x.to(torch.bfloat16)).float().numpy()
    ours = np.asarray(ReferenceEvaluator(str(out)).run(None, {"x": x.numpy()})[0], np.float32)
    assert 1e-5 < _rel(ours, ref) <= HALF_MARGIN * _rel(half, ref)


def test_precision_is_onnx_only(tmp_path: Path) -> None:
    src = _rule_model(tmp_path / "rule.onnx")
    with pytest.raises(convert.UsageError, match=r"unknown option\(s\) precision"):
        convert.convert(src, to="caffe", out=tmp_path / "m.prototxt", check=False, precision="fp16")
