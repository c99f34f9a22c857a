"""Control flow: torch.cond -> ONNX If (both branches lowered as subgraphs), torch's while_loop ->
ONNX Loop; a TorchScript loop that torch cannot convert is refused in one line naming where the
loop is."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest
from _torch_helpers import REL_TO_SCALE, ROOT, rel_to_scale, run_onnx, to_onnx

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch


class _Branchy(torch.nn.Module):
    """A data-dependent branch: a learned scale (an operand lifted into the branch) or a shift."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.linspace(0.5, 2.0, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda t: torch.sin(t) * self.scale, lambda t: torch.cos(t) - 1, (x,))


class _WithCond(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.body = _Branchy()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.lin(x)
        both = torch.cond(y.mean() > 0, lambda t: (t * 2, t.max()), lambda t: (-t, t.min()), (y,))
        return self.body(y) + 1, both[0] + both[1]


def test_cond_becomes_if_and_takes_both_branches(tmp_path: Path) -> None:
    from convert.frontends.pytorch import load_module

    torch.manual_seed(0)
    model = _WithCond().eval()
    ir_model = load_module(model, (torch.randn(2, 4),))
    assert [n.op_type for n in ir_model.graph].count("If") == 2
    path = to_onnx(ir_model, tmp_path / "cond.onnx")
    taken = set()
    for seed in range(12):
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(seed)) * 3
        with torch.no_grad():
            refs = model(x)
            taken.add((bool(model.lin(x).sum() > 0), bool(model.lin(x).mean() > 0)))
        outs = run_onnx(path, {ir_model.graph.inputs[0].name: x.numpy()})
        for ours, ref in zip(outs, refs, strict=True):
            assert rel_to_scale(ours, ref.numpy()) <= REL_TO_SCALE
    assert {t[0] for t in taken} == {True, False}  # both branches of each cond were checked
    assert {t[1] for t in taken} == {True, False}


class _Loop(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = int(x.sum().abs()) % 4 + 1
        for i in range(n):
            x = x * 0.5 + i
        return x


def test_scripted_data_dependent_loop_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "loop.pt"
    torch.jit.save(torch.jit.script(_Loop()), path)
    r = subprocess.run([sys.executable, "-m", "convert", "pytorch:onnx", str(path), "-o", str(tmp_path / "o.onnx"),
                        "--input-shape", "x=2,4"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    loop_line = inspect.getsourcelines(_Loop.forward)[1] + 2
    assert "prim::Loop" in lines[0]
    assert f"test_pytorch_control_flow.py:{loop_line}" in lines[0]
    assert "torch.export.save" in lines[0]


class _Iterate(torch.nn.Module):
    """A data-dependent loop: n steps of a learned map (a module and an outer input in the body)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        from torch._higher_order_ops.while_loop import while_loop

        def cond(i: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return i < n.sum()

        def body(i: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return i + 1, torch.tanh(self.lin(y)) + y * 0.5

        i, y = while_loop(cond, body, (torch.zeros((), dtype=torch.int64), x))
        return y, i


def test_while_loop_becomes_loop_with_a_data_dependent_trip_count(tmp_path: Path) -> None:
    """Trip counts 0, 1 and 5 from one file: the condition is checked before the first step."""
    import numpy as np

    from convert.frontends.pytorch import load_module
    from convert.ir import Options

    net = _Iterate().eval()
    model = load_module(net, (torch.randn(3, 4), torch.tensor([3])), Options())
    assert "Loop" in {n.op_type for n in model.graph}
    path = to_onnx(model, tmp_path / "loop.onnx")
    names = [v.name for v in model.graph.inputs]
    for steps in (0, 1, 5):
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(steps))
        with torch.no_grad():
            ref_y, ref_i = net(x, torch.tensor([steps]))
        y, i = run_onnx(path, {names[0]: x.numpy(), names[1]: np.array([steps])})
        assert int(i) == int(ref_i) == steps
        assert rel_to_scale(y, ref_y.numpy()) <= REL_TO_SCALE


class _Mystery(torch.nn.Module):
    """torch.cond whose true branch calls an op no converter knows (a custom op defined in the test)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda t: torch.ops.convert_test.mystery(t), lambda t: t - 1, (x,))


class _MysteryOuter(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = _Mystery()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.convert_test.mystery(self.head(x))


def test_unsupported_op_inside_a_branch_is_listed_with_the_rest() -> None:
    """Ops of both branches are checked before any work; one error lists every gap with its module path."""
    from convert.frontends.pytorch import load_module
    from convert.ir import UnsupportedOpsError

    lib = torch.library.Library("convert_test", "FRAGMENT")
    lib.define("mystery(Tensor x) -> Tensor")
    lib.impl("mystery", lambda x: x * 3, "CPU")
    torch.library.register_fake("convert_test::mystery", lambda x: torch.empty_like(x), lib=lib)
    with pytest.raises(UnsupportedOpsError) as info:
        load_module(_MysteryOuter(), (torch.randn(2, 4),))
    message = str(info.value)
    assert "convert_test.mystery x2" in message  # the branch's call and the top-level one
    assert "'head'" in message  # the first is inside the torch.cond of module 'head'


def test_cond_converts_first_in_a_fresh_process() -> None:
    """torch.cond imports torch._dynamo when first called, here inside the fast trace, whose watchers
    had replaced ``torch.ops.aten.item`` by a function: dynamo's imports read its ``.default`` and
    failed, which left torch._dynamo without ``exc`` for the rest of the process, and the module was
    refused ('torch.export failed: module 'torch._dynamo' has no attribute 'exc'') when it was the
    first thing a process converted. Run in a process of its own, where nothing imported dynamo."""
    code = ("import sys, torch; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
            "from test_pytorch_control_flow import _WithCond\n"
            "from convert.frontends.pytorch import load_module\n"
            "assert 'torch._dynamo' not in sys.modules\n"
            "m = load_module(_WithCond().eval(), (torch.randn(2, 4),))\n"
            "print([n.op_type for n in m.graph].count('If'))\n")
    here = Path(__file__).resolve().parent
    r = subprocess.run([sys.executable, "-c", code, str(here), str(here.parents[1])], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split()[-1] == "2", r.stdout
