"""Write the public deploy architectures under ``models/caffe/deploy/`` as prototxt.

Each net is described here layer by layer from its published architecture (the paper and the
layer list of its authors' public deploy file, re-typed as code; no file is copied) and written as
a deploy prototxt whose header comment names its origin. Run ``python models/caffe/deploy_nets.py``
to regenerate them (``tests/frontends/caffe/test_deploy_nets.py`` checks the committed files are
this script's output). Input sizes are small where the architecture allows (fully convolutional
nets, global pooling), to keep the tests fast; GoogLeNet and ResNet-50 end in a 7x7 pool and keep
224. Weights: ``fill_weights.py`` (seeded random values of the shapes the layers need).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["NETS", "Net", "build_all"]

OUT = Path(__file__).resolve().parent / "deploy"


class E(str):
    """An enum value (written bare)."""


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, E):
        return str(v)
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _fields(params: dict[str, object], indent: int) -> list[str]:
    pad = "  " * indent
    lines: list[str] = []
    for key, v in params.items():
        for item in v if isinstance(v, list) else [v]:
            if isinstance(item, dict):
                lines.append(f"{pad}{key} {{")
                lines.extend(_fields(item, indent + 1))
                lines.append(f"{pad}}}")
            else:
                lines.append(f"{pad}{key}: {_value(item)}")
    return lines


class Net:
    """Accumulate layers as prototxt text."""

    def __init__(self, name: str, origin: str, shape: Sequence[int], *, legacy_input: bool = False) -> None:
        self.name = name
        self.lines = [f"# {line}" for line in origin.strip().splitlines()]
        self.lines.append(f'name: "{name}"')
        if legacy_input:  # PSPNet's Caffe has no Input layer (its field 143 is interp_param)
            self.lines += ['input: "data"', "input_shape {", *[f"  dim: {d}" for d in shape], "}"]
        else:
            self.layer("data", "Input", [], ["data"], input_param={"shape": {"dim": list(shape)}})

    def layer(self, name: str, type_: str, bottoms: Sequence[str], tops: Sequence[str], **params: object) -> str:
        head: dict[str, object] = {"name": name, "type": type_, "bottom": list(bottoms), "top": list(tops)}
        self.lines += ["layer {", *_fields({**head, **params}, 1), "}"]
        return tops[0] if tops else name

    # -- building blocks -----------------------------------------------------------------------
    def conv(self, name: str, bottom: str, n: int, k: int, *, s: int = 1, p: int = 0, g: int = 1, d: int = 1,
             bias: bool = True, top: str | None = None) -> str:
        cp: dict[str, object] = {"num_output": n}
        if not bias:
            cp["bias_term"] = False
        if p:
            cp["pad"] = p
        cp["kernel_size"] = k
        if s != 1:
            cp["stride"] = s
        if g != 1:
            cp["group"] = g
        if d != 1:
            cp["dilation"] = d
        return self.layer(name, "Convolution", [bottom], [top or name], convolution_param=cp)

    def relu(self, name: str, blob: str) -> str:
        return self.layer(name, "ReLU", [blob], [blob])

    def bn(self, name: str, scale: str, blob: str) -> str:
        self.layer(name, "BatchNorm", [blob], [blob], batch_norm_param={"use_global_stats": True})
        return self.layer(scale, "Scale", [blob], [blob], scale_param={"bias_term": True})

    def pool(self, name: str, bottom: str, k: int = 0, s: int = 1, *, p: int = 0, ave: bool = False,
             global_: bool = False) -> str:
        pp: dict[str, object] = {"pool": E("AVE" if ave else "MAX")}
        if global_:
            pp["global_pooling"] = True
        else:
            pp["kernel_size"] = k
            if s != 1:
                pp["stride"] = s
            if p:
                pp["pad"] = p
        return self.layer(name, "Pooling", [bottom], [name], pooling_param=pp)

    def lrn(self, name: str, bottom: str) -> str:
        return self.layer(name, "LRN", [bottom], [name], lrn_param={"local_size": 5, "alpha": 0.0001, "beta": 0.75})

    def fc(self, name: str, bottom: str, n: int) -> str:
        return self.layer(name, "InnerProduct", [bottom], [name], inner_product_param={"num_output": n})

    def concat(self, name: str, bottoms: Sequence[str], axis: int = 1) -> str:
        params: dict[str, object] = {} if axis == 1 else {"concat_param": {"axis": axis}}
        return self.layer(name, "Concat", bottoms, [name], **params)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


# ---- AlexNet --------------------------------------------------------------------------------------
def alexnet() -> Net:
    net = Net("AlexNet", """
