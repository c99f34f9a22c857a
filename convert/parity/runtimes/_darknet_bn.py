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
"""

from __future__ import annotations

import mmap
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from convert.ir import Options, TensorProtocol

__all__ = ["FORMULA_GAP_LIMIT", "Matched", "Region", "denominator", "matched_weights", "param_regions"]

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


def _transform(buf: memoryview | mmap.mmap, regions: list[Region], runtime: str, target: str
               ) -> tuple[float, str]:
    worst, where = 0.0, ""
    for r in regions:
        v = np.frombuffer(buf, dtype="<f4", count=r.count, offset=r.offset)
        want = denominator(target, v.astype(np.float64))
        new = _inverse(runtime, target, v.astype(np.float64)).astype("<f4")
        # The denominator the runtime will compute from the stored float32, in float32 like it does.
        got = denominator(runtime, new, np.float32).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = np.abs(got - want) / np.abs(want)
        rel = np.where(np.isfinite(want), rel, 0.0)  # a variance no formula takes (negative) is the file's
        gap = float(np.nanmax(rel, initial=0.0)) if rel.size else 0.0
        if gap > worst:
            worst, where = gap, r.where
        np.frombuffer(buf, dtype="<f4", count=r.count, offset=r.offset)[:] = new  # type: ignore[index]
    return worst, where


@contextmanager
def matched_weights(cfg: Path, weights: Path, options: Options, *, runtime: str, target: str
                    ) -> Iterator[Matched]:
    """Yield a temporary copy of ``weights`` that makes ``runtime`` compute ``target``'s batch norm.

    ``runtime``: ``libdarknet`` or ``opencv``; ``target``: ``original`` or ``alexeyab``. When the
    runtime already computes the target (libdarknet, original), ``weights`` itself is yielded. The
    copy streams (file copy, then the variance regions rewritten in place through a memory map):
    memory does not grow with the model.
    """
    if (runtime, target) == ("libdarknet", "original"):
        yield Matched(weights, 0.0, "")
        return
    regions = param_regions(cfg, weights, options)
    with tempfile.TemporaryDirectory(prefix="convert-darknet-ref-") as tmp:
        out = Path(tmp) / weights.name
        shutil.copyfile(weights, out)
        gap, where = 0.0, ""
        if regions:
            with open(out, "r+b") as fh, mmap.mmap(fh.fileno(), 0) as mm:
                gap, where = _transform(mm, regions, runtime, target)
                mm.flush()
        os.chmod(out, 0o400)
        yield Matched(out, gap, where if gap > FORMULA_GAP_LIMIT else "")
