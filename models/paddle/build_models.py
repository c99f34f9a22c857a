"""Build Paddle inference models for the tests and benchmarks (needs paddlepaddle).

Every network gets seeded random weights and BatchNorm statistics recalibrated on random
data, so its outputs have a useful spread (fresh statistics make some nets output ~1e-7 and
others ~1e3, which hides errors). Usage::

    python models/paddle/build_models.py OUT_DIR resnet18 mobilenet_v2 ... [--legacy]

writes ``OUT_DIR/<name>/inference.{json|pdmodel,pdiparams}``. ``--legacy`` writes the
ProgramDesc ``.pdmodel`` (``FLAGS_enable_pir_api=0``, set before paddle is imported).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

__all__ = ["NETS", "build", "main"]


def _legacy() -> bool:
    """Return True when Paddle writes the legacy ProgramDesc (FLAGS_enable_pir_api=0)."""
    return os.environ.get("FLAGS_enable_pir_api") == "0"  # noqa: SIM112  (Paddle's spelling)


def _ppocr_det() -> object:
    """A small PP-OCR-style DB detection head: backbone, FPN with upsampling, sigmoid maps."""
    import paddle
    import paddle.nn.functional as F  # noqa: N812
    from paddle import nn

    class ConvBNAct(nn.Layer):
        def __init__(self, cin: int, cout: int, k: int, s: int, act: str | None = "hardswish") -> None:
            super().__init__()
            self.conv = nn.Conv2D(cin, cout, k, s, padding=k // 2, bias_attr=False)
            self.bn = nn.BatchNorm2D(cout)
            self.act = act

        def forward(self, x):
            y = self.bn(self.conv(x))
            if self.act == "hardswish":
                y = F.hardswish(y)
            elif self.act == "relu":
                y = F.relu(y)
            return y

    class SE(nn.Layer):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.c1 = nn.Conv2D(c, c // 4, 1)
            self.c2 = nn.Conv2D(c // 4, c, 1)

        def forward(self, x):
            y = F.adaptive_avg_pool2d(x, 1)
            y = F.hardsigmoid(self.c2(F.relu(self.c1(y))), slope=0.2, offset=0.5)
            return x * y

    class Det(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.s1 = ConvBNAct(3, 16, 3, 2)
            self.s2 = ConvBNAct(16, 24, 3, 2)
            self.se = SE(24)
            self.s3 = ConvBNAct(24, 32, 3, 2)
            self.l2 = nn.Conv2D(24, 16, 1)
            self.l3 = nn.Conv2D(32, 16, 1)
            self.head = ConvBNAct(32, 16, 3, 1, "relu")
            self.up = nn.Conv2DTranspose(16, 8, 2, 2)
            self.out = nn.Conv2D(8, 1, 1)

        def forward(self, x):
            c2 = self.se(self.s2(self.s1(x)))
            c3 = self.s3(c2)
            p3 = self.l3(c3)
            p2 = self.l2(c2) + F.interpolate(p3, scale_factor=2, mode="nearest")
            p3u = F.interpolate(p3, size=p2.shape[2:], mode="bilinear", align_corners=False)
            y = self.head(paddle.concat([p2, p3u], axis=1))
            logits = self.out(self.up(y))
            # Paddle 3.3 cannot trace sigmoid, tanh, exp, abs, sum or gelu into a legacy program.
            return F.hardsigmoid(logits) if _legacy() else F.sigmoid(logits)

    return Det()


def _ppocr_rec() -> object:
    """A small PP-OCR-style CRNN recogniser: conv backbone, pool to height 1, FC + softmax."""
    import paddle
    import paddle.nn.functional as F  # noqa: N812
    from paddle import nn

    class Rec(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.c1 = nn.Conv2D(3, 16, 3, 1, 1)
            self.b1 = nn.BatchNorm2D(16)
            self.c2 = nn.Conv2D(16, 32, 3, (2, 1), 1, groups=16)
            self.b2 = nn.BatchNorm2D(32)
            self.fc = nn.Linear(32, 40)

        def forward(self, x):
            y = F.hardswish(self.b1(self.c1(x)))
            y = F.max_pool2d(y, 2, 2)
            y = F.relu6(self.b2(self.c2(y)))
            y = F.avg_pool2d(y, (y.shape[2], 2), (y.shape[2], 2), ceil_mode=True)
            y = paddle.squeeze(y, axis=2)
            y = paddle.transpose(y, [0, 2, 1])
            y = self.fc(y)
            a, b = paddle.split(y, 2, axis=-1)
            y = paddle.concat([a * 0.5, paddle.scale(b, 2.0, 0.1)], axis=-1)
            return F.softmax(y, axis=2)

    return Rec()


def _op_zoo() -> object:
    """One small net whose outputs exercise op options the vision nets leave out."""
    import paddle
    import paddle.nn.functional as F  # noqa: N812
    from paddle import nn

    class Zoo(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2D(3, 8, 3, padding=[1, 2, 0, 1])
            self.ln = nn.LayerNorm(14)
            self.fc = nn.Linear(14, 6)
            self.prelu = nn.PReLU(8, 0.2)

        def forward(self, x):
            y = self.conv(x)  # paddings [top, bottom, left, right]: 15x15 -> 16x14
            outs = [
                F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=True),
                F.interpolate(y, size=[7, 9], mode="bilinear", align_corners=False, align_mode=1),
                F.interpolate(y, size=[31, 20], mode="nearest"),
                F.max_pool2d(y, 3, 2, padding=1, ceil_mode=True),
                F.avg_pool2d(y, 3, 2, padding=1, exclusive=False),
                F.avg_pool2d(y, 2, 2, ceil_mode=True),
                F.adaptive_avg_pool2d(y, [4, 5]),
                F.adaptive_max_pool2d(y, 4),
            ]
            a, b, c = paddle.split(y, [2, 3, -1], axis=1)
            outs.append(paddle.concat([c, a], axis=1) - b[:, :1])
            outs.append(y[:, 1:6:2, ::3, 2:-1])
            outs.append(paddle.strided_slice(y, [2, 3], [0, 1], [15, 17], [4, 2]))
            z = y[:, :, :, :14]
            # See _ppocr_det for why the legacy program uses other activations.
            act = F.hardswish if _legacy() else F.gelu
            outs.append(self.fc(act(self.ln(z))))
            if _legacy():  # see _ppocr_det
                outs.append(F.leaky_relu(z, 0.1) + F.silu(z) * F.hardsigmoid(z) - F.relu6(-z))
            else:
                outs.append(F.leaky_relu(z, 0.1) + F.silu(z) * F.tanh(z) - paddle.exp(-paddle.abs(z)))
            outs.append(paddle.clip(z, -0.5, 0.7) * paddle.mean(z, axis=[2, 3], keepdim=True))
            if not _legacy():  # legacy tracing of paddle.matmul fails too
                outs.append(paddle.matmul(z, z, transpose_y=True) / 4.0)
            total = z.mean(axis=1) if _legacy() else z.sum(axis=1)
            outs.append(paddle.stack([z.max(axis=1), total], axis=1))
            outs.append(paddle.unsqueeze(paddle.flatten(z, 1, 2), [0, 3]))
            outs.append(F.log_softmax(paddle.pow(z, 2), axis=1))
            outs.append(paddle.transpose(paddle.reshape(z, [-1, 8, 4, 56]), [0, 3, 1, 2]))
            outs.append(self.prelu(F.pad(z, [1, 2, 0, 1], mode="reflect")))
            outs.append(F.pad(z, [2, 0, 1, 1], value=0.25) * 2.0)
            if not _legacy():  # legacy tracing of argmax fails as well
                outs.append(paddle.argmax(z, axis=1).astype("float32"))
            pooled = z.mean(axis=[2, 3], keepdim=True)
            outs.append(paddle.expand(pooled, [-1, -1, 3, 5]) + paddle.tile(pooled, [1, 1, 3, 5]))
            outs.append(paddle.gather(z, paddle.to_tensor([3, 0, 5]), axis=1))
            return outs

    return Zoo()


def _vision(name: str, **kwargs: object) -> Callable[[], object]:
    def make() -> object:
        import paddle.vision.models as M  # noqa: N812

        return getattr(M, name)(pretrained=False, **kwargs)

    return make


def _vgg11_features() -> object:
    """VGG-11 as paddle.vision.models builds it, without its 400 MiB classifier (num_classes=0):
    convs, max pools and the adaptive 7x7 average pool (a 2x2 -> 7x7 upsampling at 64x64)."""
    from paddle.vision.models.vgg import VGG, cfgs, make_layers

    return VGG(make_layers(cfgs["A"], batch_norm=False), num_classes=0)


# name -> (constructor, input shape)
NETS: dict[str, tuple[Callable[[], object], tuple[int, ...]]] = {
    "resnet18": (_vision("resnet18"), (1, 3, 64, 64)),
    "resnet50": (_vision("resnet50"), (1, 3, 224, 224)),
    "mobilenet_v1": (_vision("mobilenet_v1", scale=0.25), (1, 3, 64, 64)),
    "mobilenet_v2": (_vision("mobilenet_v2", scale=0.5), (1, 3, 64, 64)),
    "mobilenet_v3_small": (_vision("mobilenet_v3_small", scale=0.5), (1, 3, 64, 64)),
    "mobilenet_v3_large": (_vision("mobilenet_v3_large"), (1, 3, 224, 224)),
    "vgg11": (_vgg11_features, (1, 3, 64, 64)),
    "shufflenet_v2": (_vision("shufflenet_v2_x0_25"), (1, 3, 64, 64)),
    "squeezenet": (_vision("squeezenet1_1"), (1, 3, 64, 64)),
    "densenet121": (_vision("densenet121"), (1, 3, 64, 64)),
    "googlenet": (_vision("googlenet"), (1, 3, 224, 224)),
    "inception_v3": (_vision("inception_v3"), (1, 3, 96, 96)),
    "ppocr_det": (_ppocr_det, (1, 3, 64, 64)),
    "ppocr_rec": (_ppocr_rec, (1, 3, 32, 64)),
    "op_zoo": (_op_zoo, (1, 3, 15, 15)),
}


# Saved with free height and width, so the program keeps its shape-derived subgraphs.
DYNAMIC_HW = {"ppocr_det"}


def _recalibrate(net: object, shape: tuple[int, ...], seed: int) -> None:
    """Randomise BN affine params and set running stats from one batch of random data."""
    import numpy as np
    import paddle

    rng = np.random.default_rng(seed)
    bns = [m for m in net.sublayers() if isinstance(m, paddle.nn.layer.norm._BatchNormBase)]
    for bn in bns:
        c = bn.weight.shape[0]
        bn.weight.set_value(rng.uniform(0.4, 0.8, c).astype("float32"))
        bn.bias.set_value(rng.uniform(0.0, 0.3, c).astype("float32"))
        bn._momentum = 0.0
    net.train()
    batch = (max(4, shape[0]), *tuple(shape[1:]))
    with paddle.no_grad():
        net(paddle.to_tensor(rng.standard_normal(batch).astype("float32")))
    net.eval()
    # Channels that are (nearly) dead on random data get a tiny variance, and BN then amplifies
    # float32 rounding noise by 1/sqrt(var); floor each layer's variances to keep the net
    # well conditioned, so parity errors measure the converter rather than that amplification.
    for bn in bns:
        var = bn._variance.numpy()
        bn._variance.set_value(np.maximum(var, 0.1 * float(var.mean())).astype("float32"))


def build(name: str, out_dir: str, *, seed: int = 0) -> str:
    """Build net ``name``, save it to ``out_dir/name/inference``, return that prefix."""
    import paddle

    make, shape = NETS[name]
    paddle.seed(seed)
    net = make()
    _recalibrate(net, shape, seed)
    prefix = os.path.join(out_dir, name, "inference")
    dims = [None, shape[1], None, None] if name in DYNAMIC_HW else [None, *shape[1:]]
    spec = [paddle.static.InputSpec(dims, "float32", "x")]
    paddle.jit.save(paddle.jit.to_static(net, input_spec=spec, full_graph=True), prefix)
    return prefix


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("names", nargs="*")
    parser.add_argument("--legacy", action="store_true", help="write the ProgramDesc .pdmodel")
    args = parser.parse_intermixed_args(argv)
    if args.legacy and os.environ.get("FLAGS_enable_pir_api") != "0":  # noqa: SIM112  (Paddle's spelling)
        # Paddle reads the flag when it is first imported: run again with it set.
        import subprocess

        env = dict(os.environ, FLAGS_enable_pir_api="0")
        return subprocess.call([sys.executable, os.path.abspath(__file__), *(argv or sys.argv[1:])], env=env)
    for name in args.names or list(NETS):
        print(build(name, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
