"""Public deploy architectures (``models/caffe/deploy/``) with seeded random weights.

Each net runs in real Caffe (PSPNet, whose Interp layer real Caffe lacks, in OpenCV DNN), and is
converted Caffe -> ONNX (run in ONNX Runtime) and Caffe -> Caffe (run in the same Caffe runtime):
both agree with the original within the README's 1e-5 of the output's scale. MobileNet-SSD's
DetectionOutput is compared row for row; writing it back to Caffe is refused (listed).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from convert.exporters.caffe import EXPORTER
from convert.exporters.onnx import EXPORTER as ONNX_EXPORTER
from convert.frontends.caffe import FRONTEND
from convert.ir import Options, UnsupportedOpsError, passes

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "models" / "caffe"))

import deploy_nets  # noqa: E402
import fill_weights  # noqa: E402

RTOL = 1e-5
NETS = list(deploy_nets.NETS)
OPENCV_ONLY = {"pspnet50"}  # Interp: real Caffe (brocolli-caffe) has no such layer


def _rel(ours: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(ours.reshape(ref.shape) - ref).max() / np.abs(ref).max())


def _runtime(paths: list[Path], opencv: bool) -> object:
    if opencv:
        pytest.importorskip("cv2")
        from convert.parity.runtimes.opencv_caffe import open_runtime

        return open_runtime(paths, Options())
    from convert.parity.runtimes.caffe_runtime import RealCaffeRuntime, find_caffe

    caffe_dir = find_caffe()
    if caffe_dir is None:
        pytest.skip("real Caffe is not built here: run scripts/build_caffe")
    return RealCaffeRuntime(paths[0], paths[1], caffe_dir)


def test_committed_prototxts_are_the_generator_output(tmp_path: Path) -> None:
    for path in deploy_nets.build_all(tmp_path):
        committed = ROOT / "models" / "caffe" / "deploy" / path.name
        assert committed.read_text() == path.read_text(), f"run python models/caffe/deploy_nets.py ({path.name})"


@pytest.mark.slow
@pytest.mark.parametrize("name", NETS, ids=NETS)
def test_deploy_net_to_onnx_and_back_to_caffe(name: str, tmp_path: Path) -> None:
    import onnxruntime as ort

    proto = ROOT / "models" / "caffe" / "deploy" / f"{name}.prototxt"
    paths = [proto, fill_weights.fill(proto, tmp_path / f"{name}.caffemodel", seed=0)]
    src = _runtime(paths, name in OPENCV_ONLY)
    spec = src.inputs()[0]  # type: ignore[attr-defined]
    x = np.random.default_rng(1).standard_normal(spec.shape).astype(np.float32)
    ref = src.run({spec.name: x})  # type: ignore[attr-defined]
    for key, r in ref.items():
        assert float(r.max() - r.min()) > 0.05 * float(np.abs(r).max()), f"degenerate reference {key}"

    model = FRONTEND.load(paths, Options())
    passes.standard_pipeline()(model)
    onnx_path = tmp_path / f"{name}.onnx"
    ONNX_EXPORTER.save(model, onnx_path, Options())
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {spec.name: x}), strict=True))
    for key, r in ref.items():
        assert got[key].shape == r.shape, key  # DetectionOutput: the same number of rows
        assert _rel(got[key], r) <= RTOL, (key, _rel(got[key], r))

    flavor = "pspnet" if name == "pspnet50" else "ssd"
    out_base = tmp_path / "out" / name
    if name == "mobilenet_ssd":
        with pytest.raises(UnsupportedOpsError, match="NonMaxSuppression"):
            EXPORTER.save(model, out_base, Options(extra={"caffe_flavor": flavor}))
        return
    out = list(EXPORTER.save(model, out_base, Options(extra={"caffe_flavor": flavor})))
    back = _runtime(out, name in OPENCV_ONLY).run({spec.name: x})  # type: ignore[attr-defined]
    for key, r in ref.items():
        assert _rel(back[key], r) <= RTOL, (key, _rel(back[key], r))
