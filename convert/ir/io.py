"""Moving models between the IR and ONNX protos or files (the only place that does it).

``save_model`` streams initializers tensor by tensor into an external data file: an
``ExternalTensor`` is copied from its mapped file in chunks and a lazy tensor is computed one at a
time, so peak memory stays near the largest single tensor, not the model.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

import onnx
import onnx_ir as _ir
from onnx_ir import external_data as _external_data

__all__ = ["from_proto", "load_file", "save_inline_streamed", "save_model", "serialize_inline"]

# Tensors in flight while writing external data; the bound on extra memory beyond one tensor.
_IN_FLIGHT_BYTES = 64 * 1024 * 1024


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

    _ir.save(
        model,
        path,
        external_data=external_data,
        size_threshold_bytes=size_threshold_bytes,
        callback=callback,
        max_in_flight_bytes=_IN_FLIGHT_BYTES,
    )
