"""Darknet as a parity runtime: libdarknet (Debian's ``darknet``) when installed, else OpenCV DNN.

libdarknet is driven through a small C shim compiled on first use against ``darknet.h`` (so the
``network``/``layer`` struct layouts are the library's own) and cached under
``~/.cache/convert-toolkit``. It runs at batch 1 on the raw input tensor (no letterbox) and returns
what each ``[yolo]``/``[region]`` layer and the last layer leave in their outputs.

OpenCV's importer decodes ``[yolo]`` outputs into boxes, so for heads we take the tensor OpenCV
computes for the layer feeding the head and apply Darknet's head function in numpy. Output names
and order are the frontend's (``yolo_30``, ``softmax_135``, or ``detections`` with ``decode``).

Environment: ``CONVERT_DARKNET_RUNTIME=libdarknet|opencv`` forces one.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from convert.ir import Options, UsageError

from ..runtime import TensorSpec

if TYPE_CHECKING:
    from ._darknet_bn import Matching

__all__ = ["DarknetLib", "OpenCVDarknet", "find_libdarknet", "open_runtime"]

logger = logging.getLogger(__name__)

_LIB_DIRS = ("/usr/lib/darknet", "/usr/lib/x86_64-linux-gnu", "/usr/local/lib", "/usr/lib")
_HEADER_DIRS = ("/usr/lib/darknet/include", "/usr/include", "/usr/local/include", "/usr/include/darknet")

_SHIM = r"""
#include <darknet.h>
int shim_n(network *net) { return net->n; }
float *shim_output(network *net, int i) { return net->layers[i].output; }
void shim_dims(network *net, int i, int *d) {
    layer l = net->layers[i];
    d[0] = l.out_c; d[1] = l.out_h; d[2] = l.out_w; d[3] = l.outputs; d[4] = (int)l.type;
}
void shim_net_dims(network *net, int *d) { d[0] = net->c; d[1] = net->h; d[2] = net->w; d[3] = net->inputs; }
"""


def find_libdarknet() -> tuple[Path, Path] | None:
    """Return (libdarknet.so, darknet.h) when both are installed, else None."""
    lib = next((Path(d) / "libdarknet.so" for d in _LIB_DIRS if (Path(d) / "libdarknet.so").is_file()), None)
    hdr = next((Path(d) / "darknet.h" for d in _HEADER_DIRS if (Path(d) / "darknet.h").is_file()), None)
    if lib is None or hdr is None:
        return None
    return lib, hdr


def _shim_path(lib: Path, hdr: Path) -> Path:
    key = hashlib.sha256(_SHIM.encode() + hdr.read_bytes() + str(lib.stat().st_mtime_ns).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "convert-toolkit"
    out = cache / f"darknet_shim_{key}.so"
    if out.is_file():
        return out
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise UsageError("the libdarknet runtime needs a C compiler (gcc) to build its shim. Install gcc.")
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError:  # read-only home (CI sandboxes): build in the temporary folder instead
        cache = Path(tempfile.gettempdir()) / f"convert-toolkit-{os.getuid()}"
        cache.mkdir(parents=True, exist_ok=True)
        out = cache / out.name
        if out.is_file():
            return out
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "shim.c"
        src.write_text(_SHIM)
        tmp_out = Path(tmp) / out.name
        cmd = [cc, "-O1", "-shared", "-fPIC", f"-I{hdr.parent}", str(src), f"-L{lib.parent}", "-ldarknet",
               f"-Wl,-rpath,{lib.parent}", "-o", str(tmp_out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise UsageError(f"cannot build the libdarknet shim: {proc.stderr.strip().splitlines()[-1:]}")
        shutil.move(str(tmp_out), out)
    return out


@contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence C-level stderr (libdarknet prints its layer table) for the duration."""
    try:
        fd = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(fd, 2)
        os.close(fd)


@dataclass(frozen=True, slots=True)
class _Plan:
    """Which Darknet layers become outputs, named as the frontend names them."""

    sections: list[Any]  # list[Section]: the frontend owns the type
    heads: list[tuple[int, str]]
    last: tuple[int, str]
    decode: bool
    c: int
    h: int
    w: int

    @property
    def names(self) -> list[str]:
        """Output names in the frontend's order."""
        if self.decode and self.heads:
            return ["detections"]
        names = [n for _, n in self.heads]
        if self.last[1] not in names:
            names.append(self.last[1])
        return names