AlexNet (Krizhevsky, Sutskever, Hinton, NIPS 2012) as in BVLC Caffe's models/bvlc_alexnet deploy
architecture (grouped conv2/4/5, LRN after conv1/conv2). Input 99x99 instead of 227 (fc6 then sees
256x2x2; every other layer is unchanged).""", (1, 3, 99, 99))
    x = net.conv("conv1", "data", 96, 11, s=4)
    net.relu("relu1", x)
    x = net.pool("pool1", net.lrn("norm1", x), 3, 2)
    x = net.conv("conv2", x, 256, 5, p=2, g=2)
    net.relu("relu2", x)
    x = net.pool("pool2", net.lrn("norm2", x), 3, 2)
    for i, (n, g) in enumerate(((384, 1), (384, 2), (256, 2)), 3):
        x = net.conv(f"conv{i}", x, n, 3, p=1, g=g)
        net.relu(f"relu{i}", x)
    x = net.pool("pool5", x, 3, 2)
    for i in (6, 7):
        x = net.fc(f"fc{i}", x, 4096)
        net.relu(f"relu{i}", x)
        net.layer(f"drop{i}", "Dropout", [x], [x], dropout_param={"dropout_ratio": 0.5})
    net.layer("prob", "Softmax", [net.fc("fc8", x, 1000)], ["prob"])
    return net


# ---- GoogLeNet ------------------------------------------------------------------------------------
def _inception(net: Net, name: str, x: str, c1: int, r3: int, c3: int, r5: int, c5: int, pp: int) -> str:
    outs = []
    b = net.conv(f"{name}/1x1", x, c1, 1)
    net.relu(f"{name}/relu_1x1", b)
    outs.append(b)
    for k, r, c in ((3, r3, c3), (5, r5, c5)):
        red = net.conv(f"{name}/{k}x{k}_reduce", x, r, 1)
        net.relu(f"{name}/relu_{k}x{k}_reduce", red)
        b = net.conv(f"{name}/{k}x{k}", red, c, k, p=k // 2)
        net.relu(f"{name}/relu_{k}x{k}", b)
        outs.append(b)
    pool = net.pool(f"{name}/pool", x, 3, 1, p=1)
    b = net.conv(f"{name}/pool_proj", pool, pp, 1)
    net.relu(f"{name}/relu_pool_proj", b)
    outs.append(b)
    return net.concat(f"{name}/output", outs)


def googlenet() -> Net:
    net = Net("GoogleNet", """
