"""A zoo of public-architecture look-alikes in pure PyTorch, with the code patterns that break exporters.

Each family is rewritten here from its published structure in plain PyTorch (no transformers, no
timm; ``models/pytorch/hf.py`` has the real transformers classes), keeping the parts that matter
for conversion: how transformers 5.x builds attention masks (advanced indexing with broadcast
``arange`` tensors -> ``aten.index``), GPT-2's
Conv1D (``addmm``), tanh GELU, causal mask and last-token pooling (``logits[arange(B), lengths]``),
DistilBERT's ``masked_fill(finfo.min)``, T5's relative-position buckets and RMS norm, Whisper's
conv front end and pre-norm ``nn.TransformerEncoderLayer``, MobileNetV3's in-place hardswish/hardsigmoid, RAFT's
``grid_sample`` warping with instance norm and a ``meshgrid`` coordinate grid, YOLOv8's DFL head and
anchors built without a prior forward (``meshgrid``, ``new_full``). Weights are seeded and random;
BatchNorm statistics are measured on seeded data (``nets.recalibrate``).

``build(name)`` returns ``(model, inputs(seed))``: the eval-mode model and a function giving its
example inputs for a seed (text models: int64 ``input_ids`` and an ``attention_mask`` with padding).

    python models/pytorch/zoo.py            # list the models with their input shapes
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

__all__ = ["DETECTORS", "ZOO", "build"]

VOCAB = 512
SEQ = 16


def _nets() -> object:
    name = "pytorch_test_nets"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("nets.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# -- text inputs and masks -----------------------------------------------------------------
def _text_inputs(batch: int = 3) -> Callable[[int], tuple[torch.Tensor, torch.Tensor]]:
    def make(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(1, VOCAB, (batch, SEQ), generator=gen)
        mask = torch.ones(batch, SEQ, dtype=torch.int64)
        for b in range(1, batch):  # padding of a different length per row and seed: right, then left
            pad = 2 + (seed + 3 * b) % (SEQ // 2)
            cols = slice(SEQ - pad, SEQ) if b % 2 else slice(0, pad)
            mask[b, cols] = 0
            ids[b, cols] = 0
        return ids, mask

    return make


def padding_mask_4d(attention_mask: torch.Tensor, causal: bool) -> torch.Tensor:
    """Return the bool [B, 1, Q, K] mask (True = attend) as transformers 5.x's sdpa_mask builds it.

    transformers vmaps a mask function over ``batch_idx, head_idx, q_idx, kv_idx`` or, without
    vmap, indexes the padding mask with broadcast ``arange`` tensors: that indexing is ``aten.index``.
    """
    batch, length = attention_mask.shape
    device = attention_mask.device
    b = torch.arange(batch, device=device)[:, None, None, None]
    q = torch.arange(length, device=device)[None, None, :, None]
    k = torch.arange(length, device=device)[None, None, None, :]
    mask = attention_mask.bool()[b, k]  # [B, 1, 1, K] broadcast to [B, 1, Q, K] below
    mask = mask.expand(batch, 1, length, length)
    if causal:
        mask = mask & (k <= q)
    return mask


# -- BERT / DistilBERT ---------------------------------------------------------------------
class _SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.value = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        return x.view(b, s, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        b, h, s, d = y.shape
        return self.out(y.transpose(1, 2).reshape(b, s, h * d))


class _BertLayer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.attention = _SelfAttention(dim, heads)
        self.norm1 = nn.LayerNorm(dim, eps=1e-12)
        self.intermediate = nn.Linear(dim, 4 * dim)
        self.output = nn.Linear(4 * dim, dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-12)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attention(x, mask))
        return self.norm2(x + self.output(F.gelu(self.intermediate(x))))


class BertLike(nn.Module):
    """BERT (base structure, small sizes): embeddings, post-norm encoder, tanh pooler."""

    def __init__(self, dim: int = 64, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.word = nn.Embedding(VOCAB, dim, padding_idx=0)
        self.position = nn.Embedding(SEQ, dim)
        self.token_type = nn.Embedding(2, dim)
        self.norm = nn.LayerNorm(dim, eps=1e-12)
        self.layers = nn.ModuleList(_BertLayer(dim, heads) for _ in range(layers))
        self.pooler = nn.Linear(dim, dim)
        self.register_buffer("position_ids", torch.arange(SEQ)[None], persistent=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        length = input_ids.shape[1]
        types = input_ids.new_zeros(input_ids.shape)
        x = self.word(input_ids) + self.position(self.position_ids[:, :length]) + self.token_type(types)
        x = self.norm(x)
        mask = padding_mask_4d(attention_mask, causal=False)
        for layer in self.layers:
            x = layer(x, mask)
        return x, torch.tanh(self.pooler(x[:, 0]))


class _DistilAttention(nn.Module):
    """DistilBERT's attention: scores masked with ``masked_fill(mask == 0, finfo.min)``."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_lin, self.k_lin, self.v_lin, self.out_lin = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.heads

        def shape(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, -1, h, d // h).transpose(1, 2)

        q = shape(self.q_lin(x)) / math.sqrt(d // h)
        k, v = shape(self.k_lin(x)), shape(self.v_lin(x))
        scores = torch.matmul(q, k.transpose(2, 3))
        masked = (mask == 0).view(b, 1, 1, s).expand_as(scores)
        scores = scores.masked_fill(masked, torch.finfo(scores.dtype).min)
        weights = nn.functional.softmax(scores, dim=-1)
        context = torch.matmul(weights, v).transpose(1, 2).contiguous().view(b, -1, d)
        return self.out_lin(context)


class DistilBertLike(nn.Module):
    """DistilBERT (small sizes): embeddings, post-norm layers with masked_fill attention."""

    def __init__(self, dim: int = 64, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.word = nn.Embedding(VOCAB, dim, padding_idx=0)
        self.position = nn.Embedding(SEQ, dim)
        self.norm = nn.LayerNorm(dim, eps=1e-12)
        self.attn = nn.ModuleList(_DistilAttention(dim, heads) for _ in range(layers))
        self.sa_norm = nn.ModuleList(nn.LayerNorm(dim, eps=1e-12) for _ in range(layers))
        self.ffn = nn.ModuleList(nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
                                 for _ in range(layers))
        self.out_norm = nn.ModuleList(nn.LayerNorm(dim, eps=1e-12) for _ in range(layers))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.norm(self.word(input_ids) + self.position(positions)[None])
        for attn, n1, ffn, n2 in zip(self.attn, self.sa_norm, self.ffn, self.out_norm, strict=True):
            x = n1(x + attn(x, attention_mask))
            x = n2(x + ffn(x))
        return x


# -- GPT-2 ---------------------------------------------------------------------------------
class Conv1D(nn.Module):
    """GPT-2's Conv1D: a linear layer with the weight stored [in, out], applied with addmm."""

    def __init__(self, nf: int, nx: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.randn(nf) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size_out = (*x.size()[:-1], self.weight.shape[1])
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size_out)


class _GPT2Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(dim)
        self.c_attn = Conv1D(3 * dim, dim)
        self.c_proj = Conv1D(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.c_fc = Conv1D(4 * dim, dim)
        self.mlp_proj = Conv1D(dim, 4 * dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2Like(nn.Module):
    """GPT-2 with an LM head tied to the embedding and a last-token classification head."""

    def __init__(self, dim: int = 64, heads: int = 4, layers: int = 2, labels: int = 3) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, dim)
        self.wpe = nn.Embedding(SEQ, dim)
        self.h = nn.ModuleList(_GPT2Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.score = nn.Linear(dim, labels, bias=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch, length = input_ids.shape
        positions = torch.arange(length, device=input_ids.device)[None]
        x = self.wte(input_ids) + self.wpe(positions)
        mask = padding_mask_4d(attention_mask, causal=True)
        for block in self.h:
            x = block(x, mask)
        x = self.ln_f(x)
        lm_logits = torch.matmul(x, self.wte.weight.T)
        # GPT2ForSequenceClassification: the logits of the last non-padding token of each row (left
        # padding leaves the first queries with every key masked: torch's attention gives 0 there)
        non_pad = (input_ids != 0).int()
        last = (non_pad * torch.arange(length, device=input_ids.device)).argmax(-1)
        pooled = self.score(x)[torch.arange(batch, device=input_ids.device), last]
        return lm_logits, pooled


# -- T5 encoder ------------------------------------------------------------------------------
class _T5Norm(nn.Module):
    """T5's RMS norm: no mean subtraction, no bias, variance computed in float32."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.rand(dim) + 0.5)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


def relative_position_bucket(relative: torch.Tensor, buckets: int = 32, max_distance: int = 128) -> torch.Tensor:
    """Return T5's bidirectional relative-position bucket of every (query, key) offset."""
    buckets //= 2
    result = (relative > 0).to(torch.long) * buckets
    relative = torch.abs(relative)
    max_exact = buckets // 2
    is_small = relative < max_exact
    large = max_exact + (torch.log(relative.float() / max_exact) / math.log(max_distance / max_exact)
                         * (buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, buckets - 1))
    return result + torch.where(is_small, relative, large)


class T5EncoderLike(nn.Module):
    """T5 encoder: RMS norms, no attention scaling, a learned relative-position bias, ReLU FFN."""

    def __init__(self, dim: int = 64, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(VOCAB, dim)
        self.bias = nn.Embedding(32, heads)
        self.qkvo = nn.ModuleList(nn.ModuleList(nn.Linear(dim, dim, bias=False) for _ in range(4))
                                  for _ in range(layers))
        self.ffn = nn.ModuleList(nn.Sequential(nn.Linear(dim, 2 * dim, bias=False), nn.ReLU(),
                                               nn.Linear(2 * dim, dim, bias=False)) for _ in range(layers))
        self.norms = nn.ModuleList(_T5Norm(dim) for _ in range(2 * layers + 1))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        b, s = input_ids.shape
        x = self.embed(input_ids)
        positions = torch.arange(s)
        buckets = relative_position_bucket(positions[None, :] - positions[:, None])
        bias = self.bias(buckets).permute(2, 0, 1)[None]  # [1, H, Q, K]
        pad = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        bias = bias + pad
        for i, (proj, ffn) in enumerate(zip(self.qkvo, self.ffn, strict=True)):
            h = self.norms[2 * i](x)
            q, k, v = (p(h).view(b, s, self.heads, -1).transpose(1, 2) for p in proj[:3])
            scores = torch.matmul(q, k.transpose(3, 2)) + bias
            weights = scores.float().softmax(-1).type_as(scores)
            x = x + proj[3](torch.matmul(weights, v).transpose(1, 2).reshape(b, s, -1))
            x = x + ffn(self.norms[2 * i + 1](x))
        return self.norms[-1](x)


# -- Whisper encoder -------------------------------------------------------------------------
class WhisperEncoderLike(nn.Module):
    """Whisper's audio encoder: two Conv1d + GELU over log-mel frames, sinusoidal positions, pre-norm layers."""

    def __init__(self, mels: int = 16, dim: int = 64, heads: int = 4, layers: int = 2, frames: int = 32) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(mels, dim, 3, padding=1)
        self.conv2 = nn.Conv1d(dim, dim, 3, stride=2, padding=1)
        length = frames // 2
        inv = torch.exp(-math.log(10000) / (dim // 2 - 1) * torch.arange(dim // 2))
        scaled = torch.arange(length)[:, None] * inv[None, :]
        self.register_buffer("positions", torch.cat([torch.sin(scaled), torch.cos(scaled)], 1))
        self.layers = nn.ModuleList(nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.0, activation="gelu",
                                                               batch_first=True, norm_first=True)
                                    for _ in range(layers))
        self.norm = nn.LayerNorm(dim)

    def forward(self, input_features: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.conv1(input_features))
        x = F.gelu(self.conv2(x)).permute(0, 2, 1)
        x = x + self.positions
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


# -- MobileNetV3 ---------------------------------------------------------------------------
class _SqueezeExcite(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(channels, channels // 4, 1)
        self.fc2 = nn.Conv2d(channels // 4, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.relu(self.fc1(F.adaptive_avg_pool2d(x, 1)), inplace=True)
        return x * F.hardsigmoid(self.fc2(s), inplace=True)


class _V3Block(nn.Module):
    def __init__(self, cin: int, mid: int, cout: int, stride: int, se: bool) -> None:
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.Hardswish(inplace=True))
        self.dw = nn.Sequential(nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid),
                                nn.Hardswish(inplace=True))
        self.se = _SqueezeExcite(mid) if se else nn.Identity()
        self.project = nn.Sequential(nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.project(self.se(self.dw(self.expand(x))))
        if self.residual:
            y += x  # timm/torchvision add the shortcut in place
        return y


class MobileNetV3Like(nn.Module):
    """MobileNetV3 (small): hardswish/hardsigmoid in place, SE blocks, in-place residual adds."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish(inplace=True))
        self.blocks = nn.Sequential(_V3Block(16, 32, 16, 1, True), _V3Block(16, 48, 24, 2, False),
                                    _V3Block(24, 72, 24, 1, True))
        self.head = nn.Sequential(nn.Linear(24, 64), nn.Hardswish(inplace=True), nn.Dropout(0.2),
                                  nn.Linear(64, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1).flatten(1))


# -- RAFT-style warping ----------------------------------------------------------------------
class RaftLike(nn.Module):
    """RAFT's building blocks: instance-normalised feature encoder, coordinate grid, bilinear warp."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.InstanceNorm2d(16), nn.ReLU(inplace=True),
                                     nn.Conv2d(16, 16, 3, 1, 1), nn.InstanceNorm2d(16, affine=True))
        self.flow = nn.Conv2d(32, 2, 3, 1, 1)

    def forward(self, image1: torch.Tensor, image2: torch.Tensor) -> torch.Tensor:
        f1, f2 = self.encoder(image1), self.encoder(image2)
        _, _, h, w = f1.shape
        flow = self.flow(torch.cat([f1, f2], 1))
        ys, xs = torch.meshgrid(torch.arange(h, dtype=f1.dtype), torch.arange(w, dtype=f1.dtype), indexing="ij")
        coords = torch.stack([xs, ys], 0)[None] + flow  # pixel coordinates, [B, 2, H, W]
        grid = torch.stack([2 * coords[:, 0] / (w - 1) - 1, 2 * coords[:, 1] / (h - 1) - 1], -1)
        warped = F.grid_sample(f2, grid, mode="bilinear", align_corners=True)
        return (f1 * warped).sum(1, keepdim=True)


# -- YOLOv8 detect head ------------------------------------------------------------------------
class _DFL(nn.Module):
    """Distribution focal loss decoding: softmax over 16 bins, expectation by a fixed 1x1 conv."""

    def __init__(self, bins: int = 16) -> None:
        super().__init__()
        self.bins = bins
        self.conv = nn.Conv2d(bins, 1, 1, bias=False).requires_grad_(False)
        self.conv.weight.data[:] = torch.arange(bins, dtype=torch.float).view(1, bins, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, a = x.shape
        return self.conv(x.view(b, 4, self.bins, a).transpose(2, 1).softmax(1)).view(b, 4, a)


class YoloV8HeadLike(nn.Module):
    """A YOLOv8 detect head on two feature levels; anchors made in forward (no prior forward run)."""

    def __init__(self, classes: int = 8, bins: int = 16) -> None:
        super().__init__()
        nets = _nets()
        self.backbone = nn.Sequential(nets.conv_bn(3, 16, 3, 2, act=nn.SiLU), nets.conv_bn(16, 32, 3, 2, act=nn.SiLU))
        self.down = nets.conv_bn(32, 32, 3, 2, act=nn.SiLU)
        self.box = nn.ModuleList(nn.Sequential(nets.conv_bn(32, 32, act=nn.SiLU), nn.Conv2d(32, 4 * bins, 1))
                                 for _ in range(2))
        self.cls = nn.ModuleList(nn.Sequential(nets.conv_bn(32, 32, act=nn.SiLU), nn.Conv2d(32, classes, 1))
                                 for _ in range(2))
        self.dfl = _DFL(bins)
        self.strides = (8, 16)
        self.no = classes + 4 * bins

    @staticmethod
    def make_anchors(feats: list[torch.Tensor], strides: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        points, stride_tensor = [], []
        for f, s in zip(feats, strides, strict=True):
            _, _, h, w = f.shape
            sx = torch.arange(w, dtype=f.dtype) + 0.5
            sy = torch.arange(h, dtype=f.dtype) + 0.5
            sy, sx = torch.meshgrid(sy, sx, indexing="ij")
            points.append(torch.stack((sx, sy), -1).view(-1, 2))
            stride_tensor.append(f.new_full((h * w, 1), s))
        return torch.cat(points).transpose(0, 1), torch.cat(stride_tensor).transpose(0, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p3 = self.backbone(x)
        feats = [p3, self.down(p3)]
        outs = [torch.cat((self.box[i](f), self.cls[i](f)), 1) for i, f in enumerate(feats)]
        anchors, strides = self.make_anchors(feats, self.strides)
        flat = torch.cat([o.view(o.shape[0], self.no, -1) for o in outs], 2)
        box, cls = flat.split((4 * self.dfl.bins, self.no - 4 * self.dfl.bins), 1)
        lt, rb = self.dfl(box).chunk(2, 1)
        xy = anchors[None] + (rb - lt) / 2
        wh = rb + lt
        return torch.cat((torch.cat((xy, wh), 1) * strides, cls.sigmoid()), 1)


def _image_inputs(*shapes: tuple[int, ...]) -> Callable[[int], tuple[torch.Tensor, ...]]:
    def make(seed: int) -> tuple[torch.Tensor, ...]:
        gen = torch.Generator().manual_seed(seed)
        return tuple(torch.randn(s, generator=gen) for s in shapes)

    return make


ZOO: dict[str, tuple[Callable[[], nn.Module], Callable[[int], tuple[torch.Tensor, ...]], tuple[int, ...] | None]] = {
    "bert": (BertLike, _text_inputs(), None),
    "distilbert": (DistilBertLike, _text_inputs(), None),
    "gpt2": (GPT2Like, _text_inputs(), None),
    "t5_encoder": (T5EncoderLike, _text_inputs(), None),
    "whisper_encoder": (WhisperEncoderLike, _image_inputs((1, 16, 32)), None),
    "mobilenetv3": (MobileNetV3Like, _image_inputs((1, 3, 64, 64)), (1, 3, 64, 64)),
    "raft": (RaftLike, _image_inputs((1, 3, 32, 48), (1, 3, 32, 48)), None),
    "yolov8_head": (YoloV8HeadLike, _image_inputs((1, 3, 64, 64)), (1, 3, 64, 64)),
}


def _detectors() -> object:
    name = "pytorch_test_detectors"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("detectors.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# Detectors (models/pytorch/detectors.py): outputs boxes, scores, labels of a data-dependent count,
# compared as sets of detections sorted by box.
def _detector(cls_name: str) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        model = getattr(_detectors(), cls_name)()
        _nets().recalibrate(model.backbone, (4, 3, 64, 64))  # type: ignore[attr-defined]
        return model  # type: ignore[no-any-return]

    return make


DETECTORS: dict[str, tuple[Callable[[], nn.Module], Callable[[int], tuple[torch.Tensor, ...]], None]] = {
    "retinanet": (_detector("RetinaNetLike"), _image_inputs((1, 3, 64, 64)), None),
    "fasterrcnn": (_detector("FasterRCNNLike"), _image_inputs((1, 3, 64, 64)), None),
}


def build(name: str, *, seed: int = 0) -> tuple[nn.Module, Callable[[int], tuple[torch.Tensor, ...]]]:
    """Return zoo model ``name`` (seeded weights, recalibrated BatchNorm, eval mode) and its input maker."""
    factory, inputs, calibrate = ZOO[name] if name in ZOO else DETECTORS[name]
    torch.manual_seed(seed)
    model = factory()
    if calibrate is not None:
        _nets().recalibrate(model, calibrate, seed=seed)  # type: ignore[attr-defined]
    return model.eval(), inputs


if __name__ == "__main__":
    for zoo_name in [*ZOO, *DETECTORS]:
        _, maker = build(zoo_name)
        shapes = ", ".join(f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}" for t in maker(1))
        print(f"{zoo_name:12} {shapes}")