def _plan(cfg: Path, options: Options) -> _Plan:
    from convert.frontends.darknet.cfg import parse_cfg
    from convert.frontends.darknet.loader import input_shape, output_layers

    sections = parse_cfg(cfg)
    heads, last = output_layers(sections[1:])
    c, h, w = input_shape(sections[0], options)
    return _Plan(sections, heads, last, bool(options.get("decode", False)), c, h, w)


# -- Darknet's head functions in numpy (oracles for OpenCV, decoding for both) ---------------------

def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-x)))


def yolo_forward(x: np.ndarray, sec: object) -> np.ndarray:
    """Apply a [yolo] layer's forward to its input (N x C x H x W), as Darknet does."""
    s = sec  # Section
    classes = s.int("classes", 20)  # type: ignore[attr-defined]
    total = s.int("num", 1)  # type: ignore[attr-defined]
    n = len(s.ints("mask", list(range(total))))  # type: ignore[attr-defined]
    scale = s.float("scale_x_y", 1.0)  # type: ignore[attr-defined]
    new_coords = s.int("new_coords", 0)  # type: ignore[attr-defined]
    b, c, h, w = x.shape
    y = x.reshape(b, n, 5 + classes, h, w).astype(np.float32).copy()
    if not new_coords:
        y[:, :, 0:2] = _sigmoid(y[:, :, 0:2])
        y[:, :, 4:] = _sigmoid(y[:, :, 4:])
    y[:, :, 0:2] = y[:, :, 0:2] * np.float32(scale) + np.float32(-0.5 * (scale - 1))
    return y.reshape(b, c, h, w)


def region_forward(x: np.ndarray, sec: object) -> np.ndarray:
    """Apply a [region] layer's forward to its input, as Darknet does."""
    s = sec
    classes = s.int("classes", 20)  # type: ignore[attr-defined]
    coords = s.int("coords", 4)  # type: ignore[attr-defined]
    total = s.int("num", 1)  # type: ignore[attr-defined]
    softmax = s.int("softmax", 0)  # type: ignore[attr-defined]
    b, c, h, w = x.shape
    y = x.reshape(b, total, coords + 1 + classes, h, w).astype(np.float32).copy()
    y[:, :, 0:2] = _sigmoid(y[:, :, 0:2])
    y[:, :, coords] = _sigmoid(y[:, :, coords])
    if softmax and classes:
        z = y[:, :, coords + 1:]
        z = np.exp(z - z.max(axis=2, keepdims=True))
        y[:, :, coords + 1:] = z / z.sum(axis=2, keepdims=True)
    return y.reshape(b, c, h, w)


def decode(heads: Sequence[tuple[object, np.ndarray]], net_w: int, net_h: int) -> np.ndarray:
    """Decode head outputs into N x boxes x (x, y, w, h, objectness, classes), boxes in input pixels."""
    rows = []
    for sec, out in heads:
        s = sec
        total = s.int("num", 1)  # type: ignore[attr-defined]
        anchors = np.array(s.floats("anchors", []), np.float32)[: 2 * total].reshape(total, 2)  # type: ignore[attr-defined]
        b, c, h, w = out.shape
        if s.type == "yolo":  # type: ignore[attr-defined]
            anchors = anchors[s.ints("mask", list(range(total)))]  # type: ignore[attr-defined]
        else:
            anchors = anchors * np.array([net_w / w, net_h / h], np.float32)
        n = anchors.shape[0]
        per = c // n
        v = out.reshape(b, n, per, h * w).transpose(0, 1, 3, 2).reshape(b, n * h * w, per).copy()
        gy, gx = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        grid = np.tile(np.stack([gx.ravel(), gy.ravel()], 1), (n, 1)).astype(np.float32)
        v[..., 0:2] = (v[..., 0:2] + grid) * np.array([net_w / w, net_h / h], np.float32)
        new_coords = s.type == "yolo" and s.int("new_coords", 0)  # type: ignore[attr-defined]
        wh = v[..., 2:4] * v[..., 2:4] * 4 if new_coords else np.exp(v[..., 2:4])
        v[..., 2:4] = wh * np.repeat(anchors, h * w, axis=0)
        rows.append(v)
    return np.concatenate(rows, axis=1)


