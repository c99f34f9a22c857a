"""Caffe frontend: a deploy prototxt plus a caffemodel, lowered to the IR.

Both BVLC's ``layer`` and the legacy V1 ``layers`` forms are read, and the dialects' pooling
rounding (``round_mode`` and ``ceil_mode``) and extension layers (Permute, Normalize, ReLU6,
Upsample, Interp, ShuffleChannel). protobuf is imported only when a model is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from convert.ir import FrontendSpec, Model, OpSupport, Options, Unsupported

__all__ = ["FRONTEND"]


def _load(paths: Sequence[Path], options: Options) -> Model:
    from .frontend import load

    return load(paths, options)


def _check(paths: Sequence[Path], options: Options) -> Sequence[Unsupported]:
    from .frontend import check_support

    return check_support(paths, options)


def _sniff(path: Path) -> bool:
    from .frontend import sniff

    return sniff(path)


def _ops() -> Sequence[OpSupport]:
    from .frontend import ops

    return ops()


FRONTEND = FrontendSpec(
    name="caffe",
    description="Caffe deploy .prototxt + .caffemodel (BVLC, V1 layers, SSD/OpenCV/PSPNet extensions)",
    suffixes=(".prototxt", ".caffemodel"),
    load=_load,
    sniff=_sniff,
    ops=_ops,
    check_support=_check,
    runtime="convert.parity.runtimes.caffe_runtime",
)
