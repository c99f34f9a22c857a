"""Benchmark: large ONNX models through the IR, beside `cp` and beside onnx's own save.

Two sources, each converted ONNX -> IR -> ONNX and copied with ``cp`` in the same run:

- ``sparse``: 3 x MatMul 16384x16384 float32 (3 GiB) of mostly-zero weights in a sparse data file
  (only the non-zero 4 KiB blocks are on disk), written as external data;
- ``dense``: 3 x MatMul 11585x11585 float32 (1.5 GiB) of random weights, every byte on disk,
  written inline (under the 1.8 GiB external-data threshold).

Times are whole processes, both sides: ``cp model data DIR`` against
``python -c "import convert; convert.convert(...)"`` and against the command,
``python -m convert onnx->onnx SRC -o OUT --no-check`` (start-up included), best of ``--repeat``;
the ratio is ``cp``'s time over ours (>= 1 is as fast as cp). Python's bytecode cache is on for
the timed processes (as users have it), whatever ``PYTHONDONTWRITEBYTECODE`` says. Peak memory divided by model size
(anonymous RSS, and peak RSS with file-backed pages) comes from one more, measured, run. The peer,
``onnx.load`` + ``onnx.save_model(save_as_external_data=True)``, the usual way to re-save a large
ONNX model, loads every weight into memory (``--skip-peer`` leaves it out).

Also start-up: ``convert --help`` and a small ONNX -> ONNX conversion, and whether either imports a
framework.

    python benchmarks/bench_large_onnx.py [--dir DIR] [--kinds sparse,dense] [--repeat 2] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _measure import ROOT, gib, measure, mib, user_env

sys.path.insert(0, str(ROOT / "models"))
import large_onnx

KINDS = {"sparse": (16384, 3), "dense": (11585, 3)}


def _make_sparse(data: Path, n: int, layers: int) -> None:
    """Rewrite ``data`` (as large_onnx wrote it) with holes wherever its bytes are zero.

    large_onnx writes through a memory map, which this filesystem may allocate whole; only the
    first row and the diagonal are non-zero, so those are copied into a fresh sparse file.
    """
    mm = np.memmap(data, dtype=np.float32, mode="r", shape=(layers, n, n))
    fresh = data.with_suffix(".sparse")
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, data.stat().st_size)
        row = n * 4
        for i in range(layers):
            base = i * n * row
            os.pwrite(fd, mm[i, 0].tobytes(), base)
            diag = np.ascontiguousarray(mm[i].diagonal())
            for r in range(1, n):
                os.pwrite(fd, diag[r:r + 1].tobytes(), base + r * row + r * 4)
    finally:
        os.close(fd)
    del mm
    os.replace(fresh, data)


def _make_dense(data: Path) -> None:
    """Overwrite every byte of ``data`` with random float32 values in [-1, 1)."""
    size = data.stat().st_size
    block = np.random.default_rng(0).uniform(-1, 1, 16 << 20 >> 2).astype(np.float32).tobytes()
    with open(data, "r+b") as f:
        for off in range(0, size, len(block)):
            f.write(block[: min(len(block), size - off)])


# Processes run as a user's do, with Python's bytecode cache (``user_env``). The first of the
# repeated runs writes the cache; the best run is kept.
_ENV = user_env()


def _wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=_ENV)
    return time.perf_counter() - t0


def _bench_kind(kind: str, work: Path, repeat: int, skip_peer: bool) -> tuple[dict[str, dict[str, float | str]], int]:
    n, layers = KINDS[kind]
    src = large_onnx.build(work / kind / "src", n=n, layers=layers)
    data = src.parent / "large.data"
    if kind == "sparse":
        _make_sparse(data, n, layers)
    else:
        _make_dense(data)
    size = data.stat().st_size
    on_disk = data.stat().st_blocks * 512
    print(f"{kind}: {layers} x MatMul {n}x{n} float32 = {gib(size)} of weights, {gib(on_disk)} on disk", flush=True)
    rows: dict[str, dict[str, float | str]] = {}
    out_dir = work / kind / "out"
    ours_cmd = [sys.executable, "-c", "import sys, convert; convert.convert(sys.argv[1], to='onnx', "
                "out=sys.argv[2], check=False)", str(src), str(out_dir / "large.onnx")]
    cli_cmd = [sys.executable, "-m", "convert", "onnx->onnx", str(src), "-o", str(out_dir / "large.onnx"),
               "--no-check"]
    cp_cmd = ["cp", str(src), str(data), str(out_dir)]
    times: dict[str, list[float]] = {"cp": [], "ours": [], "cli": []}
    for _ in range(repeat):
        for name, cmd in (("cp", cp_cmd), ("ours", ours_cmd), ("cli", cli_cmd)):
            shutil.rmtree(out_dir, ignore_errors=True)
            out_dir.mkdir()
            times[name].append(_wall(cmd))
    cp_s, ours_s = min(times["cp"]), min(times["ours"])
    rows[f"{kind}: cp (whole process)"] = {"seconds": cp_s, "gbps": size / cp_s / 1e9}
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir()
    m = measure(f"""
        import convert
        convert.convert({str(src)!r}, to="onnx", out={str(out_dir / "large.onnx")!r}, check=False)
    """)
    row = _row(m, size)
    row.update(seconds=ours_s, gbps=size / ours_s / 1e9, vs_cp=cp_s / ours_s)
    rows[f"{kind}: convert onnx->onnx (whole process)"] = row
    cli_s = min(times["cli"])
    rows[f"{kind}: the convert command, --no-check (whole process)"] = {
        "seconds": cli_s, "gbps": size / cli_s / 1e9, "vs_cp": cp_s / cli_s}
    written = sorted(p.name for p in out_dir.iterdir())
    print(f"  cp {', '.join(f'{t:.2f}' for t in times['cp'])} s; ours {', '.join(f'{t:.2f}' for t in times['ours'])} "
          f"s -> {cp_s / ours_s:.2f}x cp; the command {', '.join(f'{t:.2f}' for t in times['cli'])} s -> "
          f"{cp_s / cli_s:.2f}x cp; wrote {written}", flush=True)
    shutil.rmtree(out_dir, ignore_errors=True)
    if not skip_peer:
        peer = work / kind / "peer" / "large.onnx"
        peer.parent.mkdir(exist_ok=True)
        m = measure(f"""
            import onnx
            model = onnx.load({str(src)!r})
            onnx.save_model(model, {str(peer)!r}, save_as_external_data=True,
                            all_tensors_to_one_file=True, location="large.onnx.data")
        """)
        rows[f"{kind}: peer onnx.load + save_model"] = _row(m, size)
        shutil.rmtree(peer.parent, ignore_errors=True)
    shutil.rmtree(work / kind, ignore_errors=True)
    return rows, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, help="work folder (default: a temporary one, removed after)")
    parser.add_argument("--kinds", default="sparse,dense")
    parser.add_argument("--repeat", type=int, default=2, help="runs of cp and of ours (best kept)")
    parser.add_argument("--skip-peer", action="store_true", help="skip onnx.load/save (needs RAM = model size)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench_large_"))
    work.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict[str, float | str]] = {}
    sizes: dict[str, int] = {}
    try:
        for kind in args.kinds.split(","):
            kind_rows, sizes[kind] = _bench_kind(kind, work, args.repeat, args.skip_peer)
            rows.update(kind_rows)

        startup = {}
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "convert", "--help"], check=True, capture_output=True, env=_ENV)
        startup["convert --help (s)"] = time.perf_counter() - t0
        small = work / "small.onnx"
        import models_onnx_for_bench as mob

        mob.write_small(small)
        probe = ("import sys, time; t=time.perf_counter(); import convert; "
                 f"convert.convert({str(small)!r}, to='onnx', out={str(work / 'small_out.onnx')!r}); "
                 "print(time.perf_counter()-t, [m for m in ('torch','paddle','cv2','tensorflow') if m in sys.modules])")
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True, env=_ENV)
        startup["small onnx->onnx with parity, whole process (s)"] = time.perf_counter() - t0
        startup["frameworks imported"] = r.stdout.strip().split(" ", 1)[1]
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)

    head = ("tool", "time", "GB/s", "x cp", "peak RssAnon", "/size", "peak RSS", "/size")
    print("\n{:44s} {:>7s} {:>6s} {:>5s} {:>13s} {:>6s} {:>10s} {:>6s}".format(*head))
    for name, row in rows.items():
        if "error" in row:
            print(f"{name:44s} failed: {row['error']}")
        elif "rss_anon" in row:
            ratio = f"{row['vs_cp']:5.2f}" if "vs_cp" in row else f"{'':5}"
            print(f"{name:44s} {row['seconds']:7.2f} {row['gbps']:6.2f} {ratio} {mib(row['rss_anon']):>13s} "
                  f"{row['anon_ratio']:6.1%} {mib(row['hwm']):>10s} {row['hwm_ratio']:6.1%}")
        else:
            print(f"{name:44s} {row['seconds']:7.2f} {row['gbps']:6.2f}")
    print()
    for k, v in startup.items():
        print(f"{k}: {v if isinstance(v, str) else f'{v:.2f}'}")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "startup": startup, "bytes": sizes}, indent=2))


def _row(m, size: int) -> dict[str, float | str]:  # type: ignore[no-untyped-def]
    if not m.ok:
        return {"error": m.error}
    return {"seconds": m.seconds, "gbps": size / m.seconds / 1e9, "rss_anon": m.rss_anon_peak,
            "anon_ratio": m.rss_anon_peak / size, "hwm": m.vm_hwm, "hwm_ratio": m.vm_hwm / size}


if __name__ == "__main__":
    main()
