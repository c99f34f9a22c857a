"""Benchmark pytorch->onnx: ours beside torch.onnx.export, on a ResNet-50-sized net and a >2 GiB net.

Each conversion runs in a fresh process that first builds the model (seeded, identical across
processes), then converts it; the table gives the conversion's wall time, the process's peak
resident set (VmHWM, the model included) and the anonymous memory the conversion added on top
of the built model, the ONNX node count, and ONNX Runtime's median CPU latency.

``--zoo`` runs the look-alikes of ``models/pytorch/zoo.py`` instead (BERT, DistilBERT, GPT-2,
MobileNetV3, RAFT-style, YOLOv8 head, T5/Whisper encoders, and the RetinaNet / Faster R-CNN detectors)
and the real Hugging Face transformers models of ``models/pytorch/hf.py`` (names ``hf:bert``...,
when transformers is installed; built from small configs, nothing downloaded) and the real
torchvision and timm models of ``models/pytorch/vision_zoo.py`` (``tv:resnet18``, ``timm:dla34``...,
when both import; ``det:NAME`` torchvision detectors; ``yolo:yolov8n``... when ultralytics imports
too; ``traced:NAME`` converts the same model from a ``.pt`` traced before the clock starts, every
tool reading the file), and adds whether each file matches eager: max error relative to the output's scale over
every output and two inputs, a match when <= 1e-4 (detections compared as sets: same count, rows sorted by box),
or, past it, when the parity check's float64 rule calls it float32 rounding (``f64``: no more than
twice as far from the net run in float64 as eager float32 is).

    python benchmarks/bench_pytorch.py [--models resnet50,big] [--runs 20]
    python benchmarks/bench_pytorch.py --zoo [--models bert,gpt2,hf:bert,hf:gpt2_lm,tv:resnet18,timm:dla34]
    python benchmarks/bench_pytorch.py --zoo --models traced:det:maskrcnn_resnet50_fpn
    python benchmarks/bench_pytorch.py --zoo --tools 'ours,torch.onnx (TorchScript)' --models tv:resnet18,det:...
    python benchmarks/bench_pytorch.py --zoo --repeat 3 ...   (median of 3 conversions a tool, taking turns)

``--zoo`` ends with ours against the TorchScript exporter, model by model, in this run: conversion time
and peak RSS ratios (parity excluded), and their geometric means. Ours is timed through the API a
user's script calls (``convert.convert(..., check=False)``; the CLI runs the same), the exporters
through ``torch.onnx.export``; each includes importing what it needs beyond torch.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _measure import compile_toolkit, user_env

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("resnet50", "big")
TOOLS = ("ours", "torch.onnx (TorchScript)", "torch.onnx (dynamo)")


def _status(key: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


MATCH_TOL = 1e-4


def _zoo() -> object:
    sys.path.insert(0, str(ROOT / "models" / "pytorch"))
    import zoo

    return zoo


def _hf() -> object | None:
    """Return models/pytorch/hf.py, or None when transformers is not installed."""
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        return None
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(ROOT / "models" / "pytorch"))
    import hf

    return hf


def _vision(name: str) -> object | None:
    """Return models/pytorch/vision_zoo.py, or None when the package model ``name`` comes from (timm
    for ``timm:``, torchvision for the others) is not importable.

    Only that package is imported, before the clock, as a user's script building the model imports it.
    Importing timm for every model imported torch._dynamo and some 1,600 modules that the TorchScript
    exporter would otherwise import on the clock: SSDlite's export measured 0.49-0.51 s with timm
    imported and 0.62-0.69 s without (ours 0.61-0.66 s either way).
    """
    try:
        if name.startswith("timm:"):
            import timm  # noqa: F401
        import torchvision  # noqa: F401  (vision_zoo's detectors, classifiers and heads)
    except Exception:  # a torchvision built for another torch fails with RuntimeError, not ImportError
        return None
    sys.path.insert(0, str(ROOT / "models" / "pytorch"))
    import vision_zoo

    return vision_zoo


def _zoo_build(name: str) -> tuple[object, object]:
    """Return (model, inputs(seed)) of zoo model ``name``; ``hf:NAME`` is a Hugging Face model,
    ``tv:NAME`` / ``timm:NAME`` / ``yolo:NAME`` a torchvision / timm / ultralytics one."""
    name = name.removeprefix("traced:")  # the same model, converted from a traced .pt
    if name.startswith(("tv:", "timm:", "yolo:", "det:")):
        vision = _vision(name)
        if vision is None:
            raise SystemExit(f"{name}: torchvision or timm is not importable (pip install '.[vision]')")
        return vision.build(name)  # type: ignore[attr-defined,no-any-return]
    if name.startswith("hf:"):
        hf = _hf()
        if hf is None:
            raise SystemExit(f"{name}: transformers is not installed (pip install '.[hf]')")
        return hf.build(name[3:])  # type: ignore[attr-defined,no-any-return]
    return _zoo().build(name)  # type: ignore[attr-defined,no-any-return]


def _build(name: str) -> tuple[object, tuple[object, ...]]:
    import torch

    if name.startswith("zoo:"):
        model, inputs = _zoo_build(name[4:])
        return model, inputs(1)  # type: ignore[operator]
    if name == "resnet50":
        sys.path.insert(0, str(ROOT / "models" / "pytorch"))
        import nets

        return nets.build("resnet50", size=224), (torch.rand(1, 3, 224, 224),)
    torch.manual_seed(0)
    dims = [16384, 12288, 16384, 12288]
    model = torch.nn.Sequential(*[torch.nn.Linear(a, b, bias=False) for a, b in itertools.pairwise(dims)]).eval()
    return model, (torch.rand(1, dims[0]),)


def child(tool: str, name: str, out: str) -> None:
    """Build model ``name``, convert it with ``tool`` to ``out``, print a JSON measurement."""
    import inspect

    import torch

    model, example = _build(name)
    names = list(inspect.signature(model.forward).parameters)[: len(example)]  # type: ignore[attr-defined]
    traced = Path(out).with_suffix(".pt") if name.startswith("zoo:traced:") else None
    if traced is not None:  # traced before the clock starts; every tool then reads the file
        with torch.no_grad():
            torch.jit.save(torch.jit.trace(model, example, check_trace=False), traced)  # type: ignore[arg-type]
    base_anon = _status("RssAnon")
    peak = [base_anon]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _status("RssAnon"))
            time.sleep(0.005)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    t0 = time.perf_counter()
    error = ""
    try:
        if tool == "ours (torch.export)":  # ours with the fast capture (traced.py) turned off
            from convert.exporters.onnx import EXPORTER
            from convert.frontends.pytorch.capture import export_module, script_to_program
            from convert.frontends.pytorch.lower import lower_program
            from convert.ir import Options, existing_objects_spared, passes

            options = Options()
            with existing_objects_spared():  # as the API runs a conversion (convert/ir/gcwindow.py)
                program = (script_to_program(torch.jit.load(traced), example, name) if traced is not None  # type: ignore[no-untyped-call, arg-type]
                           else export_module(model, example, options, name, fast=False))  # type: ignore[arg-type]
                ir_model = lower_program(program, source=name, options=options, input_names=names)
                passes.standard_pipeline()(ir_model)
                EXPORTER.save(ir_model, Path(out), options)
        elif tool == "ours":  # what a user calls: the API (the CLI's conversion), the parity check off
            import convert

            convert.convert(str(traced) if traced is not None else model, None if traced is not None else example,
                            to="onnx", out=out, check=False)
        else:
            source = torch.jit.load(traced) if traced is not None else model  # type: ignore[no-untyped-call]
            with torch.no_grad():
                torch.onnx.export(source, example, out, opset_version=17, input_names=names,
                                  dynamo=tool.endswith("(dynamo)"))
    except Exception as exc:  # reported in the table
        error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:120] if str(exc).strip() else ''}"
    seconds = time.perf_counter() - t0
    stop.set()
    thread.join()
    print("@@" + json.dumps({"seconds": seconds, "hwm": _status("VmHWM"), "extra_anon": peak[0] - base_anon,
                             "error": error}))


def _node_count(path: Path) -> int:
    import onnx

    return len(onnx.load(str(path), load_external_data=False).graph.node)


def _latency(path: Path, name: str, runs: int) -> float:
    import numpy as np
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    session = ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])
    shape = (1, 3, 224, 224) if name == "resnet50" else (1, 16384)
    feed = {session.get_inputs()[0].name: np.random.default_rng(0).random(shape, dtype=np.float32)}
    for _ in range(3):
        session.run(None, feed)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _match(path: Path, name: str) -> tuple[float, bool]:
    """Return the max error relative to scale of ``path`` against eager, over two inputs and all
    outputs, and whether every output past MATCH_TOL is float32 rounding by the parity check's own
    rule: no more than FLOAT64_MARGIN times as far from the net run in float64 as eager float32 is."""
    import copy

    import numpy as np
    import onnxruntime as ort
    import torch

    from convert.parity.compare import FLOAT64_MARGIN

    model, inputs = _zoo_build(name[4:])  # the eager model, for a traced file too
    so = ort.SessionOptions()
    so.log_severity_level = 3
    session = ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])
    base = name[4:].removeprefix("traced:")
    detector = base in _zoo().DETECTORS or base.startswith("det:")  # type: ignore[attr-defined]
    wide: object = None

    def flat(model_: object, xs: tuple[torch.Tensor, ...]) -> list[np.ndarray]:
        with torch.no_grad():
            out = model_(*xs)  # type: ignore[operator]
        # every tensor of the output (a tuple, or a transformers ModelOutput), in pytree order
        leaves = [r.numpy() for r in torch.utils._pytree.tree_leaves(out) if isinstance(r, torch.Tensor)]
        if detector and leaves:  # detections as sets: rows sorted by box
            order = np.lexsort(leaves[0].T[::-1])
            leaves = [r[order] for r in leaves]
        return leaves

    worst, rounding = 0.0, True
    for seed in (1, 2):
        xs = inputs(seed)  # type: ignore[operator]
        refs = flat(model, xs)
        feeds = {i.name: x.numpy() for i, x in zip(session.get_inputs(), xs, strict=False)}
        outs = session.run(None, feeds)
        if len(outs) != len(refs) or (detector and outs[0].shape != refs[0].shape):
            return float("inf"), False
        if detector:
            order = np.lexsort(outs[0].T[::-1])
            outs = [o[order] for o in outs]
        for k, (ours, ref) in enumerate(zip(outs, refs, strict=True)):
            r = ref.astype(np.float64)
            if ours.shape != r.shape:
                return float("inf"), False
            err = float(np.abs(ours - r).max()) / max(float(np.abs(r).max()), 1e-30)
            worst = max(worst, err)
            if err <= MATCH_TOL or not rounding:
                continue
            if wide is None:
                wide = copy.deepcopy(model).double()  # type: ignore[attr-defined]
            r64 = flat(wide, tuple(x.double() if x.is_floating_point() else x for x in xs))
            if len(r64) != len(refs) or r64[k].shape != r.shape:
                rounding = False
                continue
            scale = max(float(np.abs(r64[k]).max()), 1e-30)
            theirs = float(np.abs(r - r64[k]).max()) / scale
            rounding = float(np.abs(ours - r64[k]).max()) / scale <= FLOAT64_MARGIN * theirs
    return worst, rounding


def _zoo_table(names: list[str], tools: tuple[str, ...] = TOOLS, repeat: int = 1) -> None:
    """Convert each model with each tool ``repeat`` times, the tools taking turns (so that a slow
    moment of the machine falls on both), each conversion in a fresh process; report the median
    time and peak RSS, and the first file's match against eager."""
    import torch

    compile_toolkit()  # the toolkit's bytecode cache, as an installed package has it (user_env)

    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs; match: max|onnx - eager| / max|eager| <= {MATCH_TOL} "
          "on two inputs, every output ('f64': past it by float32 rounding, the parity check's float64 rule)"
          + (f"; time and peak RSS: median of {repeat} runs, the tools taking turns" if repeat > 1 else ""))
    header = f"{'model':30} {'exporter':26} {'file':>4} {'match':>6} {'max err':>9} {'time s':>7} {'peak RSS':>10}"
    rows = [header, "-" * len(header)]
    totals = {tool: [0, 0] for tool in tools}
    timing: dict[str, dict[str, tuple[float, int]]] = {}  # model -> tool -> (seconds, peak RSS)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            runs: dict[str, list[dict[str, object]]] = {tool: [] for tool in tools}
            for rep, tool in itertools.product(range(repeat), tools):
                out = Path(tmp) / f"{name}_{tools.index(tool)}_{rep}.onnx"
                env = user_env(toolkit_on_path=True)
                r = subprocess.run([sys.executable, __file__, "--child", tool, f"zoo:{name}", str(out)],
                                   capture_output=True, text=True, env=env, timeout=3600)
                lines = [ln for ln in r.stdout.splitlines() if ln.startswith("@@")]
                m = json.loads(lines[-1][2:]) if lines else {"error": (r.stderr.strip().splitlines()
                                                                        or ["failed"])[-1][:100]}
                if not m["error"] and not out.exists():
                    m["error"] = "no file written"
                runs[tool].append(m)
            for tool in tools:
                failed = [m for m in runs[tool] if m["error"]]
                if failed:
                    why = str(failed[0]["error"])[:70]
                    rows.append(f"{name:30} {tool:26} {'no':>4} {'-':>6} {'':>9} failed: {why}")
                    print(rows[-1], flush=True)
                    continue
                seconds = statistics.median(float(m["seconds"]) for m in runs[tool])  # type: ignore[arg-type]
                hwm = int(statistics.median(int(m["hwm"]) for m in runs[tool]))  # type: ignore[call-overload]
                timing.setdefault(name, {})[tool] = (seconds, hwm)
                try:
                    err, rounding = _match(Path(tmp) / f"{name}_{tools.index(tool)}_0.onnx", f"zoo:{name}")
                except Exception as exc:  # an exported file ORT cannot run
                    rows.append(f"{name:30} {tool:26} {'yes':>4} {'no':>6} ORT failed: {str(exc)[:60]}")
                    print(rows[-1], flush=True)
                    totals[tool][0] += 1
                    continue
                ok = err <= MATCH_TOL or rounding
                verdict = "yes" if err <= MATCH_TOL else "f64" if rounding else "no"
                totals[tool][0] += 1
                totals[tool][1] += int(ok)
                rows.append(f"{name:30} {tool:26} {'yes':>4} {verdict:>6} {err:9.1e} "
                            f"{seconds:7.2f} {hwm / 2**20:8.0f} M")
                print(rows[-1], flush=True)
    rows.append("")
    for tool, (files, matching) in totals.items():
        rows.append(f"{tool:26} files {files}/{len(names)}, matching {matching}/{len(names)}")
    rows += _ratios(timing)
    print("\n".join(rows))


