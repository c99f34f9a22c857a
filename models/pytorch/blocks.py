"""Blocks of the torchvision model families, hand-written: the op-coverage fixtures.

ConvNeXt (depthwise 7x7, channels-last LayerNorm and Linear, layer scale), EfficientNet MBConv
with squeeze-excitation (SiLU, sigmoid gating, hardswish/hardsigmoid as in MobileNetV3),
ShuffleNet channel shuffle, SqueezeNet Fire (ceil-mode max pool), GoogLeNet/Inception branches,
nn.MultiheadAttention and nn.TransformerEncoderLayer (ViT), Swin window attention (roll,
relative position bias gathered from a table), DenseNet (concat, transition avg pool), VGG head
(adaptive pool to 7x7, dropout). Each takes an input of shape (1, 16, 16, 16) (VGG head: 14x14).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

__all__ = ["BLOCKS"]


class ConvNeXtBlock(nn.Module):
    """Depthwise 7x7, LayerNorm and MLP in channels-last layout, layer scale, residual."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.dw = nn.Conv2d(d, d, 7, padding=3, groups=d)
        self.norm = nn.LayerNorm(d)
        self.pw1 = nn.Linear(d, 4 * d)
        self.pw2 = nn.Linear(4 * d, d)
        self.gamma = nn.Parameter(torch.rand(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.gamma * self.pw2(F.gelu(self.pw1(self.norm(y))))
        return x + y.permute(0, 3, 1, 2)


class MBConvSE(nn.Module):
    """EfficientNet MBConv with squeeze-excitation; MobileNetV3's hardswish/hardsigmoid."""

    def __init__(self, c: int = 16) -> None:
        super().__init__()
        self.exp = nn.Conv2d(c, 4 * c, 1)
        self.dw = nn.Conv2d(4 * c, 4 * c, 3, padding=1, groups=4 * c)
        self.se1 = nn.Conv2d(4 * c, c // 4, 1)
        self.se2 = nn.Conv2d(c // 4, 4 * c, 1)
        self.proj = nn.Conv2d(4 * c, c, 1)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.silu(self.dw(F.silu(self.exp(x))))
        y = y * torch.sigmoid(self.se2(F.silu(self.se1(F.adaptive_avg_pool2d(y, 1)))))
        y = F.hardswish(y) * F.hardsigmoid(y)
        return x + self.bn(self.proj(y))


class Shuffle(nn.Module):
    """ShuffleNet v2: split channels, process one half, concat, channel shuffle."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x.chunk(2, 1)
        x = torch.cat([a, F.relu(b)], 1)
        n, c, h, w = x.shape
        return x.view(n, 2, c // 2, h, w).transpose(1, 2).contiguous().view(n, c, h, w)


class Fire(nn.Module):
    """SqueezeNet Fire after a ceil-mode max pool."""

    def __init__(self) -> None:
        super().__init__()
        self.sq = nn.Conv2d(16, 4, 1)
        self.e1 = nn.Conv2d(4, 8, 1)
        self.e3 = nn.Conv2d(4, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.sq(F.max_pool2d(x, 3, 2, ceil_mode=True)))
        return torch.cat([F.relu(self.e1(y)), F.relu(self.e3(y))], 1)


class Inception(nn.Module):
    """GoogLeNet-style branches: 1x1, 3x3, pool + 1x1, avg pool; concatenated."""

    def __init__(self) -> None:
        super().__init__()
        self.b1 = nn.Conv2d(16, 8, 1)
        self.b2 = nn.Conv2d(16, 8, 3, padding=1)
        self.b3 = nn.Conv2d(16, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = F.max_pool2d(x, 3, 1, 1, ceil_mode=True)
        return torch.cat([self.b1(x), self.b2(x), self.b3(p), F.avg_pool2d(x, 3, 1, 1)], 1)


class MHA(nn.Module):
    """nn.MultiheadAttention over the flattened feature map (torchvision ViT's encoder)."""

    def __init__(self) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.flatten(2).transpose(1, 2)
        return self.mha(t, t, t, need_weights=False)[0]


class Encoder(nn.Module):
    """nn.TransformerEncoderLayer (eval: dropout is a no-op)."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, dropout=0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.enc(x.flatten(2).transpose(1, 2))


class SwinAttention(nn.Module):
    """Swin: shifted windows (roll), window attention with a relative position bias table."""

    def __init__(self, d: int = 16, ws: int = 4, heads: int = 2) -> None:
        super().__init__()
        self.ws = ws
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)
        self.table = nn.Parameter(torch.randn((2 * ws - 1) ** 2, heads))
        coords = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + ws - 1
        self.register_buffer("index", (rel[:, :, 0] * (2 * ws - 1) + rel[:, :, 1]).flatten())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(x.permute(0, 2, 3, 1))
        b, h, w, c = x.shape
        ws = self.ws
        x = torch.roll(x, (-2, -2), (1, 2))
        win = x.view(b, h // ws, ws, w // ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, c)
        qkv = self.qkv(win).reshape(win.shape[0], ws * ws, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q * (c // self.heads) ** -0.5) @ k.transpose(-2, -1)
        bias = self.table[self.index].view(ws * ws, ws * ws, -1).permute(2, 0, 1).contiguous()
        attn = (attn + bias.unsqueeze(0)).softmax(-1)
        y = (attn @ v).transpose(1, 2).reshape(win.shape[0], ws * ws, c)
        y = self.proj(y).view(b, h // ws, w // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
        return torch.roll(y, (2, 2), (1, 2))


class Dense(nn.Module):
    """DenseNet: BN-ReLU-conv, concat with the input, transition 1x1 + avg pool."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(16)
        self.conv = nn.Conv2d(16, 8, 3, padding=1)
        self.trans = nn.Conv2d(24, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.cat([x, self.conv(F.relu(self.bn(x)))], 1)
        return F.avg_pool2d(self.trans(y), 2)


class VGGHead(nn.Module):
    """VGG: max pool, adaptive average pool to 7x7, classifier with dropout."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(16 * 7 * 7, 32), nn.ReLU(True), nn.Dropout(), nn.Linear(32, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(F.max_pool2d(x, 2), (7, 7)), 1))


BLOCKS: dict[str, tuple[type[nn.Module], tuple[int, ...]]] = {
    "convnext": (ConvNeXtBlock, (1, 16, 16, 16)),
    "efficientnet_mbconv_se": (MBConvSE, (1, 16, 16, 16)),
    "shufflenet": (Shuffle, (1, 16, 16, 16)),
    "squeezenet_fire": (Fire, (1, 16, 16, 16)),
    "inception": (Inception, (1, 16, 16, 16)),
    "multihead_attention": (MHA, (1, 16, 8, 8)),
    "transformer_encoder": (Encoder, (1, 16, 8, 8)),
    "swin": (SwinAttention, (1, 16, 16, 16)),
    "densenet": (Dense, (1, 16, 16, 16)),
    "vgg_head": (VGGHead, (1, 16, 14, 14)),
}
