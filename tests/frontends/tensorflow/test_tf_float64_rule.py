"""The float64 rule of the verdict on the TensorFlow route (``.keras`` files and SavedModels).

A net whose float32 rounding alone exceeds the tolerance, MobileNetV3-like in its parts (a
hard-swish, a squeeze-and-excite gate, 1x1 convolutions), built so that two 4000x 1x1
convolutions cancel to a small result (``a - a' + S x``, after activations each runtime computes
ulps apart). TensorFlow's own float32 run and ours are ~1e-4 of the output's scale from the exact
value; the source run in float64 (a ``.keras`` file: Keras' float64 dtype policy, the same
weights; a SavedModel: the graph the converter read with every float32 type made float64, run by
TensorFlow's own kernels) judges them: PASS by the float64 rule. Checked against a source whose
small term differs by 1 %, the same converted model FAILs even with the float64 run. Both verdicts
come from the public API's parity check (``convert.convert``, ``convert.verify``), against TensorFlow itself.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

pytestmark = [pytest.mark.tensorflow]

GAIN = 4000.0
CHANNELS = 32


def _cancelling(small: np.ndarray, big: np.ndarray) -> object:
    x = keras.Input((6, 7, CHANNELS), name="x")
    e = keras.layers.Activation("hard_swish", name="hswish")(x)  # each runtime's own kernel: ulps apart
    s = keras.layers.GlobalAveragePooling2D(keepdims=True)(e)
    s = keras.layers.Conv2D(CHANNELS, 1, activation="hard_sigmoid", name="se")(s)
    e = keras.layers.Multiply()([e, s])
    a = keras.layers.Conv2D(CHANNELS, 1, use_bias=False, name="a")(e)
    b = keras.layers.Conv2D(CHANNELS, 1, use_bias=False, name="b")(e)
    model = keras.Model(x, keras.layers.Add(name="y")([a, b]))
    model.get_layer("a").set_weights([big.reshape(1, 1, CHANNELS, CHANNELS)])
    model.get_layer("b").set_weights([(-big + small).reshape(1, 1, CHANNELS, CHANNELS)])
    rng = np.random.default_rng(1)
    se = model.get_layer("se")
    se.set_weights([rng.standard_normal(w.shape).astype(np.float32) * 0.5 for w in se.get_weights()])
    return model


@pytest.fixture(scope="module")
def nets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The net as a ``.keras`` file and a SavedModel, the wrong one as a SavedModel."""
    root = tmp_path_factory.mktemp("f64")
    rng = np.random.default_rng(0)
    small = rng.standard_normal((CHANNELS, CHANNELS)).astype(np.float32)
    big = (rng.standard_normal((CHANNELS, CHANNELS)) * GAIN).astype(np.float32)
    out = {}
    for name, model in (("net", _cancelling(small, big)), ("wrong", _cancelling(small * 1.01, big))):
        if name == "net":
            model.save(str(root / f"{name}.keras"))
            out[name] = root / f"{name}.keras"
        model.export(str(root / f"{name}_sm"), verbose=False)
        out[f"{name}_sm"] = root / f"{name}_sm"
    return out


@pytest.mark.parametrize("form", ["keras", "savedmodel"])
def test_float32_rounding_passes_by_the_float64_run_and_a_wrong_model_fails(nets: dict[str, Path], form: str,
                                                                            tmp_path: Path) -> None:
    import convert

    src, wrong = (nets["net"] if form == "keras" else nets["net_sm"]), nets["wrong_sm"]
    result = convert.convert(str(src), format="tensorflow", to="onnx", out=str(tmp_path / "net.onnx"))
    report = result.report
    assert report is not None
    out = report.outputs[0]
    assert out.rel_to_scale > 1e-4, out  # float32 rounding alone misses tol: the rule must decide
    assert report.verdict == "PASS" and out.by_float64, report.table()
    assert "float64 run of the source" in out.note
    print(f"TF-F64 {form} {out.rel_to_scale:.1e}: {out.note}")
    if form == "keras":
        return  # the verdict's arithmetic is the same for both forms: the wrong model is checked once

    report = convert.verify(str(wrong), str(tmp_path / "net.onnx"), format="tensorflow", to="onnx")
    out = report.outputs[0]
    assert report.verdict == "FAIL" and not out.by_float64, report.table()
