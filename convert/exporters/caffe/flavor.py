"""Caffe dialects the exporter can target (``--caffe-flavor``).

Caffe is a family of dialects. The exporter writes plain BVLC constructs whenever they express
the op exactly and uses a dialect feature only when nothing plain does:

* ``bvlc`` (default): BVLC master. Floor-rounded pooling that pads cannot express is written as
  ``round_mode: FLOOR`` (BVLC field 13, CEIL = 0 / FLOOR = 1); Clip, HardSigmoid and HardSwish are
  written with ReLU/Power/Eltwise (exact, and loadable where BVLC master's ``Clip`` layer is not:
  older BVLC, OpenCV); nearest upsampling is a fixed-weight grouped Deconvolution. No Permute.
* ``ssd``: the SSD-era fork, OpenCV and most vendor NPU toolchains. Floor pooling is
  ``ceil_mode: false`` (their field 13 is a bool, default true: the same wire number as
  ``round_mode`` with the opposite meaning); Transpose is ``Permute``; Clip(0, 6) is ``ReLU6``;
  nearest upsampling is ``Upsample``.
* ``pspnet``: BVLC plus PSPNet's ``Interp`` for bilinear align-corners resizing.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FLAVORS", "FLAVOR_HELP", "Flavor", "flavor"]


@dataclass(frozen=True, slots=True)
class Flavor:
    """The dialect features an export may use."""

    name: str
    floor_pooling: str  # "round_mode" or "ceil_mode"
    permute: bool = False
    relu6: bool = False
    upsample: bool = False
    normalize: bool = False
    interp: bool = False


FLAVORS = {
    "bvlc": Flavor("bvlc", "round_mode"),
    "ssd": Flavor("ssd", "ceil_mode", permute=True, relu6=True, upsample=True, normalize=True),
    "pspnet": Flavor("pspnet", "round_mode", interp=True),
}

FLAVOR_HELP = (
    "Caffe dialect to write: 'bvlc' (default; BVLC master, plain layers only), 'ssd' (SSD fork / "
    "OpenCV / vendor NPU toolchains: Permute, ReLU6, Upsample, ceil_mode) or 'pspnet' (BVLC + Interp). "
    "Pooling rounding is where they clash on the wire: BVLC's enum round_mode and the fork's bool "
    "ceil_mode are both field 13 with opposite meanings, so a file written for one is misread by the "
    "other. The exporter avoids both whenever pads alone give the ONNX output size."
)


def flavor(name: object) -> Flavor:
    """Return the flavor called ``name`` (None means the default, bvlc)."""
    from convert.ir import UsageError

    key = "bvlc" if name is None else str(name).lower()
    if key not in FLAVORS:
        raise UsageError(f"unknown --caffe-flavor '{name}'. Known: {', '.join(FLAVORS)}")
    return FLAVORS[key]
