"""Hand-written PyTorch test networks with seeded weights and recalibrated BatchNorm statistics.

ResNet-, MobileNetV2-, ViT-block- and YOLO-style networks, written here so the tests need no
torchvision and no download. ``build(name)`` returns the network in eval mode with its BatchNorm
running statistics measured on seeded random data (fresh statistics make torchvision-style CNNs
output values around 1e-10, on which any comparison proves little).

Run as a script to save every network as TorchScript, ExportedProgram and pickled module::

    python models/pytorch/nets.py OUT_DIR [--size 64]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

__all__ = ["NETS", "build", "recalibrate"]


def conv_bn(cin: int, cout: int, k: int = 3, s: int = 1, groups: int = 1,
            act: type[nn.Module] | None = nn.ReLU) -> nn.Sequential:
    """Return Conv (no bias) + BatchNorm + activation."""
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


# -- ResNet ------------------------------------------------------------------------------
class Bottleneck(nn.Module):
    """ResNet bottleneck: 1x1, 3x3 (stride), 1x1 x4, plus a projected shortcut when needed."""

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * 4
        self.conv1 = conv_bn(cin, width, 1)
        self.conv2 = conv_bn(width, width, 3, stride)
        self.conv3 = conv_bn(width, cout, 1, act=None)
        self.down = conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.conv3(self.conv2(self.conv1(x))) + self.down(x))


class ResNet(nn.Module):
    """ResNet with bottleneck blocks; ``layers=(3, 4, 6, 3)``, ``base=64`` is ResNet-50."""

    def __init__(self, layers: tuple[int, ...] = (1, 1, 1, 1), base: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.stem = conv_bn(3, base, 7, 2)
        self.pool = nn.MaxPool2d(3, 2, 1)
        blocks: list[nn.Module] = []
        cin = base
        for i, n in enumerate(layers):
            width = base * 2**i
            for j in range(n):
                blocks.append(Bottleneck(cin, width, 2 if j == 0 and i > 0 else 1))
                cin = width * 4
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.pool(self.stem(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# -- MobileNetV2 --------------------------------------------------------------------------
class InvertedResidual(nn.Module):
    """MobileNetV2 block: expand 1x1, depthwise 3x3, project 1x1; residual when shapes allow."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.block = nn.Sequential(
            conv_bn(cin, hidden, 1, act=nn.ReLU6),
            conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
            conv_bn(hidden, cout, 1, act=None),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.use_res else y