GoogLeNet / Inception v1 (Szegedy et al., CVPR 2015) as in BVLC Caffe's models/bvlc_googlenet
deploy architecture (nine inception modules, LRN after the stem, 7x7 average pool, no auxiliary
classifiers at deploy). Input 224x224 (the final 7x7 pool needs it).""", (1, 3, 224, 224))
    x = net.conv("conv1/7x7_s2", "data", 64, 7, s=2, p=3)
    net.relu("conv1/relu_7x7", x)
    x = net.lrn("pool1/norm1", net.pool("pool1/3x3_s2", x, 3, 2))
    x = net.conv("conv2/3x3_reduce", x, 64, 1)
    net.relu("conv2/relu_3x3_reduce", x)
    x = net.conv("conv2/3x3", x, 192, 3, p=1)
    net.relu("conv2/relu_3x3", x)
    x = net.pool("pool2/3x3_s2", net.lrn("conv2/norm2", x), 3, 2)
    x = _inception(net, "inception_3a", x, 64, 96, 128, 16, 32, 32)
    x = _inception(net, "inception_3b", x, 128, 128, 192, 32, 96, 64)
    x = net.pool("pool3/3x3_s2", x, 3, 2)
    for name, cfg in (("4a", (192, 96, 208, 16, 48, 64)), ("4b", (160, 112, 224, 24, 64, 64)),
                      ("4c", (128, 128, 256, 24, 64, 64)), ("4d", (112, 144, 288, 32, 64, 64)),
                      ("4e", (256, 160, 320, 32, 128, 128))):
        x = _inception(net, f"inception_{name}", x, *cfg)
    x = net.pool("pool4/3x3_s2", x, 3, 2)
    x = _inception(net, "inception_5a", x, 256, 160, 320, 32, 128, 128)
    x = _inception(net, "inception_5b", x, 384, 192, 384, 48, 128, 128)
    x = net.pool("pool5/7x7_s1", x, 7, 1, ave=True)
    net.layer("pool5/drop_7x7_s1", "Dropout", [x], [x], dropout_param={"dropout_ratio": 0.4})
    net.layer("prob", "Softmax", [net.fc("loss3/classifier", x, 1000)], ["prob"])
    return net


# ---- ResNet-50 ------------------------------------------------------------------------------------
def _bottleneck(net: Net, name: str, x: str, mid: int, out: int, *, stride: int, project: bool,
                dilation: int = 1, prefix: str = "res", bn: str = "bn", scale: str = "scale") -> str:
    short = x
    if project:
        short = net.conv(f"{prefix}{name}_branch1", x, out, 1, s=stride, bias=False)
        net.bn(f"{bn}{name}_branch1", f"{scale}{name}_branch1", short)
    y = x
    for part, (n, k, s, d) in zip("abc", ((mid, 1, stride, 1), (mid, 3, 1, dilation), (out, 1, 1, 1)), strict=True):
        y = net.conv(f"{prefix}{name}_branch2{part}", y, n, k, s=s, p=d if k == 3 else 0, d=d, bias=False)
        net.bn(f"{bn}{name}_branch2{part}", f"{scale}{name}_branch2{part}", y)
        if part != "c":
            net.relu(f"{prefix}{name}_branch2{part}_relu", y)
    y = net.layer(f"{prefix}{name}", "Eltwise", [short, y], [f"{prefix}{name}"])
    return net.relu(f"{prefix}{name}_relu", y)


def resnet50() -> Net:
    net = Net("ResNet-50", """
ResNet-50 (He, Zhang, Ren, Sun, CVPR 2016) as in the authors' KaimingHe/deep-residual-networks
deploy architecture: bias-free convolutions, BatchNorm + Scale, stride on the first 1x1 of each
stage's first block, 7x7 average pool. Input 224x224 (the final 7x7 pool needs it).""", (1, 3, 224, 224))
    x = net.conv("conv1", "data", 64, 7, s=2, p=3, bias=False)
    net.bn("bn_conv1", "scale_conv1", x)
    net.relu("conv1_relu", x)
    x = net.pool("pool1", x, 3, 2)
    for stage, (blocks, mid) in enumerate(((3, 64), (4, 128), (6, 256), (3, 512)), 2):
        for b in range(blocks):
            x = _bottleneck(net, f"{stage}{chr(97 + b)}", x, mid, mid * 4, stride=2 if b == 0 and stage > 2 else 1,
                            project=b == 0)
    x = net.pool("pool5", x, 7, 1, ave=True)
    net.layer("prob", "Softmax", [net.fc("fc1000", x, 1000)], ["prob"])
    return net


