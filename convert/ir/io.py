"""Moving models between the IR and ONNX protos or files (the only place that does it).

``save_model`` streams initializers tensor by tensor into an external data file: an
``ExternalTensor`` is copied from its mapped file in chunks and a lazy tensor is computed one at a
time, so peak memory stays near the largest single tensor, not the model.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import os
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import onnx
import onnx_ir as _ir
from onnx_ir import external_data as _external_data

from .tensors import MappedSlice

__all__ = ["from_proto", "load_file", "save_inline_streamed", "save_model", "serialize_inline"]

# Copying a file slice (an ONNX source's external data) into the file being written. Measured on
# ext4 (2 cores, docs/performance.md): copy_file_range and sendfile both run at cp's speed on dense
# data (about 1 GB/s, page cache to page cache), a Python read/write loop at a fifth of it. On a
# sparse file, copy_file_range reads every hole as zeros and writes them (0.2-0.6 GB/s), while cp
# skips holes (10 GB/s). So: find the data extents with SEEK_DATA/SEEK_HOLE, copy only those with
# copy_file_range (sendfile, then pread/pwrite where the kernel refuses), and leave the holes as
# holes: they read back as zeros, the bytes the source has there.
#
# Two more measurements on that disk (benchmarks/bench_copy_kernel.py) shape how a slice is copied:
# - A dense extent's blocks are reserved with fallocate before it is copied: 1.5 GiB copies in
#   0.37 s instead of 0.48 s (cp's time), because the kernel no longer reserves delayed blocks
#   page by page as the copy writes them.
# - A sparse slice costs per extent (two lseeks and a copy for each 4 KiB of data), not per byte,
#   and those calls run in parallel from two threads: 49,152 extents in 0.18 s instead of 0.33 s.
#   Dense copies gain nothing from threads (writes to one file serialize on its lock).
_KERNEL_COPY_CHUNK = 1 << 30
_PLAIN_COPY_CHUNK = 8 << 20
_NO_KERNEL_COPY = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM, errno.EXDEV, errno.EBADF}
_RESERVE_MIN = 1 << 20  # extents at least this long get their blocks reserved first
_PARALLEL_MIN = 16 << 20  # sparse slices at least this long are copied from several threads
_MAX_COPY_THREADS = 4


@functools.cache
def _fallocate() -> Callable[[int, int, int], int] | None:
    """Linux ``fallocate(2)`` as ``f(fd, offset, length) -> errno`` (0 when done); None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = getattr(libc, "fallocate64", None) or libc.fallocate
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    fn.restype = ctypes.c_int

    def call(fd: int, offset: int, length: int) -> int:
        return 0 if fn(fd, 0, offset, length) == 0 else ctypes.get_errno()

    return call


def _reserve(fd: int, offset: int, length: int) -> None:
    """Allocate ``fd``'s blocks for ``[offset, offset + length)`` before they are written, where
    the system can; a full disk is reported here, before any copying."""
    fallocate = _fallocate()
    if fallocate is None:
        return
    err = fallocate(fd, offset, length)
    if err in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        raise OSError(err, os.strerror(err))
    # any other failure (EOPNOTSUPP where a filesystem lacks it, ...) only costs the speed-up


def _copy_threads() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(_MAX_COPY_THREADS, cpus))


def _data_extents(fd: int, start: int, end: int) -> Iterator[tuple[int, int]]:
    """Yield the ``(begin, end)`` ranges of ``[start, end)`` that hold data (all of it where the
    filesystem cannot say where its holes are)."""
    pos = start
    while pos < end:
        try:
            data = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # nothing but a hole from ``pos`` to the end of the file
                return
            yield pos, end  # SEEK_DATA unsupported here: treat the rest as data
            return
        if data >= end:
            return
        try:
            hole = os.lseek(fd, data, os.SEEK_HOLE)
        except OSError:
            hole = end
        yield data, min(hole, end)
        pos = hole


