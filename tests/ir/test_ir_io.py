"""The streamed inline writer produces exactly the message protobuf would have built."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from convert import ir
from convert.frontends.onnx import FRONTEND


def test_streamed_inline_equals_built_proto(tmp_path: Path, rng: np.random.Generator) -> None:
    raw = tmp_path / "w.bin"
    w = rng.standard_normal((16, 8)).astype(np.float32)
    raw.write_bytes(b"\x00" * 8 + w.tobytes())
    b = ir.GraphBuilder("io")
    x = b.input("x", ir.DataType.FLOAT, (2, 16))
    wv = b.initializer(ir.file_slice(raw, 8, "float32", w.shape, name="w"))  # a file slice
    h = b.op("MatMul", [x, wv])
    h = b.op("Add", [h, b.const(rng.standard_normal(8).astype(np.float16).astype(np.float32), "bias")])
    idx = b.const(np.array([1, 3], np.int64), "idx")  # int64
    flag = b.const(np.array([True, False]), "flag")  # bool
    g = b.op("Gather", [h, idx], {"axis": 1})
    b.output(g, "y")
    b.output(b.op("Not", [flag]), "nf")
    model = b.build()
    ir.passes.InferShapes()(model)
    checked: list[str] = []
    path = tmp_path / "m.onnx"
    ir.save_inline_streamed(model, path, check=lambda p: (onnx.checker.check_model(p), checked.append(p)))
    assert checked and not Path(checked[0]).exists()  # the skeleton was checked, then removed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "w.bin"]
    streamed = onnx.load(str(path))
    built = onnx.ModelProto.FromString(ir.serialize_inline(model))
    # onnx_ir also writes value_info for initializers (redundant: they carry their own type/shape)
    inits = {t.name for t in built.graph.initializer}
    kept = [vi for vi in built.graph.value_info if vi.name not in inits]
    del built.graph.value_info[:]
    built.graph.value_info.extend(kept)
    assert streamed == built
    onnx.checker.check_model(str(path))
    back = FRONTEND.load([path], ir.Options())
    assert np.array_equal(back.graph.initializers["w"].const_value.numpy(), w)
