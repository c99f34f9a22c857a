"""The Caffe parity runtime: real Caffe when it is built here, else OpenCV's DNN module.

``scripts/build_caffe`` builds two real Caffes, CPU only, into ``~/.cache/convert-caffe``:

* the SSD-era fork packaged as the ``brocolli-caffe`` sdist (``python/``, or where
  ``CONVERT_CAFFE_PYTHON`` points): pooling field 13 is the bool ``ceil_mode``; it has the SSD
  layers (Permute, Normalize, PriorBox, DetectionOutput, ReLU6, Upsample) and no Clip;
* BVLC master 99bd997 from Debian's source archive (``bvlc/python``, or
  ``CONVERT_CAFFE_BVLC_PYTHON``): field 13 is the enum ``round_mode``; it has Clip and Swish and
  none of the SSD layers.

A file is run in the Caffe whose dialect it is written in, decided on the parsed net: BVLC master
when it is written in convert's ``bvlc`` flavor (its first line says so) or uses ``round_mode``,
``Clip`` or ``Swish`` (and nothing only the fork has), the fork otherwise. Without BVLC master, a
``round_mode`` file is checked in the fork through a translated copy, and the report says the file
as written does not load there (as with OpenCV). Each net runs in a subprocess
(``_caffe_worker``): Caffe aborts its process on a failed CHECK. ``CONVERT_CAFFE_RUNTIME=opencv``
(or ``caffe``) forces the choice.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from convert._caffe_home import CAFFE_DIALECTS, find_caffe
from convert.ir import Options, UsageError
from convert.parity.runtime import Runtime, TensorSpec

from .opencv_caffe import (
    OpenCVCaffeRuntime,
    detection_rows,
    input_domains,
    net_io,
    round_mode_note,
    translate_round_mode,
)

__all__ = ["RealCaffeRuntime", "dialect_of", "find_caffe", "open_runtime", "real_caffe", "written_for"]

_TIMEOUT = 600
_GLOG_FATAL = re.compile(r"^F\d{8} ")


_DIALECTS = CAFFE_DIALECTS  # the two real Caffes (convert/_caffe_home.py)
# What only BVLC master reads (the pooling field round_mode, the layers Clip and Swish), and what only
# the SSD fork reads (its layers, the pooling field ceil_mode): decided on the parsed net, whatever
# the file's line layout.
_BVLC_LAYERS = frozenset({"Clip", "Swish"})
_FORK_LAYERS = frozenset({"Permute", "Normalize", "PriorBox", "DetectionOutput", "ReLU6", "Upsample"})
_OUR_BVLC = "# Written by convert-toolkit, Caffe flavor 'bvlc'"


def written_for(prototxt: Path) -> str:
    """Return the Caffe ``prototxt`` is written for, from the parsed net: ``bvlc`` (BVLC master) when
    our bvlc flavor wrote it, or it uses round_mode, Clip or Swish and nothing only the fork has;
    else ``ssd`` (the fork, which also reads every file both Caffes read)."""
    from convert.frontends.caffe.reader import read_prototxt

    path = Path(prototxt)
    with open(path, encoding="utf-8", errors="replace") as fh:
        if fh.readline().startswith(_OUR_BVLC):
            return "bvlc"
    net = read_prototxt(path)
    types = {layer.type for layer in net.layers}
    pooling = [getattr(layer.param, "pooling_param", None) for layer in net.layers if layer.type == "Pooling"]
    round_mode = any(_has_field(p, "round_mode") for p in pooling if p is not None)
    ceil_mode = any(_has_field(p, "ceil_mode") for p in pooling if p is not None)
    bvlc = bool(types & _BVLC_LAYERS) or round_mode
    fork = bool(types & _FORK_LAYERS) or ceil_mode
    return "bvlc" if bvlc and not fork else "ssd"


def _has_field(msg: object, name: str) -> bool:
    try:
        return bool(msg.HasField(name))  # type: ignore[attr-defined]
    except ValueError:  # a field this schema does not declare
        return False


def dialect_of(prototxt: Path) -> str:
    """Return the real Caffe to run ``prototxt`` in: ``bvlc`` when it is written for BVLC master
    (``written_for``) and BVLC master is built here, else ``ssd`` (the fork)."""
    return "bvlc" if written_for(prototxt) == "bvlc" and find_caffe("bvlc") else "ssd"


def real_caffe(prototxt: Path, caffemodel: Path) -> RealCaffeRuntime | None:
    """Open the net in the real Caffe of its dialect; None when that Caffe is not built here."""
    dialect = dialect_of(prototxt)
    caffe_dir = find_caffe(dialect)
    return None if caffe_dir is None else RealCaffeRuntime(prototxt, caffemodel, caffe_dir, dialect)


# The SSD fork (brocolli-caffe, as the SSD-era forks) reads a caffemodel through protobuf with a
# hard-coded SetTotalBytesLimit(536870912) in src/caffe/util/io.cpp: no larger file loads there.
FORK_CAFFEMODEL_LIMIT = 536870912
# Layers of Caffe forks that neither Caffe built here has: a refusal for them is our installation's.
_OTHER_FORKS = {"Interp": "PSPNet's and DeepLab's Caffe forks", "BN": "PSPNet's Caffe fork",
                "ShuffleChannel": "ShuffleNet's Caffe forks"}


def refusal(prototxt: Path, caffemodel: Path, dialect: str, error: str) -> tuple[str, bool, str]:
    """Say why the real Caffe of ``dialect`` refused a file, whether that is a limit of what is built
    here (True: the file's own Caffe is another fork) rather than of the file's Caffe, and what to do
    about it when the file is one ``convert`` wrote ('' : nothing)."""
    size = caffemodel.stat().st_size if caffemodel.is_file() else 0
    name = _DIALECTS[dialect][2]
    if dialect == "ssd" and size > FORK_CAFFEMODEL_LIMIT:
        return (f"{name} cannot read {caffemodel.name} ({size / 2**20:.0f} MiB): the SSD-era forks read at most "
                "512 MiB of caffemodel (SetTotalBytesLimit(536870912) in their io.cpp)", False,
                "Convert with --caffe-flavor bvlc (BVLC master reads up to 2 GiB) for a Caffe that loads it")
    try:
        from convert.frontends.caffe.reader import read_prototxt

        types = {layer.type for layer in read_prototxt(prototxt).layers}
    except Exception:  # the refusal stands as Caffe said it
        types = set()
    other = sorted(t for t in types if t in _OTHER_FORKS)
    if len(other) == 1:
        return (f"{other[0]} is a layer of {_OTHER_FORKS[other[0]]}, which is not built here ({name} refused the "
                f"file: {error}); the Caffe this file is for was not run", True, "")
    if other:
        layers = ", ".join(f"{t} ({_OTHER_FORKS[t]})" for t in other)
        return (f"{layers} are layers of Caffe forks not built here ({name} refused the file: {error}); the "
                "Caffe this file is for was not run", True, "")
    return f"{name}, the Caffe this file is written for, cannot load it: {error}", False, ""


class CaffeFailedError(RuntimeError):
    """Real Caffe refused or crashed on a net (its last log line says why)."""


class RealCaffeRuntime:
    """A Caffe net run by real Caffe (CPU), one subprocess per run."""

    def __init__(self, prototxt: Path, caffemodel: Path, caffe_dir: Path, dialect: str = "ssd") -> None:
        """Open the net in the real Caffe at ``caffe_dir``, of ``dialect`` (``ssd`` or ``bvlc``).
        The SSD fork runs a file written with ``round_mode`` through a translated copy."""
        from convert.frontends.caffe.reader import read_prototxt

        netdef = read_prototxt(Path(prototxt))
        self._tmp = tempfile.TemporaryDirectory(prefix="convert-caffe-")
        text = Path(prototxt).read_text()
        translated = translate_round_mode(text) if dialect == "ssd" else text
        self.prototxt = Path(prototxt)
        self.notes: list[str] = []
        if translated != text:
            self.prototxt = Path(self._tmp.name) / Path(prototxt).name
            self.prototxt.write_text(translated)
            self.notes.append(round_mode_note(Path(prototxt).name, "real Caffe (the SSD fork)"))
        self.caffemodel = Path(caffemodel)
        self.caffe_dir = caffe_dir
        self._inputs, self._outputs, self._writer = net_io(netdef)
        self.input_ranges = input_domains(netdef)  # seeded inputs in the first layer's domain
        self.set_outputs, self.row_axes = detection_rows(netdef, Path(prototxt).name)  # rows compared as sets
        self._tops = {layer.name: list(layer.tops) for layer in netdef.layers}
        self.name = _DIALECTS[dialect][2] + (" (round_mode read as ceil_mode)" if translated != text else "")
        self.device = "cpu"
        self._run_blobs([])  # load once now: a file real Caffe refuses fails here, not mid-check

    def inputs(self) -> Sequence[TensorSpec]:
        """Return the net's inputs."""
        return list(self._inputs)

    def outputs(self) -> Sequence[str]:
        """Return the net's output blobs."""
        return list(self._outputs)

    def _run_blobs(self, blobs: Sequence[str], feeds: Mapping[str, np.ndarray] | None = None,
                   layers: Sequence[str] = ()) -> dict[str, np.ndarray]:
        if feeds is None:
            feeds = {s.name: np.zeros([int(d) for d in s.shape], np.float32) for s in self._inputs}  # type: ignore[call-overload]
        tmp = Path(self._tmp.name)
        names = list(feeds)
        np.savez(tmp / "in.npz", names=np.array(names, dtype=str),
                 **{f"arr_{i}": np.ascontiguousarray(feeds[n], dtype=np.float32) for i, n in enumerate(names)})
        (tmp / "blobs.json").write_text(json.dumps({"blobs": list(blobs), "layers": list(layers)}))
        env = dict(os.environ, GLOG_minloglevel="2", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
                   OPENBLAS_NUM_THREADS=os.environ.get("OPENBLAS_NUM_THREADS", "1"))
        proc = subprocess.run(
            [sys.executable, "-m", "convert.parity.runtimes._caffe_worker", str(self.caffe_dir), str(self.prototxt),
             str(self.caffemodel), str(tmp / "in.npz"), str(tmp / "out.npz"), str(tmp / "blobs.json")],
            capture_output=True, text=True, timeout=_TIMEOUT, env=env, check=False,
        )
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
            # glog's "F... Check failed: ..." line says why; a Python error's last line otherwise
            parse = [ln.split("] ", 1)[-1] for ln in lines if "Error parsing text-format" in ln]
            fatal = [ln.split("] ", 1)[-1] for ln in lines if _GLOG_FATAL.match(ln)]  # LOG(FATAL), CHECK
            checks = parse + fatal
            errors = [ln for ln in lines if "Error" in ln or "error" in ln]
            reason = (checks[:1] or errors[-1:] or lines[-1:] or [f"exit status {proc.returncode}"])[0]
            raise CaffeFailedError(f"real Caffe failed on {self.prototxt.name}: {reason.strip()[:400]}")
        with np.load(tmp / "out.npz", allow_pickle=False) as data:
            return {str(n): data[f"arr_{i}"] for i, n in enumerate(data["names"])}

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once; return every output blob by name."""
        missing = [s.name for s in self._inputs if s.name not in feeds]
        if missing:
            raise UsageError(f"missing input '{missing[0]}'")
        got = self._run_blobs(self._outputs, {s.name: feeds[s.name] for s in self._inputs})
        return {n: got[n] for n in self._outputs}

    def layer_outputs(self, feeds: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, list[np.ndarray]]:
        """Run once, layer by layer; return the tops of each layer in ``names`` as it left them."""
        wanted = [n for n in dict.fromkeys(names) if self._tops.get(n)]
        got = self._run_blobs([], {s.name: feeds[s.name] for s in self._inputs}, layers=wanted)
        return {n: [got[f"{n}:{k}"] for k in range(len(self._tops[n]))] for n in wanted
                if all(f"{n}:{k}" in got for k in range(len(self._tops[n])))}


class _Unloaded:
    """The stand-in for a net neither real Caffe nor OpenCV DNN loads: its inputs and outputs come
    from the prototxt; running it raises OpenCV's refusal (``run_parity`` reports the file NOT
    VERIFIED with both reasons, or FAIL where the file's own Caffe refused a file convert wrote)."""

    def __init__(self, prototxt: Path, error: str) -> None:
        from convert.frontends.caffe.reader import read_prototxt

        self._inputs, self._outputs, _ = net_io(read_prototxt(Path(prototxt)))
        self.input_ranges = input_domains(read_prototxt(Path(prototxt)))
        # OpenCV's message spans lines (where, in which C++ function, then why): the report keeps one
        lines = [ln.strip().lstrip(">").strip() for ln in error.splitlines() if ln.strip()]
        head = re.sub(r" in function '.*$", "", lines[0]) if lines else "OpenCV could not load it"
        self._error = (head + (f": {lines[1]}" if len(lines) > 1 else ""))[:400]
        self.name = "OpenCV DNN"
        self.device = "cpu"
        self.notes: list[str] = []

    def inputs(self) -> Sequence[TensorSpec]:
        """Return the net's inputs (from the prototxt)."""
        return list(self._inputs)

    def outputs(self) -> Sequence[str]:
        """Return the net's output blobs (from the prototxt)."""
        return list(self._outputs)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Raise OpenCV's refusal: nothing here runs the net."""
        raise RuntimeError(self._error)


def open_runtime(paths: Sequence[Path], options: Options) -> Runtime:
    """Open ``[prototxt, caffemodel]`` in real Caffe when built here (else OpenCV DNN)."""
    from convert.frontends.caffe.frontend import split_paths

    proto, weights = split_paths(paths)
    if weights is None:
        raise UsageError("the Caffe runtime needs the .prototxt and the .caffemodel")
    choice = os.environ.get("CONVERT_CAFFE_RUNTIME", "")
    dialect = dialect_of(proto)
    caffe_dir = find_caffe(dialect)
    if choice == "caffe" and caffe_dir is None:
        raise UsageError("CONVERT_CAFFE_RUNTIME=caffe, but real Caffe is not built here (run scripts/build_caffe)")
    if caffe_dir is not None and choice != "opencv":
        try:
            return RealCaffeRuntime(proto, weights, caffe_dir, dialect)
        except CaffeFailedError as exc:
            if choice == "caffe":
                raise UsageError(str(exc)) from exc
            try:
                fallback: Runtime = OpenCVCaffeRuntime(proto, weights)
            except UsageError as cv_exc:  # OpenCV cannot load it either: the report says so, unverified
                fallback = _Unloaded(proto, str(cv_exc))
            fallback.notes = [*getattr(fallback, "notes", []),  # type: ignore[attr-defined]
                              f"REAL CAFFE REFUSED THIS FILE ({exc}); the check ran in OpenCV DNN instead"]
            # Whether source or converted file, no verdict of the stand-in is that Caffe's: say why it
            # refused (the check never PASSes then).
            (fallback.target_refused, fallback.refusal_is_ours,  # type: ignore[attr-defined]
             fallback.refusal_hint) = refusal(proto, weights, dialect, str(exc))  # type: ignore[attr-defined]
            return fallback
    return OpenCVCaffeRuntime(proto, weights)