def _copy_extent(src: int, dst: int, offset: int, length: int, dst_offset: int, *, shared_dst: bool = False) -> None:
    """Copy ``length`` bytes of ``src`` at ``offset`` to ``dst`` at ``dst_offset`` (in the kernel when it can).

    ``shared_dst``: other threads write through the same descriptor, so nothing may use its file
    position (``sendfile`` writes at it); only calls given explicit offsets are used.
    """
    copy_file_range = getattr(os, "copy_file_range", None)
    if length < _RESERVE_MIN and copy_file_range is not None:  # a sparse file's extent: one call, mostly
        try:
            if copy_file_range(src, dst, length, offset, dst_offset) == length:
                return
        except OSError as exc:
            if exc.errno not in _NO_KERNEL_COPY:
                raise
    done = 0
    if length >= _RESERVE_MIN:
        _reserve(dst, dst_offset, length)
    if copy_file_range is not None:
        try:
            while done < length:
                n = copy_file_range(src, dst, min(_KERNEL_COPY_CHUNK, length - done), offset + done, dst_offset + done)
                if n == 0:
                    break
                done += n
        except OSError as exc:
            if exc.errno not in _NO_KERNEL_COPY:
                raise
    if done < length and hasattr(os, "sendfile") and not shared_dst:
        try:
            os.lseek(dst, dst_offset + done, os.SEEK_SET)
            while done < length:
                n = os.sendfile(dst, src, offset + done, min(_KERNEL_COPY_CHUNK, length - done))
                if n == 0:
                    break
                done += n
        except OSError as exc:
            if exc.errno not in _NO_KERNEL_COPY:
                raise
    while done < length:
        chunk = os.pread(src, min(_PLAIN_COPY_CHUNK, length - done), offset + done)
        if not chunk:
            raise OSError(errno.EIO, f"the file ends {length - done} bytes early")
        view = memoryview(chunk)
        while view:
            n = os.pwrite(dst, view, dst_offset + done)
            view = view[n:]
            done += n


def _copy_part(path: str, dst: int, begin: int, end: int, shift: int) -> None:
    """Copy the data extents of ``path``'s ``[begin, end)`` to ``dst`` at ``shift`` bytes further on."""
    with open(path, "rb") as src_file:
        src = src_file.fileno()
        for a, b in _data_extents(src, begin, end):
            _copy_extent(src, dst, a, b - a, a + shift, shared_dst=True)


