"""Benchmark darknet->onnx: conversion time and peak memory for yolov3 and yolov4 (~250 MB of weights).

Beside each conversion, a plain copy of the ``.weights`` file sets the floor for I/O. Each step runs
in a fresh process; the table gives wall time, peak anonymous RSS (what the conversion allocated;
file-backed pages of the mapped weights are not counted) and VmHWM (peak resident set, mapped file
pages included). Weights are seeded random (``write_random_weights``), written once per run.

    python benchmarks/bench_darknet.py [--models yolov3,yolov4] [--size 608] [--check] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _measure import ROOT, Measurement, measure

CFGS = {
    "yolov3": Path("/usr/share/darknet/cfg/yolov3.cfg"),
    "yolov4": ROOT.parent / "shared" / "models" / "darknet" / "yolov4.cfg",
    "yolov3-tiny": Path("/usr/share/darknet/cfg/yolov3-tiny.cfg"),
    "yolov4-tiny": ROOT.parent / "shared" / "models" / "darknet" / "yolov4-tiny.cfg",
}


def _steps(cfg: Path, weights: Path, out: Path, check: bool) -> dict[str, str]:
    paths = f"[{str(cfg)!r}, {str(weights)!r}]"
    steps = {
        "copy .weights": f"import shutil\nshutil.copyfile({str(weights)!r}, {str(out.with_suffix('.copy'))!r})",
        "load (IR, lazy)": "from pathlib import Path\nfrom convert.frontends.darknet import FRONTEND\n"
                           f"from convert.ir import Options\nFRONTEND.load([Path(p) for p in {paths}], Options())",
        "convert -> onnx": f"import convert\nconvert.convert({paths}, to='onnx', out={str(out)!r}, check=False)",
        "... external data": f"import convert\nconvert.convert({paths}, to='onnx', out={str(out)!r}, check=False, "
                             "external_data=True)",
    }
    if check:
        steps["convert + parity"] = (f"import convert\nr = convert.convert({paths}, to='onnx', out={str(out)!r})\n"
                                     "assert r.report.passed")
    return steps


def _fmt(m: Measurement) -> str:
    if not m.ok:
        return f"FAILED: {m.error}"
    return f"{m.seconds:7.2f} s  {m.rss_anon_peak / 2**20:8.0f} MiB  {m.vm_hwm / 2**20:8.0f} MiB"


def main() -> None:
    """Run the benchmark and print a table (and JSON with --json)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="yolov3,yolov4")
    ap.add_argument("--size", type=int, default=0, help="override [net] width/height (0: the cfg's)")
    ap.add_argument("--check", action="store_true", help="also time a conversion with the parity check")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    import re

    from convert.frontends.darknet.random_weights import write_random_weights

    results: dict[str, dict[str, dict[str, object]]] = {}
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        for name in args.models.split(","):
            src = CFGS[name]
            if not src.is_file():
                print(f"{name}: {src} is absent, skipped")
                continue
            text = src.read_text()
            if args.size:
                text = re.sub(r"(?m)^\s*width\s*=.*$", f"width={args.size}", text, count=1)
                text = re.sub(r"(?m)^\s*height\s*=.*$", f"height={args.size}", text, count=1)
            cfg = tmp / src.name
            cfg.write_text(text)
            weights = write_random_weights(cfg, tmp / f"{name}.weights")
            size = weights.stat().st_size
            print(f"\n{name}: {cfg.name}, {size / 2**20:.1f} MiB of weights")
            print(f"  {'step':<18} {'wall':>9}  {'RssAnon peak':>12}  {'VmHWM':>12}")
            results[name] = {}
            for step, body in _steps(cfg, weights, tmp / f"{name}.onnx", args.check).items():
                m = measure(body)
                results[name][step] = {"seconds": m.seconds, "rss_anon_peak": m.rss_anon_peak, "vm_hwm": m.vm_hwm,
                                       "ok": m.ok, "error": m.error, "weights_bytes": size}
                print(f"  {step:<18} {_fmt(m)}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
