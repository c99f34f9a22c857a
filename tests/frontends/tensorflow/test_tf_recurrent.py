"""Keras recurrent layers (LSTM, GRU, SimpleRNN, Bidirectional) -> ONNX LSTM / GRU / RNN, against TensorFlow.

Keras runs each layer as a while loop, which freezing lowers to a TF1 frame; ``recurrent.py``
replaces a loop whose body is exactly one Keras cell by one ONNX recurrent op (Keras' gate order
i, f, c, o as ONNX's i, o, f, c; GRU ``reset_after`` as ``linear_before_reset=1`` with both bias
vectors). Each model (``sequence_models.py``, random non-zero weights) is exported as a SavedModel,
converted, run in ONNX Runtime and compared with TensorFlow's own run on two seeded inputs; no
``Loop`` and no TF control flow is left. Masked layers (``Select``s in the body) become general
ONNX ``Loop``s instead: ``test_tf_control_flow.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sequence_models  # beside this file

from convert.ir import Options, passes

pytestmark = pytest.mark.tensorflow
pytest.importorskip("tensorflow")

RTOL = 1e-5  # max |ours - TF| / max |TF|
RECURRENT = {"LSTM", "GRU", "RNN"}
# "mixed": a stacked LSTM -> GRU (last step), a Bidirectional LSTM -> ReLU SimpleRNN (every step), a
# go_backwards ReLU GRU (every step), a Bidirectional GRU (last steps, summed): four outputs.
EXPECTED = {"mixed": {"LSTM": 3, "GRU": 4, "RNN": 1}, "text_bilstm": {"LSTM": 2}, "bidir_rnn": {"LSTM": 2, "RNN": 1}}


def _compare(path: Path, out: Path, seeds: tuple[int, ...] = (0, 1)) -> tuple[float, list[str]]:
    import onnx

    from convert.exporters.onnx import EXPORTER
    from convert.frontends.tensorflow import FRONTEND
    from convert.parity.runtimes.onnxruntime import open_runtime as open_ort
    from convert.parity.runtimes.tensorflow import open_runtime as open_tf

    options = Options()
    model = FRONTEND.load([path], options)
    notes = " ".join(options.diagnostics.notes)
    if path.is_dir():  # the loop reads each variable through an Enter node: still mapped, not frozen
        assert "mapped from variables/" in notes, notes
    passes.standard_pipeline(validate=True)(model)
    EXPORTER.save(model, out, Options())
    ours = open_ort([out], Options(extra={"device": "cpu"}))
    ref = open_tf([path], Options())
    worst = 0.0
    for seed in seeds:
        rng = np.random.default_rng(seed)
        feeds = {}
        for s in ref.inputs():  # type: ignore[attr-defined]
            shape = tuple(2 if d is None else d for d in s.shape)  # batch 2
            feeds[s.name] = (rng.integers(0, 50, shape).astype(s.dtype) if np.issubdtype(s.dtype, np.integer)
                             else rng.standard_normal(shape).astype(np.float32))
        wants, gots = ref.run(feeds), ours.run(feeds)  # type: ignore[attr-defined]
        assert sorted(wants) == sorted(gots), (sorted(wants), sorted(gots))
        for name, want in wants.items():
            got = gots[name]
            assert got.shape == want.shape, (name, got.shape, want.shape)
            assert want.std() > 1e-3 * np.abs(want).max() > 0, "degenerate reference"
            worst = max(worst, float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max()))
    return worst, [n.op_type for n in onnx.load(str(out)).graph.node]


@pytest.mark.parametrize("case", ["mixed", "text_bilstm"])
def test_keras_recurrent_layer_matches_tensorflow(case: str, tmp_path: Path) -> None:
    path = tmp_path / case
    sequence_models.build(case).export(str(path), verbose=False)  # type: ignore[attr-defined]
    err, ops = _compare(path, tmp_path / "m.onnx")
    print(f"PARITY-TF-RNN {case} {err:.1e} {sorted(set(ops))}")
    assert err <= RTOL, f"{case}: max rel error {err:.2e}"
    assert {op: ops.count(op) for op in RECURRENT if op in ops} == EXPECTED[case], ops
    assert "Loop" not in ops and "Transpose" in ops  # batch-major <-> time-major, as Keras does


def test_keras_file_bidirectional(tmp_path: Path) -> None:
    path = tmp_path / "bidir.keras"
    sequence_models.build("bidir_rnn").save(str(path))  # type: ignore[attr-defined]
    err, ops = _compare(path, tmp_path / "m.onnx", seeds=(0,))
    print(f"PARITY-TF-RNN bidir_rnn.keras {err:.1e}")
    assert err <= RTOL and ops.count("LSTM") == 2 and ops.count("RNN") == 1, (err, ops)

