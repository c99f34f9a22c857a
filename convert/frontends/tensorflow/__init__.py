"""TensorFlow frontend: a SavedModel signature or a Keras 3 ``.keras`` model into the IR (NCHW).

TensorFlow reads the model and freezes the signature's graph (``graph.py``); from there the ops
are converted through the registry (``ops/``) with TensorFlow's NHWC image tensors held in NCHW
inside (``context.py``), so the ONNX graph is NCHW with transposes only at its edges.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from convert.ir import FrontendSpec, Model, OpSupport, Options, OptionSpec, Unsupported

__all__ = ["FRONTEND", "check_support", "load", "supported_ops"]


def load(paths: Sequence[Path], options: Options) -> Model:
    """Read a TensorFlow model into the IR (see ``loader.load``)."""
    from .loader import load as _load

    return _load(paths, options)


def check_support(paths: Sequence[Path], options: Options) -> list[Unsupported]:
    """Return every unsupported op type of the model, with its count and first node."""
    from .loader import check_support as _check

    return _check(paths, options)


def supported_ops() -> list[OpSupport]:
    """Return the support table, one row per TensorFlow op type, sorted by name."""
    from .ops import OPS

    return OPS.support(sort=True)


def _sniff(path: Path) -> bool:
    return (path.is_dir() and (path / "saved_model.pb").is_file()) or (
        path.is_file() and path.suffix in (".keras", ".h5", ".hdf5", ".pb") and path.name != "saved_model.pb")


FRONTEND = FrontendSpec(
    name="tensorflow",
    description="TensorFlow SavedModel folder (a serving signature), Keras .keras/.h5 file or frozen .pb graph",
    suffixes=(".keras", ".h5", ".hdf5", ".pb"),
    load=load,
    sniff=_sniff,
    ops=supported_ops,
    check_support=check_support,
    options=(
        OptionSpec(flag="--signature", dest="tf_signature", default="serving_default", metavar="NAME",
                   help="the SavedModel signature to convert (default serving_default)"),
        OptionSpec(flag="--keep-nhwc", dest="keep_nhwc", is_flag=True,
                   help="keep rank-4 inputs and outputs NHWC as in TensorFlow (default: NCHW)"),
    ),
    runtime="convert.parity.runtimes.tensorflow",
)
