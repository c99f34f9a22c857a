"""TFLite frontend: a ``.tflite`` flatbuffer (float or int8/uint8 quantized) into the IR, without TensorFlow.

``flatbuf.py`` reads FlatBuffers, ``model.py`` the TFLite schema (weights stay in the mapped
file), ``lower.py`` converts the main subgraph through the op table in ``ops.py``; layout handling
and most op converters are the TensorFlow frontend's (NCHW inside, transposes at the edges).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from convert.ir import FrontendSpec, Model, OpSupport, Options, OptionSpec, Unsupported

__all__ = ["FRONTEND", "check_support", "load", "supported_ops"]


def load(paths: Sequence[Path], options: Options) -> Model:
    """Read a ``.tflite`` model into the IR (see ``lower.load``)."""
    from .lower import load as _load

    return _load(paths, options)


def check_support(paths: Sequence[Path], options: Options) -> list[Unsupported]:
    """Return every unsupported operator type of the model, with its count and first place."""
    from .lower import check_support as _check

    return _check(paths, options)


def supported_ops() -> list[OpSupport]:
    """Return the support table, one row per TFLite builtin operator, sorted by name."""
    from .ops import OPS

    return OPS.support(sort=True)


def _sniff(path: Path) -> bool:
    if not path.is_file():
        return False
    try:
        with path.open("rb") as fh:
            return fh.read(8)[4:8] == b"TFL3"
    except OSError:
        return False


FRONTEND = FrontendSpec(
    name="tflite",
    description="TensorFlow Lite .tflite flatbuffer (float, float16 weights, int8/uint8 quantized); no TensorFlow",
    suffixes=(".tflite",),
    load=load,
    sniff=_sniff,
    ops=supported_ops,
    check_support=check_support,
    options=(
        OptionSpec(flag="--tflite-signature", dest="tflite_signature", default="", metavar="NAME",
                   help="the signature of a .tflite with several (default: its only one, else subgraph 0)"),
        OptionSpec(flag="--keep-nhwc", dest="keep_nhwc", is_flag=True,
                   help="keep rank-4 inputs and outputs NHWC as in TFLite (default: NCHW)"),
    ),
    runtime="convert.parity.runtimes.tflite",
)
