"""Benchmark: the kernel copy under the ONNX writer, alone (the measurements behind convert/ir/io.py).

Copies file ranges with plain ``os`` calls, no toolkit code, so each choice the writer makes can be
checked on the machine at hand:

- ``offsets``: 1000 MiB of a dense file with ``copy_file_range``, the destination at various
  offsets from the source's, each with and without reserving its blocks first (``fallocate``);
- ``sparse``: a 3 GiB sparse file (one 4 KiB block of data in every 64 KiB) copied extent by extent
  (``SEEK_DATA``/``SEEK_HOLE`` and a copy per extent), from 1, 2 and 4 threads;
- ``calls``: the same dense 1.5 GiB in one call and in three, at offsets that are not multiples of
  64 KiB.

Each case: a fresh destination, ``os.sync()`` first, median of ``--repeat``.

    python benchmarks/bench_copy_kernel.py [--dir DIR] [--repeat 3] [--cases offsets,sparse,calls]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


def _copy(src: int, dst: int, src_at: int, dst_at: int, length: int) -> None:
    done = 0
    while done < length:
        n = os.copy_file_range(src, dst, length - done, src_at + done, dst_at + done)
        if n == 0:
            raise OSError("source ended early")
        done += n


def _timed(dest: Path, work) -> float:  # type: ignore[no-untyped-def]
    dest.unlink(missing_ok=True)
    os.sync()
    t0 = time.perf_counter()
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        work(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - t0


def _dense_file(path: Path, size: int) -> None:
    block = np.random.default_rng(0).uniform(-1, 1, 4 << 20).astype(np.float32).tobytes()
    with open(path, "wb") as f:
        for off in range(0, size, len(block)):
            f.write(block[: min(len(block), size - off)])


def offsets(work: Path, repeat: int) -> list[tuple[str, float]]:
    src_path = work / "dense.bin"
    if not src_path.exists():
        _dense_file(src_path, 1610 << 20)
    length = 1000 << 20
    cases = [(0, 0), (2564, 2564), (43524, 2564), (43524, 43524), (0, 4096), (4096, 8192), (0, 2564),
             (0, 16384), (0, 32768), (0, 65536), (65536, 65536 + (2 << 20))]
    rows = []
    src = os.open(src_path, os.O_RDONLY)
    try:
        for src_at, dst_at in cases:
            for reserve in (False, True):
                def job(dst: int, src_at: int = src_at, dst_at: int = dst_at, reserve: bool = reserve) -> None:
                    if reserve:
                        _libc.fallocate(dst, 0, dst_at, length)
                    _copy(src, dst, src_at, dst_at, length)

                t = statistics.median(_timed(work / "out.bin", job) for _ in range(repeat))
                rows.append((f"1000 MiB, source at {src_at}, destination at {dst_at}"
                             f"{', blocks reserved' if reserve else ''}", t))
    finally:
        os.close(src)
    return rows


def _sparse_file(path: Path, size: int) -> None:
    data = np.random.default_rng(1).bytes(4096)
    with open(path, "wb") as f:
        f.truncate(size)
        for off in range(0, size, 65536):
            f.seek(off)
            f.write(data)


def _copy_extents(path: Path, dst: int, begin: int, end: int) -> None:
    src = os.open(path, os.O_RDONLY)
    try:
        pos = begin
        while pos < end:
            try:
                data = os.lseek(src, pos, os.SEEK_DATA)
            except OSError:
                return
            if data >= end:
                return
            hole = min(os.lseek(src, data, os.SEEK_HOLE), end)
            _copy(src, dst, data, data, hole - data)
            pos = hole
    finally:
        os.close(src)


def sparse(work: Path, repeat: int) -> list[tuple[str, float]]:
    src_path = work / "sparse.bin"
    size = 3 << 30
    if not src_path.exists():
        _sparse_file(src_path, size)
    rows = []
    for threads in (1, 2, 4):
        def job(dst: int, threads: int = threads) -> None:
            os.ftruncate(dst, size)
            step = size // threads
            workers = [threading.Thread(target=_copy_extents, args=(src_path, dst, i * step, (i + 1) * step))
                       for i in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()

        t = statistics.median(_timed(work / "out.bin", job) for _ in range(repeat))
        rows.append((f"3 GiB sparse, 49,152 extents of 4 KiB, {threads} thread(s)", t))
    return rows


def calls(work: Path, repeat: int) -> list[tuple[str, float]]:
    src_path = work / "dense.bin"
    if not src_path.exists():
        _dense_file(src_path, 1610 << 20)
    third = 536848900  # a 11585 x 11585 float32 tensor: not a multiple of 64 KiB
    rows = []
    src = os.open(src_path, os.O_RDONLY)
    try:
        for n in (1, 3):
            def job(dst: int, n: int = n) -> None:
                _libc.fallocate(dst, 0, 0, 3 * third)
                step = 3 * third // n
                for i in range(n):
                    _copy(src, dst, i * step, i * step, step)

            t = statistics.median(_timed(work / "out.bin", job) for _ in range(repeat))
            rows.append((f"1.5 GiB in {n} call(s), blocks reserved", t))
    finally:
        os.close(src)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, help="work folder (default: a temporary one, removed after)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cases", default="offsets,sparse,calls")
    args = parser.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench_copy_"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        for case in args.cases.split(","):
            for name, seconds in {"offsets": offsets, "sparse": sparse, "calls": calls}[case](work, args.repeat):
                print(f"{name:70s} {seconds:6.3f} s", flush=True)
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
