"""Make a Darknet reference runtime compute the batch norm of the lineage a conversion used.

The two Darknet forks and OpenCV's Darknet importer divide a batch-normalised channel by
different denominators of the stored rolling variance ``v``:

==============================  ==========================
pjreddie's Darknet (libdarknet)  ``sqrt(v) + 1e-6``
AlexeyAB's Darknet               ``sqrt(v + 1e-5)``
OpenCV's importer                ``sqrt(v + 1e-6)``
==============================  ==========================

They agree while variances are large (random weights) and differ by up to tens of percent on
trained weights, whose variances can be 1e-4 and smaller. A reference that runs one formula cannot
judge a conversion made for another. So the reference gets its own copy of the ``.weights`` file in
which every rolling variance ``v`` is replaced by the ``v'`` whose denominator in the reference's
formula equals the target lineage's denominator of ``v``:

- libdarknet, target AlexeyAB: ``v' = (sqrt(v + 1e-5) - 1e-6)^2``
- OpenCV, target AlexeyAB: ``v' = v + 9e-6``
- OpenCV, target original: ``v' = (sqrt(v) + 1e-6)^2 - 1e-6``

The reference then computes the target fork's function with its own code for everything else. The
copy is exact up to float32 storage of ``v'``, except where ``v'`` cancels (OpenCV, original
lineage, variances below about 1e-9): ``formula_gap`` measures the relative error left in each
denominator as the runtime computes it in float32, so the verdict can say NOT VERIFIED there
instead of FAIL.

The variance regions are found by converting the cfg with a weight source that records where each
rolling variance lies in the file (the frontend owns the layout), so nothing here restates it.

The matched file is streamed, not copied: the reference reads it through a named pipe from a thread
that sends the original file with the variance regions replaced, so the check needs no room in the
temporary folder (a copy of yolov3's 236 MiB did, and a small ``TMPDIR`` failed the check of a
conversion that had succeeded). Both references read their weights once, front to back. Where
named pipes do not exist (Windows), a copy is written instead.

A variance below zero is a broken file (trained statistics never are): its square root is NaN in
every fork. ``negative_variances`` says where they are, so the verdict can name the layer.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from convert.ir import Options, TensorProtocol

__all__ = ["FORMULA_GAP_LIMIT", "Matched", "Matching", "Negative", "Region", "denominator", "matched_path",
           "matched_weights", "matching", "negative_variances", "param_regions"]

#: A reference whose denominators stay within this relative error of the target's computes the
#: target's function to float32 accuracy; beyond it the verdict cannot blame the conversion.
FORMULA_GAP_LIMIT = 1e-6

# The formula each runtime or lineage applies; the keys are what ``denominator`` takes.
_EPS_PJREDDIE = 1e-6
_EPS_ALEXEYAB = 1e-5
_EPS_OPENCV = 1e-6


def denominator(formula: str, v: np.ndarray, dtype: type = np.float64) -> np.ndarray:
    """Return what ``formula`` divides a normalised channel by, computed in ``dtype``.

    ``formula``: ``original`` / ``libdarknet`` (pjreddie), ``alexeyab``, or ``opencv``.
    """
    v = np.asarray(v, dtype)
    if formula in ("original", "libdarknet"):
        return np.asarray(np.sqrt(v) + dtype(_EPS_PJREDDIE), dtype)
    if formula == "alexeyab":
        return np.asarray(np.sqrt(v + dtype(_EPS_ALEXEYAB)), dtype)
    if formula == "opencv":
        return np.asarray(np.sqrt(v + dtype(_EPS_OPENCV)), dtype)
    raise ValueError(f"unknown batch-norm formula {formula!r}")


def _inverse(runtime: str, target: str, v: np.ndarray) -> np.ndarray:
    """Return the variances (float64) whose ``runtime`` denominator is ``target``'s of ``v``."""
    d = denominator(target, v)
    # The runtimes add their epsilon as a float32 constant: invert with that constant's exact value.
    if runtime == "libdarknet":
        return np.square(d - float(np.float32(_EPS_PJREDDIE)))
    if runtime == "opencv":
        return np.square(d) - float(np.float32(_EPS_OPENCV))
    raise ValueError(f"unknown reference runtime {runtime!r}")


@dataclass(frozen=True, slots=True)
class Region:
    """Where one layer's parameters of one role lie in a ``.weights`` file."""

    offset: int
    count: int
    where: str  # "layer 3 [convolutional] (net.cfg:25)"