def converted_lineage(options: Options) -> str:
    """The lineage the frontend converts with under ``options`` (``auto`` converts as AlexeyAB)."""
    chosen = str(options.get("darknet_lineage", "auto") or "auto")
    return "alexeyab" if chosen == "auto" else chosen


_LINEAGE_NAMES = {"alexeyab": "AlexeyAB's", "original": "pjreddie's"}


class _Base:
    """What both Darknet references share: the plan, the lineage, a network loaded on first run.

    The network is loaded when the check first runs it, not when the runtime opens: a conversion
    opens its reference before writing (to refuse bad ``--inputs`` with nothing written), and the
    reference's weights are then read, matched to the lineage, after the converted file is written.
    """

    name: str
    device: str = "cpu"
    plan: _Plan
    notes: list[str]  # what this reference cannot verify, shown in the parity report
    runtime_key: str  # the batch-norm formula this runtime computes (``_darknet_bn.denominator``)
    lineage: str = "alexeyab"  # the batch norm this reference computes (the conversion's)
    assumed: bool = False  # the lineage was assumed (``auto`` on a cfg both forks run)
    #: The lineage the converted model was made with, when known: this process's conversion (the
    #: frontend leaves it in ``options.memo``) or the converted file's record of it; "" when unknown.
    converted: str = ""
    #: The lineage came from the converted file's record (``follow_destination``).
    recorded: bool = False
    #: Outputs this reference cannot decide whatever the numbers, by output name: (a short label for
    #: the output's row, the reason). Filled by ``explain_verdict``; the check makes them NOT VERIFIED.
    undecided: dict[str, tuple[str, str]]

    def _prepare(self, cfg: Path, weights: Path, options: Options) -> None:
        """Read the cfg's plan and the lineage; the network is loaded on first run (``_ensure_loaded``)."""
        self.notes = []
        self.undecided = {}
        self.lineage = converted_lineage(options)
        self.converted = str(options.memo.get("darknet_lineage", "") or "")
        self._chosen = str(options.get("darknet_lineage", "auto") or "auto")
        self._source = (cfg, weights, options)
        self.plan = _plan(cfg, options)
        self._loaded = False
        self._match: Matching | None = None  # the variances that make it compute the lineage, once read
        self._last: dict[str, np.ndarray] = {}
        self._cannot: list[tuple[int, str]] = []  # layers this reference cannot compute as Darknet does

    @property
    def method(self) -> list[str]:
        """How the reference ran: the lineage it took from the file, the weights matched to it."""
        lines = []
        if self.recorded:
            lines.append(f"lineage: {_LINEAGE_NAMES[self.lineage]}, as the converted file records "
                         "(convert:darknet_lineage); --darknet-lineage checks another")
        if (self.runtime_key, self.lineage) != ("libdarknet", "original"):
            formula = "sqrt(v) + 1e-6" if self.runtime_key == "libdarknet" else "sqrt(v + 1e-6)"
            lines.append(
                f"batch norm: {self.name} divides by {formula}; it ran a copy of the weights whose variances are "
                f"rewritten so that this yields {_LINEAGE_NAMES[self.lineage]} "
                + ("sqrt(v + 1e-5)" if self.lineage == "alexeyab" else "sqrt(v) + 1e-6")
                + ", the batch norm of the conversion (docs/darknet.md)")
        return lines

    def follow_destination(self, metadata: Mapping[str, str]) -> None:
        """Take the lineage the converted file records (``convert:darknet_lineage``, written by the
        frontend) when the check was not told one: a file converted with ``--darknet-lineage
        original`` is checked as pjreddie's. A lineage the conversion itself assumed stays assumed."""
        recorded = str(metadata.get("convert:darknet_lineage", "") or "")
        lineage = recorded.split(" ")[0]
        if self._chosen != "auto" or lineage not in _LINEAGE_NAMES:
            return
        self.converted = lineage
        if "(assumed)" in recorded or not self.assumed or self._loaded:  # the cfg decided, or nothing is known
            return
        self.lineage, self.assumed, self.recorded, self._match = lineage, False, True, None

    def _options(self) -> Options:
        """The options the reference converts the cfg with (for the variance regions): its lineage."""
        options = self._source[2]
        if converted_lineage(options) == self.lineage:
            return options
        return replace(options, extra={**options.extra, "darknet_lineage": self.lineage})

    def _matching(self) -> Matching:
        """The variances that make this runtime compute the lineage (read once; see ``_darknet_bn``)."""
        if self._match is None:
            from ._darknet_bn import matching

            cfg, weights, _ = self._source
            self._match = matching(cfg, weights, self._options(), runtime=self.runtime_key, target=self.lineage)
        return self._match

    @property
    def formula_gap(self) -> str:
        """Why outputs that miss the tolerance cannot be blamed on the conversion: the matched weights
        leave a denominator of the reference farther from the target's than float32 rounding ("" if not)."""
        match = self._matching()
        if not match.gap_where:
            return ""
        return (f"the reference cannot compute {_LINEAGE_NAMES[self.lineage]} batch norm exactly on these weights: "
                f"{self.runtime_key}'s formula on the nearest float32 variance is {match.gap:.2g} away in a "
                f"denominator ({match.gap_where}; variances near zero)")

    def _ensure_loaded(self) -> None:
        """Load the network on weights matched to the lineage (streamed, see ``_darknet_bn``), once."""
        if self._loaded:
            return
        from ._darknet_bn import matched_path

        cfg, weights, options = self._source
        with matched_path(weights, self._matching()) as path:
            self._open(cfg, path, options)
        self._loaded = True

    def _open(self, cfg: Path, weights: Path, options: Options) -> None:
        raise NotImplementedError

    def _depends_on(self, layers: Sequence[int]) -> dict[str, int]:
        """Return the outputs computed from any of ``layers``, each with the first such layer."""
        body = self.plan.sections[1:]
        first: dict[int, int] = {}  # layer -> the first of ``layers`` it is computed from
        marked = set(layers)
        for i, sec in enumerate(body):
            kind = sec.type
            refs = [-1]
            if kind == "route":
                refs = sec.ints("layers")
            elif kind in ("shortcut", "sam", "scale_channels"):
                refs = [-1, *sec.ints("from")]
            found = [first[j] for j in (i + r if r < 0 else r for r in refs) if j in first]
            if i in marked:
                found.append(i)
            if found:
                first[i] = min(found)
        p = self.plan
        outs = {name: first[i] for i, name in p.heads if i in first}
        if p.last[0] in first:
            outs[p.last[1]] = first[p.last[0]]
        if p.decode and p.heads and outs:
            return {"detections": min(outs.values())}
        return outs

    def explain_verdict(self, feeds: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray],
                        tol: float, passed: bool) -> str:
        """Say which outputs this reference cannot decide (``undecided``) and what else it can tell.

        ``got``: the converted model's outputs by this runtime's output names; ``passed``: the
        verdict against this lineage. Undecided, whatever the numbers: an output computed from a
        layer the reference cannot express (``_cannot``); an output that is NaN while the weights
        hold variances below zero (named with their layer); and, when the lineage was assumed and
        the two forks' batch norms give outputs more than ``tol`` apart on these weights, every
        output that tells them apart (no check can tell which fork trained a file: the user decides
        with ``--darknet-lineage``). Returns a note, or "".
        """
        self.undecided = {}
        cfg, weights, _ = self._source
        if self._cannot:
            body = self.plan.sections[1:]
            for name, index in self._depends_on([i for i, _ in self._cannot]).items():
                what = dict(self._cannot)[index]
                sec = body[index]
                key = what.split("=")[0]
                where = f"{sec.file}:{sec.option_lines[key]}" if key in sec.option_lines else sec.where
                self.undecided[name] = (
                    f"{self.name} ignores {what}",
                    f"{self.name}, the reference, ignores {what} in Darknet cfgs (layer {index} [{sec.type}] at "
                    f"{where}), so it does not compute this output as Darknet does: it can neither pass nor fail "
                    "the conversion, and no other Darknet reference installed expresses that layer")
        nan = [n for n in got if np.isnan(got[n]).any() or (n in self._last and np.isnan(self._last[n]).any())]
        if nan:
            from ._darknet_bn import negative_variances

            bad = negative_variances(cfg, weights, self._options(), self.lineage)
            if bad:
                first = bad[0]
                count = sum(b.count for b in bad)
                lowest = f", down to {first.lowest:.3g}" if first.lowest == first.lowest else ", NaN"
                reason = (f"the reference is NaN: the weights hold {count} batch-norm variance"
                          f"{'s' if count > 1 else ''} below zero in {len(bad)} layer{'s' if len(bad) > 1 else ''}, "
                          f"first {first.where}: {first.count} of its {first.total} channels{lowest}. Every Darknet "
                          "takes their square root; trained weights never hold one, so the .weights file is broken "
                          "or not this cfg's")
                for name in nan:
                    self.undecided.setdefault(name, ("NaN: a negative batch-norm variance", reason))
        if not self.assumed:
            return ""
        other = self.other_lineage()
        try:
            alt = other.run(feeds)
        finally:
            close = getattr(other, "close", None)
            if close is not None:
                close()
        mine = self.lineage
        theirs = "original" if mine == "alexeyab" else "alexeyab"

        def err(name: str) -> float:
            ref = alt[name].astype(np.float64)
            if ref.shape != got[name].shape:
                return float("inf")
            scale = float(np.abs(ref).max()) if ref.size else 0.0
            return float(np.abs(got[name] - ref).max() / scale) if scale > 0 else 0.0

        errs = {n: err(n) for n in alt if n in got and n not in self.undecided}
        worst = max(errs.values(), default=0.0)
        if not passed:
            if worst > tol or not errs:
                return ""
            said = (f"the converted model computes {_LINEAGE_NAMES[theirs]} batch norm on these weights "
                    f"({worst:.2g} of scale from it), not {_LINEAGE_NAMES[mine]}")
            if self.converted == mine:  # the conversion said it used this lineage: a bug, FAIL stands
                return f"{said}, which it was converted with"
            for name in errs:
                self.undecided[name] = (
                    f"computes {_LINEAGE_NAMES[theirs]} batch norm",
                    f"{said}, which the check ASSUMED (the cfg uses no feature of either fork alone): it is right for "
                    f"weights trained with {_LINEAGE_NAMES[theirs]} darknet. Pass --darknet-lineage "
                    f"{theirs} (or {mine}) to decide")
            return ""
        apart = [n for n, e in errs.items() if e > tol]
        for name in apart:
            self.undecided[name] = (
                "lineage assumed: the forks differ here",
                f"the lineage was ASSUMED {_LINEAGE_NAMES[mine]} (the cfg uses no feature of either fork alone), and "
                f"on these weights {_LINEAGE_NAMES[theirs]} batch norm gives outputs {worst:.2g} of scale from it: "
                f"no check can tell which fork trained them, so a PASS would be a guess. Pass --darknet-lineage "
                f"{mine} or --darknet-lineage {theirs} to decide")
        return ""

    def other_lineage(self) -> _Base:
        """Return this runtime on the same weights computing the other lineage's batch norm."""
        cfg, weights, options = self._source
        other = "original" if self.lineage == "alexeyab" else "alexeyab"
        return type(self)(cfg, weights, replace(options, extra={**options.extra, "darknet_lineage": other}))

    def inputs(self) -> Sequence[TensorSpec]:
        """One input, ``data``: 1 x C x H x W."""
        p = self.plan
        return [TensorSpec("data", np.dtype(np.float32), (1, p.c, p.h, p.w))]

    def outputs(self) -> Sequence[str]:
        """The frontend's output names, in its order."""
        return self.plan.names

    @property
    def input_ranges(self) -> dict[str, tuple[float, float, str]]:
        """Darknet takes an image's pixels divided by 255: parity inputs are drawn in [0, 1)."""
        return {"data": (0.0, 1.0, "an image's pixels / 255, as Darknet takes them")}

    def layer_output(self, index: int) -> np.ndarray:
        """Return Darknet layer ``index``'s output after the last ``run``."""
        raise NotImplementedError

    def _forward(self, x: np.ndarray) -> None:
        raise NotImplementedError

    def head_output(self, index: int) -> np.ndarray:
        """Return head ``index``'s output (Darknet's in-place head function applied)."""
        return self.layer_output(index)

    def all_layer_outputs(self, feeds: Mapping[str, np.ndarray]) -> dict[int, np.ndarray]:
        """Run once; return every layer's output by Darknet layer index (for the localisation)."""
        self.run(feeds)
        return {i: self.layer_output(i) for i in range(len(self.plan.sections) - 1)}

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once at batch 1 on the only input."""
        if len(feeds) != 1:
            raise UsageError(f"a Darknet model takes one input, got {len(feeds)}")
        x = np.ascontiguousarray(next(iter(feeds.values())), dtype=np.float32)
        p = self.plan
        if x.shape != (1, p.c, p.h, p.w):
            raise UsageError(f"Darknet input must be 1x{p.c}x{p.h}x{p.w}, got {'x'.join(map(str, x.shape))}")
        self._ensure_loaded()
        self._forward(x)
        body = p.sections[1:]
        heads = {i: self.head_output(i) for i, _ in p.heads}
        if p.decode and p.heads:
            self._last = {"detections": decode([(body[i], heads[i]) for i, _ in p.heads], p.w, p.h)}
            return self._last
        result = {name: heads[i] for i, name in p.heads}
        li, lname = p.last
        if lname not in result:
            result[lname] = heads[li] if li in heads else self.layer_output(li)
        self._last = result
        return result


def _one_blas_thread_under_a_memory_limit() -> None:
    """Under an address-space limit (``ulimit -v``), let libdarknet's OpenBLAS start no threads.

    Each OpenBLAS thread maps a 128 MiB buffer when it starts and retries for ever when the map is
    refused: the check passed, then the process hung at exit joining that thread (Debian's OpenBLAS,
    a 54 MiB model under a 1 GiB limit). One thread maps nothing more. The variable is read when
    libdarknet loads OpenBLAS; one the user set is kept.
    """
    try:
        import resource

        limited = resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY
    except (ImportError, OSError, ValueError):  # no resource module (Windows)
        return
    if limited:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


class DarknetLib(_Base):
    """The original Darknet library, through ctypes and the compiled shim.

    It computes the batch norm of the lineage ``options`` converts with: for AlexeyAB's it loads a
    copy of the weights whose variances make pjreddie's formula yield AlexeyAB's (``_darknet_bn``).
    """

    runtime_key = "libdarknet"

    name = "libdarknet (Debian darknet, pjreddie's)"

    def __init__(self, cfg: Path, weights: Path, options: Options) -> None:
        if find_libdarknet() is None:
            raise UsageError("libdarknet is not installed (apt-get install darknet)")
        self._prepare(cfg, weights, options)

    def _open(self, cfg: Path, weights: Path, options: Options) -> None:
        found = find_libdarknet()
        if found is None:
            raise UsageError("libdarknet is not installed (apt-get install darknet)")
        lib_path, hdr = found
        _one_blas_thread_under_a_memory_limit()
        shim = ctypes.CDLL(str(_shim_path(lib_path, hdr)), mode=ctypes.RTLD_GLOBAL)
        lib = ctypes.CDLL(str(lib_path), mode=ctypes.RTLD_GLOBAL)
        lib.load_network.restype = ctypes.c_void_p
        lib.load_network.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
        lib.set_batch_network.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.resize_network.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        lib.network_predict.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_float)]
        lib.network_predict.restype = ctypes.POINTER(ctypes.c_float)
        lib.free_network.argtypes = [ctypes.c_void_p]
        shim.shim_n.argtypes = [ctypes.c_void_p]
        shim.shim_output.argtypes = [ctypes.c_void_p, ctypes.c_int]
        shim.shim_output.restype = ctypes.POINTER(ctypes.c_float)
        shim.shim_dims.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
        shim.shim_net_dims.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        self.lib, self.shim = lib, shim
        with _quiet_stderr():
            net = lib.load_network(str(cfg).encode(), str(weights).encode(), 0)
            if not net:
                raise UsageError(f"libdarknet could not load {cfg.name}")
            lib.set_batch_network(net, 1)
            dims = (ctypes.c_int * 4)()
            shim.shim_net_dims(net, dims)
            if (dims[1], dims[2]) != (self.plan.h, self.plan.w):
                lib.resize_network(net, self.plan.w, self.plan.h)
        self.net = net

    def _forward(self, x: np.ndarray) -> None:
        self._x = x  # keep alive while Darknet may point at it
        self.lib.network_predict(self.net, x.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))

    def layer_output(self, index: int) -> np.ndarray:
        """Copy layer ``index``'s output buffer as 1 x C x H x W."""
        d = (ctypes.c_int * 5)()
        self.shim.shim_dims(self.net, index, d)
        ptr = self.shim.shim_output(self.net, index)
        flat = np.ctypeslib.as_array(ptr, shape=(d[3],)).copy()
        dims = (d[0], d[1], d[2])
        j = index
        while dims[0] * dims[1] * dims[2] != d[3] and j > 0:
            # softmax/cost layers leave out_c/h/w unset: they keep an earlier layer's layout
            j -= 1
            e = (ctypes.c_int * 5)()
            self.shim.shim_dims(self.net, j, e)
            dims = (e[0], e[1], e[2])
        if dims[0] * dims[1] * dims[2] != d[3]:
            dims = (d[3], 1, 1)
        return flat.reshape(1, *dims)

    def close(self) -> None:
        """Free the network."""
        if getattr(self, "net", None):
            self.lib.free_network(self.net)
            self.net = None


