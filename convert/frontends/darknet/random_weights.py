"""Write a seeded random ``.weights`` file for any supported cfg (for tests and deployment trials).

Kernels are scaled by fan-in and by an estimate of the input's mean square, and batch-norm
rolling statistics match the estimated output, so activations stay between about 0.1 and 10 through
hundreds of layers (see ``weights.RandomWeights``).
"""

from __future__ import annotations

import contextlib
import os
import struct
from pathlib import Path

from convert.ir import ExportError, Options

from .loader import build_model
from .weights import RandomWeights

__all__ = ["write_random_weights"]


def write_random_weights(cfg_path: str | os.PathLike[str], out_path: str | os.PathLike[str], *,
                         seed: int = 0, options: Options | None = None) -> Path:
    """Write random weights for ``cfg_path`` to ``out_path`` (header 0.2.0, 64-bit ``seen``).

    The file is written to a temporary name and moved into place, so a failure leaves nothing.

    Args:
        cfg_path: the Darknet cfg.
        out_path: the .weights file to write.
        seed: the random seed; the same seed gives the same file.
        options: conversion options (input shape overrides, lineage); defaults otherwise.

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
        with open(tmp, "wb") as fh:
            fh.write(struct.pack("<3iQ", 0, 2, 0, 0))
            source = RandomWeights(seed=seed, sink=fh)
            build_model(cfg, source, options or Options())
        os.replace(tmp, out)
    except OSError as exc:  # the user's folder or disk, not a bug: one line, nothing left
        raise ExportError(f"cannot write the random weights of {cfg.name} to '{out}': "
                          f"{exc.strerror or exc}. Nothing was written.") from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    return out
