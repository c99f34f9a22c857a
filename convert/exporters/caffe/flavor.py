"""Caffe dialects the exporter can target (``--caffe-flavor``).

Caffe is a family of dialects. The exporter writes plain BVLC constructs whenever they express
the op exactly and uses a dialect feature only when nothing plain does:

* ``ssd`` (default): the SSD-era fork, as OpenCV DNN and the ``brocolli-caffe`` build of Caffe
  read it (the two runtimes of the parity check, which therefore run the file as written). Floor
  pooling is ``ceil_mode: false`` (their field 13 is a bool, default true: the same wire number
  as BVLC master's ``round_mode`` with the opposite meaning); Transpose is ``Permute``; Clip(0, 6)
  is ``ReLU6``; nearest upsampling is ``Upsample``.
* ``bvlc``: BVLC master (and Huawei Ascend's ATC, whose effective rounding field is also named
  ``round_mode``). Floor-rounded pooling that pads cannot express is ``round_mode: FLOOR``
  (CEIL = 0 / FLOOR = 1); Clip, HardSigmoid and HardSwish are written with ReLU/Power/Eltwise
  (exact, and loadable where BVLC master's ``Clip`` layer is not); nearest upsampling is a
  fixed-weight grouped Deconvolution. No Permute. The parity check runs it in BVLC master as
  written where ``scripts/build_caffe`` built it; OpenCV and the fork cannot parse ``round_mode``:
  without BVLC master the check runs a translated copy and says so.
* ``pspnet``: PSPNet's fork (BVLC 1.0 plus ``Interp`` for bilinear align-corners resizing):
  inputs as the net's ``input``/``input_shape`` (its field 143 is ``interp_param``, it has no
  Input layer) and no pooling rounding field (floor pooling that pads cannot give is refused).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_FLAVOR", "FLAVORS", "FLAVOR_HELP", "Flavor", "flavor"]

DEFAULT_FLAVOR = "ssd"


@dataclass(frozen=True, slots=True)
class Flavor:
    """The dialect features an export may use."""

    name: str
    floor_pooling: str  # "round_mode", "ceil_mode", or "" (no rounding field: floor pooling refused)
    permute: bool = False
    relu6: bool = False
    upsample: bool = False
    normalize: bool = False
    interp: bool = False
    detection: bool = False  # PriorBox / DetectionOutput (the SSD fork's layers)
    input_layer: bool = True  # inputs as Input layers (field 143); else the net's input/input_shape


FLAVORS = {
    "bvlc": Flavor("bvlc", "round_mode"),
    # Nearest upsampling is a fixed Deconvolution in every flavor (OpenCV and every Caffe read it); the
    # fork's Upsample layer only on request (--caffe-upsample-layer): OpenCV DNN cannot create it.
    "ssd": Flavor("ssd", "ceil_mode", permute=True, relu6=True, normalize=True, detection=True),
    # PSPNet's caffe.proto has no Input layer (its field 143 is interp_param) and no pooling rounding field.
    "pspnet": Flavor("pspnet", "", interp=True, input_layer=False),
}

FLAVOR_HELP = (
    "Caffe dialect to write: 'ssd' (default; the SSD fork as OpenCV DNN and brocolli-caffe read it: "
    "Permute, ReLU6, ceil_mode), 'bvlc' (BVLC master / Ascend ATC: plain layers, round_mode; "
    "checked in BVLC master when scripts/build_caffe built it) "
    "or 'pspnet' (PSPNet's fork: Interp, no Input layer, no rounding field). "
    "Pooling rounding is where they clash on the wire: BVLC's enum round_mode and the fork's bool "
    "ceil_mode are both field 13 with opposite meanings, so a file written for one is misread by the "
    "other. The exporter avoids both whenever pads alone give the ONNX output size."
)


def flavor(name: object) -> Flavor:
    """Return the flavor called ``name`` (None means the default, ssd)."""
    from convert.ir import UsageError

    key = DEFAULT_FLAVOR if name is None else str(name).lower()
    if key not in FLAVORS:
        raise UsageError(f"unknown --caffe-flavor '{name}'. Known: {', '.join(FLAVORS)}")
    return FLAVORS[key]