# ---- SqueezeNet v1.1 ------------------------------------------------------------------------------
def squeezenet() -> Net:
    net = Net("SqueezeNet_v1.1", """
SqueezeNet v1.1 (Iandola et al., 2016; DeepScale/SqueezeNet's v1.1 deploy architecture): 3x3 stem,
eight fire modules, 1x1 conv10 classifier and global average pooling. Input 64x64.""", (1, 3, 64, 64))
    x = net.conv("conv1", "data", 64, 3, s=2)
    net.relu("relu_conv1", x)
    x = net.pool("pool1", x, 3, 2)
    fires = {2: (16, 64), 3: (16, 64), 4: (32, 128), 5: (32, 128), 6: (48, 192), 7: (48, 192), 8: (64, 256),
             9: (64, 256)}
    for i, (sq, ex) in fires.items():
        s = net.conv(f"fire{i}/squeeze1x1", x, sq, 1)
        net.relu(f"fire{i}/relu_squeeze1x1", s)
        a = net.conv(f"fire{i}/expand1x1", s, ex, 1)
        net.relu(f"fire{i}/relu_expand1x1", a)
        b = net.conv(f"fire{i}/expand3x3", s, ex, 3, p=1)
        net.relu(f"fire{i}/relu_expand3x3", b)
        x = net.concat(f"fire{i}/concat", [a, b])
        if i in (3, 5):
            x = net.pool(f"pool{i}", x, 3, 2)
    net.layer("drop9", "Dropout", [x], [x], dropout_param={"dropout_ratio": 0.5})
    x = net.conv("conv10", x, 1000, 1)
    net.relu("relu_conv10", x)
    net.layer("prob", "Softmax", [net.pool("pool10", x, ave=True, global_=True)], ["prob"])
    return net


# ---- MobileNet v1 / v2 ----------------------------------------------------------------------------
_V1 = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1), (512, 1), (512, 1),
       (512, 1), (1024, 2), (1024, 1)]


def mobilenet_v1() -> Net:
    net = Net("MobileNet", """
MobileNet v1 (Howard et al., 2017), width 1.0, as in shicai/MobileNet-Caffe's deploy architecture:
depthwise (group = channels) and pointwise convolutions with BatchNorm + Scale + ReLU, global
average pool, 1x1 convolution classifier. Input 64x64.""", (1, 3, 64, 64))
    x = net.conv("conv1", "data", 32, 3, s=2, p=1, bias=False)
    net.bn("conv1/bn", "conv1/scale", x)
    net.relu("relu1", x)
    c = 32
    names = ["2_1", "2_2", "3_1", "3_2", "4_1", "4_2", "5_1", "5_2", "5_3", "5_4", "5_5", "5_6", "6"]
    for name, (n, s) in zip(names, _V1, strict=True):
        x = net.conv(f"conv{name}/dw", x, c, 3, s=s, p=1, g=c, bias=False)
        net.bn(f"conv{name}/dw/bn", f"conv{name}/dw/scale", x)
        net.relu(f"relu{name}/dw", x)
        x = net.conv(f"conv{name}/sep", x, n, 1, bias=False)
        net.bn(f"conv{name}/sep/bn", f"conv{name}/sep/scale", x)
        net.relu(f"relu{name}/sep", x)
        c = n
    x = net.conv("fc7", net.pool("pool6", x, ave=True, global_=True), 1000, 1)
    net.layer("prob", "Softmax", [x], ["prob"])
    return net


