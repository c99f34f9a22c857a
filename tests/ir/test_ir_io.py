"""The streamed inline writer produces exactly the message protobuf would have built."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import onnx
import pytest

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


def _sparse_source(path: Path, size: int, runs: list[tuple[int, bytes]]) -> None:
    with open(path, "wb") as f:
        f.truncate(size)
        for offset, payload in runs:
            f.seek(offset)
            f.write(payload)


@pytest.mark.parametrize("fallback", ["kernel", "sendfile", "pread"])
def test_file_slices_copied_with_their_holes(tmp_path: Path, rng: np.random.Generator, fallback: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Slices of a sparse file are written byte for byte (holes read as zeros), at unaligned offsets
    too, whether the kernel copies them, sendfile does, or plain reads."""
    def refuse(*_: object) -> int:
        raise OSError(errno.EXDEV, "refused")

    if fallback in ("sendfile", "pread"):
        monkeypatch.setattr(os, "copy_file_range", refuse, raising=False)
    if fallback == "pread":
        monkeypatch.setattr(os, "sendfile", refuse, raising=False)
    raw = tmp_path / "w.bin"
    size = 3 << 20
    runs = [(5, rng.bytes(1000)), (1 << 20, rng.bytes(70_000)), ((3 << 20) - 4096, rng.bytes(4096))]
    _sparse_source(raw, size, runs)
    whole = raw.read_bytes()
    b = ir.GraphBuilder("holes")
    x = b.input("x", ir.DataType.FLOAT, (1, 64))
    slices = [(0, 64 * 4096), (7, 64 * 1024), ((1 << 20) - 12, 64 * 2048), ((2 << 20) + 4, 64 * 256),
              (size - 64 * 4096, 64 * 4096)]  # from the start, unaligned, across data, all hole, to the end
    y = x
    for i, (offset, length) in enumerate(slices):
        w = b.initializer(ir.file_slice(raw, offset, "float32", (64, length // 256), name=f"w{i}"))
        y = b.op("Concat", [y, b.op("MatMul", [x, w])], {"axis": 1})
    b.output(y, "y")
    model = b.build()
    ir.passes.InferShapes()(model)
    for external in (True, False):
        out = tmp_path / f"m{external}.onnx"
        if external:
            ir.save_model(model, out, external_data=out.name + ".data")
        else:
            ir.save_inline_streamed(model, out)
        loaded = onnx.load(str(out))
        for i, (offset, length) in enumerate(slices):
            t = next(t for t in loaded.graph.initializer if t.name == f"w{i}")
            got = onnx.numpy_helper.to_array(t, base_dir=str(tmp_path)).tobytes()
            assert got == whole[offset:offset + length], (external, i)
    assert type(model.graph.initializers["w0"].const_value) is ir.ExternalTensor  # the model is left as it was
