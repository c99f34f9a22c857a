"""The Caffe parity runtime on sources its own Caffe refuses, and on the dialect it reads (#48).

* Never a PASS from a stand-in when the file's own Caffe refuses the *source*, as for converted
  files: a source real Caffe here refuses (an Interp layer: PSPNet's fork, not built here) is
  checked in OpenCV DNN and is NOT VERIFIED with the reason (was PASS, exit 0). One that OpenCV
  cannot run either (PSPNet's BN) is NOT VERIFIED with both reasons, exit 1, in ``convert`` and in
  ``convert check`` alike (was NOT CHECKED, exit 1, and an error, exit 2).
* A fork-dialect file whose only ``round_mode`` is in a comment or a name loads in the fork as
  written: no translated copy, no 'AS WRITTEN DOES NOT LOAD' (the translation was a text regex).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from convert import api
from convert.parity.runtimes.caffe_runtime import RealCaffeRuntime, find_caffe
from convert.parity.runtimes.opencv_caffe import OpenCVCaffeRuntime

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "models" / "caffe"))

from build_nets import NetBuilder  # noqa: E402

cv2 = pytest.importorskip("cv2")


@pytest.fixture(scope="module")
def caffe_dir() -> Path:
    found = find_caffe()
    if found is None:
        pytest.skip("real Caffe is not built here: run scripts/build_caffe")
    return found


def _interp_net(tmp: Path) -> tuple[Path, Path]:
    b = NetBuilder("interp", 0)
    b.input("data", (1, 2, 5, 5))
    b.conv("conv", "data", "conv", 2, 3, 3, p=1)
    b.layer("Interp", "up", ["conv"], ["up"], interp_param={"zoom_factor": 2})
    return b.save(tmp)


def _bn_net(tmp: Path, fillers: bool) -> tuple[Path, Path]:
    """PSPNet's BN; with ``fillers``, its bn_param as PSPNet's released prototxts write it (OpenCV's
    parser then refuses the file; without, OpenCV loads it and cannot create the layer)."""
    b = NetBuilder("pspbn", 0)
    b.input("data", (1, 3, 6, 6))
    c = 3
    rng = np.random.default_rng(3)
    extra = {"slope_filler": {"type": "constant", "value": 1.0}, "bias_filler": {"type": "constant", "value": 0.0},
             "frozen": True, "momentum": 0.95} if fillers else {}
    b.layer("BN", "bn", ["data"], ["bn"], [rng.uniform(0.5, 1, (1, c, 1, 1)), rng.normal(0, 0.1, (1, c, 1, 1)),
                                           rng.normal(0, 0.1, (1, c, 1, 1)), rng.uniform(0.8, 1.2, (1, c, 1, 1))],
            bn_param={"eps": 1e-5, **extra})
    return b.save(tmp)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convert", *args], capture_output=True, text=True, timeout=600)


def test_source_refused_by_real_caffe_is_not_verified_in_opencv(caffe_dir: Path, tmp_path: Path) -> None:
    proto, model = _interp_net(tmp_path)
    result = api.convert([proto, model], to="onnx", out=tmp_path / "interp.onnx")
    report = result.report
    assert report is not None and report.source_runtime.startswith("OpenCV DNN"), report.table()
    assert report.verdict == "NOT VERIFIED" and not report.passed, report.table()  # was PASS
    assert "Interp is a layer of PSPNet's and DeepLab's Caffe forks" in report.source_refused
    assert "NOT VERIFIED: the source's own runtime refused it" in report.table()
    out = report.outputs[0]  # OpenCV, standing in, agrees with the conversion: the numbers are right
    assert out.passed and out.rel_to_scale <= 1e-5 and out.ref_std > 0.01
    run = _cli("caffe:onnx", str(proto), str(model), "-o", str(tmp_path / "cli.onnx"))
    assert run.returncode == 1 and "parity NOT VERIFIED" in run.stdout.splitlines()[-1], run.stdout + run.stderr


@pytest.mark.parametrize(("fillers", "opencv_says"), [(False, "Can't create layer"), (True, "OpenCV could not load")],
                         ids=["opencv-cannot-run-it", "opencv-cannot-parse-it"])
def test_source_neither_real_caffe_nor_opencv_runs_is_not_verified_with_both_reasons(
        fillers: bool, opencv_says: str, caffe_dir: Path, tmp_path: Path) -> None:
    proto, model = _bn_net(tmp_path, fillers)
    out = tmp_path / "bn.onnx"
    converted = _cli("caffe:onnx", str(proto), str(model), "-o", str(out))
    checked = _cli("check", str(proto), str(model), "--against", str(out))
    for run in (converted, checked):  # was exit 1 "NOT CHECKED", and exit 2 in convert check
        assert run.returncode == 1, run.stdout + run.stderr
        assert "parity NOT VERIFIED" in run.stdout.splitlines()[-1], run.stdout
        assert "BN is a layer of PSPNet's Caffe fork, which is not built here" in run.stdout
        assert "its stand-in failed too" in run.stdout and opencv_says in run.stdout.split("its stand-in failed too")[1]
        assert "Traceback" not in run.stderr
    # The conversion is right all the same: PSPNet's BN, (x - mean) / sqrt(var + eps) * slope + bias.
    x = np.random.default_rng(4).standard_normal((1, 3, 6, 6)).astype(np.float32)
    from convert._proto import caffe_pb2

    blobs = [np.asarray(b.data, np.float64).reshape(1, 3, 1, 1)
             for b in caffe_pb2.NetParameter.FromString(model.read_bytes()).layer[1].blobs]
    slope, bias, mean, var = blobs
    want = (x - mean) / np.sqrt(var + 1e-5) * slope + bias
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"data": x})[0]
    assert float(np.abs(got - want).max()) <= 1e-5 * float(np.abs(want).max())


ROUND_MODE_IN_A_COMMENT = """name: "fork"
# BVLC master would spell this pooling round_mode: FLOOR; the fork reads ceil_mode
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 2 dim: 7 dim: 7 } } }
layer { name: "pool round_mode: CEIL" type: "Pooling" bottom: "data" top: "p"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 ceil_mode: false } }
"""


def test_round_mode_in_a_comment_or_a_name_is_not_translated(caffe_dir: Path, tmp_path: Path) -> None:
    proto = tmp_path / "fork.prototxt"
    proto.write_text(ROUND_MODE_IN_A_COMMENT)
    model = tmp_path / "fork.caffemodel"
    model.write_bytes(b"")  # no layer has blobs
    real = RealCaffeRuntime(proto, model, caffe_dir)
    assert real.notes == [] and "round_mode" not in real.name and real.prototxt == proto  # run as written
    cv = OpenCVCaffeRuntime(proto, model)
    assert cv.notes == [] and "round_mode" not in cv.name
    x = np.random.default_rng(5).standard_normal((1, 2, 7, 7)).astype(np.float32)
    ref = real.run({"data": x})["p"]
    assert ref.shape == (1, 2, 3, 3)  # floor rounding: 3, not ceil's 4
    want = x[:, :, :6, :6].reshape(1, 2, 3, 2, 3, 2).max(axis=(3, 5))
    np.testing.assert_array_equal(ref, want)
    np.testing.assert_array_equal(cv.run({"data": x})["p"], want)
    report = api.convert([proto, model], to="onnx", out=tmp_path / "fork.onnx").report
    assert report is not None and report.verdict == "PASS" and not report.notes, report.table()
    assert report.source_runtime == "Caffe (brocolli-caffe 9.0.2, SSD fork)"


def _key(field: int, length: int) -> bytes:
    """A length-delimited protobuf field's key and length, as varints."""
    out = bytearray()
    for value in (field << 3 | 2, length):
        while True:
            out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
            value >>= 7
            if not value:
                break
    return bytes(out)