class MobileNetV2(nn.Module):
    """A narrow MobileNetV2 (same block structure, fewer channels)."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        cfg = [(1, 8, 1, 1), (6, 12, 2, 2), (6, 16, 2, 2), (6, 24, 1, 2), (6, 32, 1, 1)]
        layers: list[nn.Module] = [conv_bn(3, 16, 3, 2, act=nn.ReLU6)]
        cin = 16
        for t, c, n, s in cfg:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(conv_bn(cin, 64, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(64, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        return self.classifier(x.mean([2, 3]))


# -- ViT --------------------------------------------------------------------------------------
class Attention(nn.Module):
    """Multi-head self-attention through F.scaled_dot_product_attention."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    """Pre-norm transformer block: LN, attention, LN, GELU MLP."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    """A small ViT: patch embedding, class token, position embedding, blocks, head."""

    def __init__(self, image: int = 64, patch: int = 8, dim: int = 64, depth: int = 2, heads: int = 4,
                 classes: int = 10) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        n = (image // patch) ** 2
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


# -- YOLO ------------------------------------------------------------------------------------
class C2f(nn.Module):
    """YOLOv8-style C2f: conv, chunk in two, bottlenecks on one half, concat everything."""

    def __init__(self, cin: int, cout: int, n: int = 1) -> None:
        super().__init__()
        self.hidden = cout // 2
        self.cv1 = conv_bn(cin, 2 * self.hidden, 1, act=nn.SiLU)
        self.m = nn.ModuleList(
            nn.Sequential(conv_bn(self.hidden, self.hidden, 3, act=nn.SiLU),
                          conv_bn(self.hidden, self.hidden, 3, act=nn.SiLU)) for _ in range(n))
        self.cv2 = conv_bn((2 + n) * self.hidden, cout, 1, act=nn.SiLU)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            y.append(y[-1] + m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    """Spatial pyramid pooling (fast): three chained 5x5 max pools, concatenated."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.cv1 = conv_bn(cin, cin // 2, 1, act=nn.SiLU)
        self.cv2 = conv_bn(cin * 2, cout, 1, act=nn.SiLU)
        self.pool = nn.MaxPool2d(5, 1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.cv1(x)
        y1 = self.pool(x)
        y2 = self.pool(y1)
        return self.cv2(torch.cat([x, y1, y2, self.pool(y2)], 1))


class YOLO(nn.Module):
    """A tiny YOLO-style detector: C2f backbone, SPPF, upsample + concat neck, two heads."""

    def __init__(self, classes: int = 4) -> None:
        super().__init__()
        self.stem = conv_bn(3, 16, 3, 2, act=nn.SiLU)
        self.s1 = nn.Sequential(conv_bn(16, 32, 3, 2, act=nn.SiLU), C2f(32, 32))
        self.s2 = nn.Sequential(conv_bn(32, 64, 3, 2, act=nn.SiLU), C2f(64, 64))
        self.sppf = SPPF(64, 64)
        self.up = nn.Upsample(scale_factor=2.0, mode="nearest")
        self.neck = C2f(96, 32)
        self.out = 4 + classes
        self.head_p3 = nn.Conv2d(32, self.out, 1)
        self.head_p4 = nn.Conv2d(64, self.out, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p3 = self.s1(self.stem(x))
        p4 = self.sppf(self.s2(p3))
        n3 = self.neck(torch.cat([self.up(p4), p3], 1))
        b = x.shape[0]
        h3 = self.head_p3(n3).view(b, self.out, -1)
        h4 = self.head_p4(p4).view(b, self.out, -1)
        y = torch.cat([h3, h4], 2)
        box, cls = y.split([4, self.out - 4], 1)
        return torch.cat([box, cls.sigmoid()], 1)


class Branchy(nn.Module):
    """A module whose control flow depends on tensor values (torch.export cannot capture it)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = conv_bn(3, 8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        if y.mean() > -1e9:  # data-dependent guard: always true, but only at run time
            y = y * 2.0
        return F.adaptive_avg_pool2d(y, 1).flatten(1)


NETS = {
    "resnet": lambda: ResNet(),
    "resnet50": lambda: ResNet((3, 4, 6, 3), 64, 1000),
    "mobilenetv2": MobileNetV2,
    "vit": ViT,
    "yolo": YOLO,
    "branchy": Branchy,
}


@torch.no_grad()
def recalibrate(model: nn.Module, shape: tuple[int, ...], *, batches: int = 2, seed: int = 0) -> nn.Module:
    """Randomise BatchNorm affine parameters and measure running statistics on seeded random data."""
    gen = torch.Generator().manual_seed(seed)
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for bn in bns:
        bn.weight.copy_(torch.rand(bn.weight.shape, generator=gen) + 0.5)
        bn.bias.copy_(torch.rand(bn.bias.shape, generator=gen) * 0.2 - 0.1)
        bn.reset_running_stats()
        bn.momentum = None  # cumulative average over the calibration batches
    if bns:
        model.train()
        for _ in range(batches):
            model(torch.randn((max(shape[0], 4), *shape[1:]), generator=gen))
    return model.eval()


def build(name: str, *, size: int = 64, seed: int = 0) -> nn.Module:
    """Return network ``name`` with seeded weights, recalibrated BN, in eval mode."""
    torch.manual_seed(seed)
    model = NETS[name]()
    return recalibrate(model, (1, 3, size, size), seed=seed)


def main() -> None:
    """Save every network as TorchScript (.pt), ExportedProgram (.pt2) and pickled module (.pth)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", type=int, default=64)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    # Build through the importable module 'nets' (not __main__), so that the pickled modules name
    # classes that can be imported again: load them with PYTHONPATH=models/pytorch.
    import nets

    for name in ("resnet", "mobilenetv2", "vit", "yolo"):
        model = nets.build(name, size=args.size)
        x = torch.rand(1, 3, args.size, args.size, generator=torch.Generator().manual_seed(1))
        torch.jit.save(torch.jit.trace(model, (x,)), args.out / f"{name}.pt")
        torch.export.save(torch.export.export(model, (x,)), args.out / f"{name}.pt2")
        torch.save(model, args.out / f"{name}.pth")
        print(f"wrote {name}.pt, {name}.pt2, {name}.pth")


if __name__ == "__main__":
    main()
