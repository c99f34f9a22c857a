"""Benchmark paddle->onnx: our reader against paddle2onnx, on the same models in the same run.

For each model: conversion wall time and peak RSS (each conversion in a fresh process; the RSS
after imports is reported too, since paddle2onnx must import PaddlePaddle), then the ONNX
Runtime latency of both results (one thread, median of N runs) and how far they are apart.

    python benchmarks/bench_paddle.py [--models resnet50 mobilenet_v3_large]
        [--p2o-python /path/to/venv/bin/python] [--work DIR] [--runs 30]

paddle2onnx pins onnx<=1.17.0, so it lives in its own environment: pass that environment's
python (it needs paddlepaddle and paddle2onnx; nothing is installed by this script). Building
the test models needs PaddlePaddle in this environment (models/paddle/build_models.py).
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

ROOT = Path(__file__).resolve().parents[1]

_RSS = """
def _rss():
    fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024
"""

_OURS = _RSS + """
import json, sys, time
from pathlib import Path
from convert.frontends.paddle import FRONTEND
from convert.exporters.onnx import EXPORTER
from convert.ir import Options, passes
base, _ = _rss()
t0 = time.perf_counter()
model = FRONTEND.load([Path(sys.argv[1])], Options())
passes.standard_pipeline()(model)
read = time.perf_counter() - t0
_, read_peak = _rss()
EXPORTER.save(model, Path(sys.argv[2]), Options(external_data=sys.argv[3] == "external" or None))
dt = time.perf_counter() - t0
_, peak = _rss()
print(json.dumps({"seconds": dt, "rss_after_imports_mib": base, "peak_rss_mib": peak,
                  "read_and_passes_s": read, "peak_rss_before_export_mib": read_peak}))
"""

_P2O = _RSS + """
import json, os, sys, time, contextlib, io
os.environ["POLYGRAPHY_AUTOINSTALL_DEPS"] = "0"
import paddle2onnx
base, _ = _rss()
t0 = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    paddle2onnx.export(sys.argv[1], sys.argv[3], save_file=sys.argv[2], opset_version=17,
                       auto_upgrade_opset=True, enable_onnx_checker=True, optimize_tool=sys.argv[4])
dt = time.perf_counter() - t0
_, peak = _rss()
print(json.dumps({"seconds": dt, "rss_after_imports_mib": base, "peak_rss_mib": peak,
                  "version": paddle2onnx.__version__}))
"""


def _child(python: str, code: str, *args: str, env: dict[str, str] | None = None) -> dict[str, object]:
    proc = subprocess.run([python, "-c", code, *args], capture_output=True, text=True, env=env, timeout=1800)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": f"exit {proc.returncode}: {' | '.join(tail)}"}
    return json.loads(lines[-1])


def _latencies(paths: dict[str, Path], x: object, runs: int) -> dict[str, float]:
    """Median single-thread ONNX Runtime latency (ms) of each model, runs interleaved.

    Interleaving matters on a shared machine: load from other processes then hits every model
    alike instead of whichever happened to run during a busy spell.
    """
    import onnxruntime as ort

    sessions = {}
    for key, path in paths.items():
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        sessions[key] = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    feeds = {key: {sess.get_inputs()[0].name: x} for key, sess in sessions.items()}
    for key, sess in sessions.items():
        for _ in range(3):
            sess.run(None, feeds[key])
    times: dict[str, list[float]] = {key: [] for key in sessions}
    for _ in range(runs):
        for key, sess in sessions.items():
            t0 = time.perf_counter()
            sess.run(None, feeds[key])
            times[key].append(time.perf_counter() - t0)
    return {key: statistics.median(t) * 1000 for key, t in times.items()}


def _outputs(path: Path, x: object) -> object:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print a table (and JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet50", "mobilenet_v3_large"])
    parser.add_argument("--p2o-python", default=None, help="python of an environment with paddle2onnx")
    parser.add_argument("--p2o-optimize", default="None", choices=["None", "onnxoptimizer"],
                        help="paddle2onnx optimize_tool ('polygraphy' would pip-install onnx_graphsurgeon)")
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    import numpy as np

    work = args.work or Path(tempfile.mkdtemp(prefix="bench_paddle_"))
    subprocess.run([sys.executable, str(ROOT / "models" / "paddle" / "build_models.py"), str(work / "nets"),
                    *args.models], check=True, capture_output=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    results = []
    for name in args.models:
        folder = work / "nets" / name
        program = folder / "inference.json"
        row: dict[str, object] = {"model": name}
        ours_onnx, p2o_onnx = work / f"{name}.ours.onnx", work / f"{name}.p2o.onnx"
        row["ours"] = _child(sys.executable, _OURS, str(folder), str(ours_onnx), "inline", env=env)
        row["ours_external"] = _child(sys.executable, _OURS, str(folder), str(work / f"{name}.ext.onnx"),
                                      "external", env=env)
        if args.p2o_python:
            row["paddle2onnx"] = _child(args.p2o_python, _P2O, str(program), str(p2o_onnx),
                                        str(folder / "inference.pdiparams"), args.p2o_optimize)
        shape = _input_shape(name)
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        done = {key: path for key, path in (("ours", ours_onnx), ("paddle2onnx", p2o_onnx))
                if isinstance(row.get(key), dict) and "error" not in row[key] and path.is_file()}  # type: ignore[operator]
        for key, ms in _latencies(done, x, args.runs).items():
            row[key]["ort_latency_ms"] = ms  # type: ignore[index]
            row[key]["onnx_mib"] = done[key].stat().st_size / 2**20  # type: ignore[index]
        if len(done) == 2:
            ours, ref = _outputs(done["ours"], x), _outputs(done["paddle2onnx"], x)
            row["max_rel_diff"] = float(np.abs(ours - ref).max() / np.abs(ref).max())
        results.append(row)
    _print(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


def _input_shape(name: str) -> tuple[int, ...]:
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_models", ROOT / "models" / "paddle" / "build_models.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return tuple(mod.NETS[name][1])


def _print(results: list[dict[str, object]]) -> None:
    print(f"{'model':<20} {'route':<14} {'convert s':>9} {'RSS MiB (imports/peak)':>23} {'ORT ms':>8} {'ONNX MiB':>9}")
    for row in results:
        for key in ("ours", "ours_external", "paddle2onnx"):
            info = row.get(key)
            if not isinstance(info, dict):
                continue
            if "error" in info:
                print(f"{row['model']:<20} {key:<12} failed: {info['error']}")
                continue
            rss = f"{info['rss_after_imports_mib']:.0f} / {info['peak_rss_mib']:.0f}"
            print(f"{row['model']:<20} {key:<14} {info['seconds']:>9.2f} {rss:>23} "
                  f"{info.get('ort_latency_ms', float('nan')):>8.2f} {info.get('onnx_mib', float('nan')):>9.1f}")
        info = row.get("ours")
        if isinstance(info, dict) and "read_and_passes_s" in info:
            print(f"{'':<20} ours: read + passes {info['read_and_passes_s']:.2f} s, peak RSS before export "
                  f"{info['peak_rss_before_export_mib']:.0f} MiB (the rest is the ONNX exporter)")
        if "max_rel_diff" in row:
            print(f"{'':<20} max |ours - paddle2onnx| / max |paddle2onnx| = {row['max_rel_diff']:.1e}")


if __name__ == "__main__":
    sys.exit(main())
