"""Convert the same PyTorch models with two source trees and compare the files they write.

For a refactor of the PyTorch frontend that must not change behaviour (#49): each model is
converted by ``convert.convert`` (what a user calls, the parity check off) in a fresh process
per (tree, model), the two trees taking turns, and the two ONNX files compared proto by proto:
every node's op_type, domain, inputs, outputs and attributes (subgraphs included), every
initializer's name, dtype, dims and bytes, and the graph's inputs and outputs. Conversion times
are of the same run, so their ratio is the refactor's speed; on a shared machine the process's CPU
time (all its threads) is the steadier measure, and is reported beside the wall time.

Usage (from either tree)::

    python benchmarks/same_files_pytorch.py --base /work/wt-base --new /work/wt-layers \
        [--models zoo:bert,tv:resnet18,traced:tv:resnet18,...] [--repeat 2]

Model names: those of ``benchmarks/bench_pytorch.py --zoo`` (``bert``, ``tv:resnet18``,
``det:ssdlite320_mobilenet_v3_large``, ``traced:NAME``: the same model read from a traced .pt),
``export:NAME`` (ours with the fast capture off: ``export_module(fast=False)``; ``export:traced:NAME``:
the traced file read by torch's TorchScript converter, ``script_to_program``, instead of directly),
``cond``: a module of torch.cond and while_loop (ONNX If and Loop), and ``scripted``: a
``torch.jit.script`` file with a branch and a loop (read by torch's converter, ``tsfold.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

DEFAULT = ("mobilenetv3,bert,gpt2,yolov8_head,raft,retinanet,fasterrcnn,tv:resnet18,tv:swin_t,"
           "det:ssdlite320_mobilenet_v3_large,det:fasterrcnn_mobilenet_v3_large_320_fpn,"
           "det:maskrcnn_resnet50_fpn,det:keypointrcnn_resnet50_fpn,traced:tv:resnet18,traced:bert,"
           "traced:det:ssdlite320_mobilenet_v3_large,traced:det:maskrcnn_resnet50_fpn,"
           "export:tv:resnet18,export:bert,cond")


def _cond_model() -> tuple[object, tuple[object, ...]]:
    import torch
    import torch._dynamo  # torch.cond's capture reads torch._dynamo.exc without importing it
    from torch._higher_order_ops.while_loop import while_loop

    class Branchy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            y = self.lin(x)
            both = torch.cond(y.mean() > 0, lambda t: (t * 2, t.max()), lambda t: (-t, t.min()), (y,))

            def cond_fn(i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
                return i < 3

            def body_fn(i: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                return i + 1, v * 0.5 + 1

            _, looped = while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), y))
            return both[0] + both[1], looped

    torch.manual_seed(0)
    return Branchy().eval(), (torch.randn(2, 4),)


def _scripted_model() -> tuple[object, tuple[object, ...]]:
    import torch

    class Scripted(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(self.bn(self.conv(x)))
            if y.shape[-1] > 4:
                y = torch.nn.functional.interpolate(y, size=[int(y.shape[-2] // 2), int(y.shape[-1] // 2)])
            for _ in range(2):
                y = y * 0.5 + 1.0
            return y.flatten(1)

    torch.manual_seed(0)
    return torch.jit.script(Scripted().eval()), (torch.randn(1, 3, 16, 16),)


def _build(name: str) -> tuple[object, tuple[object, ...]]:
    if name == "cond":
        return _cond_model()
    if name == "scripted":
        return _scripted_model()
    sys.path.insert(0, str(HERE))
    import bench_pytorch

    model, inputs = bench_pytorch._zoo_build(name)  # type: ignore[attr-defined]
    return model, inputs(1)  # type: ignore[operator]


def child(tree: str, name: str, out: str) -> None:
    """Convert model ``name`` with the toolkit of ``tree`` to ``out``; print the time as JSON."""
    sys.path.insert(0, tree)
    import torch

    import convert

    if not convert.__file__.startswith(tree):
        raise SystemExit(f"convert imported from {convert.__file__}, not {tree}")
    base = name.removeprefix("export:")
    model, example = _build(base.removeprefix("traced:"))
    traced = Path(out).with_suffix(".pt") if base.startswith("traced:") or base == "scripted" else None
    if traced is not None:
        with torch.no_grad():
            script = model if base == "scripted" else torch.jit.trace(model, example, check_trace=False)  # type: ignore[arg-type]
            torch.jit.save(script, traced)  # type: ignore[arg-type]
    t0, c0 = time.perf_counter(), time.process_time()
    if name.startswith("export:traced:"):  # the file read by torch's TorchScript converter
        from convert.exporters.onnx import EXPORTER
        from convert.frontends.pytorch.capture import script_to_program
        from convert.frontends.pytorch.lower import lower_program
        from convert.ir import Options, existing_objects_spared, passes

        options = Options()
        with existing_objects_spared():
            program = script_to_program(torch.jit.load(traced), example, base)  # type: ignore[no-untyped-call, arg-type]
            ir_model = lower_program(program, source=base, options=options)
            passes.standard_pipeline()(ir_model)
            EXPORTER.save(ir_model, Path(out), options)
    elif name.startswith("export:"):
        from convert.exporters.onnx import EXPORTER
        from convert.frontends.pytorch.capture import export_module
        from convert.frontends.pytorch.lower import lower_program
        from convert.ir import Options, existing_objects_spared, passes

        options = Options()
        with existing_objects_spared():
            program = export_module(model, example, options, base, fast=False)  # type: ignore[arg-type]
            ir_model = lower_program(program, source=base, options=options)
            passes.standard_pipeline()(ir_model)
            EXPORTER.save(ir_model, Path(out), options)
    else:
        shapes = {"input_shapes": {"x": tuple(example[0].shape)}} if base == "scripted" else {}  # type: ignore[index]
        convert.convert(str(traced) if traced is not None else model, None if traced is not None else example,
                        to="onnx", out=out, check=False, **shapes)
    print("@@" + json.dumps({"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0}))


def _attr(a: object) -> object:
    import onnx

    if a.type == onnx.AttributeProto.GRAPH:  # type: ignore[attr-defined]
        return ("graph", _graph(a.g))  # type: ignore[attr-defined]
    if a.type == onnx.AttributeProto.GRAPHS:  # type: ignore[attr-defined]
        return ("graphs", [_graph(g) for g in a.graphs])  # type: ignore[attr-defined]
    if a.type == onnx.AttributeProto.TENSOR:  # type: ignore[attr-defined]
        return ("tensor", a.t.SerializeToString(deterministic=True))  # type: ignore[attr-defined]
    return a.SerializeToString(deterministic=True)  # type: ignore[attr-defined]


def _graph(g: object) -> object:
    from onnx import numpy_helper

    nodes = [(n.op_type, n.domain, list(n.input), list(n.output), [(a.name, _attr(a)) for a in n.attribute])
             for n in g.node]  # type: ignore[attr-defined]
    inits = [(t.name, t.data_type, list(t.dims), numpy_helper.to_array(t).tobytes())
             for t in g.initializer]  # type: ignore[attr-defined]
    ios = [v.SerializeToString(deterministic=True) for v in [*g.input, *g.output]]  # type: ignore[attr-defined]
    return nodes, inits, ios


def compare(a: Path, b: Path) -> str:
    """'' when the two files' graphs are the same; otherwise the first difference."""
    import onnx

    ga, gb = (onnx.load(str(p)).graph for p in (a, b))
    (na, ia, oa), (nb, ib, ob) = _graph(ga), _graph(gb)
    if len(na) != len(nb):
        return f"{len(na)} nodes against {len(nb)}"
    for i, (x, y) in enumerate(zip(na, nb, strict=True)):
        if x != y:
            return f"node {i} differs: {x[0]} {x[3][:2]} against {y[0]} {y[3][:2]}"
    if len(ia) != len(ib):
        return f"{len(ia)} initializers against {len(ib)}"
    for x, y in zip(ia, ib, strict=True):
        if x != y:
            return f"initializer {x[0]} differs"
    if oa != ob:
        return "graph inputs or outputs differ"
    return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="/work/wt-base")
    parser.add_argument("--new", default=str(HERE.parent))
    parser.add_argument("--models", default=DEFAULT)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    trees = {"base": str(Path(args.base).resolve()), "new": str(Path(args.new).resolve())}
    same = differ = failed = 0
    ratios: list[float] = []
    cpu_ratios: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            seconds: dict[str, list[float]] = {"base": [], "new": []}
            cpu: dict[str, list[float]] = {"base": [], "new": []}
            error = ""
            for rep in range(args.repeat):
                for label in (("base", "new") if rep % 2 == 0 else ("new", "base")):
                    out = Path(tmp) / f"{name.replace(':', '_')}_{label}_{rep}.onnx"
                    env = {**os.environ, "PYTHONPATH": trees[label]}
                    r = subprocess.run([sys.executable, __file__, "--child", trees[label], name, str(out)],
                                       capture_output=True, text=True, env=env, timeout=3600, cwd=trees[label])
                    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("@@")]
                    if not lines:
                        error = f"{label}: " + ((r.stderr.strip().splitlines() or ["failed"])[-1][:150])
                        break
                    measured = json.loads(lines[-1][2:])
                    seconds[label].append(measured["seconds"])
                    cpu[label].append(measured["cpu"])
                if error:
                    break
            if error:
                failed += 1
                print(f"{name:45} FAILED {error}", flush=True)
                continue
            diff = compare(Path(tmp) / f"{name.replace(':', '_')}_base_0.onnx",
                           Path(tmp) / f"{name.replace(':', '_')}_new_0.onnx")
            sb, sn = statistics.median(seconds["base"]), statistics.median(seconds["new"])
            cb, cn = statistics.median(cpu["base"]), statistics.median(cpu["new"])
            ratios.append(sn / sb)
            cpu_ratios.append(cn / cb)
            same += not diff
            differ += bool(diff)
            print(f"{name:45} {'identical' if not diff else 'DIFFERENT: ' + diff:12} base {sb:6.2f} s  "
                  f"new {sn:6.2f} s  ratio {sn / sb:5.2f}  (CPU time: base {cb:6.2f} s new {cn:6.2f} s ratio "
                  f"{cn / cb:5.2f})", flush=True)
    gm = statistics.geometric_mean(ratios) if ratios else float("nan")
    gc = statistics.geometric_mean(cpu_ratios) if cpu_ratios else float("nan")
    print(f"\n{same} identical, {differ} different, {failed} failed; time new/base geometric mean {gm:.3f} "
          f"(min {min(ratios, default=0):.2f}, max {max(ratios, default=0):.2f}); CPU time new/base geometric "
          f"mean {gc:.3f} (min {min(cpu_ratios, default=0):.2f}, max {max(cpu_ratios, default=0):.2f})")


if __name__ == "__main__":
    main()
