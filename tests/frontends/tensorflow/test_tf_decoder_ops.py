"""Decoder, segmentation, super-resolution and audio ops, SavedModel -> ONNX against TensorFlow.

Conv2DTranspose (``Conv2DBackpropInput`` -> ConvTranspose), bilinear and nearest resizing in each
coordinate mode (-> Resize), DepthToSpace / SpaceToDepth, and Keras' dilated Conv1D
(SpaceToBatchND -> ExpandDims -> Conv2D -> Squeeze -> BatchToSpaceND -> one dilated Conv).
Each small Keras model (``decoder_models.py``) is exported with ``model.export``, converted, run in
ONNX Runtime and compared with TensorFlow's own run of the SavedModel on the same seeded input.
A tiny U-Net goes through ``convert.api.convert`` and its parity check.
"""

from __future__ import annotations

from pathlib import Path

import decoder_models  # beside this file (pytest puts its folder on sys.path)
import numpy as np
import pytest

from convert.ir import Options, passes

pytestmark = pytest.mark.tensorflow
pytest.importorskip("tensorflow")

RTOL = 1e-5  # max |ours - TF| / max |TF|

# The ONNX ops each family must become (and no Transpose around the image ops: NCHW inside).
EXPECTED = {"convT": "ConvTranspose", "upsample": "Resize", "resize": "Resize", "depth_to_space": "DepthToSpace",
            "space_to_depth": "SpaceToDepth"}


def _savedmodel(name: str, folder: Path) -> Path:
    model = decoder_models.build(name)
    path = folder / f"{name}_savedmodel"
    model.export(str(path), verbose=False)  # type: ignore[attr-defined]
    return path


def _convert_and_compare(path: Path, out: Path, seeds: tuple[int, ...] = (0, 1)) -> tuple[float, list[str]]:
    """Return the largest relative error over ``seeds`` and the converted graph's op types."""
    import onnx

    from convert.exporters.onnx import EXPORTER
    from convert.frontends.tensorflow import FRONTEND
    from convert.parity.runtimes.onnxruntime import open_runtime as open_ort
    from convert.parity.runtimes.tensorflow import open_runtime as open_tf

    model = FRONTEND.load([path], Options())
    passes.standard_pipeline(validate=True)(model)
    EXPORTER.save(model, out, Options())
    ours = open_ort([out], Options(extra={"device": "cpu"}))
    ref = open_tf([path], Options())
    worst = 0.0
    for seed in seeds:
        rng = np.random.default_rng(seed)
        feeds = {s.name: rng.standard_normal(tuple(1 if d is None else d for d in s.shape)).astype(np.float32)
                 for s in ref.inputs()}  # type: ignore[attr-defined]
        want = ref.run(feeds)["output_0"]  # type: ignore[attr-defined]
        got = ours.run(feeds)["output_0"]  # type: ignore[attr-defined]
        assert got.shape == want.shape, (got.shape, want.shape)
        assert want.std() > 1e-3 * np.abs(want).max() > 0, "degenerate reference"
        worst = max(worst, float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max()))
    return worst, [n.op_type for n in onnx.load(str(out)).graph.node]


@pytest.mark.parametrize("case", list(decoder_models.CASES))
def test_decoder_op_matches_tensorflow(case: str, tmp_path: Path) -> None:
    err, ops = _convert_and_compare(_savedmodel(case, tmp_path), tmp_path / "m.onnx")
    print(f"PARITY-TF {case} {err:.1e}")
    assert err <= RTOL, f"{case}: max rel error {err:.2e}"
    family = next((op for prefix, op in EXPECTED.items() if case.startswith(prefix)), None)
    if family is not None:
        assert family in ops and "Transpose" not in ops, ops
    if case.startswith("convT"):  # Keras' bias (and batch norm) joins the ConvTranspose
        assert ops.count("ConvTranspose") == 1 and "Add" not in ops and "Mul" not in ops, ops
    if case.startswith("conv1d"):  # one dilated Conv: no SpaceToBatch arithmetic left
        assert ops.count("Conv") == 1 and not {"SpaceToDepth", "DepthToSpace"} & set(ops), ops
    if case.startswith(("conv1d", "tcn")):  # [N, C, L] between the Conv1Ds: Transposes only at the edges
        assert ops.count("Transpose") <= 2, ops


def test_dilated_conv1d_becomes_one_dilated_conv(tmp_path: Path) -> None:
    """SpaceToBatchND -> ExpandDims -> Conv2D -> Squeeze -> BatchToSpaceND: one Conv with dilation
    [1, 4] and pads = the SpaceToBatchND's paddings less the BatchToSpaceND's crops."""
    import onnx

    err, _ = _convert_and_compare(_savedmodel("conv1d_dilation4_same", tmp_path), tmp_path / "m.onnx")
    assert err <= RTOL, err
    conv = next(n for n in onnx.load(str(tmp_path / "m.onnx")).graph.node if n.op_type == "Conv")
    attrs = {a.name: list(a.ints) for a in conv.attribute if a.ints}
    assert attrs["dilations"] == [1, 4] and attrs["pads"] == [0, 4, 0, 4], attrs


def test_transposed_conv_output_size_is_not_computed_at_run_time(tmp_path: Path) -> None:
    """Keras computes input_sizes from Shape(x) (a free batch): the static size is used instead,
    so no Shape/StridedSlice/Pack arithmetic (and no Transpose for it) is converted."""
    _, ops = _convert_and_compare(_savedmodel("convT_k3_s2_same", tmp_path), tmp_path / "m.onnx", seeds=(0,))
    assert ops == ["Conv", "ConvTranspose"], ops


def test_tiny_unet_through_the_api_passes(tmp_path: Path) -> None:
    """Conv + batch norm blocks, Conv2DTranspose (SAME and VALID) with skip concatenations, a
    bilinear upsampling branch and a DepthToSpace head: convert.api.convert's verdict is PASS."""
    from convert import api

    path = tmp_path / "unet"
    decoder_models.build("unet").export(str(path), verbose=False)  # type: ignore[attr-defined]
    result = api.convert([path], format="tensorflow", to="onnx", out=tmp_path / "unet.onnx")
    report = result.report
    assert report is not None and report.verdict == "PASS", report.table() if report else result
    err = max(o.rel_to_scale for o in report.outputs)
    print(f"PARITY-TF unet {err:.1e}")
    assert err <= RTOL
    err2, ops = _convert_and_compare(path, tmp_path / "m.onnx")
    assert err2 <= RTOL, err2
    assert ops.count("ConvTranspose") == 2 and "Resize" in ops and "DepthToSpace" in ops, ops


def test_savedmodel_without_variables_converts(tmp_path: Path) -> None:
    """Placeholder -> PartitionedCall -> Identity is under grappler's default minimum graph size (4
    nodes): it must still be inlined (it was refused as an unsupported PartitionedCall)."""
    import keras

    inp = keras.Input((5, 6, 3), name="image")
    path = tmp_path / "upsample"
    keras.Model(inp, keras.layers.UpSampling2D(2, interpolation="bilinear")(inp)).export(str(path), verbose=False)
    err, ops = _convert_and_compare(path, tmp_path / "m.onnx")
    assert err <= RTOL, err
    assert ops == ["Shape", "Slice", "Concat", "Resize"], ops  # sizes [N, C, 10, 12] with a free batch
