"""Core ATen coverage: how many of torch's Core ATen ops the op table lowers directly.

Core ATen is the closed op set torch's decompositions end in (``torch.Tag.core``); anything else
reaches us through ``run_decompositions`` (see ``convert/frontends/pytorch/decompose.py``), so the
ops of this list are the ones a converter must exist for. The test prints the count and the ops
still missing, and fails when the count drops below the one measured.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

# Measured with torch 2.14.1: all 164 (the 7 *_backward gradient ops since test_pytorch_grad.py).
CORE_ATEN_LOWERED_AT_LEAST = 164


def core_aten_ops() -> list[str]:
    """Return the names (``aten.<op>``) of every op with an overload tagged ``core``."""
    names = set()
    # every aten op torch has registered; dir(torch.ops.aten) lists only those loaded so far, which
    # depends on what ran before in the process
    every = {n.split("::", 1)[1].split(".", 1)[0] for n in torch._C._dispatch_get_all_op_names()
             if n.startswith("aten::")}
    for name in sorted(every | set(dir(torch.ops.aten))):
        try:
            packet = getattr(torch.ops.aten, name)
        except (AttributeError, RuntimeError):
            continue
        if not hasattr(packet, "overloads"):
            continue
        if any(torch.Tag.core in getattr(packet, o).tags for o in packet.overloads()):
            names.add(f"aten.{name}")
    return sorted(names)


def test_core_aten_coverage() -> None:
    from convert.frontends.pytorch.ops import resolve

    core = core_aten_ops()
    assert len(core) > 100, "torch's Core ATen list looks wrong"
    lowered = [op for op in core if resolve(op) is not None]
    missing = [op for op in core if resolve(op) is None]
    print(f"Core ATen: {len(lowered)} of {len(core)} ops lowered directly; missing: {', '.join(missing)}")
    assert len(lowered) >= CORE_ATEN_LOWERED_AT_LEAST, f"Core ATen coverage dropped: {len(lowered)}"


def test_decomposition_table_keeps_our_ops() -> None:
    """Ops we lower stay whole through the fallback; ops we do not are decomposed."""
    from convert.frontends.pytorch.decompose import decomposition_table

    table = decomposition_table()
    kept = {torch.ops.aten.conv2d.default, torch.ops.aten.layer_norm.default,
            torch.ops.aten.scaled_dot_product_attention.default, torch.ops.aten.gelu.default,
            torch.ops.aten.upsample_bilinear2d.vec, torch.ops.aten.group_norm.default}
    assert not kept & set(table.keys())
    assert torch.ops.aten.addcmul.default in table


def test_unsupported_op_decomposed_end_to_end(tmp_path: object) -> None:
    """An op without a converter (addcmul, lerp, hardshrink) goes through torch's decompositions."""
    from pathlib import Path

    from _torch_helpers import REL_TO_SCALE, rel_to_scale, run_onnx, to_onnx

    from convert.frontends.pytorch import load_module
    from convert.ir import Options

    class Net(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return torch.addcmul(x, y, x, value=0.5) + torch.lerp(x, y, 0.3) + torch.nn.functional.hardshrink(x)

    net = Net().eval()
    gen = torch.Generator().manual_seed(0)
    xs = (torch.randn(2, 3, 5, generator=gen), torch.randn(2, 3, 5, generator=gen))
    options = Options()
    model = load_module(net, xs, options)
    assert any("Core ATen decompositions" in n for n in options.diagnostics.notes)
    path = to_onnx(model, Path(str(tmp_path)) / "net.onnx")
    for seed in (1, 2):
        gen = torch.Generator().manual_seed(seed)
        feeds = (torch.randn(2, 3, 5, generator=gen), torch.randn(2, 3, 5, generator=gen))
        (ours,) = run_onnx(path, {"x": feeds[0].numpy(), "y": feeds[1].numpy()})
        assert rel_to_scale(ours, net(*feeds).numpy()) <= REL_TO_SCALE


class _WriteAndDecompose(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        y[:, :2] = y[:, :2] * 0.5  # a write through a view: functionalized into slice_scatter
        return torch.addcmul(y, y, y, value=0.1) + torch.nn.functional.hardshrink(y)


def test_fallback_on_torchscript_file(tmp_path: object) -> None:
    """A traced .pt with a write through a view and ops without a converter converts and matches."""
    from pathlib import Path

    from _torch_helpers import REL_TO_SCALE, rel_to_scale, run_onnx, to_onnx

    from convert.frontends.pytorch import load
    from convert.ir import Options

    torch.manual_seed(0)
    net = _WriteAndDecompose().eval()
    folder = Path(str(tmp_path))
    with torch.no_grad():
        torch.jit.save(torch.jit.trace(net, (torch.randn(1, 3, 8, 8),), check_trace=False), folder / "net.pt")
    options = Options()
    model = load([folder / "net.pt"], options)
    assert any("aten.addcmul" in n and "Core ATen" in n for n in options.diagnostics.notes)
    path = to_onnx(model, folder / "net.onnx")
    for seed in (1, 2):
        x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(seed))
        (ours,) = run_onnx(path, {model.graph.inputs[0].name: x.numpy()})
        with torch.no_grad():
            assert rel_to_scale(ours, net(x).numpy()) <= REL_TO_SCALE


def test_fallback_keeps_dynamic_batch(tmp_path: object) -> None:
    """Under --dynamic-batch the functionalized, decomposed program still takes any batch."""
    from pathlib import Path

    from _torch_helpers import REL_TO_SCALE, rel_to_scale, run_onnx, to_onnx

    from convert.frontends.pytorch import load_module
    from convert.ir import Options

    torch.manual_seed(0)
    net = _WriteAndDecompose().eval()
    model = load_module(net, (torch.randn(2, 3, 8, 8),), Options(dynamic_batch=True))
    path = to_onnx(model, Path(str(tmp_path)) / "net.onnx")
    for batch in (1, 3):
        x = torch.randn(batch, 3, 8, 8, generator=torch.Generator().manual_seed(batch))
        (ours,) = run_onnx(path, {"x": x.numpy()})
        with torch.no_grad():
            assert rel_to_scale(ours, net(x).numpy()) <= REL_TO_SCALE


def test_refused_call_retried_through_decomposition(tmp_path: object) -> None:
    """softplus with beta != 1 is refused by its converter, then lowered through torch's decomposition."""
    from pathlib import Path

    from _torch_helpers import REL_TO_SCALE, rel_to_scale, run_onnx, to_onnx

    from convert.frontends.pytorch import load_module
    from convert.ir import Options

    class Net(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.softplus(x, beta=2.0) + torch.nn.functional.softplus(x)

    net = Net().eval()
    options = Options()
    model = load_module(net, (torch.randn(2, 8),), options)
    assert any("softplus with beta other than 1" in n and "decomposition of aten.softplus" in n
               for n in options.diagnostics.notes)
    path = to_onnx(model, Path(str(tmp_path)) / "net.onnx")
    for seed in (1, 2):
        x = torch.randn(2, 8, generator=torch.Generator().manual_seed(seed)) * 3
        (ours,) = run_onnx(path, {"x": x.numpy()})
        assert rel_to_scale(ours, net(x).numpy()) <= REL_TO_SCALE


def test_refusal_without_decomposition_keeps_the_users_op() -> None:
    """When the decomposed form is refused too, the error names the op the user wrote."""
    from convert.frontends.pytorch import load_module
    from convert.ir import ConversionError

    pool = torch.nn.AdaptiveMaxPool2d(3)
    with pytest.raises(ConversionError, match=r"aten\.adaptive_max_pool2d .*not divisible"):
        load_module(pool, (torch.rand(1, 3, 7, 7),))


def test_inplace_variants_resolve_generically() -> None:
    """Every in-place ATen op whose functional form has a converter resolves to it; none is registered."""
    from convert.frontends.pytorch.ops import OPS, resolve

    keys = OPS.keys()
    assert not [k for k in keys if str(k).startswith("aten.") and str(k).endswith("_") and not str(k).endswith("__")]
    inplace = [n for n in dir(torch.ops.aten) if n.endswith("_") and not n.endswith("__")]
    covered = [n for n in inplace if OPS.lookup(f"aten.{n[:-1]}") is not None]
    assert all(resolve(f"aten.{n}") is OPS.lookup(f"aten.{n[:-1]}") for n in covered)
    print(f"in-place variants lowered through their functional converter: {len(covered)}")
    assert {"hardswish_", "fill_", "relu_", "add_", "index_put_", "copy_", "masked_fill_"} <= set(covered)


def test_stride_and_storage_offset_are_their_recorded_values(tmp_path: object) -> None:
    """sym_stride / sym_storage_offset (torch.export specialises them away; inserted here) are constants."""
    from pathlib import Path

    from _torch_helpers import REL_TO_SCALE, rel_to_scale, run_onnx, to_onnx

    from convert.frontends.pytorch.lower import lower_program
    from convert.ir import Options

    class Net(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 + 3

    program = torch.export.export(Net(), (torch.randn(2, 3, 4),))
    graph = program.graph
    x = next(n for n in graph.nodes if n.op == "placeholder")
    mul = next(n for n in graph.nodes if n.op == "call_function" and "mul" in str(n.target))
    add = next(n for n in graph.nodes if n.op == "call_function" and "add" in str(n.target))
    with graph.inserting_before(mul):
        stride = graph.call_function(torch.ops.aten.sym_stride.int, (x, 1))
        stride.meta["val"] = 4
        view = graph.call_function(torch.ops.aten.slice.Tensor, (x, 1, 1, 3))
        view.meta["val"] = x.meta["val"][:, 1:3]
        offset = graph.call_function(torch.ops.aten.sym_storage_offset.default, (view,))
        offset.meta["val"] = 4
    mul.args = (x, stride)
    add.args = (mul, offset)
    program.graph_module.recompile()
    model = lower_program(program, source="net", options=Options())
    assert {"aten.sym_stride", "aten.sym_storage_offset"} <= set(model.meta["convert:aten_ops"])
    path = to_onnx(model, Path(str(tmp_path)) / "net.onnx")
    for seed in (1, 2):
        t = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(seed))
        (ours,) = run_onnx(path, {model.graph.inputs[0].name: t.numpy()})
        ref = t * t.stride(1) + t[:, 1:3].storage_offset()
        assert rel_to_scale(ours, ref.numpy()) <= REL_TO_SCALE