def _ratios(timing: dict[str, dict[str, tuple[float, int]]]) -> list[str]:
    """Ours against the TorchScript exporter, model by model (this run): time and peak RSS ratios."""
    peer = "torch.onnx (TorchScript)"
    pairs = {n: (t["ours"], t[peer]) for n, t in timing.items() if "ours" in t and peer in t}
    if not pairs:
        return []
    w = max(30, *(len(n) for n in pairs))
    out = ["", f"ours / {peer} (conversion only, parity excluded; < 1 is ours faster or smaller)",
           f"{'model':{w}} {'ours s':>7} {'TS s':>7} {'time':>6} {'ours RSS':>9} {'TS RSS':>9} {'RSS':>6}"]
    for name, ((s_ours, m_ours), (s_ts, m_ts)) in pairs.items():
        out.append(f"{name:{w}} {s_ours:7.2f} {s_ts:7.2f} {s_ours / s_ts:6.2f} {m_ours / 2**20:7.0f} M "
                   f"{m_ts / 2**20:7.0f} M {m_ours / m_ts:6.2f}")
    times = [o[0] / t[0] for o, t in pairs.values()]
    mems = [o[1] / t[1] for o, t in pairs.values()]
    out.append(f"{'geometric mean':{w}} {'':7} {'':7} {statistics.geometric_mean(times):6.2f} {'':9} {'':9} "
               f"{statistics.geometric_mean(mems):6.2f}")
    return out


