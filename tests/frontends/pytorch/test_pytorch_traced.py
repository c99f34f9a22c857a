"""The fast capture (frontends/pytorch/traced.py): a module's traced graph lowered without torch.export.

Every conversion here is checked against the module run by torch itself (eager, fp32) on inputs other
than the example. The trace is taken only where it is as sound as torch.export; the other modules must
land on torch.export and still convert correctly, with the user's module left as it was.
"""

from __future__ import annotations

import inspect
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from _torch_helpers import rel_to_scale, run_onnx

from convert.exporters.onnx import EXPORTER
from convert.frontends.pytorch import load, load_module
from convert.frontends.pytorch.capture import export_module
from convert.frontends.pytorch.traced import TracedProgram, trace_module
from convert.ir import Options, passes


def _calibrated(net: torch.nn.Module, x: torch.Tensor) -> torch.nn.Module:
    """Batch-norm statistics from real batches (random ones give a degenerate output)."""
    net.train()
    with torch.no_grad():
        for _ in range(4):
            net(x + 0.1 * torch.randn_like(x))
    return net.eval()


def _converted(net: torch.nn.Module, example: tuple[torch.Tensor, ...], tmp_path, name: str = "m.onnx"):
    options = Options()
    model = load_module(net, example, options)
    passes.standard_pipeline()(model)
    out = tmp_path / name
    EXPORTER.save(model, out, options)
    return out, options


def _file_converted(path, tmp_path, name: str):
    """A traced TorchScript file converted as the frontend reads files, written to ``tmp_path / name``."""
    options = Options()
    model = load([path], options)
    passes.standard_pipeline()(model)
    out = tmp_path / name
    EXPORTER.save(model, out, options)
    return out


def _flat(value: object) -> list[torch.Tensor]:
    return [t for v in value for t in _flat(v)] if isinstance(value, (tuple, list)) else [value]


def _check(net: torch.nn.Module, path, inputs: tuple[torch.Tensor, ...], names: tuple[str, ...] = ("x",),
           tol: float = 1e-5) -> None:
    with torch.no_grad():
        refs = _flat(net(*inputs))
    outs = run_onnx(path, {n: t.numpy() for n, t in zip(names, inputs, strict=True)})
    assert len(outs) == len(refs)
    for got, ref in zip(outs, refs, strict=True):
        assert got.shape == tuple(ref.shape)
        assert rel_to_scale(got, ref.numpy()) < tol


class _ConvNet(torch.nn.Module):
    """Size arithmetic (view(x.size(0), -1)), an in-place ReLU, eval dropout through a view, a residual."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.relu = torch.nn.ReLU(inplace=True)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.drop = torch.nn.Dropout(0.3, inplace=True)
        self.fc = torch.nn.Linear(8 * 4 * 4, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn(self.conv(x)))
        y = y + self.conv2(y)
        y = torch.nn.functional.adaptive_avg_pool2d(y, 4)
        flat = self.drop(y.view(y.size(0), -1))
        return self.fc(flat)


def test_a_plain_module_is_traced_and_matches_eager(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 16, 16)
    net = _calibrated(_ConvNet(), x)
    program = export_module(net, (x,), Options(), "ConvNet")
    assert isinstance(program, TracedProgram)
    path, _ = _converted(net, (x,), tmp_path)
    _check(net, path, (torch.randn(2, 3, 16, 16),))
    # the graph runs as torch.fx runs it (what --locate does, layer by layer) and as a module
    other = torch.randn(2, 3, 16, 16)
    spec_args = [other if spec.kind.name == "USER_INPUT" else program.state_dict[spec.target]
                 for spec in program.graph_signature.input_specs]
    with torch.no_grad():
        ref = net(other)
        stepped = torch.fx.Interpreter(program.graph_module).run(*spec_args)
        called = program.graph_module(*spec_args)
    for got in (stepped, called):
        assert rel_to_scale(_flat(got)[0].numpy(), ref.numpy()) < 1e-5


class _Shapes(torch.nn.Module):
    """reshape_as / view_as (kept whole by a trace), tied weights, two outputs in a nested tuple."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(12, 12)
        self.b = torch.nn.Linear(12, 12)
        self.b.weight = self.a.weight  # tied

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor]]:
        h = self.a(x).reshape_as(y) * y
        z = self.b(h.view_as(x)).sigmoid()
        return h, (z * x.size(-1),)  # a size as a number: prim::NumToTensor in the trace