def param_regions(cfg: Path, weights: Path, options: Options, role: str = "variance") -> list[Region]:
    """Return where the parameters of ``role`` lie in ``weights``, in file order, by converting ``cfg``.

    ``role``: a ``ParamRequest`` role (``variance``, ``scale``, ``mean``, ``bias``, ``weight``). The
    conversion reads nothing but the header: parameters are lazy slices.
    """
    from convert.frontends.darknet.loader import build_model
    from convert.frontends.darknet.weights import FileWeights, ParamRequest

    class _Recording(FileWeights):
        def __init__(self) -> None:
            super().__init__(weights, allow_trailing=True, cfg_name=cfg.name)
            self.regions: list[Region] = []

        def take(self, req: ParamRequest) -> TensorProtocol:
            if req.role == role:
                count = int(np.prod(req.shape, dtype=np.int64))
                self.regions.append(Region(self.offset, count, f"layer {req.layer} {req.where}"))
            return super().take(req)

    source = _Recording()
    quiet = replace(options, diagnostics=type(options.diagnostics)())  # its notes were said once already
    build_model(cfg, source, quiet)
    return [r for r in source.regions if r.offset + 4 * r.count <= source.file_size]


@dataclass(slots=True)
class Matched:
    """A matched copy of a ``.weights`` file, and what the reference cannot express exactly."""

    path: Path
    #: The largest relative error left in a denominator, and where ("" when none is above the limit).
    gap: float
    gap_where: str


