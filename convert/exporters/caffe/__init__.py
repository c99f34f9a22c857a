"""Caffe exporter: IR -> deploy ``<name>.prototxt`` + ``<name>.caffemodel``.

``-o net``, ``-o net.prototxt`` and ``-o net.caffemodel`` all write ``net.prototxt`` and
``net.caffemodel``. The dialect is chosen with ``--caffe-flavor`` (see ``flavor.py``).
protobuf is imported only when a model is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from convert.ir import ExporterSpec, ExportPlan, Model, OpSupport, Options, OptionSpec, Unsupported

from .flavor import DEFAULT_FLAVOR, FLAVOR_HELP, FLAVORS

__all__ = ["EXPORTER"]


def _save(model: Model, path: Path, options: Options) -> list[Path]:
    from .writer import save_caffe

    return save_caffe(model, path, options)


def _plan(model: Model, options: Options) -> ExportPlan:
    from .writer import plan

    return plan(model, options)


def _check(model: Model, options: Options) -> Sequence[Unsupported]:
    return _plan(model, options).gaps


def _ops() -> Sequence[OpSupport]:
    from . import layers_tensor  # noqa: F401  (registers the tensor and detection emitters)
    from .layers import EMITTERS

    rows = EMITTERS.support()
    rows.append(OpSupport("HardSigmoid", "Power + ReLU/Power/Eltwise", "decomposed exactly (decompose.py)"))
    rows.append(OpSupport("HardSwish", "HardSigmoid + Eltwise PROD", "decomposed exactly (decompose.py)"))
    return rows


EXPORTER = ExporterSpec(
    name="caffe",
    description="Caffe deploy .prototxt + .caffemodel (flavors: ssd, bvlc, pspnet)",
    suffix=".prototxt",
    save=_save,
    ops=_ops,
    check=_check,
    plan=_plan,
    options=(
        OptionSpec(
            flag="--caffe-flavor",
            dest="caffe_flavor",
            help=FLAVOR_HELP,
            default=DEFAULT_FLAVOR,
            choices=tuple(FLAVORS),
            metavar="FLAVOR",
        ),
        OptionSpec(
            flag="--caffe-upsample-layer",
            dest="caffe_upsample_layer",
            help="ssd flavor: write nearest upsampling as the fork's Upsample layer (default: a fixed-weight "
                 "Deconvolution, the same numbers, which OpenCV DNN and every Caffe read; OpenCV cannot create "
                 "Upsample, so the check then needs real Caffe)",
            is_flag=True,
        ),
    ),
    companions=(".caffemodel",),
)
