"""Benchmark: a >2 GiB ONNX model through the IR, beside a plain copy and beside onnx's own save.

Prints wall time, throughput (GB/s) next to a plain copy of the same bytes on the same disk, and
peak memory divided by model size (anonymous RSS, and peak RSS with file-backed pages), for:

- ``convert`` (ONNX -> IR -> ONNX with streamed external data),
- the peer: ``onnx.load`` + ``onnx.save_model(save_as_external_data=True)``, the usual way to
  re-save a large ONNX model, which loads every weight into memory.

Also start-up: ``convert --help`` and a small ONNX -> ONNX conversion, and whether either imports a
framework.

    python benchmarks/bench_large_onnx.py [--dir DIR] [--n 16384] [--layers 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _measure import ROOT, gib, measure, mib

sys.path.insert(0, str(ROOT / "models"))
import large_onnx


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, help="work folder (default: a temporary one, removed after)")
    parser.add_argument("--n", type=int, default=16384)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--skip-peer", action="store_true", help="skip onnx.load/save (needs RAM = model size)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench_large_"))
    work.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict[str, float | str]] = {}
    try:
        src = large_onnx.build(work / "src", n=args.n, layers=args.layers)
        data = src.parent / "large.data"
        size = data.stat().st_size
        # Make the source really occupy the disk (a sparse file reads as free zeros).
        with open(data, "r+b") as f:
            chunk = b"\x01" * (64 * 1024**2)
            for off in range(0, size, len(chunk) * 8):
                f.seek(off)
                f.write(chunk[: min(len(chunk), size - off)])
        print(f"model: {args.layers} x MatMul {args.n}x{args.n} float32 = {gib(size)} of weights")

        (work / "copy").mkdir(exist_ok=True)
        t0 = time.perf_counter()
        shutil.copyfile(data, work / "copy" / "large.data")
        copy_s = time.perf_counter() - t0
        rows["plain copy (shutil.copyfile)"] = {"seconds": copy_s, "gbps": size / copy_s / 1e9}

        out = work / "ours" / "large.onnx"
        out.parent.mkdir(exist_ok=True)
        m = measure(f"""
            import convert
            convert.convert({str(src)!r}, to="onnx", out={str(out)!r}, check=False)
        """)
        rows["convert onnx->onnx"] = _row(m, size)

        if not args.skip_peer:
            peer = work / "peer" / "large.onnx"
            peer.parent.mkdir(exist_ok=True)
            m = measure(f"""
                import onnx
                model = onnx.load({str(src)!r})
                onnx.save_model(model, {str(peer)!r}, save_as_external_data=True,
                                all_tensors_to_one_file=True, location="large.onnx.data")
            """)
            rows["peer: onnx.load + onnx.save_model"] = _row(m, size)

        startup = {}
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "convert", "--help"], check=True, capture_output=True)
        startup["convert --help (s)"] = time.perf_counter() - t0
        small = work / "small.onnx"
        import models_onnx_for_bench as mob

        mob.write_small(small)
        probe = ("import sys, time; t=time.perf_counter(); import convert; "
                 f"convert.convert({str(small)!r}, to='onnx', out={str(work / 'small_out.onnx')!r}); "
                 "print(time.perf_counter()-t, [m for m in ('torch','paddle','cv2','tensorflow') if m in sys.modules])")
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
        startup["small onnx->onnx with parity, whole process (s)"] = time.perf_counter() - t0
        startup["frameworks imported"] = r.stdout.strip().split(" ", 1)[1]
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)

    head = ("tool", "time", "GB/s", "peak RssAnon", "/size", "peak RSS", "/size")
    print("\n{:38s} {:>8s} {:>7s} {:>13s} {:>7s} {:>10s} {:>7s}".format(*head))
    for name, row in rows.items():
        if "rss_anon" in row:
            print(f"{name:38s} {row['seconds']:8.2f} {row['gbps']:7.2f} {mib(row['rss_anon']):>13s} "
                  f"{row['anon_ratio']:7.1%} {mib(row['hwm']):>10s} {row['hwm_ratio']:7.1%}")
        elif "error" in row:
            print(f"{name:38s} failed: {row['error']}")
        else:
            print(f"{name:38s} {row['seconds']:8.2f} {row['gbps']:7.2f}")
    print()
    for k, v in startup.items():
        print(f"{k}: {v if isinstance(v, str) else f'{v:.2f}'}")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "startup": startup, "bytes": size}, indent=2))


def _row(m, size: int) -> dict[str, float | str]:  # type: ignore[no-untyped-def]
    if not m.ok:
        return {"error": m.error}
    return {"seconds": m.seconds, "gbps": size / m.seconds / 1e9, "rss_anon": m.rss_anon_peak,
            "anon_ratio": m.rss_anon_peak / size, "hwm": m.vm_hwm, "hwm_ratio": m.vm_hwm / size}


if __name__ == "__main__":
    main()