def _read(fd: int, region: Region) -> np.ndarray:
    """Read one region's float32 values (little-endian) with ``pread``."""
    data = os.pread(fd, 4 * region.count, region.offset)
    return np.frombuffer(data, dtype="<f4", count=len(data) // 4)


def _rewrite(v: np.ndarray, runtime: str, target: str) -> tuple[np.ndarray, float]:
    """Return the variances ``runtime`` needs for ``target``'s denominators of ``v``, and the largest
    relative error left in a denominator as the runtime computes it (float32)."""
    with np.errstate(invalid="ignore", divide="ignore"):  # a negative variance is NaN in every formula
        want = denominator(target, v.astype(np.float64))
        new = _inverse(runtime, target, v.astype(np.float64)).astype("<f4")
        # The denominator the runtime will compute from the stored float32, in float32 like it does.
        got = denominator(runtime, new, np.float32).astype(np.float64)
        rel = np.abs(got - want) / np.abs(want)
    rel = np.where(np.isfinite(want), rel, 0.0)  # a variance no formula takes (negative) is the file's
    return new, float(np.nanmax(rel, initial=0.0)) if rel.size else 0.0


def _patches(weights: Path, regions: Sequence[Region], runtime: str, target: str
             ) -> tuple[list[tuple[int, bytes]], float, str]:
    """Return the rewritten variance regions as ``(offset, bytes)``, the worst gap and where it is."""
    patches: list[tuple[int, bytes]] = []
    worst, where = 0.0, ""
    fd = os.open(weights, os.O_RDONLY)
    try:
        for r in regions:
            new, gap = _rewrite(_read(fd, r), runtime, target)
            if gap > worst:
                worst, where = gap, r.where
            patches.append((r.offset, new.tobytes()))
    finally:
        os.close(fd)
    return sorted(patches), worst, where


_CHUNK = 1 << 20


def _copy(src: int, out: int, start: int, length: int) -> None:
    """Copy ``length`` bytes of ``src`` from ``start`` to the pipe ``out``: spliced by the kernel where
    it can (0.2 s for 236 MiB against 1.2 s through Python buffers), else read and written."""
    end = start + length
    pos = start
    splice = getattr(os, "splice", None)
    while pos < end and splice is not None:
        try:
            moved = splice(src, out, min(end - pos, 1 << 30), offset_src=pos)
        except OSError:  # a file system or kernel that does not splice: copy the rest by hand
            break
        if moved == 0:
            return
        pos += moved
    while pos < end:
        data = os.pread(src, min(_CHUNK, end - pos), pos)
        if not data:
            return
        _write_all(out, data)
        pos += len(data)


def _write_all(out: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(out, view):]


def _send(weights: Path, patches: Sequence[tuple[int, bytes]], out: int) -> None:
    """Write ``weights`` to the pipe ``out`` with ``patches`` in place of its bytes."""
    src = os.open(weights, os.O_RDONLY)
    try:
        size = os.fstat(src).st_size
        pos = 0
        for offset, data in patches:
            _copy(src, out, pos, offset - pos)
            _write_all(out, data)
            pos = offset + len(data)
        _copy(src, out, pos, size - pos)
    finally:
        os.close(src)


@contextmanager
def _streamed(weights: Path, patches: Sequence[tuple[int, bytes]]) -> Iterator[Path]:
    """Yield a named pipe that a thread fills with ``weights`` patched (a copy where there are no pipes)."""
    with tempfile.TemporaryDirectory(prefix="convert-darknet-ref-") as tmp:
        path = Path(tmp) / weights.name
        if not hasattr(os, "mkfifo"):  # pragma: no cover - Windows
            shutil.copyfile(weights, path)
            with open(path, "r+b") as fh:
                for offset, data in patches:
                    fh.seek(offset)
                    fh.write(data)
            yield path
            return
        os.mkfifo(path, 0o600)
        opened = threading.Event()

        def feed() -> None:
            try:
                out = os.open(path, os.O_WRONLY)  # blocks until the reference opens the pipe
            except OSError:
                return
            opened.set()
            try:
                _send(weights, patches, out)
            except OSError:  # the reference stopped reading (it failed, or needed no more)
                pass
            finally:
                os.close(out)

        writer = threading.Thread(target=feed, name="darknet-matched-weights", daemon=True)
        writer.start()
        try:
            yield path
        finally:
            if not opened.is_set():  # the reference never opened the pipe: let the writer's open return
                with contextlib.suppress(OSError):
                    os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
            writer.join()


@dataclass(frozen=True, slots=True)
class Matching:
    """How to make a runtime compute a lineage's batch norm on one ``.weights`` file."""

    patches: list[tuple[int, bytes]]  # (offset, rewritten variances); empty: the file as it is
    gap: float  # the largest relative error left in a denominator
    gap_where: str  # where it is ("" when within ``FORMULA_GAP_LIMIT``)


def matching(cfg: Path, weights: Path, options: Options, *, runtime: str, target: str) -> Matching:
    """Return the variances ``runtime`` needs to compute ``target``'s batch norm on ``weights``.

    ``runtime``: ``libdarknet`` or ``opencv``; ``target``: ``original`` or ``alexeyab``. Reads the
    variance regions only (memory: the variances).
    """
    if (runtime, target) == ("libdarknet", "original"):
        return Matching([], 0.0, "")
    patches, gap, where = _patches(weights, param_regions(cfg, weights, options), runtime, target)
    return Matching(patches, gap, where if gap > FORMULA_GAP_LIMIT else "")


@contextmanager
def matched_path(weights: Path, match: Matching) -> Iterator[Path]:
    """Yield a path that reads as ``weights`` with ``match``'s variances: the file itself when there are
    none to rewrite, else a named pipe streaming it (read it once, inside the ``with``): the
    temporary folder holds nothing."""
    if not match.patches:
        yield weights
        return
    with _streamed(weights, match.patches) as path:
        yield path


@contextmanager
def matched_weights(cfg: Path, weights: Path, options: Options, *, runtime: str, target: str
                    ) -> Iterator[Matched]:
    """Yield a path to ``weights`` made to make ``runtime`` compute ``target``'s batch norm
    (``matching`` then ``matched_path``)."""
    match = matching(cfg, weights, options, runtime=runtime, target=target)
    with matched_path(weights, match) as path:
        yield Matched(path, match.gap, match.gap_where)


@dataclass(frozen=True, slots=True)
class Negative:
    """A layer whose rolling variances hold values no batch norm takes (below zero, or NaN)."""

    where: str  # "layer 3 [convolutional] (net.cfg:25)"
    count: int  # how many of them
    total: int  # of how many channels
    lowest: float  # the lowest of them (NaN when all are NaN)


def negative_variances(cfg: Path, weights: Path, options: Options, target: str) -> list[Negative]:
    """Return the layers whose variances give ``target``'s batch norm a NaN denominator, in file order."""
    found = []
    fd = os.open(weights, os.O_RDONLY)
    try:
        for r in param_regions(cfg, weights, options):
            v = _read(fd, r)
            with np.errstate(invalid="ignore"):
                bad = ~np.isfinite(denominator(target, v.astype(np.float64)))
            if bad.any():
                lowest = float(np.nanmin(v[bad])) if not np.isnan(v[bad]).all() else float("nan")
                found.append(Negative(r.where, int(bad.sum()), int(v.size), lowest))
    finally:
        os.close(fd)
    return found
