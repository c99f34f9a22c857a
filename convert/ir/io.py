"""Moving models between the IR and ONNX protos or files (the only place that does it).

``save_model`` streams initializers tensor by tensor into an external data file: an
``ExternalTensor`` is copied from its mapped file in chunks and a lazy tensor is computed one at a
time, so peak memory stays near the largest single tensor, not the model.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import onnx_ir as _ir
from onnx_ir import external_data as _external_data

__all__ = ["from_proto", "load_file", "save_model", "serialize_inline", "to_proto"]

# Tensors in flight while writing external data; the bound on extra memory beyond one tensor.
_IN_FLIGHT_BYTES = 64 * 1024 * 1024


def from_proto(proto: object, base_dir: str | os.PathLike[str]) -> _ir.Model:
    """Deserialize an ``onnx.ModelProto``; external tensors resolve against ``base_dir`` lazily."""
    model = _ir.serde.deserialize_model(proto)  # type: ignore[arg-type]
    for graph in model.graphs():
        _external_data.set_base_dir(graph, os.fspath(base_dir))
    return model


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


def to_proto(model: _ir.Model) -> object:
    """Serialize to an ``onnx.ModelProto`` (this reads every weight into the proto)."""
    return _ir.serde.serialize_model(model)


def save_model(
    model: _ir.Model,
    path: str | os.PathLike[str],
    *,
    external_data: str | None,
    progress: Callable[[int, int], None] | None = None,
    size_threshold_bytes: int = 1024,
) -> None:
    """Write ``model`` to ``path``; with ``external_data`` (a file name beside it) stream weights there.

    ``progress(done_bytes, total_bytes)`` is called after each tensor written externally.
    """
    if external_data is None:
        with open(path, "wb") as f:
            f.write(serialize_inline(model))
        return
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