_CV_ACTIVATIONS = {"leaky", "relu", "mish", "swish", "logistic", "tanh", "relu6", "elu", "selu", "gelu",
                   "hardswish", "hard_mish", "linear", "ramp", "relie", "loggy", "hardtan"}


def _opencv_ignores(sec: Any) -> str:
    """What of this section OpenCV's Darknet importer ignores and Darknet computes ("" if nothing).

    OpenCV 4.x reads ``stride`` alone (not AlexeyAB's ``stride_x``/``stride_y``) and no ``dilation``.
    """
    stride = sec.int("stride", 1)
    ignored = []
    if sec.int("dilation", 1) != 1 and sec.int("size", stride) > 1:
        ignored.append(f"dilation={sec.int('dilation', 1)}")
    for key in ("stride_x", "stride_y"):
        if key in sec.options and sec.int(key, stride) != stride:
            ignored.append(f"{key}={sec.int(key, stride)}")
    return ", ".join(ignored)


class OpenCVDarknet(_Base):
    """OpenCV DNN's Darknet importer (AlexeyAB-lineage cfgs), on weights matched to the lineage."""

    runtime_key = "opencv"

    def __init__(self, cfg: Path, weights: Path, options: Options) -> None:
        try:
            import cv2
        except ImportError as exc:
            from convert.formats import install_hint

            raise UsageError(f"the Darknet runtime needs libdarknet (Debian's darknet package) or "
                             f"{install_hint('cv2')}") from exc
        if not hasattr(cv2, "dnn") or not hasattr(cv2.dnn, "readNetFromDarknet"):
            raise UsageError("this OpenCV has no Darknet importer (OpenCV 5 removed it): pip install "
                             "'opencv-python-headless<5'")
        self.cv2 = cv2
        self.name = f"OpenCV DNN {cv2.__version__}"
        self._prepare(cfg, weights, options)
        self._cannot = [(i, what) for i, sec in enumerate(self.plan.sections[1:]) if (what := _opencv_ignores(sec))]

    def _open(self, cfg: Path, weights: Path, options: Options) -> None:
        cv2 = self.cv2
        self.net = cv2.dnn.readNetFromDarknet(str(cfg), str(weights))
        self.net.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
        self.net.setPreferableTarget(cv2.dnn.DNN_TARGET_CPU)
        # Map every OpenCV layer to the Darknet layer it belongs to; activations carry index + 1.
        owner: dict[int, str] = {}
        for lname in self.net.getLayerNames():
            kind, _, num = lname.rpartition("_")
            if not num.isdigit():
                continue
            idx = int(num) - 1 if kind in _CV_ACTIVATIONS else int(num)
            owner[idx] = lname
        self.owner = owner
        self._cache: dict[int, np.ndarray] = {}

    def _cv_name(self, index: int) -> str:
        i = index
        body = self.plan.sections[1:]
        while i >= 0 and i not in self.owner:
            if body[i].type not in ("dropout", "cost"):
                raise UsageError(f"OpenCV DNN has no layer for Darknet layer {index} [{body[index].type}]")
            i -= 1
        return self.owner[i]

    def _forward(self, x: np.ndarray) -> None:
        p = self.plan
        wanted = sorted({i - 1 for i, _ in p.heads} | {p.last[0]} - {i for i, _ in p.heads})
        names = [self._cv_name(i) for i in wanted]
        self.net.setInput(x)
        outs = self.net.forward(names)
        self._cache = {i: np.asarray(o, dtype=np.float32) for i, o in zip(wanted, outs, strict=True)}

    def layer_output(self, index: int) -> np.ndarray:
        """Return the output computed for Darknet layer ``index`` in the last run."""
        out = self._cache[index]
        return out.reshape(1, *out.shape[1:]) if out.ndim == 4 else out.reshape(1, -1, 1, 1)

    def all_layer_outputs(self, feeds: Mapping[str, np.ndarray]) -> dict[int, np.ndarray]:
        """Run once; return the output of every Darknet layer OpenCV has a layer for, by index.

        Heads are left out: OpenCV's [yolo]/[region] layers output decoded detections, not Darknet's
        activated map (the verdict compares heads through ``head_output``).
        """
        x = np.ascontiguousarray(next(iter(feeds.values())), dtype=np.float32)
        self._ensure_loaded()
        body = self.plan.sections[1:]
        wanted = sorted(i for i in self.owner if body[i].type not in ("yolo", "region"))
        self.net.setInput(x)
        outs = self.net.forward([self.owner[i] for i in wanted])
        return {i: np.asarray(o, dtype=np.float32) for i, o in zip(wanted, outs, strict=True)}

    def head_output(self, index: int) -> np.ndarray:
        """Re-derive the head's output from the tensor feeding it (OpenCV decodes heads itself)."""
        sec = self.plan.sections[1 + index]
        x = self.layer_output(index - 1)
        return yolo_forward(x, sec) if sec.type == "yolo" else region_forward(x, sec)


