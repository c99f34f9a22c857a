"""Tensor backings: the streamed transpose writes exactly the bytes of ``a.T``."""

from __future__ import annotations

import io
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest

from convert import ir
from convert.ir import tensors


@pytest.mark.parametrize(("shape", "dtype"), [((37, 5), np.float32), ((1, 1), np.int64), ((100, 33), np.float16),
                                              ((20, 70), ml_dtypes.bfloat16), ((3, 2000), np.float64)],
                         ids=["f32", "1x1-i64", "f16", "bf16", "wide-f64"])
def test_transposed_values_and_stream(shape: tuple[int, int], dtype: type, rng: np.random.Generator) -> None:
    a = (rng.standard_normal(shape) * 100).astype(dtype)
    t = ir.transposed(ir.from_array(a, name="w"), name="w_T")
    want = np.ascontiguousarray(a.T)
    assert tuple(t.shape) == shape[::-1] and t.dtype == ir.DataType.from_numpy(np.dtype(dtype))
    assert t.nbytes == a.nbytes
    np.testing.assert_array_equal(t.numpy(), want)
    assert t.tobytes() == want.tobytes()
    out = io.BytesIO()
    t.tofile(out)
    assert out.getvalue() == want.tobytes()


def test_transposed_streams_in_stripes(monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator) -> None:
    """With small stripes, every write is at most one stripe and the bytes are still those of a.T."""
    monkeypatch.setattr(tensors, "_STRIPE_BYTES", 4 * 64 * 20)  # 20 columns of 64 rows
    a = rng.standard_normal((64, 90)).astype(np.float32)
    sizes: list[int] = []

    class Recorder(io.BytesIO):
        def write(self, b: object) -> int:
            sizes.append(len(memoryview(b).cast("B")))  # type: ignore[arg-type]
            return super().write(b)  # type: ignore[arg-type]

    out = Recorder()
    ir.transposed(ir.from_array(a, name="w"), name="w_T").tofile(out)
    assert out.getvalue() == np.ascontiguousarray(a.T).tobytes()
    assert len(sizes) == 5 and max(sizes) == 4 * 64 * 20


def test_transposed_refuses_other_ranks() -> None:
    with pytest.raises(ValueError, match="rank 3"):
        ir.transposed(ir.from_array(np.zeros((2, 3, 4), np.float32), name="w"), name="w_T")


def test_transposed_weight_saved_as_external_data(tmp_path: Path, rng: np.random.Generator) -> None:
    w = rng.standard_normal((48, 24)).astype(np.float32)
    b = ir.GraphBuilder("t")
    x = b.input("x", ir.DataType.FLOAT, (2, 48))
    wt = b.initializer(ir.transposed(ir.from_array(w.T.copy(), name="w"), name="w_T"))
    b.output(b.op("MatMul", [x, wt]), "y")
    model = b.build()
    ir.passes.InferShapes()(model)
    ir.save_model(model, tmp_path / "m.onnx", external_data="m.onnx.data", size_threshold_bytes=0)
    loaded = onnx.load(str(tmp_path / "m.onnx"))
    got = onnx.numpy_helper.to_array(loaded.graph.initializer[0], base_dir=str(tmp_path))
    np.testing.assert_array_equal(got, w)