@pytest.mark.slow
def test_source_over_the_forks_512_mib_is_not_verified(caffe_dir: Path, tmp_path: Path) -> None:
    """A 549 MiB ssd-dialect source (ceil_mode, the fork's pooling field): the SSD fork here reads at
    most 512 MiB of caffemodel and refuses it, BVLC master cannot parse ceil_mode, OpenCV runs it.
    The verdict was 'parity PASS', exit 0, beside a NOTE: now NOT VERIFIED naming the limit."""
    from google.protobuf import text_format

    from convert._proto import caffe_pb2

    rows, cols = 144_000, 1000  # 144 M float32 weights: 549 MiB
    text = ('name: "big"\nlayer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 1 '
            f'dim: 2 dim: {2 * cols} }} }} }}\nlayer {{ name: "pool" type: "Pooling" bottom: "data" top: "pool" '
            'pooling_param { pool: MAX kernel_size: 2 stride: 2 ceil_mode: false } }\n'
            'layer { name: "ip" type: "InnerProduct" bottom: "pool" top: "ip" '
            f'inner_product_param {{ num_output: {rows} bias_term: false }} }}\n')
    proto, model = tmp_path / "big.prototxt", tmp_path / "big.caffemodel"
    proto.write_text(text)
    net = caffe_pb2.NetParameter()
    text_format.Parse(text, net)
    w = np.random.default_rng(6).standard_normal((rows, cols), dtype=np.float32)
    w /= np.float32(np.sqrt(cols))
    shape = caffe_pb2.BlobShape(dim=[rows, cols]).SerializeToString()
    head = caffe_pb2.LayerParameter(name="ip", type="InnerProduct").SerializeToString()
    data = w.tobytes()  # little-endian float32, as the packed field holds it
    blob_len = len(_key(7, len(shape))) + len(shape) + len(_key(5, len(data))) + len(data)
    layer_len = len(head) + len(_key(7, blob_len)) + blob_len
    with open(model, "wb") as fh:  # NetParameter { layer (100) { name, type, blobs (7) { shape (7), data (5) } } }
        fh.write(_key(100, layer_len) + head + _key(7, blob_len) + _key(7, len(shape)) + shape + _key(5, len(data)))
        fh.write(data)
    del data
    assert model.stat().st_size > 512 * 2**20
    x = np.random.default_rng(7).standard_normal((1, 1, 2, 2 * cols)).astype(np.float32)
    result = api.convert([proto, model], to="onnx", out=tmp_path / "big.onnx", inputs={"data": x})
    report = result.report
    assert report is not None and report.verdict == "NOT VERIFIED", report.table()  # was PASS
    assert report.source_runtime.startswith("OpenCV DNN") and "549 MiB" in report.source_refused
    assert "read at most 512 MiB" in report.source_refused and "--caffe-flavor" not in report.source_refused
    out = report.outputs[0]  # the stand-in's numbers agree with the conversion's: nothing else is wrong
    assert out.passed and out.rel_to_scale <= 1e-5
    pooled = x.reshape(1, 1, 1, 2, cols, 2).max(axis=(3, 5)).reshape(1, cols).astype(np.float64)
    got = ort.InferenceSession(str(result.outputs[0]), providers=["CPUExecutionProvider"]).run(None, {"data": x})[0]
    want = pooled @ w.T.astype(np.float64)
    assert float(np.abs(got - want).max()) <= 1e-5 * float(np.abs(want).max())
