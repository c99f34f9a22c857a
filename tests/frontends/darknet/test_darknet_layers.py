"""One small cfg per Darknet section type and option, converted and compared with an oracle.

Original-lineage features are checked against libdarknet itself; AlexeyAB-only features (which
libdarknet cannot run) against small numpy references of the Darknet code, on a network whose
first layer is an identity 1x1 convolution so the input reaches the layer under test unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from darknet_helpers import (
    convert_to_onnx,
    needs_libdarknet,
    parity,
    rel_err,
    run_onnx,
    write_cfg,
    write_weights,
)

from convert.frontends.darknet.activations import ACTIVATIONS
from convert.frontends.darknet.layers import LAYERS
from convert.ir import ModelFormatError

ATOL_FP32 = 1e-5


def _net(c: int = 3, h: int = 13, w: int = 11) -> str:
    return f"[net]\nbatch=1\nchannels={c}\nheight={h}\nwidth={w}\n"


def _conv(filters: int, size: int = 3, stride: int = 1, act: str = "leaky", bn: int = 1, extra: str = "") -> str:
    return (f"[convolutional]\nbatch_normalize={bn}\nfilters={filters}\nsize={size}\nstride={stride}\npad=1\n"
            f"activation={act}\n{extra}\n")


# Each case: id, cfg body after [net] (with its net args). Compared with libdarknet.
LIBDARKNET_CASES = {
    "conv-bn-leaky": (_net(), _conv(8) + _conv(6, 1, act="linear")),
    "conv-stride2-odd": (_net(h=13, w=9), _conv(8, 3, 2) + _conv(4, 1, act="relu", bn=0)),
    "conv-groups": (_net(c=4), _conv(8, 3, 1, extra="groups=2") + _conv(4, 1, act="linear", bn=0, extra="groups=4")),
    "conv-nopad": (_net(), "[convolutional]\nfilters=5\nsize=3\nstride=1\nactivation=linear\n"),
    "maxpool-2x2s2-odd": (_net(h=13, w=11), _conv(4) + "[maxpool]\nsize=2\nstride=2\n" + _conv(4, act="linear")),
    "maxpool-2x2s1": (_net(), _conv(4) + "[maxpool]\nsize=2\nstride=1\n" + _conv(4, act="linear")),
    "maxpool-5x5s1-spp": (_net(), _conv(4) + "[maxpool]\nsize=5\nstride=1\n" + _conv(4, act="linear")),
    "maxpool-3x3s2-pad0": (_net(h=15, w=12), _conv(4) + "[maxpool]\nsize=3\nstride=2\npadding=0\n"),
    "avgpool": (_net(), _conv(6) + "[avgpool]\n"),
    "route-and-upsample": (_net(h=12, w=12), _conv(4) + "[maxpool]\nsize=2\nstride=2\n" + _conv(6)
                           + "[upsample]\nstride=2\n[route]\nlayers=-1,0\n" + _conv(4, 1, act="linear")),
    "route-absolute": (_net(), _conv(4) + _conv(5) + "[route]\nlayers=0,1\n" + _conv(3, 1, act="linear")),
    "upsample-scale": (_net(), _conv(4) + "[upsample]\nstride=3\nscale=0.5\n"),
    "shortcut-same": (_net(), _conv(4) + _conv(4) + "[shortcut]\nfrom=-2\nactivation=leaky\n"),
    "shortcut-from-larger": (_net(h=12, w=12), _conv(6) + _conv(4, 3, 2) + "[shortcut]\nfrom=-2\nactivation=linear\n"),
    "shortcut-from-smaller": (_net(h=12, w=12), _conv(3, 3, 2) + _conv(8, 3, 1) + "[upsample]\nstride=2\n"
                              + "[shortcut]\nfrom=-3\nactivation=linear\n"),
    "reorg": (_net(h=8, w=12), _conv(8) + "[reorg]\nstride=2\n" + _conv(5, 1, act="linear")),
    "crop": (_net(h=12, w=12), "[crop]\ncrop_height=7\ncrop_width=9\n" + _conv(3, act="linear")),
    "crop-noadjust": (_net(h=12, w=12), "[crop]\ncrop_height=8\ncrop_width=8\nnoadjust=1\n" + _conv(3, act="linear")),
    "connected": (_net(h=6, w=5), _conv(4) + "[connected]\noutput=7\nactivation=leaky\n"
                  + "[connected]\noutput=5\nbatch_normalize=1\nactivation=linear\n"),
    "softmax-groups-temperature": (_net(h=4, w=4), _conv(6, act="linear") + "[softmax]\ngroups=4\ntemperature=2\n"),
    "dropout-cost": (_net(), _conv(4) + "[dropout]\nprobability=.5\n" + _conv(3, act="linear") + "[cost]\n"),
    "region": (_net(h=10, w=10), _conv(2 * (5 + 3), 1, act="linear", bn=0)
               + "[region]\nanchors=1,1.5,2,3\nclasses=3\ncoords=4\nnum=2\nsoftmax=1\n"),
    "yolo-two-heads": (_net(h=16, w=16), _conv(2 * 7, 1, act="linear", bn=0)
                       + "[yolo]\nmask=0,1\nanchors=10,13,16,30,33,23\nclasses=2\nnum=3\n"
                       + "[route]\nlayers=-2\n" + _conv(7, 3, 2, act="linear", bn=0)
                       + "[yolo]\nmask=2\nanchors=10,13,16,30,33,23\nclasses=2\nnum=3\n"),
    "aliases": (_net(), "[conv]\nfilters=4\nsize=3\npad=1\nactivation=leaky\n[max]\nsize=2\nstride=2\n"
                "[conn]\noutput=6\nactivation=linear\n[soft]\n"),
    "avg-alias": (_net(), _conv(4) + "[avg]\n"),
    # libdarknet sizes its im2col workspace from the conv layers only: keep the conv's the larger.
    "local": (_net(c=8, h=9, w=9), _conv(4, 3, 2) + "[local]\nfilters=6\nsize=3\nstride=1\npad=1\nactivation=leaky\n"),
    "local-nopad": (_net(c=8, h=9, w=9), _conv(4, 3, 2) + "[local]\nfilters=5\nsize=2\nstride=1\nactivation=linear\n"),
    "detection": (_net(c=3, h=6, w=6), _conv(4) + "[connected]\noutput=52\nactivation=linear\n"
                  "[detection]\nclasses=3\ncoords=4\nrescore=1\nside=2\nnum=2\nsoftmax=1\nsqrt=1\n"),
    "network-alias": ("[network]\nbatch=1\nchannels=3\nheight=8\nwidth=8\n", _conv(4, act="linear")),
}
ORIGINAL_ACTIVATIONS = ["linear", "leaky", "relu", "relie", "ramp", "logistic", "loggy", "tanh", "hardtan", "elu",
                        "selu"]
for _act in ORIGINAL_ACTIVATIONS:
    LIBDARKNET_CASES[f"activation-{_act}"] = (_net(), _conv(6, act=_act) + "[activation]\nactivation=linear\n"
                                              if _act == "linear" else _conv(6, act=_act))


@needs_libdarknet
@pytest.mark.darknet
@pytest.mark.parametrize("case", list(LIBDARKNET_CASES), ids=list(LIBDARKNET_CASES))
def test_layer_matches_libdarknet(case: str, tmp_path: Path) -> None:
    net, body = LIBDARKNET_CASES[case]
    cfg = write_cfg(tmp_path, net + body)
    parity(cfg, tmp_path, "libdarknet")


# -- AlexeyAB-only features: numpy oracles ------------------------------------------------------

def _identity_net(c: int, h: int, w: int, body: str) -> str:
    """A net whose layer 0 copies its input (1x1 identity conv, no bias, no BN)."""
    return _net(c, h, w) + f"[convolutional]\nfilters={c}\nsize=1\nstride=1\npad=0\nactivation=linear\n" + body


def _identity_weights(path: Path, c: int, more: list[np.ndarray] | None = None) -> Path:
    return write_weights(path, [np.zeros(c), np.eye(c, dtype=np.float32).reshape(c, c, 1, 1), *(more or [])])


def _run(tmp_path: Path, text: str, c: int, x: np.ndarray, more: list[np.ndarray] | None = None,
         **extra: object) -> dict[str, np.ndarray]:
    cfg = write_cfg(tmp_path, text)
    weights = _identity_weights(tmp_path / "net.weights", c, more)
    onnx_path, _ = convert_to_onnx(cfg, weights, tmp_path / "net.onnx", **extra)
    return run_onnx(onnx_path, x)


def _x(shape: tuple[int, ...], scale: float = 3.0) -> np.ndarray:
    return (np.random.default_rng(7).standard_normal(shape) * scale).astype(np.float32)


ALEXEYAB_ACTIVATIONS = ["mish", "swish", "hard_mish", "relu6", "hardswish", "gelu"]


def _sig(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-v))


def _softplus(v: float) -> float:  # Darknet's (AlexeyAB src/activations.h): thresholded at +-20
    return v if v > 20 else (math.exp(v) if v < -20 else math.log1p(math.exp(v)))


# Each activation as Darknet's C sources define it (pjreddie src/activations.h; AlexeyAB's for mish,
# swish, hard_mish, relu6, gelu; hardswish as x * relu6(x + 3) / 6), written here element by element
# and independently of the product's own numpy table.
DARKNET_FORMULAS: dict[str, Callable[[float], float]] = {
    "linear": lambda v: v,
    "leaky": lambda v: v if v > 0 else 0.1 * v,
    "relie": lambda v: v if v > 0 else 0.01 * v,
    "relu": lambda v: v * (v > 0),
    "ramp": lambda v: v * (v > 0) + 0.1 * v,
    "relu6": lambda v: min(max(v, 0.0), 6.0),
    "hardtan": lambda v: -1.0 if v < -1 else (1.0 if v > 1 else v),
    "logistic": _sig,
    "loggy": lambda v: 2.0 / (1.0 + math.exp(-v)) - 1,
    "tanh": lambda v: (math.exp(2 * v) - 1) / (math.exp(2 * v) + 1),
    "elu": lambda v: (v >= 0) * v + (v < 0) * (math.exp(v) - 1),
    "selu": lambda v: (v >= 0) * 1.0507 * v + (v < 0) * 1.0507 * 1.6732 * (math.exp(v) - 1),
    "swish": lambda v: v * _sig(v),
    "mish": lambda v: v * math.tanh(_softplus(v)),
    "hard_mish": lambda v: v if v > 0 else (v * v / 2 + v if v > -2 else 0.0),
    "hardswish": lambda v: v * min(max(v + 3, 0.0), 6.0) / 6,
    "gelu": lambda v: 0.5 * v * (1 + math.tanh(0.797885 * v + 0.035677 * v**3)),
}


@pytest.mark.parametrize("act", ALEXEYAB_ACTIVATIONS + ORIGINAL_ACTIVATIONS)
def test_activation_formula(act: str, tmp_path: Path) -> None:
    x = _x((1, 4, 6, 5), 4.0)
    out = _run(tmp_path, _identity_net(4, 6, 5, f"[activation]\nactivation={act}\n"), 4, x)
    (got,) = out.values()
    ref = np.vectorize(DARKNET_FORMULAS[act], otypes=[np.float64])(x.astype(np.float64))
    assert np.abs(got - ref).max() <= ATOL_FP32 * max(1.0, np.abs(ref).max())


def test_route_groups(tmp_path: Path) -> None:
    x = _x((1, 6, 4, 4))
    body = "[route]\nlayers=-1\ngroups=2\ngroup_id=1\n[route]\nlayers=0,-1\ngroups=3\ngroup_id=0\n"
    (got,) = _run(tmp_path, _identity_net(6, 4, 4, body), 6, x).values()
    ref = np.concatenate([x[:, 0:2], x[:, 3:4]], axis=1)
    np.testing.assert_allclose(got, ref, atol=ATOL_FP32)


def test_scale_channels(tmp_path: Path) -> None:
    x = _x((1, 5, 4, 3))
    body = "[avgpool]\n[scale_channels]\nfrom=-2\nactivation=linear\n"
    (got,) = _run(tmp_path, _identity_net(5, 4, 3, body), 5, x).values()
    np.testing.assert_allclose(got, x * x.mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=ATOL_FP32)


def test_sam(tmp_path: Path) -> None:
    x = _x((1, 3, 4, 4))
    body = "[activation]\nactivation=logistic\n[sam]\nfrom=-2\n"
    (got,) = _run(tmp_path, _identity_net(3, 4, 4, body), 3, x).values()
    np.testing.assert_allclose(got, x / (1 + np.exp(-x)), rtol=1e-5, atol=ATOL_FP32)


def _darknet_pool(x: np.ndarray, size: int, stride: int, padding: int, op: str) -> np.ndarray:
    """Darknet's forward_(max|local_avg)pool_layer loops, verbatim in numpy."""
    _, c, h, w = x.shape
    oh, ow = (h + padding - size) // stride + 1, (w + padding - size) // stride + 1
    off = -(padding // 2)
    out = np.zeros((1, c, oh, ow), np.float32)
    for i in range(oh):
        for j in range(ow):
            cells = [x[0, :, off + i * stride + n, off + j * stride + m]
                     for n in range(size) for m in range(size)
                     if 0 <= off + i * stride + n < h and 0 <= off + j * stride + m < w]
            stack = np.stack(cells)
            out[0, :, i, j] = stack.max(axis=0) if op == "max" else stack.mean(axis=0)
    return out


@pytest.mark.parametrize(("size", "stride", "padding"), [(2, 2, None), (3, 2, None), (2, 1, None), (3, 1, 0),
                                                          (4, 3, 2)])
def test_local_avgpool_and_maxpool_geometry(size: int, stride: int, padding: int | None, tmp_path: Path) -> None:
    x = _x((1, 3, 7, 9))
    pad = size - 1 if padding is None else padding
    opt = "" if padding is None else f"padding={padding}\n"
    for op, section in (("max", "maxpool"), ("avg", "local_avgpool")):
        sub = tmp_path / op
        sub.mkdir()
        body = f"[{section}]\nsize={size}\nstride={stride}\n{opt}"
        (got,) = _run(sub, _identity_net(3, 7, 9, body), 3, x).values()
        ref = _darknet_pool(x, size, stride, pad, op)
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=ATOL_FP32)


