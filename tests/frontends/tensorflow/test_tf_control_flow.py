"""TF control flow -> ONNX ``Loop`` / ``If`` (``controlflow.py``, ``ops/controlflow.py``), against TensorFlow.

Each model (``control_flow_models.py``) is saved as a SavedModel, converted, run in ONNX Runtime
and compared with TensorFlow's own run: custom ``tf.while_loop``s (a data-dependent trip count; a
scan over time through TensorArrays), a ``tf.cond`` whose branches differ in ops and in shape (both
branches taken), and Keras recurrent layers behind a mask (``Masking``, ``Embedding(mask_zero=True)``)
with masked steps in the middle of the sequences. A loop that cannot be converted is refused in
one line naming its ``LoopCond``, exit status 2.
"""

from __future__ import annotations

from pathlib import Path

import control_flow_models as models  # beside this file
import numpy as np
import pytest

from convert.ir import Options, UnsupportedOpsError, passes

pytestmark = pytest.mark.tensorflow
pytest.importorskip("tensorflow")

RTOL = 1e-5  # max |ours - TF| / max |TF|


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tf_control_flow")
    return {name: models.export(name, folder / name) for name in ("loops", "cond", "masked", "masked_text")}


def _convert(path: Path) -> tuple[object, list[str]]:
    import onnx

    from convert.exporters.onnx import EXPORTER
    from convert.frontends.tensorflow import FRONTEND
    from convert.parity.runtimes.onnxruntime import open_runtime as open_ort

    model = FRONTEND.load([path], Options())
    passes.standard_pipeline(validate=True)(model)
    out = path.with_suffix(".onnx")
    EXPORTER.save(model, out, Options())
    return open_ort([out], Options(extra={"device": "cpu"})), [n.op_type for n in onnx.load(str(out)).graph.node]


def _worst(path: Path, ours: object, batches: list[np.ndarray], name: str) -> float:
    from convert.parity.runtimes.tensorflow import open_runtime as open_tf

    ref = open_tf([path], Options())
    (spec,) = ref.inputs()  # type: ignore[attr-defined]
    worst = 0.0
    for x in batches:
        wants, gots = ref.run({spec.name: x}), ours.run({spec.name: x})  # type: ignore[attr-defined]
        assert sorted(wants) == sorted(gots), (sorted(wants), sorted(gots))
        for key, want in wants.items():
            got = gots[key]
            assert got.shape == want.shape, (name, key, got.shape, want.shape)
            assert want.std() > 1e-3 * np.abs(want).max() > 0, f"{name}/{key}: degenerate reference"
            assert np.abs(want).mean() < 0.999 * np.abs(want).max() or want.std() > 0.1, f"{name}/{key}: saturated"
            worst = max(worst, float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max()))
    return worst


def test_while_loops_become_onnx_loop(saved: dict[str, Path]) -> None:
    ours, ops = _convert(saved["loops"])
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((2, models.T, models.C)).astype(np.float32) * s for s in (0.3, 1.0, 2.0)]
    err = _worst(saved["loops"], ours, batches, "loops")
    print(f"PARITY-TF-LOOP loops {err:.1e}")
    assert err <= RTOL, f"loops: max rel error {err:.2e}"
    assert ops.count("Loop") == 2 and "Gather" not in ops, ops  # the Gather is inside the scan's body


def test_cond_becomes_onnx_if(saved: dict[str, Path]) -> None:
    ours, ops = _convert(saved["cond"])
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    x += 0.5 - x.mean()  # positive sum: the then branch ([N, 2]); -x takes the else branch ([N, 4])
    err = _worst(saved["cond"], ours, [x, -x], "cond")
    print(f"PARITY-TF-IF cond {err:.1e}")
    assert err <= RTOL, f"cond: max rel error {err:.2e}"
    assert ops.count("If") == 1 and "Sin" not in ops and "Relu" not in ops, ops  # both only inside the branches


@pytest.mark.parametrize("case", ["masked", "masked_text"])
def test_masked_keras_rnn_matches_tensorflow(case: str, saved: dict[str, Path]) -> None:
    ours, ops = _convert(saved[case])
    batches = [models.masked_inputs(4, seed, tokens=case == "masked_text") for seed in (0, 1)]
    err = _worst(saved[case], ours, batches, case)
    print(f"PARITY-TF-MASKED {case} {err:.1e} Loop x{ops.count('Loop')}")
    assert err <= RTOL, f"{case}: max rel error {err:.2e}"
    # masking's Selects make each layer (each direction) a general Loop, not an ONNX LSTM/GRU/RNN
    assert ops.count("Loop") == {"masked": 7, "masked_text": 3}[case], ops
    assert not {"LSTM", "GRU", "RNN"} & set(ops), ops


def test_unconvertible_loop_is_refused_in_one_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from convert.cli import cli
    from convert.frontends.tensorflow import FRONTEND

    path = models.export("reversed_write", tmp_path / "reversed")
    with pytest.raises(UnsupportedOpsError) as err:
        FRONTEND.load([path], Options())
    text = str(err.value)
    assert "while loop" in text and "LoopCond" in text and "neither the step counter" in text, text
    assert "\n" not in text and "Merge" not in text, text
    result = CliRunner().invoke(cli, ["tensorflow:onnx", str(path), "-o", str(tmp_path / "r.onnx")])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "while loop" in result.output, result.output
    assert not (tmp_path / "r.onnx").exists()
