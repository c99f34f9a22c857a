"""Darknet ``.weights`` files: the header and a cursor handing out lazy file slices.

Layout: ``int32 major, minor, revision``, then ``seen`` as uint64 when ``major*10+minor >= 2``
(and both are below 1000) else uint32, then float32 parameters layer after layer in the order the
layer converters ask for them (for a convolution: biases, then scales, rolling mean and rolling
variance when batch-normalized, then kernels). Nothing is read here except the header: every
parameter is a ``file_slice`` mapped when an exporter writes it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

import numpy as np

from convert.ir import ExportError, ModelFormatError, TensorProtocol, file_slice, from_array, lazy

__all__ = ["FileWeights", "Header", "NoRoomError", "ParamRequest", "RandomWeights", "WeightSource", "read_header"]

_F32 = 4
_CHUNK = 1 << 22  # random kernel values drawn and written at a time (16 MiB)


@dataclass(frozen=True, slots=True)
class Header:
    """The ``.weights`` header."""

    major: int
    minor: int
    revision: int
    seen: int
    size: int

    @property
    def transpose(self) -> bool:
        """Whether connected-layer weights are stored transposed (Darknet's own flag)."""
        return self.major > 1000 or self.minor > 1000


@dataclass(frozen=True, slots=True)
class ParamRequest:
    """What a layer asks the weight source for: a role, a shape and hints for random values.

    ``role`` is one of ``bias``, ``scale``, ``mean``, ``variance``, ``weight``. For ``weight``,
    ``fan_in`` is the number of inputs of each output and ``in_ms`` the estimated mean square of
    the layer's input; for ``mean``/``variance``, ``out_ms`` is the estimated mean square of the
    un-normalized output; for ``scale`` it is the mean square the scales aim for.
    """

    name: str
    role: str
    shape: tuple[int, ...]
    layer: int
    where: str
    fan_in: int = 1
    in_ms: float = 1.0
    out_ms: float = 1.0


class WeightSource(Protocol):
    """Where layer parameters come from: a ``.weights`` file or a random generator."""

    def take(self, req: ParamRequest) -> TensorProtocol:
        """Return the next parameter tensor."""
        ...

    def finish(self) -> None:
        """Check that every byte was used (files) or flush (writers)."""
        ...


def read_header(path: Path) -> Header:
    """Read the header of ``path``.

    Raises:
        ModelFormatError: the file is shorter than a header.
    """
    with open(path, "rb") as fh:
        head = fh.read(20)
    if len(head) < 16:
        raise ModelFormatError(
            f"{path.name}: {len(head)} bytes, too short for a Darknet weights header (at least 16 bytes)."
        )
    major, minor, revision = struct.unpack("<3i", head[:12])
    if (major * 10 + minor) >= 2 and major < 1000 and minor < 1000:
        if len(head) < 20:
            raise ModelFormatError(f"{path.name}: truncated header: expected 20 bytes, found {len(head)}.")
        (seen,) = struct.unpack("<Q", head[12:20])
        size = 20
    else:
        (seen,) = struct.unpack("<I", head[12:16])
        size = 16
    return Header(major, minor, revision, seen, size)


class FileWeights:
    """A cursor over a ``.weights`` file that hands out file slices in order."""

    def __init__(self, path: Path, *, allow_trailing: bool = False, cfg_name: str = "") -> None:
        self.path = path
        self.header = read_header(path)
        self.offset = self.header.size
        self.file_size = path.stat().st_size
        self.allow_trailing = allow_trailing
        self.cfg_name = cfg_name
        self.trailing = 0
        self.short_at: str | None = None

    def take(self, req: ParamRequest) -> TensorProtocol:
        """Return the next ``req.shape`` float32 region as a file slice.

        Past the end of the file a placeholder is returned and the shortfall recorded, so that
        ``finish`` can say where the file ran out and how many bytes the whole cfg still needed.
        """
        count = int(np.prod(req.shape, dtype=np.int64))
        nbytes = count * _F32
        if self.offset + nbytes > self.file_size:
            if self.short_at is None:
                self.short_at = f"layer {req.layer} {req.where} ('{req.name}')"
            tensor: TensorProtocol = lazy(lambda: np.zeros(req.shape, np.float32), "float32", req.shape,
                                          name=req.name)
        else:
            tensor = file_slice(self.path, self.offset, "float32", req.shape, name=req.name)
        self.offset += nbytes
        return tensor

    def finish(self) -> None:
        """Raise when the file is short, or has bytes left over (unless allowed).

        Raises:
            ModelFormatError: the file does not hold exactly what the cfg needs.
        """
        if self.short_at is not None:
            missing = self.offset - self.file_size
            raise ModelFormatError(
                f"{self.path.name}: truncated at byte {self.file_size:,} while reading {self.short_at}: "
                f"expected {missing:,} more bytes. Are the .cfg and .weights from the same model?"
            )
        extra = self.file_size - self.offset
        self.trailing = extra
        if extra > 0 and not self.allow_trailing:
            raise ModelFormatError(
                f"{self.path.name}: {extra:,} bytes left over after the last layer (byte {self.offset:,} of "
                f"{self.file_size:,}): the weights do not match {self.cfg_name or 'the cfg'}. "
                "Are the .cfg and .weights from the same model? Pass --allow-trailing-bytes to ignore them."
            )


class NoRoomError(ExportError):
    """Random weights would need more bytes than their sink has room for (``RandomWeights.room``)."""

    def __init__(self, needed: int, room: int) -> None:
        super().__init__(f"random weights need at least {needed:,} bytes, {room:,} free")
        self.needed = needed
        self.room = room


class RandomWeights:
    """Seeded random parameters with statistics that keep activations near unit scale.

    Convolution kernels are ``N(0, (K^2 / (fan_in * in_ms)))`` so the raw output has mean square
    about ``K^2``; batch-norm rolling statistics match that estimate (so the normalized output is
    about unit scale), with ``K = 10`` so that the lineages' different epsilons barely matter.
    Layers without batch norm get kernels for a unit-scale output. When ``sink`` is given, every
    array is also written to it (``write_random_weights``).
    """

    def __init__(self, seed: int = 0, sink: BinaryIO | None = None, room: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)
        self.sink = sink
        self.room = room  # bytes the sink may take (the free space where it writes); None: no bound
        self.count = 0

    def array(self, req: ParamRequest) -> np.ndarray:
        """Return the random values for ``req``."""
        rng = self.rng
        shape = req.shape
        if req.role == "weight":
            arr = rng.standard_normal(shape, dtype=np.float32) * self._weight_std(req)
        elif req.role == "bias":
            arr = rng.normal(0.0, 0.1, shape).astype(np.float32)
        elif req.role == "scale":
            arr = (np.sqrt(req.out_ms) * rng.uniform(0.8, 1.25, shape)).astype(np.float32)
        elif req.role == "mean":
            arr = rng.normal(0.0, 0.1 * np.sqrt(req.out_ms), shape).astype(np.float32)
        elif req.role == "variance":
            arr = (req.out_ms * rng.uniform(0.8, 1.25, shape)).astype(np.float32)
        else:
            raise ValueError(f"unknown parameter role {req.role!r}")
        return arr

    def take(self, req: ParamRequest) -> TensorProtocol:
        """Return a fresh random tensor (and write it to the sink).

        Raises:
            NoRoomError: the sink's ``room`` cannot take this tensor (nothing of it is generated).
        """
        if self.sink is None:
            arr = self.array(req)
            self.count += arr.size
            return from_array(arr, name=req.name)
        count = int(np.prod(req.shape, dtype=np.int64))
        if self.room is not None and (self.count + count) * _F32 > self.room:
            raise NoRoomError((self.count + count) * _F32, self.room)
        if req.role == "weight" and count > _CHUNK:
            # Kernels are drawn and written a chunk at a time (the same values as one draw): memory
            # stays at one chunk whatever the tensor's size.
            std = self._weight_std(req)
            for start in range(0, count, _CHUNK):
                part = self.rng.standard_normal(min(_CHUNK, count - start), dtype=np.float32) * std
                self.sink.write(part.astype("<f4").tobytes())
        else:
            self.sink.write(self.array(req).astype("<f4").tobytes())
        self.count += count
        # The values are on disk now: keep only a placeholder of the right shape.
        return lazy(lambda: np.zeros(req.shape, np.float32), "float32", req.shape, name=req.name)

    @staticmethod
    def _weight_std(req: ParamRequest) -> np.float32:
        return np.float32(np.sqrt(req.out_ms / (max(req.fan_in, 1) * max(req.in_ms, 1e-6))))

    def finish(self) -> None:
        """Flush the sink."""
        if self.sink is not None:
            self.sink.flush()
