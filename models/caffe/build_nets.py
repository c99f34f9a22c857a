"""Build the Caffe test nets (deploy prototxt + caffemodel) with seeded random weights.

Run ``python models/caffe/build_nets.py OUT_DIR [NAME...]``; the tests call ``build(name, out_dir)``.
The weights are He-scaled so activations stay O(1); BatchNorm layers store running sums with a
non-unit moving-average factor, as Caffe does, and statistics near the true ones.

Nets: lenet (V2 ``layer``), lenet_v1 (legacy ``layers``), resnet (BatchNorm + Scale, Eltwise),
mobilenet (depthwise convolutions), vgg (ceil-mode MAX and AVE pooling, LRN, Dropout),
ssd (Permute / Flatten / Concat / Reshape / Softmax head on two feature maps), seg (Deconvolution
and Crop skip connections).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from google.protobuf import text_format

from convert._proto import caffe_pb2

__all__ = ["NETS", "NetBuilder", "build"]


class NetBuilder:
    """Accumulate layers and blobs; write the deploy prototxt and the caffemodel."""

    def __init__(self, name: str, seed: int, *, v1: bool = False) -> None:
        self.net = caffe_pb2.NetParameter(name=name)
        self.rng = np.random.default_rng(seed)
        self.v1 = v1
        self.blobs: dict[str, list[np.ndarray]] = {}

    def input(self, name: str, shape: Sequence[int]) -> None:
        if self.v1:
            self.net.input.append(name)
            self.net.input_dim.extend(shape)
            return
        layer = self.net.layer.add(name=name, type="Input", top=[name])
        layer.input_param.shape.add(dim=list(shape))

    def layer(
        self,
        type_: str,
        name: str,
        bottoms: Sequence[str],
        tops: Sequence[str],
        blobs: Sequence[np.ndarray] = (),
        **params: object,
    ) -> caffe_pb2.LayerParameter:
        if self.v1:
            enum = caffe_pb2.V1LayerParameter.LayerType
            v1name = {"InnerProduct": "INNER_PRODUCT", "ReLU": "RELU", "TanH": "TANH"}.get(type_, type_.upper())
            layer = self.net.layers.add(name=name, type=enum.Value(v1name), bottom=bottoms, top=tops)
        else:
            layer = self.net.layer.add(name=name, type=type_, bottom=bottoms, top=tops)
        for field, values in params.items():
            getattr(layer, field).CopyFrom(getattr(layer, field).__class__(**values))  # type: ignore[arg-type]
        if blobs:
            self.blobs[name] = [np.asarray(b, dtype=np.float32) for b in blobs]
        return layer

    # -- common layers ------------------------------------------------------------------------
    def conv(
        self,
        name: str,
        bottom: str,
        top: str,
        cin: int,
        cout: int,
        k: int,
        *,
        s: int = 1,
        p: int = 0,
        group: int = 1,
        bias: bool = True,
        dilation: int = 1,
        deconv: bool = False,
    ) -> None:
        fan_in = cin // group * k * k
        if deconv:
            w = self.rng.normal(0, np.sqrt(1.0 / fan_in), (cin, cout // group, k, k))
        else:
            w = self.rng.normal(0, np.sqrt(2.0 / fan_in), (cout, cin // group, k, k))
        blobs = [w] + ([self.rng.normal(0, 0.1, cout)] if bias else [])
        cp: dict[str, object] = {
            "num_output": cout,
            "kernel_size": [k],
            "stride": [s],
            "pad": [p],
            "bias_term": bias,
        }
        if group != 1:
            cp["group"] = group
        if dilation != 1:
            cp["dilation"] = [dilation]
        self.layer("Deconvolution" if deconv else "Convolution", name, [bottom], [top], blobs, convolution_param=cp)

    def bn_scale(self, name: str, blob: str, c: int) -> None:
        factor = 7.5  # Caffe's running sums: stats = blob / factor
        mean = self.rng.normal(0, 0.2, c)
        var = self.rng.uniform(0.5, 2.0, c)
        self.layer(
            "BatchNorm",
            f"{name}_bn",
            [blob],
            [blob],
            [mean * factor, var * factor, [factor]],
            batch_norm_param={"eps": 1e-5},
        )
        self.layer(
            "Scale",
            f"{name}_scale",
            [blob],
            [blob],
            [self.rng.uniform(0.8, 1.2, c), self.rng.normal(0, 0.1, c)],
            scale_param={"bias_term": True},
        )

    def relu(self, name: str, blob: str) -> None:
        self.layer("ReLU", name, [blob], [blob])

    def pool(
        self,
        name: str,
        bottom: str,
        top: str,
        k: int,
        s: int,
        *,
        p: int = 0,
        ave: bool = False,
        global_: bool = False,
    ) -> None:
        pp: dict[str, object] = {"pool": 1 if ave else 0}
        if global_:
            pp["global_pooling"] = True
        else:
            pp.update(kernel_size=k, stride=s)
            if p:
                pp["pad"] = p
        self.layer("Pooling", name, [bottom], [top], pooling_param=pp)

    def ip(self, name: str, bottom: str, top: str, k: int, n: int) -> None:
        self.layer(
            "InnerProduct",
            name,
            [bottom],
            [top],
            [self.rng.normal(0, np.sqrt(2.0 / k), (n, k)), self.rng.normal(0, 0.1, n)],
            inner_product_param={"num_output": n},
        )

    # -- output -------------------------------------------------------------------------------
    def save(self, out_dir: Path) -> tuple[Path, Path]:
        out_dir.mkdir(parents=True, exist_ok=True)
        proto = out_dir / f"{self.net.name}.prototxt"
        model = out_dir / f"{self.net.name}.caffemodel"
        proto.write_text(text_format.MessageToString(self.net))
        full = caffe_pb2.NetParameter()
        full.CopyFrom(self.net)
        for layer in list(full.layer) + list(full.layers):
            for arr in self.blobs.get(layer.name, ()):
                blob = layer.blobs.add()
                if self.v1:
                    dims = (1,) * (4 - arr.ndim) + arr.shape
                    blob.num, blob.channels, blob.height, blob.width = dims
                else:
                    blob.shape.dim.extend(arr.shape)
                blob.data.extend(arr.ravel().tolist())
        model.write_bytes(full.SerializeToString())
        return proto, model


def lenet(b: NetBuilder) -> None:
    b.input("data", (1, 1, 28, 28))
    b.conv("conv1", "data", "conv1", 1, 8, 5)
    b.pool("pool1", "conv1", "pool1", 2, 2)
    b.conv("conv2", "pool1", "conv2", 8, 16, 5)
    b.pool("pool2", "conv2", "pool2", 2, 2)
    b.ip("ip1", "pool2", "ip1", 16 * 4 * 4, 64)
    b.relu("relu1", "ip1")
    b.ip("ip2", "ip1", "ip2", 64, 10)
    b.layer("Softmax", "prob", ["ip2"], ["prob"])


def resnet(b: NetBuilder) -> None:
    b.input("data", (1, 3, 32, 32))
    b.conv("conv1", "data", "conv1", 3, 16, 3, p=1, bias=False)
    b.bn_scale("conv1", "conv1", 16)
    b.relu("conv1_relu", "conv1")
    prev, c = "conv1", 16
    for i, (cout, s) in enumerate(((16, 1), (32, 2))):
        a, bb = f"res{i}a", f"res{i}b"
        b.conv(a, prev, a, c, cout, 3, s=s, p=1, bias=False)
        b.bn_scale(a, a, cout)
        b.relu(f"{a}_relu", a)
        b.conv(bb, a, bb, cout, cout, 3, p=1, bias=False)
        b.bn_scale(bb, bb, cout)
        short = prev
        if s != 1 or c != cout:
            short = f"res{i}_proj"
            b.conv(short, prev, short, c, cout, 1, s=s, bias=False)
            b.bn_scale(short, short, cout)
        out = f"res{i}"
        b.layer("Eltwise", out, [short, bb], [out], eltwise_param={"operation": 1})
        b.relu(f"{out}_relu", out)
        prev, c = out, cout
    b.pool("gap", prev, "gap", 0, 0, ave=True, global_=True)
    b.ip("fc", "gap", "fc", c, 10)


def mobilenet(b: NetBuilder) -> None:
    b.input("data", (1, 3, 32, 32))
    b.conv("conv0", "data", "conv0", 3, 16, 3, s=2, p=1, bias=False)
    b.bn_scale("conv0", "conv0", 16)
    b.relu("conv0_relu", "conv0")
    prev, c = "conv0", 16
    for i, (cout, s) in enumerate(((32, 1), (64, 2), (64, 1))):
        dw, pw = f"dw{i}", f"pw{i}"
        b.conv(dw, prev, dw, c, c, 3, s=s, p=1, group=c, bias=False)
        b.bn_scale(dw, dw, c)
        b.relu(f"{dw}_relu", dw)
        b.conv(pw, dw, pw, c, cout, 1, bias=False)
        b.bn_scale(pw, pw, cout)
        b.relu(f"{pw}_relu", pw)
        prev, c = pw, cout
    b.pool("gap", prev, "gap", 0, 0, ave=True, global_=True)
    b.conv("classifier", "gap", "classifier", c, 10, 1)
    b.layer("Flatten", "flat", ["classifier"], ["flat"])
    b.layer("Softmax", "prob", ["flat"], ["prob"])


def vgg(b: NetBuilder) -> None:
    b.input("data", (1, 3, 30, 30))
    b.conv("conv1_1", "data", "conv1_1", 3, 16, 3, p=1)
    b.relu("relu1_1", "conv1_1")
    b.layer("LRN", "norm1", ["conv1_1"], ["norm1"], lrn_param={"local_size": 5, "alpha": 1e-3, "beta": 0.75})
    b.pool("pool1", "norm1", "pool1", 3, 2)  # 30 -> ceil(27/2)+1 = 15 (floor would give 14)
    b.conv("conv2_1", "pool1", "conv2_1", 16, 32, 3, p=1)
    b.relu("relu2_1", "conv2_1")
    b.pool("pool2", "conv2_1", "pool2", 2, 2)  # 15 -> 8 (ceil)
    b.conv("conv3_1", "pool2", "conv3_1", 32, 32, 3, p=1, dilation=1)
    b.relu("relu3_1", "conv3_1")
    b.pool("pool3", "conv3_1", "pool3", 3, 2, ave=True)  # 8 -> ceil(5/2)+1 = 4, AVE overhang
    b.ip("fc6", "pool3", "fc6", 32 * 4 * 4, 64)
    b.relu("relu6", "fc6")
    b.layer("Dropout", "drop6", ["fc6"], ["fc6"], dropout_param={"dropout_ratio": 0.5})
    b.ip("fc7", "fc6", "fc7", 64, 10)


def ssd(b: NetBuilder) -> None:
    b.input("data", (1, 3, 32, 32))
    b.conv("conv1", "data", "conv1", 3, 16, 3, s=2, p=1)
    b.relu("relu1", "conv1")
    b.conv("conv2", "conv1", "conv2", 16, 32, 3, s=2, p=1)
    b.relu("relu2", "conv2")
    anchors, classes = 3, 4
    locs, confs = [], []
    for feat, c in (("conv1", 16), ("conv2", 32)):
        for kind, n, bucket in (("loc", 4 * anchors, locs), ("conf", classes * anchors, confs)):
            name = f"{feat}_mbox_{kind}"
            b.conv(name, feat, name, c, n, 3, p=1)
            b.layer("Permute", f"{name}_perm", [name], [f"{name}_perm"], permute_param={"order": [0, 2, 3, 1]})
            b.layer("Flatten", f"{name}_flat", [f"{name}_perm"], [f"{name}_flat"], flatten_param={"axis": 1})
            bucket.append(f"{name}_flat")
    b.layer("Concat", "mbox_loc", locs, ["mbox_loc"], concat_param={"axis": 1})
    b.layer("Concat", "mbox_conf", confs, ["mbox_conf"], concat_param={"axis": 1})
    b.layer(
        "Reshape",
        "mbox_conf_reshape",
        ["mbox_conf"],
        ["mbox_conf_reshape"],
        reshape_param={"shape": {"dim": [0, -1, classes]}},
    )
    b.layer(
        "Softmax",
        "mbox_conf_softmax",
        ["mbox_conf_reshape"],
        ["mbox_conf_softmax"],
        softmax_param={"axis": 2},
    )
    b.layer(
        "Flatten",
        "mbox_conf_flatten",
        ["mbox_conf_softmax"],
        ["mbox_conf_flatten"],
        flatten_param={"axis": 1},
    )


def seg(b: NetBuilder) -> None:
    b.input("data", (1, 3, 36, 36))
    b.conv("conv1", "data", "conv1", 3, 16, 3, s=2, p=1)  # 18
    b.relu("relu1", "conv1")
    b.conv("conv2", "conv1", "conv2", 16, 32, 3, s=2, p=1)  # 9
    b.relu("relu2", "conv2")
    b.conv("score2", "conv2", "score2", 32, 5, 1)
    b.conv("score1", "conv1", "score1", 16, 5, 1)
    b.conv("up2", "score2", "up2", 5, 5, 4, s=2, bias=False, deconv=True)  # 2*8+4 = 20
    b.layer("Crop", "crop2", ["up2", "score1"], ["crop2"], crop_param={"axis": 2, "offset": [1]})
    b.layer("Eltwise", "fuse", ["crop2", "score1"], ["fuse"], eltwise_param={"operation": 1})
    b.conv("up1", "fuse", "up1", 5, 5, 4, s=2, bias=False, deconv=True)  # 2*17+4 = 38
    b.layer("Crop", "score", ["up1", "data"], ["score"], crop_param={"axis": 2, "offset": [1, 1]})


def lenet_v1(b: NetBuilder) -> None:
    b.input("data", (1, 1, 12, 12))
    b.conv("conv1", "data", "conv1", 1, 4, 3)
    b.relu("relu1", "conv1")
    b.pool("pool1", "conv1", "pool1", 2, 2)
    b.ip("ip1", "pool1", "ip1", 4 * 5 * 5, 10)
    b.layer("TanH", "tanh1", ["ip1"], ["ip1"])


NETS: dict[str, tuple[Callable[[NetBuilder], None], int, bool]] = {
    "lenet": (lenet, 1, False),
    "lenet_v1": (lenet_v1, 2, True),
    "resnet": (resnet, 3, False),
    "mobilenet": (mobilenet, 4, False),
    "vgg": (vgg, 5, False),
    "ssd": (ssd, 6, False),
    "seg": (seg, 7, False),
}


def build(name: str, out_dir: Path) -> tuple[Path, Path]:
    """Write ``<name>.prototxt`` and ``<name>.caffemodel`` into ``out_dir``; return their paths."""
    func, seed, v1 = NETS[name]
    b = NetBuilder(name, seed, v1=v1)
    func(b)
    return b.save(Path(out_dir))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: build_nets.py OUT_DIR [NAME...]")
    for net_name in sys.argv[2:] or list(NETS):
        for path in build(net_name, Path(sys.argv[1])):
            sys.stdout.write(f"{path}\n")