def mobilenet_v2() -> Net:
    net = Net("MOBILENET_V2", """
MobileNet v2 (Sandler et al., CVPR 2018), width 1.0, as in shicai/MobileNet-Caffe's deploy
architecture: inverted residual blocks (1x1 expand, 3x3 depthwise, linear 1x1 projection, Eltwise
skip when shapes allow), BatchNorm + Scale, ReLU (BVLC Caffe has no ReLU6), 1x1 conv 1280, global
average pool, 1x1 convolution classifier. Input 64x64.""", (1, 3, 64, 64))
    x = net.conv("conv1", "data", 32, 3, s=2, p=1, bias=False)
    net.bn("conv1/bn", "conv1/scale", x)
    net.relu("relu1", x)
    c = 32
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1)]
    for stage, (t, n_out, reps, stride) in enumerate(settings, 2):
        for r in range(reps):
            name = f"conv{stage}_{r + 1}"
            inp, y = x, x
            if t != 1:
                y = net.conv(f"{name}/expand", y, c * t, 1, bias=False)
                net.bn(f"{name}/expand/bn", f"{name}/expand/scale", y)
                net.relu(f"relu{stage}_{r + 1}/expand", y)
            y = net.conv(f"{name}/dwise", y, c * t, 3, s=stride if r == 0 else 1, p=1, g=c * t, bias=False)
            net.bn(f"{name}/dwise/bn", f"{name}/dwise/scale", y)
            net.relu(f"relu{stage}_{r + 1}/dwise", y)
            y = net.conv(f"{name}/linear", y, n_out, 1, bias=False)
            net.bn(f"{name}/linear/bn", f"{name}/linear/scale", y)
            if r > 0:
                y = net.layer(f"block_{stage}_{r + 1}", "Eltwise", [inp, y], [f"block_{stage}_{r + 1}"])
            x, c = y, n_out
    x = net.conv("conv6_4", x, 1280, 1, bias=False)
    net.bn("conv6_4/bn", "conv6_4/scale", x)
    net.relu("relu6_4", x)
    x = net.conv("fc7", net.pool("pool6", x, ave=True, global_=True), 1000, 1)
    net.layer("prob", "Softmax", [x], ["prob"])
    return net


# ---- MobileNet-SSD --------------------------------------------------------------------------------
def mobilenet_ssd() -> Net:
    net = Net("MobileNet-SSD", """
MobileNet-SSD (chuanqi305/MobileNet-SSD's deploy architecture, VOC: 21 classes): a MobileNet v1
backbone (BatchNorm folded into biased convolutions, as its deploy file has them), four extra
feature layers, 1x1 loc/conf heads with Permute + Flatten on six maps, PriorBox sizes for 300x300
(min 60, then 105..285 with max sizes), DetectionOutput (NMS 0.45, top 100, CENTER_SIZE).
Input 150x150 (the prior box sizes stay those of the 300x300 model).""", (1, 3, 150, 150))
    x = net.conv("conv0", "data", 32, 3, s=2, p=1)
    net.relu("conv0/relu", x)
    c = 32
    feats = {}
    for i, (n, s) in enumerate(_V1, 1):
        x = net.conv(f"conv{i}/dw", x, c, 3, s=s, p=1, g=c)
        net.relu(f"conv{i}/dw/relu", x)
        x = net.conv(f"conv{i}", x, n, 1)
        net.relu(f"conv{i}/relu", x)
        c = n
        feats[i] = x
    sources = [feats[11], feats[13]]
    for i, (a, b) in zip(range(14, 18), ((256, 512), (128, 256), (128, 256), (64, 128)), strict=True):
        y = net.conv(f"conv{i}_1", x, a, 1)
        net.relu(f"conv{i}_1/relu", y)
        x = net.conv(f"conv{i}_2", y, b, 3, s=2, p=1)
        net.relu(f"conv{i}_2/relu", x)
        sources.append(x)
    sizes = [(60.0, None), (105.0, 150.0), (150.0, 195.0), (195.0, 240.0), (240.0, 285.0), (285.0, 300.0)]
    locs, confs, priors = [], [], []
    for src, (lo, hi) in zip(sources, sizes, strict=True):
        ratios = [2.0] if hi is None else [2.0, 3.0]
        k = 1 + (hi is not None) + 2 * len(ratios)
        for head, width, out in (("loc", 4, locs), ("conf", 21, confs)):
            y = net.conv(f"{src}_mbox_{head}", src, k * width, 1)
            y = net.layer(f"{src}_mbox_{head}_perm", "Permute", [y], [f"{src}_mbox_{head}_perm"],
                          permute_param={"order": [0, 2, 3, 1]})
            out.append(net.layer(f"{src}_mbox_{head}_flat", "Flatten", [y], [f"{src}_mbox_{head}_flat"]))
        pb: dict[str, object] = {"min_size": lo}
        if hi is not None:
            pb["max_size"] = hi
        pb.update({"aspect_ratio": ratios, "flip": True, "clip": False, "variance": [0.1, 0.1, 0.2, 0.2],
                   "offset": 0.5})
        priors.append(net.layer(f"{src}_mbox_priorbox", "PriorBox", [src, "data"], [f"{src}_mbox_priorbox"],
                                prior_box_param=pb))
    loc = net.concat("mbox_loc", locs)
    conf = net.concat("mbox_conf", confs)
    prior = net.concat("mbox_priorbox", priors, axis=2)
    conf = net.layer("mbox_conf_reshape", "Reshape", [conf], ["mbox_conf_reshape"],
                     reshape_param={"shape": {"dim": [0, -1, 21]}})
    conf = net.layer("mbox_conf_softmax", "Softmax", [conf], ["mbox_conf_softmax"], softmax_param={"axis": 2})
    conf = net.layer("mbox_conf_flatten", "Flatten", [conf], ["mbox_conf_flatten"])
    net.layer("detection_out", "DetectionOutput", [loc, conf, prior], ["detection_out"], detection_output_param={
        "num_classes": 21, "share_location": True, "background_label_id": 0,
        "nms_param": {"nms_threshold": 0.45, "top_k": 100}, "code_type": E("CENTER_SIZE"), "keep_top_k": 100,
        "confidence_threshold": 0.25})
    return net