def _copy_sparse_parallel(path: str, dst: int, offset: int, length: int, shift: int, threads: int) -> None:
    """Copy a sparse slice as ``threads`` consecutive parts at once, each with its own descriptor
    (the calls are per extent, so they overlap; every part writes only its own byte range)."""
    step = -(-length // threads)
    parts = [(offset + i * step, min(offset + length, offset + (i + 1) * step)) for i in range(threads)]
    errors: list[BaseException] = []

    def work(begin: int, end: int) -> None:
        try:
            _copy_part(path, dst, begin, end, shift)
        except BaseException as exc:  # re-raised in the calling thread below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=part, daemon=True) for part in parts[1:]]
    for w in workers:
        w.start()
    work(*parts[0])
    for w in workers:
        w.join()
    if errors:
        raise errors[0]


class _SliceCopy(_ir.ExternalTensor):
    """A file slice whose ``tofile`` copies only the data extents of its source (see above)."""

    def tofile(self, file: object) -> None:
        """Write the slice's bytes at ``file``'s position; holes of the source stay holes."""
        fileno = getattr(file, "fileno", None)
        try:
            dst = fileno() if callable(fileno) else -1
        except (OSError, ValueError):  # io.BytesIO has fileno() but no descriptor
            dst = -1
        if dst < 0 or not stat.S_ISREG(os.fstat(dst).st_mode):
            super().tofile(file)
            return
        self._check_validity()
        self._check_path_containment()
        offset = self.offset or 0
        length = self.length if self.length is not None else self.nbytes
        file.flush()  # type: ignore[attr-defined]
        start = file.tell()  # type: ignore[attr-defined]
        with open(self.path, "rb") as src_file:
            src = src_file.fileno()
            if offset + length > os.fstat(src).st_size:
                raise OSError(errno.EIO, f"external data file {self.path!r} is shorter than "
                              f"tensor '{self.name}' needs ({offset + length:,} bytes)")
            extents = _data_extents(src, offset, offset + length)
            first = next(extents, None)  # (SEEK_HOLE costs milliseconds on a large dense file)
            if first is None:  # all hole
                pass
            elif first == (offset, offset + length):  # dense
                _copy_extent(src, dst, offset, length, start)
            elif length >= _PARALLEL_MIN and (threads := _copy_threads()) > 1:
                _copy_sparse_parallel(self.path, dst, offset, length, start - offset, threads)
            else:
                for begin, end in itertools.chain([first], extents):
                    _copy_extent(src, dst, begin, end - begin, start + begin - offset)
        if os.fstat(dst).st_size < start + length:  # the slice ends in a hole: extend the file
            os.ftruncate(dst, start + length)
        file.seek(start + length)  # type: ignore[attr-defined]


def _slice_copy(tensor: _ir.TensorProtocol) -> _ir.TensorProtocol:
    """Return ``tensor`` as a ``_SliceCopy`` when it is a plain file slice (else unchanged)."""
    if type(tensor) not in (_ir.ExternalTensor, MappedSlice):
        return tensor
    return _SliceCopy(tensor.location, tensor.offset, tensor.length, tensor.dtype, shape=tensor.shape,
                      name=tensor.name, doc_string=tensor.doc_string, base_dir=tensor.base_dir,
                      metadata_props=dict(tensor.metadata_props) or None)


def from_proto(proto: object, base_dir: str | os.PathLike[str]) -> _ir.Model:
    """Deserialize an ``onnx.ModelProto``; external tensors resolve against ``base_dir`` lazily."""
    model = _ir.serde.deserialize_model(proto)  # type: ignore[arg-type]
    for graph in model.graphs():
        _external_data.set_base_dir(graph, os.fspath(base_dir))
    return model


def _varint(value: int) -> bytes:
    if value < 0:  # a negative length would loop forever below; frontends refuse negative dims first
        raise ValueError(f"cannot frame a negative length {value}")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


# Field tags (field number << 3 | wire type 2) of the messages framed by hand below.
_MODEL_GRAPH = b"\x3a"  # ModelProto.graph = 7
_GRAPH_INITIALIZER = b"\x2a"  # GraphProto.initializer = 5
_TENSOR_RAW_DATA = b"\x4a"  # TensorProto.raw_data = 9

# Padding before a large tensor's raw_data, so that the kernel copies it fast. Measured on ext4
# (docs/performance.md), copying 1000 MiB from a source offset to a destination offset: 0.21 s when
# the destination lies in the first 4 KiB page of a 64 KiB block at the source's offset within its
# page (the source's own place in its 64 KiB block does not matter), 0.27-0.30 s otherwise (0.28 s
# with both at the same unaligned offset); 1.5 GiB: 0.31 s against 0.40-0.48 s (presumably the
# page cache's large folios, 64 KiB here; benchmarks/bench_copy_kernel.py measures it on the
# machine at hand). The padding is a field ONNX does not define
# (the largest field number protobuf allows, length-delimited); every protobuf parser skips a
# field it does not know, so the model parses as if it were not there. Only slices of 16 MiB or
# more are padded, with at most 80 KiB.
_PAD_TAG = _varint((536870911 << 3) | 2)
_PAD_MIN = 16384  # padding bytes are 16,384..81,919, so their length is always a 3-byte varint
_ALIGN = 65536
_PAGE = 4096
_ALIGN_MIN = 16 << 20


def _fastest_start(tensor: _ir.TensorProtocol, size: int) -> int | None:
    """Where, modulo 64 KiB, a tensor of ``size`` bytes copies fastest in the file being written (see
    above): a file slice at its source's offset within its page, anything else at 0; None under 16 MiB."""
    if size < _ALIGN_MIN:
        return None
    return (tensor.offset or 0) % _PAGE if isinstance(tensor, _SliceCopy) else 0


def _body_len(header: bytes, size: int, tensor: _ir.TensorProtocol | None, pad: int) -> int:
    """Length of an initializer framed by ``save_inline_streamed``: header, padding, raw_data."""
    return len(header) + pad + (1 + len(_varint(size)) + size if tensor is not None else 0)


def _pad_field(size: int) -> bytes:
    """A padding field ``size`` bytes long in all (``len(_PAD_TAG) + 3 + _PAD_MIN`` at least)."""
    n = size - len(_PAD_TAG) - 3
    return _PAD_TAG + _varint(n) + bytes(n)


def _inline_paddings(prefix_len: int, graph_body_len: int,
                     entries: list[tuple[bytes, int, _ir.TensorProtocol | None]]) -> list[int]:
    """Padding field sizes (0: none) that start each large copied slice where it copies fastest.

    The sizes shift the lengths framed before them, so they are found by iterating to a fixed point
    (it takes two or three rounds); the file is valid whatever they are, only the speed depends on it.
    """
    smallest = len(_PAD_TAG) + 3 + _PAD_MIN
    # only slices are padded: other tensors are written by Python, where the offset was not measured
    wanted = [_fastest_start(tensor, size) if isinstance(tensor, _SliceCopy) else None for _, size, tensor in entries]
    pads = [0 if w is None else smallest for w in wanted]
    for _ in range(8):
        bodies = [_body_len(h, size, t, pad) for (h, size, t), pad in zip(entries, pads, strict=True)]
        graph_len = graph_body_len + sum(1 + len(_varint(b)) + b for b in bodies)
        pos = prefix_len + 1 + len(_varint(graph_len)) + graph_body_len
        fresh = []
        for (header, size, _), body, want in zip(entries, bodies, wanted, strict=True):
            pos += 1 + len(_varint(body)) + len(header)
            raw = 1 + len(_varint(size))
            fresh.append(0 if want is None else smallest + (want - pos - raw - smallest) % _ALIGN)
            pos += body - len(header)
        if fresh == pads:
            break
        pads = fresh
    return pads


def _skeleton(model: _ir.Model) -> tuple[onnx.ModelProto, list[_ir.Value]]:
    """Serialize ``model`` without its main-graph initializers; return the proto and those values."""
    graph = model.graph
    values = [v for v in graph.initializers.values() if v.const_value is not None]
    for v in values:
        graph.initializers.pop(v.name)
    try:
        proto = _ir.serde.serialize_model(model)
    finally:
        for v in values:
            graph.register_initializer(v)
    return proto, values


def save_inline_streamed(
    model: _ir.Model,
    path: str | os.PathLike[str],
    *,
    check: Callable[[str], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> None:
    """Write a self-contained .onnx (weights inside) one tensor at a time, without building the proto.

    Hot path, hand-written on purpose: protobuf would hold the whole message, and then its
    serialized copy, in memory (about twice the weights). Instead the model is serialized without
    its initializers, and each initializer is framed by hand (tag, length, header, ``raw_data``)
    and streamed from its source (a file slice is copied by the kernel). Protobuf accepts a
    message's fields in any order, so the result parses exactly as the built message would. A
    large slice is preceded by a padding field ONNX does not define (see ``_PAD_TAG``), which
    parsers skip, so that the kernel copies it at the offset it copies fastest.

    ``check(skeleton_path)`` is called first on a copy whose weights are external references into
    a sparse file of the right size, so a checker validates everything but the bytes, which are
    written to their declared sizes by construction.
    """
    proto, values = _skeleton(model)
    entries: list[tuple[bytes, int, _ir.TensorProtocol | None]] = []  # (header, raw size, tensor)
    for v in values:
        t = v.const_value
        assert t is not None
        t = _slice_copy(t)
        if t.dtype == _ir.DataType.STRING:
            entries.append((_ir.serde.serialize_tensor(t).SerializeToString(), 0, None))
            continue
        header = onnx.TensorProto(name=v.name, dims=[int(d) for d in t.shape], data_type=int(t.dtype))
        entries.append((header.SerializeToString(), int(t.nbytes), t))
    if check is not None:
        _check_skeleton(proto, entries, Path(path), check)
    graph_body = proto.graph.SerializeToString()
    proto.ClearField("graph")
    prefix = proto.SerializeToString()
    pads = _inline_paddings(len(prefix), len(graph_body), entries)
    bodies = [_body_len(header, size, tensor, pad) for (header, size, tensor), pad in zip(entries, pads, strict=True)]
    graph_len = len(graph_body) + sum(1 + len(_varint(b)) + b for b in bodies)
    total = sum(size for _, size, _ in entries)
    done = 0
    with open(path, "wb") as f:
        f.write(prefix)
        f.write(_MODEL_GRAPH + _varint(graph_len))
        f.write(graph_body)
        for (header, size, tensor), body, pad in zip(entries, bodies, pads, strict=True):
            f.write(_GRAPH_INITIALIZER + _varint(body))
            f.write(header)
            if tensor is None:
                continue
            if pad:
                f.write(_pad_field(pad))
            f.write(_TENSOR_RAW_DATA + _varint(size))
            f.flush()
            start = f.tell()
            tensor.tofile(f)
            f.seek(0, os.SEEK_END)
            if f.tell() - start != size:
                raise RuntimeError(f"tensor '{tensor.name}' wrote {f.tell() - start} bytes, expected {size}")
            done += size
            if progress is not None:
                progress(done, total)


def _check_skeleton(proto: onnx.ModelProto, entries: list[tuple[bytes, int, _ir.TensorProtocol | None]],
                    path: Path, check: Callable[[str], None]) -> None:
    skel = onnx.ModelProto()
    skel.CopyFrom(proto)
    data_name = path.name + ".check.data"
    offset = 0
    for header, size, tensor in entries:
        t = skel.graph.initializer.add()
        t.ParseFromString(header)
        if tensor is None:
            continue
        t.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", data_name), ("offset", str(offset)), ("length", str(size))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        offset += size
    skel_path = path.with_name(path.name + ".check.onnx")
    data_path = path.with_name(data_name)
    try:
        with open(data_path, "wb") as f:
            f.truncate(offset)  # sparse: no bytes written, sizes right
        with open(skel_path, "wb") as f:
            f.write(skel.SerializeToString())
        check(str(skel_path))
    finally:
        for p in (skel_path, data_path):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()


def serialize_inline(model: _ir.Model) -> bytes:
    """Serialize ``model`` with every weight inside the proto (for models under 2 GiB).

    A model written without external data must be self-contained: file slices (absolute locations
    inside source files such as .pdiparams or .weights) are inlined for the call, then restored.
    """
    swapped: list[tuple[_ir.Value, _ir.TensorProtocol]] = []
    try:
        for g in model.graphs():
            for v in g.initializers.values():
                t = v.const_value
                if isinstance(t, _ir.ExternalTensor):
                    swapped.append((v, t))
                    v.const_value = _ir.Tensor(t.numpy(), name=t.name)
        proto = _ir.serde.serialize_model(model)
        return proto.SerializeToString()
    finally:
        for v, t in swapped:
            v.const_value = t


def load_file(path: str | os.PathLike[str]) -> _ir.Model:
    """Load an ONNX file written by a tool we ran ourselves (external data resolved lazily, and
    confined to its folder by onnx_ir). User-supplied files go through the ONNX frontend instead,
    which checks every external-data location up front."""
    return _ir.load(os.fspath(path))


def save_model(
    model: _ir.Model,
    path: str | os.PathLike[str],
    *,
    external_data: str,
    progress: Callable[[int, int], None] | None = None,
    size_threshold_bytes: int = 1024,
) -> None:
    """Write ``model`` to ``path``, streaming its weights into ``external_data`` (a file name beside it).

    Initializers over ``size_threshold_bytes`` (strings excepted: ONNX stores no strings outside
    the proto) go to the data file one at a time: a file slice is copied by the kernel, any other
    tensor writes itself (``tofile``), so memory stays near one tensor. Smaller external tensors
    are read into the proto. The model is unchanged afterwards. ``progress(done_bytes,
    total_bytes)`` is called after each tensor.

    Hot path, hand-written instead of onnx-ir's ``save(external_data=...)``: each large slice is
    placed where the kernel copies it fastest (``_inline_paddings`` explains where), which needs an
    offset per tensor; onnx-ir packs tensors or aligns them all to one boundary.
    """
    path = Path(path)
    base_dir = path.parent
    to_write: list[tuple[_ir.Value, _ir.TensorProtocol]] = []
    to_load: list[tuple[_ir.Value, _ir.TensorProtocol]] = []
    for graph in model.graphs():
        for value in graph.initializers.values():
            tensor = value.const_value
            if tensor is None:
                continue
            if tensor.nbytes > size_threshold_bytes and tensor.dtype != _ir.DataType.STRING:
                to_write.append((value, tensor))
            elif isinstance(tensor, _ir.ExternalTensor):
                to_load.append((value, tensor))
    total = sum(t.nbytes for _, t in to_write)
    done = 0
    written: dict[int, _ir.ExternalTensor] = {}  # a tensor shared by initializers is written once
    try:
        for value, tensor in to_load:
            value.const_value = _ir.Tensor(tensor.numpy().copy(), name=tensor.name, dtype=tensor.dtype,
                                           doc_string=tensor.doc_string)
            tensor.release()  # its file stays closed until the tensor is read again
        with open(base_dir / external_data, "wb") as f:
            pos = 0
            for value, tensor in to_write:
                ref = written.get(id(tensor))
                if ref is None:
                    ref = written[id(tensor)] = _write_at(f, tensor, pos, external_data, base_dir)
                    pos = (ref.offset or 0) + ref.length  # type: ignore[operator]
                    done += tensor.nbytes
                value.const_value = ref
                if progress is not None:
                    progress(done, total)
        _ir.save(model, path)
    finally:
        for value, tensor in to_load + to_write:
            value.const_value = tensor


def _write_at(f: object, tensor: _ir.TensorProtocol, pos: int, location: str, base_dir: Path) -> _ir.ExternalTensor:
    """Write ``tensor`` into the open data file at ``pos`` or a little after; return the reference to it."""
    copy = _slice_copy(tensor)
    size = int(tensor.nbytes)
    want = _fastest_start(copy, size)
    if want is not None:  # a hole pads up to it
        pos += (want - pos) % _ALIGN
    f.seek(pos)  # type: ignore[attr-defined]
    if hasattr(copy, "tofile"):
        copy.tofile(f)
    else:
        f.write(copy.tobytes())  # type: ignore[attr-defined]
    f.seek(0, os.SEEK_END)  # type: ignore[attr-defined]
    if f.tell() != pos + size:  # type: ignore[attr-defined]
        raise RuntimeError(f"tensor '{tensor.name}' wrote {f.tell() - pos} bytes, expected {size}")  # type: ignore[attr-defined]
    return _ir.ExternalTensor(location, pos, size, tensor.dtype, shape=tensor.shape, name=tensor.name,
                              doc_string=tensor.doc_string, base_dir=os.fspath(base_dir),
                              metadata_props=dict(tensor.metadata_props) or None)
