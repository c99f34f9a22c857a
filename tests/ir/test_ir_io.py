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
from convert.ir.tensors import MappedSlice


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
    assert type(model.graph.initializers["w0"].const_value) is MappedSlice  # the model is left as it was


@pytest.mark.parametrize("external", [False, True])
def test_large_slices_start_where_the_kernel_copies_fast(tmp_path: Path, rng: np.random.Generator,
                                                         external: bool) -> None:
    """Slices of 16 MiB or more are written at an offset that is in the first page of a 64 KiB
    block, at the source's offset within its page (docs/performance.md: 0.21 s instead of 0.28 s
    per GiB); a sparse one is copied from several threads. The bytes stay the source's, holes
    included, and ONNX Runtime computes x @ w from them (numpy from the source is the oracle)."""
    import onnxruntime as ort

    k, n = 1024, 4112  # 16.06 MiB of float32
    size = k * n * 4
    dense_file, sparse_file = tmp_path / "dense.bin", tmp_path / "sparse.bin"
    dense_at, sparse_at = 3 * 4096 + 100, (1 << 20) + 36  # unaligned, in different places of their pages
    w_dense = rng.standard_normal((k, n)).astype(np.float32)
    dense_file.write_bytes(rng.bytes(dense_at) + w_dense.tobytes() + rng.bytes(77))
    runs = [(sparse_at + i * (1 << 20), rng.standard_normal(16384).astype(np.float32).tobytes()) for i in range(16)]
    _sparse_source(sparse_file, sparse_at + size + 4096, runs)
    w_sparse = np.frombuffer(sparse_file.read_bytes()[sparse_at:sparse_at + size], np.float32).reshape(k, n)
    assert np.count_nonzero(w_sparse) > 0 and np.count_nonzero(w_sparse == 0) > w_sparse.size // 2
    b = ir.GraphBuilder("aligned")
    x = b.input("x", ir.DataType.FLOAT, (2, k))
    wd = b.initializer(ir.file_slice(dense_file, dense_at, "float32", (k, n), name="wd"))
    ws = b.initializer(ir.file_slice(sparse_file, sparse_at, "float32", (k, n), name="ws"))
    b.output(b.op("Add", [b.op("MatMul", [x, wd]), b.op("MatMul", [x, ws])]), "y")
    model = b.build()
    ir.passes.InferShapes()(model)
    out = tmp_path / "m.onnx"
    if external:
        ir.save_model(model, out, external_data="m.onnx.data")
    else:
        ir.save_inline_streamed(model, out)
    onnx.checker.check_model(str(out))
    loaded = onnx.load(str(out), load_external_data=False)
    blob = (tmp_path / "m.onnx.data" if external else out).read_bytes()
    for name, src_at, want in (("wd", dense_at, w_dense), ("ws", sparse_at, w_sparse)):
        t = next(t for t in loaded.graph.initializer if t.name == name)
        if external:
            at = int(next(e.value for e in t.external_data if e.key == "offset"))
        else:
            at = blob.index(t.raw_data[:4096])
        assert at % 65536 == src_at % 4096, (name, at)
        assert blob[at:at + size] == want.tobytes(), name
    xv = rng.standard_normal((2, k)).astype(np.float32)
    (got,) = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": xv})
    ref = xv.astype(np.float64) @ w_dense + xv.astype(np.float64) @ w_sparse
    assert np.abs(got - ref).max() / np.abs(ref).max() < 1e-5
    assert type(model.graph.initializers["ws"].const_value) is MappedSlice  # the model is left as it was


def test_a_failing_copy_thread_fails_the_save(tmp_path: Path, rng: np.random.Generator,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """An error in any thread of a parallel sparse copy reaches the caller (no hang, no silent gap)."""
    src = tmp_path / "sparse.bin"
    size = 32 << 20
    _sparse_source(src, size, [(i << 20, rng.bytes(4096)) for i in range(32)])
    real = os.copy_file_range
    calls = []

    def flaky(fd_in: int, fd_out: int, count: int, offset_src: int | None = None, offset_dst: int | None = None) -> int:
        calls.append(offset_src)
        if offset_src is not None and offset_src >= size // 2:  # only the second thread's half
            raise OSError(errno.EIO, "input/output error")
        return real(fd_in, fd_out, count, offset_src, offset_dst)

    monkeypatch.setattr(os, "copy_file_range", flaky)
    b = ir.GraphBuilder("flaky")
    x = b.input("x", ir.DataType.FLOAT, (1, 1024))
    b.output(b.op("MatMul", [x, b.initializer(ir.file_slice(src, 0, "float32", (1024, 8192), name="w"))]), "y")
    model = b.build()
    ir.passes.InferShapes()(model)
    with pytest.raises(OSError, match="input/output error"):
        ir.save_model(model, tmp_path / "m.onnx", external_data="m.onnx.data")
    assert any(c is not None and c < size // 2 for c in calls)


def test_save_model_leaves_no_file_open(tmp_path: Path) -> None:
    """Small slices go into the proto; reading them must not leave their source file mapped and open
    (a suite converting many models ran into thousands of descriptors on deleted files)."""
    raw = tmp_path / "w.bin"
    raw.write_bytes(np.arange(10000, dtype=np.float32).tobytes())
    b = ir.GraphBuilder("fds")
    y = x = b.input("x", ir.DataType.FLOAT, (1, 10))
    for i in range(20):
        y = b.op("Add", [y, b.initializer(ir.file_slice(raw, i * 40, "float32", (10,), name=f"b{i}"))])
    b.output(b.op("Add", [y, x]), "y")
    model = b.build()
    ir.passes.InferShapes()(model)
    before = len(os.listdir("/proc/self/fd"))
    ir.save_model(model, tmp_path / "m.onnx", external_data="m.onnx.data")
    assert len(os.listdir("/proc/self/fd")) == before
    loaded = onnx.load(str(tmp_path / "m.onnx"))
    assert onnx.numpy_helper.to_array(loaded.graph.initializer[3]).tolist() == list(range(30, 40))


@pytest.mark.parametrize("fallback", ["sendfile", "pread"])
def test_parallel_sparse_copy_without_copy_file_range(tmp_path: Path, rng: np.random.Generator, fallback: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the kernel refuses copy_file_range (across filesystems on older kernels), the threads of
    a sparse copy share the destination descriptor, so none may write at its file position
    (sendfile does): the bytes still land where they belong."""
    def refuse(*_: object) -> int:
        raise OSError(errno.EXDEV, "refused")

    monkeypatch.setattr(os, "copy_file_range", refuse, raising=False)
    if fallback == "pread":
        monkeypatch.setattr(os, "sendfile", refuse, raising=False)
    src = tmp_path / "sparse.bin"
    size = 32 << 20
    _sparse_source(src, size, [(i * 65536 + 7, rng.bytes(3000)) for i in range(0, 512, 3)])
    b = ir.GraphBuilder("refused")
    x = b.input("x", ir.DataType.FLOAT, (1, 1024))
    b.output(b.op("MatMul", [x, b.initializer(ir.file_slice(src, 0, "float32", (1024, 8192), name="w"))]), "y")
    model = b.build()
    ir.passes.InferShapes()(model)
    ir.save_model(model, tmp_path / "m.onnx", external_data="m.onnx.data")
    loaded = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    at = int(next(e.value for e in loaded.graph.initializer[0].external_data if e.key == "offset"))
    with open(tmp_path / "m.onnx.data", "rb") as f:
        f.seek(at)
        assert f.read(size) == src.read_bytes()
