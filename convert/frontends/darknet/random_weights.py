"""Write a seeded random ``.weights`` file for any supported cfg (for tests and deployment trials).

Kernels are scaled by fan-in and by an estimate of the input's mean square, and batch-norm
rolling statistics match the estimated output, so activations stay between about 0.1 and 10 through
hundreds of layers (see ``weights.RandomWeights``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import struct
from pathlib import Path

import numpy as np

from convert.ir import ConvertError, ExportError, Options, TensorProtocol, lazy

from .loader import build_model
from .weights import NoRoomError, ParamRequest, RandomWeights

__all__ = ["random_weights_bytes", "write_random_weights"]

_HEADER = struct.pack("<3iQ", 0, 2, 0, 0)
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class _Counter:
    """A weight source that only counts what the cfg asks for (placeholders, nothing generated)."""

    def __init__(self) -> None:
        self.count = 0

    def take(self, req: ParamRequest) -> TensorProtocol:
        self.count += int(np.prod(req.shape, dtype=np.int64))
        return lazy(lambda: np.zeros(req.shape, np.float32), "float32", req.shape, name=req.name)

    def finish(self) -> None:
        """Nothing to check."""


def random_weights_bytes(cfg_path: str | os.PathLike[str], options: Options | None = None) -> int:
    """Return the size of ``cfg_path``'s ``.weights`` file (header included), generating nothing."""
    counter = _Counter()
    opts = options or Options()
    quiet = Options(input_shapes=opts.input_shapes, dynamic_batch=opts.dynamic_batch, extra=dict(opts.extra))
    build_model(Path(cfg_path), counter, quiet)
    return len(_HEADER) + 4 * counter.count


def _size(n: float) -> str:
    for unit, div in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{int(n)} bytes"


def _fsize_limit() -> str:
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):  # no resource module (Windows)
        return ""
    return f" ({_size(soft)}: ulimit -f)" if soft != resource.RLIM_INFINITY else ""


def _os_error(exc: BaseException) -> OSError | None:
    """The OSError ``exc`` is or was raised from (a sink's write fails inside a layer converter)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, OSError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _no_room(cfg: Path, out: Path, options: Options | None, hint: str) -> ExportError:
    """The one-line error for a folder without room for ``cfg``'s random weights (``out``'s partial
    file removed first, so that the free space said is what the folder really has)."""
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    with contextlib.suppress(OSError):
        tmp.unlink()
    try:
        free = f"{_size(shutil.disk_usage(out.parent).free)} free"
    except OSError:
        free = "no room"
    return ExportError(f"cannot write the random weights of {cfg.name} to '{out}': the disk is full: they need "
                       f"{_size(random_weights_bytes(cfg, options))} and the folder has {free}. Nothing was "
                       f"written; {hint}.")


def write_random_weights(cfg_path: str | os.PathLike[str], out_path: str | os.PathLike[str], *,
                         seed: int = 0, options: Options | None = None,
                         hint: str = "choose another -o") -> Path:
    """Write random weights for ``cfg_path`` to ``out_path`` (header 0.2.0, 64-bit ``seen``).

    The file is written to a temporary name and moved into place, so a failure leaves nothing. It
    never takes more than the free space of its folder: a cfg whose parameters do not fit (a
    corrupt one may ask for terabytes) is refused before the tensor that would not fit is drawn,
    with the size the whole file needs. Memory stays at one chunk of a tensor whatever its size.

    Args:
        cfg_path: the Darknet cfg.
        out_path: the .weights file to write.
        seed: the random seed; the same seed gives the same file.
        options: conversion options (input shape overrides, lineage); defaults otherwise.
        hint: how to make room, said when there is none (the caller knows where the path came from).

    Returns:
        ``out_path`` as a Path.

    Raises:
        UnsupportedOpsError, ModelFormatError: the cfg cannot be converted.
        ExportError: the file cannot be written there (a read-only or missing folder, a full disk).
    """
    cfg = Path(cfg_path)
    out = Path(out_path)
    if out.is_dir():  # a folder: <cfg stem>.weights in it
        out = out / (cfg.stem + ".weights")
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    try:
        room = shutil.disk_usage(out.parent).free - len(_HEADER)
        with open(tmp, "wb") as fh:
            fh.write(_HEADER)
            source = RandomWeights(seed=seed, sink=fh, room=room)
            build_model(cfg, source, options or Options())
        os.replace(tmp, out)
    except ExportError as exc:
        if isinstance(exc, NoRoomError):
            raise _no_room(cfg, out, options, hint) from exc
        raise
    except ConvertError:
        raise
    except Exception as exc:
        os_error = _os_error(exc)  # raised by the file itself, or by its write inside a layer converter
        if os_error is None:
            raise
        if os_error.errno == errno.EFBIG:  # a file size limit (ulimit -f), not the disk
            raise ExportError(f"cannot write the random weights of {cfg.name} to '{out}': they need "
                              f"{_size(random_weights_bytes(cfg, options))}, over this process's file size limit"
                              f"{_fsize_limit()}. Nothing was written; raise the limit.") from exc
        if os_error.errno in _DISK_FULL:
            raise _no_room(cfg, out, options, hint) from exc
        raise ExportError(f"cannot write the random weights of {cfg.name} to '{out}': "
                          f"{os_error.strerror or os_error}. Nothing was written.") from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    return out