def test_maxpool_stride_xy_and_conv_stride_xy(tmp_path: Path) -> None:
    x = _x((1, 2, 8, 9))
    body = "[maxpool]\nsize=2\nstride_x=2\nstride_y=1\n"
    (got,) = _run(tmp_path, _identity_net(2, 8, 9, body), 2, x).values()
    assert got.shape == (1, 2, 8, 5)


def _yolo_numpy(x: np.ndarray, n: int, scale: float, new_coords: bool) -> np.ndarray:
    b, c, h, w = x.shape
    y = x.reshape(b, n, c // n, h, w).astype(np.float64).copy()
    if not new_coords:
        y[:, :, 0:2] = 1 / (1 + np.exp(-y[:, :, 0:2]))
        y[:, :, 4:] = 1 / (1 + np.exp(-y[:, :, 4:]))
    y[:, :, 0:2] = y[:, :, 0:2] * scale - 0.5 * (scale - 1)
    return y.reshape(x.shape)


@pytest.mark.parametrize("new_coords", [0, 1])
def test_yolo_scale_x_y_and_new_coords(new_coords: int, tmp_path: Path) -> None:
    c = 2 * (5 + 3)
    x = _x((1, c, 4, 5))
    body = f"[yolo]\nmask=0,1\nanchors=1,2,3,4\nnum=2\nclasses=3\nscale_x_y=1.2\nnew_coords={new_coords}\n"
    (got,) = _run(tmp_path, _identity_net(c, 4, 5, body), c, x).values()
    assert rel_err(_yolo_numpy(x, 2, 1.2, bool(new_coords)), got) <= 1e-5


def _reorg_numpy(x: np.ndarray, s: int) -> np.ndarray:
    """Darknet's reorg_cpu(forward=0), verbatim."""
    b, c, h, w = x.shape
    flat = x.ravel()
    out = np.empty_like(flat)
    oc = c // (s * s)
    for k in range(c):
        for j in range(h):
            for i in range(w):
                in_index = i + w * (j + h * k)
                c2, offset = k % oc, k // oc
                w2, h2 = i * s + offset % s, j * s + offset // s
                out[in_index] = flat[w2 + w * s * (h2 + h * s * c2)]
    return out.reshape(b, c * s * s, h // s, w // s)


def test_reorg_is_darknets_shuffle(tmp_path: Path) -> None:
    x = _x((1, 8, 4, 6))
    (got,) = _run(tmp_path, _identity_net(8, 4, 6, "[reorg]\nstride=2\n"), 8, x).values()
    np.testing.assert_array_equal(got, _reorg_numpy(x, 2))


def test_upsample_negative_stride_sums_blocks(tmp_path: Path) -> None:
    x = _x((1, 2, 4, 6))
    (got,) = _run(tmp_path, _identity_net(2, 4, 6, "[upsample]\nstride=-2\nscale=0.5\n"), 2, x).values()
    ref = 0.5 * x.reshape(1, 2, 2, 2, 3, 2).sum(axis=(3, 5))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=ATOL_FP32)


def test_every_registered_section_and_activation_has_a_test() -> None:
    covered = set()
    texts = [n + b for n, b in LIBDARKNET_CASES.values()]
    texts += ["[route]", "[scale_channels]", "[sam]", "[local_avgpool]", "[maxpool]", "[yolo]", "[reorg]",
              "[upsample]", "[activation]"]
    for text in texts:
        for line in text.splitlines():
            if line.startswith("["):
                covered.add(line.strip("[]"))
    assert set(map(str, LAYERS.keys())) - covered == set()
    assert set(map(str, ACTIVATIONS.keys())) - set(ALEXEYAB_ACTIVATIONS + ORIGINAL_ACTIVATIONS) == set()


def _conv_numpy(x: np.ndarray, w: np.ndarray, b: np.ndarray, pad: int, sy: int, sx: int, dil: int,
                out_hw: tuple[int, int]) -> np.ndarray:
    """Darknet's im2col convolution (AlexeyAB im2col_cpu_ext), as a direct loop."""
    _, _, h, wd = x.shape
    n, _, k, _ = w.shape
    out = np.zeros((1, n, *out_hw), np.float64)
    for i in range(out_hw[0]):
        for j in range(out_hw[1]):
            for ky in range(k):
                for kx in range(k):
                    yy, xx = i * sy - pad + ky * dil, j * sx - pad + kx * dil
                    if 0 <= yy < h and 0 <= xx < wd:
                        out[0, :, i, j] += w[:, :, ky, kx] @ x[0, :, yy, xx]
    return out + b.reshape(1, n, 1, 1)


@pytest.mark.parametrize(("opts", "pad", "sy", "sx", "dil", "out_hw"), [
    ("size=3\npad=1\ndilation=2\n", 2, 1, 1, 2, (7, 9)),
    ("size=3\npad=1\nstride_x=2\nstride_y=1\n", 1, 1, 2, 1, (7, 5)),
    ("size=5\npad=1\ndilation=3\n", 6, 1, 1, 3, (7, 9)),
    ("size=4\npad=1\ndilation=2\n", 0, 1, 1, 0, (0, 0)),
], ids=["dilation2", "stride_xy", "dilation3-size5", "dilation2-even-size"])
def test_conv_dilation_and_stride_xy(opts: str, pad: int, sy: int, sx: int, dil: int, out_hw: tuple[int, int],
                                     tmp_path: Path) -> None:
    """AlexeyAB pads a dilated kernel by pad*dilation; OpenCV ignores dilation, so a numpy oracle."""
    x = _x((1, 3, 7, 9))
    rng = np.random.default_rng(3)
    k = int(opts.split("size=")[1].split("\n")[0])
    w = rng.standard_normal((4, 3, k, k)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    cfg = write_cfg(tmp_path, _net(3, 7, 9) + f"[convolutional]\nfilters=4\n{opts}activation=linear\n")
    weights = write_weights(tmp_path / "net.weights", [b, w])
    if dil == 0:
        # An even size: Darknet's size formula and the dilated convolution disagree.
        with pytest.raises(ModelFormatError, match="dilation=2 with size=4"):
            convert_to_onnx(cfg, weights, tmp_path / "net.onnx")
        return
    (got,) = run_onnx(convert_to_onnx(cfg, weights, tmp_path / "net.onnx")[0], x).values()
    ref = _conv_numpy(x, w, b, pad, sy, sx, dil, out_hw)
    assert got.shape == ref.shape
    assert rel_err(ref, got) <= 1e-5
