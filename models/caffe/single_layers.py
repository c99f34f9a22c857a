"""Small one- or few-layer Caffe nets used by the frontend and exporter tests.

Each case adds layers after an input ``data`` of shape (1, 4, 10, 10); OpenCV DNN runs them all.
"""

from __future__ import annotations

from build_nets import NetBuilder

__all__ = ["SINGLES"]


def _prelu(b: NetBuilder) -> None:
    b.layer("PReLU", "pr", ["data"], ["pr"], [b.rng.uniform(0.1, 0.3, 4)])


def _power(b: NetBuilder) -> None:
    b.layer("AbsVal", "abs", ["data"], ["abs"])
    b.layer("Power", "pw", ["abs"], ["pw"], power_param={"power": 2.0, "scale": 0.5, "shift": 1.0})


def _eltwise(b: NetBuilder) -> None:
    b.layer("Sigmoid", "s", ["data"], ["s"])
    b.layer("TanH", "t", ["data"], ["t"])
    b.layer("Eltwise", "prod", ["s", "t"], ["prod"], eltwise_param={"operation": 0})
    b.layer("Eltwise", "mx", ["prod", "data"], ["mx"], eltwise_param={"operation": 2})
    b.layer("Eltwise", "sum", ["mx", "s", "t"], ["sum"], eltwise_param={"operation": 1, "coeff": [1, -0.5, 2]})


def _slice(b: NetBuilder) -> None:
    b.layer("Slice", "sl", ["data"], ["a", "b2"], slice_param={"axis": 1, "slice_point": [1]})
    b.layer("ELU", "elu", ["a"], ["elu"], elu_param={"alpha": 0.5})
    b.layer("Concat", "cat", ["b2", "elu"], ["cat"])


def _pool_pad_overhang(b: NetBuilder) -> None:
    b.pool("ave", "data", "ave", 3, 2, p=1, ave=True)  # 10 -> 6, last window overhangs the pad
    b.pool("mx", "data", "mx", 3, 2, p=1)


def _pool_floor(b: NetBuilder) -> None:
    b.layer(
        "Pooling",
        "pf",
        ["data"],
        ["pf"],
        pooling_param={"pool": 0, "kernel_size": 3, "stride": 2, "ceil_mode": False},
    )


def _shuffle_norm(b: NetBuilder) -> None:
    b.layer("ShuffleChannel", "sh", ["data"], ["sh"], shuffle_channel_param={"group": 2})
    b.layer(
        "Normalize",
        "nm",
        ["sh"],
        ["nm"],
        [b.rng.uniform(1, 2, 4)],
        norm_param={"across_spatial": False, "channel_shared": False},
    )
    b.layer("ReLU6", "r6", ["nm"], ["r6"])


def _scale2(b: NetBuilder) -> None:
    b.layer("Pooling", "gp", ["data"], ["gp"], pooling_param={"pool": 1, "global_pooling": True})
    b.layer("Flatten", "gf", ["gp"], ["gf"])
    b.layer("Scale", "sc", ["data", "gf"], ["sc"], scale_param={"axis": 0})
    b.layer(
        "Deconvolution",
        "dc",
        ["sc"],
        ["dc"],
        [b.rng.normal(0, 0.5, (4, 2, 3, 3))],
        convolution_param={
            "num_output": 4,
            "kernel_size": [3],
            "stride": [2],
            "group": 2,
            "bias_term": False,
            "pad": [1],
        },
    )


def _crop_per_axis(b: NetBuilder) -> None:
    # The reference blob feeds only the crops, so the IR has no blob of the target shape left:
    # the exporter cuts one axis at a time (Slice layers) instead of writing a Crop.
    b.conv("r", "data", "r", 4, 2, 1)
    b.pool("ref", "r", "ref", 3, 2)  # (1, 2, 5, 5)
    b.layer("Crop", "c1", ["data", "ref"], ["c1"], crop_param={"axis": 1, "offset": [1, 2, 3]})
    b.layer("Crop", "c2", ["data", "ref"], ["c2"], crop_param={"axis": 2, "offset": [4, 0]})
    b.layer("TanH", "t2", ["c2"], ["t2"])


SINGLES = {
    "prelu": _prelu,
    "power": _power,
    "eltwise": _eltwise,
    "slice_concat_elu": _slice,
    "pool_pad_overhang": _pool_pad_overhang,
    "pool_floor": _pool_floor,
    "shuffle_normalize_relu6": _shuffle_norm,
    "scale_bottom_deconv_group": _scale2,
    "crop_per_axis": _crop_per_axis,
}
