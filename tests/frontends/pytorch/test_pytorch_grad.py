"""The gradient ops of Core ATen (``ops/grad.py``) against torch's own backward kernels.

Each case calls the aten ``*_backward`` op directly in a module, converts it, and compares ONNX
Runtime with eager on two inputs. A second test takes the gradient of a small CNN's loss with
respect to its input (a saliency map) through ``torch.func`` and checks the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from _torch_helpers import REL_TO_SCALE, rel_to_scale, run_onnx, to_onnx  # noqa: E402

from convert.frontends.pytorch import load_module  # noqa: E402
from convert.ir import Options  # noqa: E402

pytestmark = pytest.mark.torch
aten = torch.ops.aten


class Fn(torch.nn.Module):
    def __init__(self, fn: Callable[..., object], **params: torch.Tensor) -> None:
        super().__init__()
        self.fn = fn
        for name, value in params.items():
            self.register_buffer(name, value)

    def forward(self, *xs: torch.Tensor) -> object:
        return self.fn(self, *xs)


def _conv(stride: int, padding: int, dilation: int, groups: int, spatial: int = 2) -> tuple[torch.nn.Module, list]:
    gen = torch.Generator().manual_seed(5)
    size = (9, 11, 7)[:spatial]
    x_shape = (2, 4, *size)
    w = torch.randn(6, 4 // groups, *([3] * spatial), generator=gen)
    out = torch.nn.functional.conv2d if spatial == 2 else torch.nn.functional.conv1d
    y = out(torch.randn(x_shape), w, None, stride, padding, dilation, groups)

    def fn(m: Fn, go: torch.Tensor, x: torch.Tensor) -> object:
        return aten.convolution_backward(go, x, m.w, [6], [stride] * spatial, [padding] * spatial, [dilation] * spatial,
                                         False, [0] * spatial, groups, [True, True, True])

    return Fn(fn, w=w), [tuple(y.shape), x_shape]


def _max_pool() -> tuple[torch.nn.Module, list]:
    def fn(m: Fn, go: torch.Tensor, x: torch.Tensor) -> object:
        _, idx = aten.max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1], [1, 1], True)
        return aten.max_pool2d_with_indices_backward(go, x, [3, 3], [2, 2], [1, 1], [1, 1], True, idx)

    return Fn(fn), [(2, 3, 5, 6), (2, 3, 9, 10)]  # ceil((9 + 2 - 3) / 2) + 1, ceil((10 + 2 - 3) / 2) + 1


def _avg_pool(ceil: bool, include_pad: bool, divisor: int | None) -> tuple[torch.nn.Module, list]:
    x_shape = (2, 3, 9, 10)
    y = torch.nn.functional.avg_pool2d(torch.randn(x_shape), 3, 2, 1, ceil, include_pad, divisor)

    def fn(m: Fn, go: torch.Tensor, x: torch.Tensor) -> object:
        return aten.avg_pool2d_backward(go, x, [3, 3], [2, 2], [1, 1], ceil, include_pad, divisor)

    return Fn(fn), [tuple(y.shape), x_shape]


def _adaptive() -> tuple[torch.nn.Module, list]:
    def fn(m: Fn, go: torch.Tensor, x: torch.Tensor) -> object:
        return aten._adaptive_avg_pool2d_backward(go, x)

    return Fn(fn), [(2, 3, 4, 3), (2, 3, 10, 7)]


def _embedding(padding: int, by_freq: bool) -> tuple[torch.nn.Module, list]:
    index = torch.tensor([[1, 3, 3, 0], [7, 3, 1, 1]])

    def fn(m: Fn, go: torch.Tensor) -> object:
        return aten.embedding_dense_backward(go, m.index, 9, padding, by_freq)

    return Fn(fn, index=index), [(2, 4, 5)]


def _layer_norm(affine: bool) -> tuple[torch.nn.Module, list]:
    gen = torch.Generator().manual_seed(2)
    weight, bias = torch.rand(6, 5, generator=gen) + 0.5, torch.randn(6, 5, generator=gen)

    def fn(m: Fn, go: torch.Tensor, x: torch.Tensor) -> object:
        w, b = (m.weight, m.bias) if affine else (None, None)
        _, mean, rstd = aten.native_layer_norm(x, [6, 5], w, b, 1e-5)
        grads = aten.native_layer_norm_backward(go, x, [6, 5], mean, rstd, w, b, [True, affine, affine])
        return grads if affine else grads[0]

    return Fn(fn, weight=weight, bias=bias), [(2, 3, 6, 5), (2, 3, 6, 5)]


def _group_norm() -> tuple[torch.nn.Module, list]:
    gen = torch.Generator().manual_seed(3)
    weight, bias = torch.rand(6, generator=gen) + 0.5, torch.randn(6, generator=gen)

    def fn(m: Fn, go: torch.Tensor, x: torch.Tensor) -> object:
        _, mean, rstd = aten.native_group_norm(x, m.weight, m.bias, 2, 6, 20, 3, 1e-5)
        return aten.native_group_norm_backward(go, x, mean, rstd, m.weight, 2, 6, 20, 3, [True, True, True])

    return Fn(fn, weight=weight, bias=bias), [(2, 6, 4, 5), (2, 6, 4, 5)]


CASES: dict[str, Callable[[], tuple[torch.nn.Module, list]]] = {
    "conv": lambda: _conv(1, 1, 1, 1),
    "conv_strided_dilated_grouped": lambda: _conv(2, 2, 2, 2),
    "conv1d_stride3": lambda: _conv(3, 0, 1, 1, spatial=1),
    "max_pool_ceil": _max_pool,
    "avg_pool_floor": lambda: _avg_pool(False, True, None),
    "avg_pool_ceil_no_pad_count": lambda: _avg_pool(True, False, None),
    "avg_pool_divisor": lambda: _avg_pool(False, False, 5),
    "adaptive_avg_pool": _adaptive,
    "embedding": lambda: _embedding(-1, False),
    "embedding_padding_freq": lambda: _embedding(3, True),
    "layer_norm": lambda: _layer_norm(True),
    "layer_norm_plain": lambda: _layer_norm(False),
    "group_norm": _group_norm,
}


@pytest.mark.parametrize("case", list(CASES))
def test_backward_op_matches_torch(case: str, tmp_path: Path) -> None:
    module, shapes = CASES[case]()
    example = tuple(torch.randn(s, generator=torch.Generator().manual_seed(0)) for s in shapes)
    model = load_module(module.eval(), example, Options())
    path = to_onnx(model, tmp_path / f"{case}.onnx")
    for seed in (1, 2):
        gen = torch.Generator().manual_seed(seed)
        xs = [torch.randn(s, generator=gen) for s in shapes]
        with torch.no_grad():
            refs = module(*xs)
        refs = [r for r in (refs if isinstance(refs, (tuple, list)) else [refs]) if r is not None]
        outs = run_onnx(path, {v.name: x.numpy() for v, x in zip(model.graph.inputs, xs, strict=True)})
        assert len(outs) == len(refs), (len(outs), len(refs))
        for i, (ours, ref) in enumerate(zip(outs, refs, strict=True)):
            err = rel_to_scale(ours, ref.numpy())
            assert err <= REL_TO_SCALE, (case, seed, i, err)


class Saliency(torch.nn.Module):
    """d(logsumexp of the logits)/d(input) of conv, GroupNorm, ReLU, max pool, conv, LayerNorm and
    linear, written as the forward ops (keeping their saved values) and aten's backward ops."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.GroupNorm(2, 8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 8, 3, stride=2), torch.nn.Flatten(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 5))
        with torch.no_grad():
            self.net[1].weight.uniform_(0.5, 1.5)
            self.net[6].weight.uniform_(0.5, 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv1, norm1, _, _, conv2, _, norm2, fc = self.net
        n = x.shape[0]
        c1 = conv1(x)
        g, mean1, rstd1 = aten.native_group_norm(c1, norm1.weight, norm1.bias, n, 8, 144, 2, 1e-5)
        r = torch.relu(g)
        p, idx = aten.max_pool2d_with_indices(r, [2, 2], [2, 2], [0, 0], [1, 1], False)
        c2 = conv2(p)
        f = c2.flatten(1)
        ln, mean2, rstd2 = aten.native_layer_norm(f, [32], norm2.weight, norm2.bias, 1e-5)
        y = fc(ln)
        dln = torch.softmax(y, -1) @ fc.weight  # d logsumexp / d logits = softmax
        df = aten.native_layer_norm_backward(dln, f, [32], mean2, rstd2, norm2.weight, norm2.bias,
                                             [True, False, False])[0]
        dp = aten.convolution_backward(df.reshape(c2.shape), p, conv2.weight, None, [2, 2], [0, 0], [1, 1], False,
                                       [0, 0], 1, [True, False, False])[0]
        dr = aten.max_pool2d_with_indices_backward(dp, r, [2, 2], [2, 2], [0, 0], [1, 1], False, idx)
        dg = dr * (g > 0)
        dc1 = aten.native_group_norm_backward(dg, c1, mean1, rstd1, norm1.weight, n, 8, 144, 2,
                                              [True, False, False])[0]
        return aten.convolution_backward(dc1, x, conv1.weight, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                         [True, False, False])[0]


def test_input_gradient_of_a_cnn_against_autograd(tmp_path: Path) -> None:
    """The hand-written gradient, converted, against torch.autograd on the same net."""
    module = Saliency().eval()
    shape = (2, 3, 12, 12)
    model = load_module(module, (torch.randn(shape),), Options())
    path = to_onnx(model, tmp_path / "saliency.onnx")
    for seed in (1, 2):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)).requires_grad_()
        (reference,) = torch.autograd.grad(module.net(x).logsumexp(-1).sum(), x)
        (ours,) = run_onnx(path, {model.graph.inputs[0].name: x.detach().numpy()})
        assert rel_to_scale(ours, reference.numpy()) <= REL_TO_SCALE
