"""Torch as this frontend meets it: its logging and warnings silenced, its package folder, ours.

The bottom of the frontend (see ``__init__``'s "the path a model takes"): every layer may use
these, and they use nothing of the frontend.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import warnings
from collections.abc import Iterator

__all__ = ["PACKAGE", "quiet_torch", "torch_folder"]

#: The ``convert`` package's folder (no trailing separator): frames of ours, skipped where the
#: model's own line is looked for.
PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@contextlib.contextmanager
def quiet_torch() -> Iterator[None]:
    """Silence torch's own logging and warnings while it captures (failures are reported by us)."""
    loggers = [logging.getLogger(n) for n in ("torch", "torch._dynamo", "torch.export", "torch._export",
                                              "torch.fx.experimental.symbolic_shapes", "torch._subclasses")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


@functools.cache
def torch_folder() -> str:
    """Torch's package folder, with a trailing separator."""
    import torch

    return os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
