"""Helpers for the Darknet tests: cfg sizing, conversion to ONNX, reference runtimes, errors."""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from convert.exporters.onnx import EXPORTER
from convert.frontends.darknet import FRONTEND
from convert.frontends.darknet.random_weights import write_random_weights
from convert.ir import Options, passes
from convert.parity.runtimes.darknet import DarknetLib, OpenCVDarknet, find_libdarknet

ROOT = Path(__file__).resolve().parents[3]
ALEXEYAB_CFGS = ROOT / "models" / "darknet"  # AlexeyAB cfgs, committed (see its README)
SYSTEM_CFG = Path("/usr/share/darknet/cfg")

RTOL_HEAD = 1e-4  # max|ours - ref| / max|ref| on every head
SPREAD_MIN = 1e-3  # a reference whose std is below this (relative to its max) proves nothing

needs_libdarknet = pytest.mark.skipif(find_libdarknet() is None, reason="Debian's darknet is not installed")


def _has_opencv_darknet() -> bool:
    try:
        import cv2
    except ImportError:
        return False
    return hasattr(cv2, "dnn") and hasattr(cv2.dnn, "readNetFromDarknet")


needs_opencv = pytest.mark.skipif(not _has_opencv_darknet(), reason="OpenCV with the Darknet importer is missing")


def write_cfg(tmp: Path, text: str, name: str = "net.cfg") -> Path:
    """Write cfg text (dedented lines) to ``tmp/name``."""
    path = tmp / name
    path.write_text("\n".join(line.strip() for line in text.strip().splitlines()) + "\n")
    return path


def sized_cfg(src: Path, tmp: Path, size: int | None, *, drop_last: tuple[str, ...] = (),
              replace: Mapping[str, str] | None = None) -> Path:
    """Copy ``src`` to ``tmp`` with [net] width/height set to ``size`` and trailing sections dropped.

    ``replace`` maps an option name to a new value for every occurrence (e.g. crop sizes).
    """
    text = src.read_text()
    for key, value in (replace or {}).items():
        text = re.sub(rf"(?m)^\s*{key}\s*=.*$", f"{key}={value}", text)
    if size:
        text = re.sub(r"(?m)^\s*width\s*=.*$", f"width={size}", text, count=1)
        text = re.sub(r"(?m)^\s*height\s*=.*$", f"height={size}", text, count=1)
    for kind in drop_last:
        idx = text.rfind(f"[{kind}]")
        if idx >= 0 and all(not line.strip() or line.strip().startswith(("#", ";")) or "=" in line
                            for line in text[idx:].splitlines()[1:]):
            text = text[:idx]
    out = tmp / src.name
    out.write_text(text)
    return out


def convert_to_onnx(cfg: Path, weights: Path | None, out: Path, **extra: object) -> tuple[Path, Options]:
    """Convert with the frontend, run the standard passes (validated), export with external data."""
    options = Options(extra=dict(extra))
    paths = [cfg] if weights is None else [cfg, weights]
    model = FRONTEND.load(paths, options)
    passes.standard_pipeline(validate=True)(model)
    EXPORTER.save(model, out, Options(external_data=True))
    return out, options


def run_onnx(path: Path, x: np.ndarray) -> dict[str, np.ndarray]:
    """Run ``path`` in ONNX Runtime on the single input ``x``; outputs by name, in graph order."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, {sess.get_inputs()[0].name: x}), strict=True))


def seeded_input(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Uniform [0, 1) input, like an image."""
    return np.random.default_rng(seed).random(shape, dtype=np.float32)


def rel_err(ref: np.ndarray, got: np.ndarray) -> float:
    """max|got - ref| / max|ref|."""
    assert ref.shape == got.shape, (ref.shape, got.shape)
    return float(np.abs(got.astype(np.float64) - ref).max() / max(float(np.abs(ref).max()), 1e-30))


def assert_not_degenerate(ref: np.ndarray, name: str) -> None:
    """The reference must have spread: not all equal, not all near zero."""
    scale = float(np.abs(ref).max())
    assert scale > 1e-6, f"{name}: reference is all zeros"
    assert float(ref.std()) > SPREAD_MIN * scale, f"{name}: reference has no spread (std {ref.std():.3g})"


def compare(ref: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray], tol: float = RTOL_HEAD) -> dict[str, float]:
    """Assert every reference output matches; return the relative errors."""
    assert list(ref) == [k for k in got if k in ref], (list(ref), list(got))
    errs = {}
    for name, r in ref.items():
        assert_not_degenerate(r, name)
        errs[name] = rel_err(r, got[name])
        assert errs[name] <= tol, f"{name}: relative error {errs[name]:.3g} > {tol}"
    return errs


def parity(cfg: Path, tmp: Path, runtime: str, *, seed: int = 0, tol: float = RTOL_HEAD,
           weights: Path | None = None, trained: bool = False, **extra: object) -> dict[str, float]:
    """Random weights for ``cfg``, convert, run ours and the reference, compare every output.

    ``trained``: with trained-like batch-norm statistics (``trained_like``), converted with the
    default lineage; the reference computes that lineage's batch norm on matched weights. Without
    it, libdarknet checks the conversion made for its own (original) lineage.
    """
    if runtime == "libdarknet" and not trained:  # pjreddie's Darknet: the conversion for its lineage
        extra.setdefault("darknet_lineage", "original")
    if weights is None:
        weights = write_random_weights(cfg, tmp / (cfg.stem + ".weights"), seed=seed)
    if trained:
        weights = trained_like(cfg, weights, tmp / (cfg.stem + ".trained.weights"))
    onnx_path, options = convert_to_onnx(cfg, weights, tmp / (cfg.stem + ".onnx"), **extra)
    cls = DarknetLib if runtime == "libdarknet" else OpenCVDarknet
    rt = cls(cfg, weights, options)
    x = seeded_input(tuple(int(d) for d in rt.inputs()[0].shape), seed)
    ref = rt.run({"data": x})
    got = run_onnx(onnx_path, x)
    assert list(rt.outputs()) == list(got), (rt.outputs(), list(got))
    return compare(ref, got, tol)


def write_weights(path: Path, arrays: list[np.ndarray], *, header: tuple[int, int, int] = (0, 2, 0),
                  extra: bytes = b"") -> Path:
    """Write a .weights file from float arrays in file order."""
    major, minor, rev = header
    seen64 = (major * 10 + minor) >= 2 and major < 1000 and minor < 1000
    with open(path, "wb") as fh:
        fh.write(struct.pack("<3i", major, minor, rev))
        fh.write(struct.pack("<Q" if seen64 else "<I", 0))
        for arr in arrays:
            fh.write(np.asarray(arr, dtype="<f4").tobytes())
        fh.write(extra)
    return path


def trained_like(cfg: Path, weights: Path, out: Path, *, options: Options | None = None) -> Path:
    """Copy ``weights`` with trained-like batch-norm statistics: variances x1e-4, scales x1e-2.

    In exact arithmetic without epsilon the net computes the same function (scale / sqrt(var) is
    unchanged); with the forks' epsilons it does not, which is the regime of real trained weights,
    where the reference's batch-norm formula decides the verdict.
    """
    from convert.parity.runtimes._darknet_bn import param_regions

    data = bytearray(weights.read_bytes())
    for role, factor in (("variance", 1e-4), ("scale", 1e-2)):
        for r in param_regions(cfg, weights, options or Options(), role):
            view = np.frombuffer(data, dtype="<f4", count=r.count, offset=r.offset)
            view[:] = view * np.float32(factor)
    out.write_bytes(bytes(data))
    return out