def open_runtime(paths: Sequence[Path], options: Options) -> _Base:
    """Open ``[cfg, weights]`` in libdarknet when installed (OpenCV DNN otherwise).

    AlexeyAB-lineage cfgs (mish, swish, route groups, scale_x_y, ...) always use OpenCV DNN:
    libdarknet cannot run them.
    """
    from convert.frontends.darknet.cfg import parse_cfg
    from convert.frontends.darknet.loader import detect_lineage, split_paths

    cfg, weights = split_paths([Path(p) for p in paths])
    if weights is None:
        if not options.get("random_weights", False):
            raise UsageError("the Darknet runtime needs the .weights file as well as the .cfg")
        # --random-weights: the reference runs the very file the frontend generated and converted
        # (one per process: same cfg, seed and options give the same file).
        from convert.frontends.darknet.random_file import random_weights_file

        runtime = open_runtime([cfg, random_weights_file(cfg, options)], options)
        runtime.assumed = False  # generated statistics: the two forks' batch norms agree on them
        return runtime
    choice = os.environ.get("CONVERT_DARKNET_RUNTIME", "")
    chosen = str(options.get("darknet_lineage", "auto") or "auto")
    cfg_kind = detect_lineage(parse_cfg(cfg))  # 'alexeyab' (its features) or 'ambiguous'
    runtime: _Base
    if choice == "libdarknet" or (not choice and cfg_kind == "ambiguous" and find_libdarknet() is not None):
        runtime = DarknetLib(cfg, weights, options)
    else:
        runtime = OpenCVDarknet(cfg, weights, options)
    runtime.assumed = chosen == "auto" and cfg_kind == "ambiguous"
    return runtime