# ---- OpenPose ------------------------------------------------------------------------------------
def openpose() -> Net:
    net = Net("OpenPose-COCO", """
OpenPose's COCO body pose net (Cao et al., CVPR 2017; CMU-Perceptual-Computing-Lab/openpose
pose/coco deploy architecture): the first ten VGG-19 convolutions, conv4_3_CPM/conv4_4_CPM, then six
stages of two branches (L1: 38 part-affinity maps, L2: 19 heatmaps); stages 2-6 take the previous
stage's maps concatenated with the features and use 7x7 convolutions. Input 48x48 (maps 6x6).""",
              (1, 3, 48, 48))
    x = "data"
    vgg = [("1_1", 64), ("1_2", 64), None, ("2_1", 128), ("2_2", 128), None, ("3_1", 256), ("3_2", 256),
           ("3_3", 256), ("3_4", 256), None, ("4_1", 512), ("4_2", 512)]
    pools = 0
    for item in vgg:
        if item is None:
            pools += 1
            x = net.pool(f"pool{pools}_stage1", x, 2, 2)
            continue
        x = net.conv(f"conv{item[0]}", x, item[1], 3, p=1)
        net.relu(f"relu{item[0]}", x)
    for name, n in (("conv4_3_CPM", 256), ("conv4_4_CPM", 128)):
        x = net.conv(name, x, n, 3, p=1)
        net.relu(f"relu{name[4:]}", x)
    feats = x
    inp = feats
    for stage in range(1, 7):
        outs = []
        for branch, maps in (("L1", 38), ("L2", 19)):
            y = inp
            if stage == 1:
                for j, (n, k) in enumerate(((128, 3), (128, 3), (128, 3), (512, 1)), 1):
                    y = net.conv(f"conv5_{j}_CPM_{branch}", y, n, k, p=k // 2)
                    net.relu(f"relu5_{j}_CPM_{branch}", y)
                y = net.conv(f"conv5_5_CPM_{branch}", y, maps, 1)
            else:
                for j, (n, k) in enumerate(((128, 7),) * 5 + ((128, 1),), 1):
                    y = net.conv(f"Mconv{j}_stage{stage}_{branch}", y, n, k, p=k // 2)
                    net.relu(f"Mrelu{j}_stage{stage}_{branch}", y)
                y = net.conv(f"Mconv7_stage{stage}_{branch}", y, maps, 1)
            outs.append(y)
        if stage < 6:
            inp = net.concat(f"concat_stage{stage + 1}", [*outs, feats])
    return net


# ---- PSPNet --------------------------------------------------------------------------------------
def pspnet() -> Net:
    net = Net("pspnet50", """
PSPNet-50 (Zhao et al., CVPR 2017; hszhao/PSPNet's pspnet50 deploy architecture, ADE20K: 150
classes): three-convolution stem, dilated ResNet-50 (stride 8; dilation 2 in stage 4, 4 in stage 5),
pyramid pooling over 1, 2, 3 and 6 bins with Interp back to the map size, Interp zoom 8 to the
input. PSPNet's dialect: the input as the net's input/input_shape (no Input layer). Its released
files use PSPNet's BN layer; this one uses the BatchNorm + Scale pair its fork also runs, so that
OpenCV DNN can run it. Input 89x89 (a 12x12 map, so the pyramid pools are 12, 6, 4 and 2 wide
where the 473x473 model's are 60, 30, 20, 10).""", (1, 3, 89, 89), legacy_input=True)
    x = "data"
    for name, n, s in (("conv1_1_3x3_s2", 64, 2), ("conv1_2_3x3", 64, 1), ("conv1_3_3x3", 128, 1)):
        x = net.conv(name, x, n, 3, s=s, p=1, bias=False)
        net.bn(f"{name}_bn", f"{name}_scale", x)
        net.relu(f"{name}_relu", x)
    x = net.pool("pool1_3x3_s2", x, 3, 2, p=1)
    for stage, (blocks, mid, stride, dil) in enumerate(((3, 64, 1, 1), (4, 128, 2, 1), (6, 256, 1, 2),
                                                        (3, 512, 1, 4)), 2):
        for b in range(blocks):
            x = _bottleneck(net, f"{stage}_{b + 1}", x, mid, mid * 4, stride=stride if b == 0 else 1, project=b == 0,
                            dilation=dil, prefix="conv", bn="bn", scale="scale")
    feats, branches = x, [x]
    for bins, k in ((1, 12), (2, 6), (3, 4), (6, 2)):
        p = net.pool(f"conv5_3_pool{bins}", feats, k, k, ave=True)
        y = net.conv(f"conv5_3_pool{bins}_conv", p, 512, 1, bias=False)
        net.bn(f"conv5_3_pool{bins}_conv_bn", f"conv5_3_pool{bins}_conv_scale", y)
        net.relu(f"conv5_3_pool{bins}_conv_relu", y)
        branches.append(net.layer(f"conv5_3_pool{bins}_interp", "Interp", [y], [f"conv5_3_pool{bins}_interp"],
                                  interp_param={"height": 12, "width": 12}))
    x = net.concat("conv5_3_concat", branches)
    x = net.conv("conv5_4", x, 512, 3, p=1, bias=False)
    net.bn("conv5_4_bn", "conv5_4_scale", x)
    net.relu("conv5_4_relu", x)
    net.layer("conv5_4_drop", "Dropout", [x], [x], dropout_param={"dropout_ratio": 0.1})
    x = net.conv("conv6", x, 150, 1)
    net.layer("conv6_interp", "Interp", [x], ["conv6_interp"], interp_param={"zoom_factor": 8})
    return net


NETS = {
    "alexnet": alexnet,
    "googlenet": googlenet,
    "resnet50": resnet50,
    "squeezenet_v1.1": squeezenet,
    "mobilenet_v1": mobilenet_v1,
    "mobilenet_v2": mobilenet_v2,
    "mobilenet_ssd": mobilenet_ssd,
    "openpose_coco": openpose,
    "pspnet50": pspnet,
}


def build_all(out: Path = OUT) -> list[Path]:
    """Write every net's prototxt into ``out``; return the paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, make in NETS.items():
        path = out / f"{name}.prototxt"
        path.write_text(make().text())
        paths.append(path)
    return paths


if __name__ == "__main__":
    for p in build_all(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT):
        print(p)
