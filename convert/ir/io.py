"""Moving models between the IR and ONNX protos or files (the only place that does it).

``save_model`` streams initializers tensor by tensor into an external data file: an
``ExternalTensor`` is copied from its mapped file in chunks and a lazy tensor is computed one at a
time, so peak memory stays near the largest single tensor, not the model.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import onnx
import onnx_ir as _ir
from onnx_ir import external_data as _external_data

__all__ = ["from_proto", "load_file", "save_inline_streamed", "save_model", "serialize_inline"]

# Tensors in flight while writing external data; the bound on extra memory beyond one tensor.
_IN_FLIGHT_BYTES = 64 * 1024 * 1024

# Copying a file slice (an ONNX source's external data) into the file being written. Measured on
# ext4 (2 cores, docs/performance.md): copy_file_range and sendfile both run at cp's speed on dense
# data (about 1 GB/s, page cache to page cache), a Python read/write loop at a fifth of it. On a
# sparse file, copy_file_range reads every hole as zeros and writes them (0.2-0.6 GB/s), while cp
# skips holes (10 GB/s). So: find the data extents with SEEK_DATA/SEEK_HOLE, copy only those with
# copy_file_range (sendfile, then pread/pwrite where the kernel refuses), and leave the holes as
# holes: they read back as zeros, the bytes the source has there.
_KERNEL_COPY_CHUNK = 1 << 30
_PLAIN_COPY_CHUNK = 8 << 20
_NO_KERNEL_COPY = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM, errno.EXDEV, errno.EBADF}


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


def _copy_extent(src: int, dst: int, offset: int, length: int, dst_offset: int) -> None:
    """Copy ``length`` bytes of ``src`` at ``offset`` to ``dst`` at ``dst_offset`` (in the kernel when it can)."""
    done = 0
    copy_file_range = getattr(os, "copy_file_range", None)
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
    if done < length and hasattr(os, "sendfile"):
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
            for begin, end in _data_extents(src, offset, offset + length):
                _copy_extent(src, dst, begin, end - begin, start + begin - offset)
        if os.fstat(dst).st_size < start + length:  # the slice ends in a hole: extend the file
            os.ftruncate(dst, start + length)
        file.seek(start + length)  # type: ignore[attr-defined]


def _slice_copy(tensor: _ir.TensorProtocol) -> _ir.TensorProtocol:
    """Return ``tensor`` as a ``_SliceCopy`` when it is a plain file slice (else unchanged)."""
    if type(tensor) is not _ir.ExternalTensor:
        return tensor
    return _SliceCopy(tensor.location, tensor.offset, tensor.length, tensor.dtype, shape=tensor.shape,
                      name=tensor.name, doc_string=tensor.doc_string, base_dir=tensor.base_dir,
                      metadata_props=dict(tensor.metadata_props) or None)


@contextlib.contextmanager
def _slices_copied(model: _ir.Model) -> Iterator[None]:
    """Let the model's file slices be copied extent by extent while it is saved, then put them back."""
    swapped: list[tuple[_ir.Value, _ir.TensorProtocol]] = []
    try:
        for graph in model.graphs():
            for value in graph.initializers.values():
                tensor = value.const_value
                if tensor is not None and type(tensor) is _ir.ExternalTensor:
                    swapped.append((value, tensor))
                    value.const_value = _slice_copy(tensor)
        yield
    finally:
        for value, tensor in swapped:
            value.const_value = tensor


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
    message's fields in any order, so the result parses exactly as the built message would.

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
    bodies = []
    for header, size, tensor in entries:
        body = len(header) + (1 + len(_varint(size)) + size if tensor is not None else 0)
        bodies.append(body)
    graph_body = proto.graph.SerializeToString()
    graph_len = len(graph_body) + sum(1 + len(_varint(b)) + b for b in bodies)
    proto.ClearField("graph")
    total = sum(size for _, size, _ in entries)
    done = 0
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())
        f.write(_MODEL_GRAPH + _varint(graph_len))
        f.write(graph_body)
        for (header, size, tensor), body in zip(entries, bodies, strict=True):
            f.write(_GRAPH_INITIALIZER + _varint(body))
            f.write(header)
            if tensor is None:
                continue
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

    ``progress(done_bytes, total_bytes)`` is called after each tensor written externally.
    """
    sizes = [v.const_value.nbytes for g in model.graphs() for v in g.initializers.values()
             if v.const_value is not None and v.const_value.nbytes > size_threshold_bytes]
    total = sum(sizes)
    done = 0

    def callback(tensor: _ir.TensorProtocol, info: _external_data.CallbackInfo) -> None:
        nonlocal done
        done += tensor.nbytes
        if progress is not None:
            progress(done, total)

    with _slices_copied(model):
        _ir.save(
            model,
            path,
            external_data=external_data,
            size_threshold_bytes=size_threshold_bytes,
            callback=callback,
            max_in_flight_bytes=_IN_FLIGHT_BYTES,
        )