def main() -> None:
    """Run every (model, tool) pair and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=1, help="--zoo: convert each model this many times with "
                        "each tool, the tools taking turns, and report the median time and peak RSS")
    parser.add_argument("--zoo", action="store_true", help="the models/pytorch/zoo.py look-alikes, with matching")
    parser.add_argument("--tools", default=None, help=f"comma-separated subset of: {', '.join(TOOLS)} "
                        "(e.g. 'ours,torch.onnx (TorchScript)'), or 'ours (torch.export)': ours without "
                        "the fast capture (frontends/pytorch/traced.py), for a before/after in one run")
    parser.add_argument("--child", nargs=3, metavar=("TOOL", "MODEL", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    if args.zoo:
        zoo, hf, vision = _zoo(), _hf(), _vision("timm:")  # the parent lists every family: both packages
        names = [*zoo.ZOO, *zoo.DETECTORS, *(f"hf:{n}" for n in (hf.HF if hf is not None else ())),  # type: ignore[attr-defined]
                 *(n for n in ([*vision.NAMES, *vision.DETECTORS] if vision is not None else ())  # type: ignore[attr-defined]
                   if not n.startswith("yolo:") or vision.ultralytics_available())]  # type: ignore[attr-defined]
        tools = tuple(t.strip() for t in args.tools.split(",")) if args.tools else TOOLS
        _zoo_table(args.models.split(",") if args.models else names, tools, max(1, args.repeat))
        return
    args.models = args.models or ",".join(MODELS)
    import torch

    compile_toolkit()  # the toolkit's bytecode cache, as an installed package has it (user_env)
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs; latency: ONNX Runtime CPU, median of {args.runs}")
    header = f"{'model':9} {'exporter':26} {'time s':>7} {'peak RSS':>10} {'+anon':>9} {'nodes':>6} {'ORT ms':>8}"
    rows = [header, "-" * len(header)]
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            for tool in TOOLS:
                out = Path(tmp) / f"{name}_{tool.split()[0].replace('.', '_')}_{len(rows)}.onnx"
                env = user_env(toolkit_on_path=True)
                r = subprocess.run([sys.executable, __file__, "--child", tool, name, str(out)],
                                   capture_output=True, text=True, env=env, timeout=3600)
                lines = [ln for ln in r.stdout.splitlines() if ln.startswith("@@")]
                if not lines:
                    tail = (r.stderr.strip().splitlines() or ["failed"])[-1][:100]
                    rows.append(f"{name:9} {tool:26} failed: {tail}")
                    continue
                m = json.loads(lines[-1][2:])
                if m["error"]:
                    rows.append(f"{name:9} {tool:26} failed: {m['error']}")
                    continue
                nodes = _node_count(out)
                lat = _latency(out, name, args.runs if name == "resnet50" else max(3, args.runs // 4))
                rows.append(f"{name:9} {tool:26} {m['seconds']:7.2f} {m['hwm'] / 2**30:8.2f} G "
                            f"{m['extra_anon'] / 2**20:7.0f} M {nodes:6d} {lat * 1e3:8.2f}")
                print(rows[-1], flush=True)
                for f in Path(tmp).iterdir():
                    f.unlink()
    print("\n".join(rows))


if __name__ == "__main__":
    main()