def test_tied_weights_and_nested_outputs_match_eager(tmp_path):
    torch.manual_seed(1)
    net = _Shapes().eval()
    example = (torch.randn(3, 12), torch.randn(3, 3, 4))
    program = export_module(net, example, Options(), "Shapes")
    assert isinstance(program, TracedProgram)
    assert len(program.state_dict) == 3  # a.weight once, a.bias, b.bias
    path, _ = _converted(net, example, tmp_path)
    _check(net, path, (torch.randn(3, 12), torch.randn(3, 3, 4)), names=("x", "y"))


class _DataBranch(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if float(x.sum()) > 0 else x - 1


def test_a_branch_on_data_is_not_traced():
    """A trace freezes the branch it took (torch warns); torch.export must capture it instead."""
    assert trace_module(_DataBranch().eval(), (torch.ones(4),), Options(), "DataBranch") is None


class _SizeNumbers(torch.nn.Module):
    """Sizes made Python numbers, as DistilBERT, GPT-2 and RAFT do: math.sqrt of a size, a split by a
    size (Tensor.split calls int() on it), a branch on a size, and InstanceNorm's own size checks."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 24)
        self.norm = torch.nn.InstanceNorm2d(2, affine=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.lin(x).split(d, dim=2)
        att = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(d // 2), dim=-1) @ v
        if x.size(1) > 1:
            att = att + att[:, :1]
        return self.norm(att.reshape(b, 2, s, d // 2))


def test_sizes_made_numbers_are_traced_and_match_eager(tmp_path):
    torch.manual_seed(5)
    net = _SizeNumbers().eval()
    with torch.no_grad():
        net.norm.weight.uniform_(0.5, 1.5)
    example = (torch.randn(2, 6, 8),)
    program = export_module(net, example, Options(), "SizeNumbers")
    assert isinstance(program, TracedProgram)
    path, _ = _converted(net, example, tmp_path)
    _check(net, path, (torch.randn(2, 6, 8),))


class _TensorConstants(torch.nn.Module):
    """torch.tensor of Python numbers and of a size (Hugging Face's masks: torch.tensor(0.0))."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        zero = torch.tensor(0.0, dtype=x.dtype)
        width = torch.tensor(x.size(-1), dtype=x.dtype)
        return torch.where(x > 0, zero, x) / width + torch.tensor([1.0, 2.0, 3.0, 4.0])


def test_tensors_made_of_numbers_and_sizes_are_traced_and_match_eager(tmp_path):
    net = _TensorConstants().eval()
    example = (torch.randn(3, 4),)
    original = torch.tensor
    assert isinstance(trace_module(net, example, Options(), "TensorConstants"), TracedProgram)
    assert torch.tensor is original
    path, _ = _converted(net, example, tmp_path)
    _check(net, path, (torch.randn(3, 4),))


class _NumberByName(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.ops.aten._local_scalar_dense(x.min())  # no tracer warning at all


class _TensorOfData(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.tensor(x.sum())  # copies data into a constant: the next input's sum differs


class _DataCopy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x.sum().data  # the tracer makes .data a constant of the example's sum, and warns of nothing


class _WeightNumber(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(3.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * math.sqrt(float(self.scale))


class _RandomNumber(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if bool(torch.rand(()) < 2.0) else x  # always true, yet made by a random op


class _SizeAndDataNumbers(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x / math.sqrt(x.size(-1))  # from a size: sound alone
        return y.view(int(x.shape[0] * (x[0, 0] > 0)), -1) if x.size(0) > 0 else y  # this one is data


class _ListNumbers(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tensor(x.sum(0).tolist())  # tolist is not watched: its warning stays unexplained


class _CountNumber(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * float(torch.nonzero(x > 0.5).size(0))  # a size, but of a count: nonzero leaves the graph


class _MaskedNumber(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / math.sqrt(x[x > 0.5].numel() + 1)  # a boolean mask's result size is data


class _RaisesAfterANumber(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if float(x.size(0)) > 0:
            raise ValueError("boom")
        return x


@pytest.mark.parametrize("net", [_DataBranch(), _WeightNumber(), _RandomNumber(), _SizeAndDataNumbers(),
                                 _ListNumbers(), _CountNumber(), _MaskedNumber(), _TensorOfData(),
                                 _NumberByName(), _DataCopy(),
                                 _RaisesAfterANumber()], ids=lambda n: type(n).__name__)
def test_a_number_not_made_from_sizes_is_not_traced_and_tensor_methods_are_put_back(net):
    """A Python number read from data, a weight or a random op freezes a value the next input may
    change; only sizes (fixed by the example's shapes) may become constants of the graph."""
    before, original = dict(torch.Tensor.__dict__), torch.tensor
    assert trace_module(net.eval(), (torch.ones(3, 4),), Options(), type(net).__name__) is None
    assert dict(torch.Tensor.__dict__) == before and torch.tensor is original
    assert type(torch.ones(2)).__bool__ is torch._C.TensorBase.__bool__


def test_traces_in_two_threads_keep_their_own_verdicts():
    """Conversions in two threads: each trace keeps its own verdict (traces take turns, as the
    warnings' recording is the process's), and torch's own methods are back afterwards."""
    import threading

    before = dict(torch.Tensor.__dict__)
    nets = {"sizes": (_SizeNumbers().eval(), (torch.randn(2, 6, 8),)), "data": (_DataBranch().eval(), (torch.ones(4),))}
    got: dict[str, list[object]] = {name: [] for name in nets}

    def run(name: str) -> None:
        net, example = nets[name]
        for _ in range(5):
            got[name].append(trace_module(net, example, Options(), name))

    threads = [threading.Thread(target=run, args=(name,)) for name in nets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(isinstance(p, TracedProgram) for p in got["sizes"]) and len(got["sizes"]) == 5
    assert got["data"] == [None] * 5
    assert dict(torch.Tensor.__dict__) == before


class _Counter(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        return self.lin(x) + self.calls


def test_a_forward_that_writes_a_buffer_goes_to_export_with_the_buffer_put_back(tmp_path):
    torch.manual_seed(2)
    net = _Counter().eval()
    version = net.calls._version
    x = torch.randn(2, 4)
    assert trace_module(net, (x,), Options(), "Counter") is None
    assert float(net.calls) == 0.0 and net.calls._version > version  # written, then restored
    path, _ = _converted(net, (x,), tmp_path)
    assert float(net.calls) == 0.0  # torch.export ran it on fake tensors
    ours = run_onnx(path, {"x": x.numpy()})[0]
    with torch.no_grad():  # the graph starts from the buffer as it was: the first call's result
        first = net(x).numpy()
    np.testing.assert_allclose(ours, first, rtol=1e-5, atol=1e-6)


class _Glu(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.glu(x, dim=-1) * 3


def test_an_op_without_a_converter_goes_to_export_and_its_decompositions(tmp_path):
    net = _Glu().eval()
    x = torch.randn(2, 8)
    assert trace_module(net, (x,), Options(), "Glu") is None
    path, _ = _converted(net, (x,), tmp_path)
    _check(net, path, (torch.randn(2, 8),))


class _DictOut(torch.nn.Module):
    """A dict output as Hugging Face models return one: keys not in sorted order, a tuple inside."""

    def forward(self, x: torch.Tensor) -> dict[str, object]:
        return {"zeta": x * 2, "alpha": (x[:1] - 1, x.sum(0)), "mid": [torch.tanh(x)]}


class _NoneOut(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> dict[str, object]:
        return {"y": x * 2, "cache": None}


def test_a_dict_output_is_traced_in_insertion_order_and_matches_eager(tmp_path):
    net = _DictOut().eval()
    example = (torch.randn(3, 4),)
    assert isinstance(trace_module(net, example, Options(), "DictOut"), TracedProgram)
    path, _ = _converted(net, example, tmp_path)
    other = torch.randn(3, 4)
    with torch.no_grad():
        result = net(other)
    refs = [result["zeta"], *result["alpha"], *result["mid"]]  # insertion order, as torch.export's pytree
    outs = run_onnx(path, {"x": other.numpy()})
    assert [o.shape for o in outs] == [tuple(r.shape) for r in refs]
    for got, ref in zip(outs, refs, strict=True):
        assert rel_to_scale(got, ref.numpy()) < 1e-6


def test_an_output_holding_none_goes_to_export():
    assert trace_module(_NoneOut().eval(), (torch.randn(2),), Options(), "NoneOut") is None


def test_a_traced_torchscript_file_is_read_without_torch_s_converter(tmp_path, monkeypatch):
    torch.manual_seed(3)
    x = torch.randn(1, 3, 16, 16)
    net = _calibrated(_ConvNet(), x)
    path = tmp_path / "net.pt"
    with torch.no_grad():
        torch.jit.save(torch.jit.trace(net, (x,), check_trace=False), str(path))

    from convert.frontends.pytorch import capture

    def refused(*args: object, **kwargs: object) -> object:
        raise AssertionError("torch's TorchScript converter was used for a plain trace")

    monkeypatch.setattr(capture, "script_to_program", refused)
    out = _file_converted(path, tmp_path, "net.onnx")
    _check(torch.jit.load(str(path)), out, (torch.randn(1, 3, 16, 16),))


class _HardNet(torch.nn.Module):
    """MobileNetV3's blocks: batch norm, hardswish and ReLU6 in place, hardsigmoid, a clamped hardtanh."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.act = torch.nn.Hardswish(inplace=True)
        self.conv2 = torch.nn.Conv2d(8, 8, 1)
        self.bn2 = torch.nn.BatchNorm2d(8)
        self.six = torch.nn.ReLU6(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(self.bn(self.conv(x)))
        gate = torch.nn.functional.hardsigmoid(y.mean((2, 3), keepdim=True))
        z = self.six(self.bn2(self.conv2(y * gate)))
        return torch.nn.functional.hardtanh(z * 2.0 - 1.0, -1.5, 2.5).flatten(1)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_a_file_s_shape_keeping_ops_match_eager(tmp_path, monkeypatch, layout):
    """A file's batch norms and hard activations take their result types from their input (traced.py's
    _input_alike, not torch's meta kernels): the file still matches eager, in either memory layout."""
    torch.manual_seed(5)
    x = torch.randn(2, 3, 12, 12) * 2
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    net = _calibrated(_HardNet(), x)
    path = tmp_path / "hard.pt"
    with torch.no_grad():
        torch.jit.save(torch.jit.trace(net, (x,), check_trace=False), str(path))
    from convert.frontends.pytorch import tracegraph as traced

    taken: list[str] = []
    alike = traced._input_alike
    monkeypatch.setattr(traced, "_input_alike", lambda name, args: taken.append(name) or alike(name, args))
    out = _file_converted(path, tmp_path, "hard.onnx")
    assert {"batch_norm", "hardswish_", "hardsigmoid", "hardtanh_", "hardtanh"} <= set(taken)
    probe = torch.randn(2, 3, 12, 12) * 2
    with torch.no_grad():
        ref = net(probe)
    assert float(ref.std()) > 0.1  # not a degenerate output
    _check(torch.jit.load(str(path)), out, (probe,))


class _NumberTimesInts(torch.nn.Module):
    """x.int() * (size / 2): eager torch multiplies by a number (float32); the trace records a float64
    0-d tensor, which would make a float64 result."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.int() * (x.size(-1) / 2.0)


def test_a_number_that_would_change_the_result_dtype_is_not_traced(tmp_path):
    net = _NumberTimesInts().eval()
    x = torch.randn(2, 3) * 10
    assert trace_module(net, (x,), Options(), "NumberTimesInts") is None
    path = tmp_path / "n.pt"
    with torch.no_grad():
        torch.jit.save(torch.jit.trace(net, (x,), check_trace=False), str(path))
    script = torch.jit.load(str(path))  # a file records no dtypes: the rule alone must refuse it
    from convert.frontends.pytorch.traced import program_from_script

    assert program_from_script(script, (x,), Options(), "n.pt") is None
    out, _ = _converted(net, (x,), tmp_path)
    got = run_onnx(out, {"x": x.numpy()})[0]
    ref = net(x).numpy()
    assert got.dtype == ref.dtype == np.float32
    np.testing.assert_allclose(got, ref)


class _WritesAComputedConstant(torch.nn.Module):
    """A view taken of a constant before the graph writes it must see the write (eager does)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = torch.zeros(4)
        v = c[:2]
        c.add_(x)
        return torch.cat([v * 1, c])


def test_a_constant_written_by_the_graph_goes_to_export(tmp_path):
    net = _WritesAComputedConstant().eval()
    x = torch.randn(4)
    assert trace_module(net, (x,), Options(), "WritesAComputedConstant") is None
    path, _ = _converted(net, (x,), tmp_path)
    y = torch.randn(4)
    np.testing.assert_allclose(run_onnx(path, {"x": y.numpy()})[0], net(y).numpy(), rtol=1e-6)


class _Repeats(torch.nn.Module):
    def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return torch.repeat_interleave(x, r, dim=0) * 2 + 1


class _NonZero(torch.nn.Module):
    def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return torch.nonzero(r).float() * 2


def test_one_list_of_data_dependent_ops_for_the_trace_and_for_torchscript_files():
    """A TorchScript graph keeps the sizes of these ops symbolic when its metadata is made concrete
    from the example (frozen, a count of 6 would hold for every input); the trace refuses
    repeat_interleave (no fake kernel takes its data-dependent repeats) and takes nonzero with a
    symbol for its count (test_data_dependent_sizes_are_traced_as_symbols)."""
    from convert.frontends.pytorch.tsfold import concretize

    example = (torch.randn(3, 2), torch.tensor([1, 2, 3]))
    assert trace_module(_Repeats().eval(), example, Options(), "Repeats") is None
    for net in (_Repeats(), _NonZero()):
        program = torch.export.export(net.eval(), example)
        concretize(program, example)
        ops = [n for n in program.graph.nodes if n.op == "call_function" and "val" in n.meta]
        assert ops and all(not isinstance(n.meta["val"].shape[0], int) for n in ops if hasattr(n.meta["val"], "shape"))


class _Selects(torch.nn.Module):
    """A detector's tail in small: boolean-mask selection, nonzero, top-k of a data-dependent count
    with ``k = min(3, count)`` computed from its size, and a fixed size of it used in a view."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        kept = x[x[:, 0] > 0.0]  # [count, 2]
        scores = kept.sum(1)
        count = torch._shape_as_tensor(kept)[0].unsqueeze(0)  # torchvision's _topk_min, as it traces
        top = scores.topk(torch.min(torch.cat((torch.tensor([3], dtype=count.dtype), count), 0)))[0]
        where = torch.nonzero(x[:, 1] > 0.5).view(-1, kept.size(1) // 2)
        return kept * 2, top, where


def test_data_dependent_sizes_are_traced_as_symbols(tmp_path):
    """Ops whose result length depends on the data (a mask, nonzero) get a symbolic size, as in
    torch.export: the file computes the count of each input, not the example's, down to none."""
    net = _Selects().eval()
    example = torch.tensor([[1.0, 0.9], [-1.0, 0.2], [0.5, 0.7], [2.0, 0.1], [0.3, 0.6]])
    assert isinstance(trace_module(net, (example,), Options(), "Selects"), TracedProgram)
    path, options = _converted(net, (example,), tmp_path)
    assert not options.diagnostics.notes  # no branch taken on a count
    for x in (torch.randn(5, 2), torch.tensor([[2.0, 0.7], [-1.0, 0.9], [-2.0, 0.1], [-0.5, 0.2], [-3.0, 0.8]]),
              -torch.rand(5, 2)):  # 2 or 3 rows kept, then one, then none
        with torch.no_grad():
            refs = net(x)
        outs = run_onnx(path, {"x": x.numpy()})
        assert [o.shape for o in outs] == [tuple(r.shape) for r in refs]
        for got, ref in zip(outs, refs, strict=True):
            np.testing.assert_allclose(got, ref.numpy(), rtol=1e-6, atol=1e-6)


class _PadsTheFirstOfACount(torch.nn.Module):
    """Mask R-CNN's masks: the first three of a count kept (min(3, count) rows), then padded."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = x[x[:, 0] > 0][:3]
        return torch.nn.functional.pad(kept[:, None], (1, 1, 1, 1), value=-1.0)


def test_the_first_of_a_count_padded_is_traced_and_matches_eager(tmp_path):
    """torch's C++ pad specialises a size like min(3, count); its Python one, which torch.export
    runs, does not: the trace takes it, and each input keeps its own count."""
    net = _PadsTheFirstOfACount().eval()
    example = torch.tensor([[1.0, 0.9], [-1.0, 0.2], [0.5, 0.7], [2.0, 0.1], [0.3, 0.6]])  # 4 kept: 3 padded
    assert isinstance(trace_module(net, (example,), Options(), "PadsTheFirstOfACount"), TracedProgram)
    path, _ = _converted(net, (example,), tmp_path)
    one = torch.tensor([[-1.0, 0.9], [1.0, 0.2], [-0.5, 0.7], [-2.0, 0.1], [-0.3, 0.6]])
    for x in (example, one, -torch.rand(5, 2)):
        with torch.no_grad():
            ref = net(x)
        got = run_onnx(path, {"x": x.numpy()})[0]
        assert got.shape == tuple(ref.shape)  # [3, 1, 4, 4], then [1, 1, 4, 4], then none
        np.testing.assert_array_equal(got, ref.numpy())


def test_a_symbolic_size_does_not_import_torch_export():
    """torch's ShapeEnv imports torch.export (0.2 s) to name the frame of a process's first symbol;
    the trace has it skip torch's files instead, and puts torch's function back after."""
    code = (
        "import sys, torch\n"
        "from torch.fx.experimental import symbolic_shapes\n"
        "original = symbolic_shapes.uninteresting_files\n"
        "from convert.frontends.pytorch.traced import TracedProgram, trace_module\n"
        "from convert.ir import Options\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x[x > 0] * 2\n"
        "assert isinstance(trace_module(M().eval(), (torch.tensor([1.0, -1.0]),), Options(), 'M'), TracedProgram)\n"
        "assert 'torch.export._trace' not in sys.modules, 'imported'\n"
        "assert symbolic_shapes.uninteresting_files is original, 'not put back'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


class _CountBranch(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = x[x > 0]
        if kept.numel() > 0:  # a branch on a count: the trace takes the example's
            return kept * 2
        return kept


class _CountValue(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * float(x[x > 0].shape[0])  # a count made a number: frozen by a trace, never taken


def test_a_branch_on_a_count_is_refused_or_frozen_and_a_count_made_a_number_is_refused(tmp_path):
    """A branch on a count is not taken from the example by default: the trace leaves it to
    torch.export, which cannot capture it either, and the module is refused naming the line; with
    ``freeze_data_branches`` the trace takes it as the example did and names it."""
    from convert.ir import ConversionError

    x = torch.tensor([1.0, -2.0, 3.0])
    line = inspect.getsourcelines(_CountBranch)[1] + 3
    assert trace_module(_CountBranch().eval(), (x,), Options(), "CountBranch") is None
    with pytest.raises(ConversionError, match=f"test_pytorch_traced.py:{line} `if kept.numel\\(\\) > 0:`"):
        _converted(_CountBranch().eval(), (x,), tmp_path)
    options = Options(extra={"freeze_data_branches": True})
    assert isinstance(trace_module(_CountBranch().eval(), (x,), options, "CountBranch"), TracedProgram)
    assert len(options.diagnostics.notes) == 1, options.diagnostics.notes
    assert "the trace froze 1" in options.diagnostics.notes[0], options.diagnostics.notes
    assert f"test_pytorch_traced.py:{line} `if kept.numel() > 0:` (the example: True)" in options.diagnostics.notes[0]
    model = load_module(_CountBranch().eval(), (x,), Options(extra={"freeze_data_branches": True}))
    passes.standard_pipeline()(model)
    EXPORTER.save(model, tmp_path / "m.onnx", Options())
    np.testing.assert_allclose(run_onnx(tmp_path / "m.onnx", {"x": np.array([0.5, 2.0, -1.0], np.float32)})[0],
                               [1.0, 4.0])
    assert trace_module(_CountValue().eval(), (x,), Options(), "CountValue") is None


class _WritesOwnConstant(torch.nn.Module):
    """T5's relative position buckets: a tensor computed from constants, written in place (+=) by
    constants after a view of it was taken; the view sees the write, in eager and here."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = torch.arange(4, dtype=x.dtype)
        v = c[:2]
        c += torch.ones(4, dtype=x.dtype) * 3
        return x + torch.cat([v, c])


class _WritesALiftedConstant(torch.nn.Module):
    """The same write, after the graph read a view of the constant: that read must not see it (a
    detector's RPN: ``offset += num_anchors`` after ``top_n_idx + offset``)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = torch.arange(4, dtype=x.dtype)
        y = x[:2] * c[:2]
        c += torch.ones(4, dtype=x.dtype) * 3
        return y, x + c


class _ViewsAConstantThenWritesIt(torch.nn.Module):
    """A graph op takes a view of a computed constant (expand_as), which is then written: eager's
    view sees the write, a graph op on a copy would not."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = torch.arange(4, dtype=x.dtype)
        v = c.expand_as(x)
        c += torch.ones(4, dtype=x.dtype) * 3
        return v * 2


def test_constants_written_in_place_by_constants_are_folded_as_eager_wrote_them(tmp_path):
    x = torch.randn(6)
    net = _WritesOwnConstant().eval()
    assert isinstance(trace_module(net, (x,), Options(), "WritesOwnConstant"), TracedProgram)
    path, _ = _converted(net, (x,), tmp_path)
    _check(net, path, (torch.randn(6),), tol=1e-6)
    # the graph reads the constant before the write: it holds a copy taken then, as eager read it
    lifted, x4 = _WritesALiftedConstant().eval(), torch.randn(4)
    assert isinstance(trace_module(lifted, (x4,), Options(), "WritesALiftedConstant"), TracedProgram)
    path, _ = _converted(lifted, (x4,), tmp_path, name="lifted.onnx")
    _check(lifted, path, (torch.randn(4),), tol=1e-6)
    viewed, x24 = _ViewsAConstantThenWritesIt().eval(), torch.randn(2, 4)
    assert trace_module(viewed, (x24,), Options(), "ViewsAConstantThenWritesIt") is None
    path, _ = _converted(viewed, (x24,), tmp_path, name="viewed.onnx")
    _check(viewed, path, (torch.randn(2, 4),), tol=1e-6)


class _WritesAPieceOfASplit(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        a = y.split(2, dim=1)[0]
        a.add_(1)  # writes y's first two columns
        return y + 0


class _WritesTheBaseOfASplit(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        pieces = y.unbind(1)
        y.mul_(3)  # the pieces taken before see the write
        return pieces[0] + pieces[1]


class _WritesASliceOfADeadBase(torch.nn.Module):
    """GhostNet's module: the first channels of a concatenation, then ``x += shortcut`` on them."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.cat([x, torch.tanh(x)], dim=1)
        z = y[:, :3]
        z += x[:, 1:4]
        return z * 2


class _WritesASliceOfALiveBase(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.cat([x, torch.tanh(x)], dim=1)
        z = y[:, 2:5]
        z += 1
        return y - x.sum()


@pytest.mark.parametrize(("net", "traced"), [(_WritesAPieceOfASplit, False), (_WritesTheBaseOfASplit, False),
                                             (_WritesASliceOfADeadBase, True), (_WritesASliceOfALiveBase, False)])
def test_writes_through_views_are_traced_only_where_nothing_reads_the_written_memory_after(tmp_path, net, traced):
    """A write through a view is kept as a rebinding of the view only when neither its base nor another view
    of it is read after the write; a piece of ``split``/``unbind`` is a view too (such writes were rebound
    and the file computed the unwritten tensor). The rest goes to torch.export, functionalized: every file
    matches eager, from the module and from its traced file."""
    module = net().eval()
    x = torch.randn(2, 6, 5)
    assert (trace_module(module, (x,), Options(), net.__name__) is not None) == traced
    path, _ = _converted(module, (x,), tmp_path)
    _check(module, path, (torch.randn(2, 6, 5),))
    with torch.no_grad():
        script = torch.jit.trace(module, (x,), check_trace=False)
    torch.jit.save(script, tmp_path / "m.pt")
    _check(module, _file_converted(tmp_path / "m.pt", tmp_path, "file.onnx"), (x,))


class _MaskFromNewZeros(torch.nn.Module):
    """Swin's shifted-window mask: ``x.new_zeros(size)`` filled region by region with constants."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = x.new_zeros((x.shape[-2], x.shape[-1]))
        count = 0
        for rows in (slice(0, -3), slice(-3, -1), slice(-1, None)):
            for cols in (slice(0, -2), slice(-2, None)):
                mask[rows, cols] = count
                count += 1
        like = torch.full_like(x, 0.5)
        like[..., 0] = 2.0
        return x * mask + like * torch.ones_like(x)


def test_a_mask_made_by_new_zeros_and_constants_is_folded_and_matches_eager(tmp_path):
    """new_zeros/full_like/ones_like read only their argument's dtype (and shape): with fixed sizes their
    result folds, and so do the writes of constants into it, which were writes through views of a computed
    tensor (Swin went to torch.export: 4.0 s against 0.8 s). With a dynamic batch the ``_like`` results
    have a symbolic size and are not folded; the file still matches eager on another batch."""
    module = _MaskFromNewZeros().eval()
    x = torch.randn(2, 3, 6, 5)
    program = trace_module(module, (x,), Options(), "MaskFromNewZeros")
    assert program is not None
    path, _ = _converted(module, (x,), tmp_path)
    _check(module, path, (torch.randn(2, 3, 6, 5),))
    import onnx
    from onnx import numpy_helper

    inits = [numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer]
    assert any(a.shape == (6, 5) for a in inits)  # the mask, folded with what was written into it
    options = Options(dynamic_batch=True)
    model = load_module(module, (x,), options)
    passes.standard_pipeline()(model)
    EXPORTER.save(model, tmp_path / "dyn.onnx", options)
    _check(module, tmp_path / "dyn.onnx", (torch.randn(4, 3, 6, 5),))


class _IndexAfterAWholeDimension(torch.nn.Module):
    """LeViT's attention biases: ``biases[:, idxs]``, an index list whose first entry is None."""

    def __init__(self) -> None:
        super().__init__()
        self.biases = torch.nn.Parameter(torch.randn(4, 9))
        self.register_buffer("idxs", torch.randint(0, 9, (5, 5)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.biases[:, self.idxs] + x[:, torch.tensor([2, 0])].sum()


def test_an_index_list_with_a_whole_dimension_is_traced_and_matches_eager(tmp_path):
    """The trace's check for boolean-mask indices asked a None entry of the index list for its scalar type,
    which raises inside torch: LeViT went to torch.export (1.26 s against 0.39 s)."""
    module = _IndexAfterAWholeDimension().eval()
    x = torch.randn(2, 4, 5, 5)
    assert trace_module(module, (x,), Options(), "IndexAfterAWholeDimension") is not None
    path, _ = _converted(module, (x,), tmp_path)
    _check(module, path, (torch.randn(2, 4, 5, 5),))
