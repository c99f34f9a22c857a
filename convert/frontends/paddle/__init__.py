"""Paddle frontend: Paddle inference models (PIR ``.json`` or ProgramDesc ``.pdmodel`` plus
``.pdiparams``) into the IR, without Paddle installed.

``--via paddle2onnx`` converts with paddle2onnx instead (installed separately) and imports its
ONNX; the default is this package's own reader.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from convert.ir import FrontendSpec, Model, OpSupport, Options, OptionSpec, Unsupported

__all__ = ["FRONTEND", "check_support", "load", "supported_ops"]


def load(paths: Sequence[Path], options: Options) -> Model:
    """Read a Paddle inference model into the IR (see ``loader.load``)."""
    from .loader import load as _load

    return _load(paths, options)


def check_support(paths: Sequence[Path], options: Options) -> list[Unsupported]:
    """Return every unsupported op type of the model, with its count and first place."""
    if options.get("paddle_via", "reader") == "paddle2onnx":
        return []
    from .loader import check_support as _check

    return _check(paths, options)


def supported_ops() -> list[OpSupport]:
    """Return the support table, one row per Paddle op spelling, sorted by name."""
    from .ops import OPS

    return OPS.support(sort=True)


def _sniff(path: Path) -> bool:
    if path.is_dir():
        return any(p.suffix in (".pdmodel", ".pdiparams") for p in path.iterdir())
    try:
        with path.open("rb") as f:
            head = f.read(256)
    except OSError:
        return False
    return b'"base_code"' in head and b'"pir"' in head


FRONTEND = FrontendSpec(
    name="paddle",
    description="PaddlePaddle inference model (PIR .json or ProgramDesc .pdmodel, with .pdiparams)",
    suffixes=(".pdmodel", ".pdiparams"),
    load=load,
    sniff=_sniff,
    ops=supported_ops,
    check_support=check_support,
    options=(
        OptionSpec(
            flag="--via",
            dest="paddle_via",
            help="how to read Paddle models: 'reader' (ours, default) or 'paddle2onnx' "
                 "(needs paddle2onnx, installed in a separate environment)",
            default="reader",
            choices=("reader", "paddle2onnx"),
        ),
    ),
    runtime="convert.parity.runtimes.paddle",
)
