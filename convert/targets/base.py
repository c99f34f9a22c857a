"""What every target shares: its result record, the worker process protocol, the converted file's
inputs, outputs and provenance.

A toolchain runs in a worker process (``_openvino_worker``, ``_ncnn_worker``, ``_rknn_worker``:
scripts that import only numpy and the toolchain, so that the RKNN one runs in its own virtual
environment). The parent writes ``request.json`` and ``in.npz`` into a temporary folder; the worker
writes ``info.json`` (the toolchain's version, the ops its importer lacks, a refusal) and
``out.npz`` (arrays by ``CONFIG|OUTPUT``). A worker killed by a signal is a FAIL of that target,
naming the signal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from convert._errors import printable

if TYPE_CHECKING:
    from convert.parity.compare import OutputResult, ParityReport
    from convert.parity.locate import Location
    from convert.parity.runtime import TensorSpec

__all__ = ["OnnxFile", "TargetFailedError", "TargetResult", "WorkerRun", "one_line"]

#: Seconds a toolchain worker may take for one file (import, build, run).
WORKER_TIMEOUT = 900


class TargetFailedError(Exception):
    """The toolchain refused the file, or its worker died: the message says how, in one line."""


def one_line(text: str, limit: int = 400) -> str:
    """Return ``text`` on one line, cut at ``limit`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


@dataclass(slots=True)
class TargetResult:
    """The verdict of one target (one precision of it) on the converted file."""

    target: str
    toolchain: str
    version: str = ""
    precision: str = "fp32"
    device: str = "cpu"
    #: The per-output comparison with the source, by the same rules as the main check.
    report: ParityReport | None = None
    #: The toolchain refused the file (its own message, one line) or its worker died: FAIL.
    refused: str = ""
    #: Ops of the file the toolchain's importer lacks, each with the source layer it came from.
    unsupported: list[str] = field(default_factory=list)
    location: Location | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def label(self) -> str:
        """``target (precision)`` for the table and JUnit."""
        return self.target if self.precision in ("", "-") else f"{self.target} [{self.precision}]"

    @property
    def passed(self) -> bool:
        """True when the toolchain took the file and every output passed."""
        return not self.refused and not self.unsupported and self.report is not None and self.report.passed

    @property
    def verdict(self) -> str:
        """PASS, FAIL (an output, a refusal, an unsupported op, a crash) or NOT VERIFIED."""
        if self.refused or self.unsupported or self.report is None:
            return "FAIL"
        return self.report.verdict

    @property
    def outputs(self) -> list[OutputResult]:
        """The per-output results (none when the toolchain refused the file)."""
        return [] if self.report is None else list(self.report.outputs)

    def worst(self) -> float | None:
        """The largest error relative to scale over the outputs, or None."""
        errs = [o.rel_to_scale for o in self.outputs if o.rel_to_scale == o.rel_to_scale]
        return max(errs) if errs else None

    def to_dict(self) -> dict[str, object]:
        """Return the JSON form: toolchain, version, precision, verdict and per-output errors."""
        import math

        def finite(x: float) -> float | None:
            return x if math.isfinite(x) else None

        return {
            "target": self.target, "toolchain": self.toolchain, "version": self.version,
            "precision": self.precision, "device": self.device, "verdict": self.verdict,
            "passed": self.passed, "refused": self.refused or None, "unsupported": list(self.unsupported),
            "outputs": [{"name": o.name, "shape": list(o.shape), "max_abs": finite(o.max_abs),
                         "max_rel": finite(o.max_rel), "rel_to_scale": finite(o.rel_to_scale),
                         "cosine": finite(o.cosine), "verdict": o.verdict, "note": o.note or None}
                        for o in self.outputs],
            "notes": list(self.notes) + ([] if self.report is None else list(self.report.notes)),
            "location": self.location.to_dict() if self.location is not None else None,
            "seconds": round(self.seconds, 3),
        }

    def row(self) -> list[str]:
        """Return this target's row of the targets table."""
        worst = self.worst()
        n = len(self.outputs)
        passed = sum(o.passed for o in self.outputs)
        name = f"{self.toolchain} {self.version}".strip()
        how = ""
        if self.report is not None and any(o.passed and o.by_half for o in self.outputs):
            how = " (half rule)"
        elif self.report is not None and any(o.passed and o.by_float64 for o in self.outputs):
            how = " (float64 rule)"
        return [self.target, printable(name), self.precision, self.device,
                f"{passed}/{n}" if n else "-", "-" if worst is None else f"{worst:.3g}", self.verdict + how]

    def lines(self) -> list[str]:
        """Return the lines said below the targets table for this target."""
        head = f"  {self.label}:"
        out: list[str] = []
        if self.unsupported:
            kinds = len(self.unsupported)
            out.append(f"{head} FAIL: {self.toolchain}'s importer lacks {kinds} op{'s' if kinds > 1 else ''} of this "
                       "file (each with how many it met, and where they came from): " + "; ".join(self.unsupported))
        if self.refused:
            out.append(f"{head} FAIL: {printable(self.refused)}")
        if self.report is not None:
            for o in self.report.outputs:
                if not o.passed:
                    out.append(f"{head} output {printable(o.name)} {o.verdict}: err/scale {o.rel_to_scale:.3g}"
                               + (f" ({printable(o.note)})" if o.note else ""))
            out += [f"{head} NOTE: {printable(n)}" for n in self.report.notes]
        out += [f"{head} {printable(n)}" for n in self.notes]
        if self.location is not None:
            out += [f"{head} {line}" if i == 0 else f"  {line}" for i, line in enumerate(self.location.lines())]
        return out


def targets_table(results: Sequence[TargetResult]) -> list[str]:
    """Return the targets' rows and lines for the parity table."""
    if not results:
        return []
    cols = ["target", "toolchain", "precision", "device", "outputs", "worst err/scale", "result"]
    rows = [r.row() for r in results]
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    out = ["targets: the converted file in each deployment toolchain, against the source (same inputs, same rules)",
           "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in rows]
    for r in results:
        out += r.lines()
    return out


# -- the worker process ----------------------------------------------------------------------------
def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


@dataclass(slots=True)
class WorkerRun:
    """One run of a toolchain worker: what it said (``info``) and the arrays it wrote."""

    info: dict[str, object]
    arrays: dict[str, np.ndarray]


def run_worker(python: str, script: Path, request: Mapping[str, object], feeds: Mapping[str, np.ndarray],
               toolchain: str, *, env: Mapping[str, str] | None = None, timeout: float = WORKER_TIMEOUT) -> WorkerRun:
    """Run ``script`` with ``python`` on ``request`` and ``feeds``; return what it wrote.

    Raises:
        TargetFailedError: the worker died (the signal named), timed out, or exited with an error
            (its last error line).
    """
    with tempfile.TemporaryDirectory(prefix="convert-target-") as tmp:
        folder = Path(tmp)
        names = list(feeds)
        np.savez(folder / "in.npz", names=np.array(names, dtype=str),
                 **{f"arr_{i}": np.ascontiguousarray(feeds[n]) for i, n in enumerate(names)})
        req = dict(request, inputs=str(folder / "in.npz"), outputs=str(folder / "out.npz"),
                   info=str(folder / "info.json"), workdir=str(folder))
        (folder / "request.json").write_text(json.dumps(req))
        run_env = dict(os.environ if env is None else env)
        run_env.setdefault("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "2"))
        try:
            proc = subprocess.run([python, "-P", str(script), str(folder / "request.json")], capture_output=True,
                                  text=True, errors="replace", timeout=timeout, env=run_env, check=False,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise TargetFailedError(f"{toolchain} did not finish within {timeout:.0f} s (its worker was "
                                    "killed)") from exc
        if proc.returncode < 0:
            raise TargetFailedError(f"{toolchain} crashed on the file: its worker died of "
                                    f"{_signal_name(proc.returncode)}" + _last_words(proc.stderr + proc.stdout))
        info: dict[str, object] = {}
        if (folder / "info.json").is_file():
            info = json.loads((folder / "info.json").read_text())
        if proc.returncode != 0 and not info.get("refused"):
            lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
            said = [ln for ln in lines if ln.startswith("convert-worker: ")]
            reason = (said[-1][len("convert-worker: "):] if said else lines[-1] if lines
                      else f"exit status {proc.returncode}")
            raise TargetFailedError(f"{toolchain} failed: {one_line(reason)}")
        arrays: dict[str, np.ndarray] = {}
        if (folder / "out.npz").is_file():
            with np.load(folder / "out.npz", allow_pickle=False) as data:
                arrays = {str(n): data[f"arr_{i}"] for i, n in enumerate(data["names"])}
        return WorkerRun(info, arrays)


def _last_words(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and "it/s]" not in ln]
    return f" (last output: {one_line(lines[-1], 200)})" if lines else ""


# -- the converted ONNX file -----------------------------------------------------------------------
class OnnxFile:
    """The converted ONNX file as the targets need it: inputs, outputs, which outputs are sets or
    random, and where each node came from (its source layer). Weights stay on disk."""

    def __init__(self, path: Path) -> None:
        """Read ``path``'s graph (not its weights)."""
        from convert import ir
        from convert.parity.runtimes.onnxruntime import (
            RANDOM_OPS,
            SET_OPS,
            _op_names_in,
            outputs_after,
            random_outputs,
        )

        self.path = Path(path)
        self.model = ir.load_file(self.path)
        graph = self.model.graph
        self.metadata: dict[str, str] = dict(self.model.metadata_props)
        self.precision = self.metadata.get("convert:precision", "fp32")
        named = _op_names_in(self.path, [*RANDOM_OPS, *SET_OPS])
        self.random_outputs = random_outputs(self.path) if named & RANDOM_OPS else {}
        self.set_outputs = outputs_after(self.path, SET_OPS) if named & SET_OPS else {}
        given = {d for v in graph.inputs for d in (list(v.shape) if v.shape is not None else []) if isinstance(d, str)}
        self.row_axes: dict[str, int] = {}
        for v in graph.outputs:
            dims = [d if isinstance(d, int) else str(d) for d in (list(v.shape) if v.shape is not None else [])]
            axis = next((i for i, d in enumerate(dims) if isinstance(d, str) and d not in given), None)
            if axis is not None and v.name:
                self.row_axes[v.name] = axis
        self.output_names = [v.name or "" for v in graph.outputs]
        self._inputs = [v for v in graph.inputs if not v.is_initializer()]

    def inputs(self) -> list[TensorSpec]:
        """Return the graph's inputs."""
        from convert.parity.runtime import TensorSpec

        specs = []
        for v in self._inputs:
            dtype = v.dtype.numpy() if v.dtype is not None else np.dtype(np.float32)
            dims = tuple(d if isinstance(d, int) else None for d in (list(v.shape) if v.shape is not None else []))
            specs.append(TensorSpec(v.name or "", np.dtype(dtype), dims))
        return specs

    def producer_of(self, tensor: str) -> object | None:
        """Return the node that computes ``tensor``, or None."""
        for node in self.model.graph.all_nodes() if hasattr(self.model.graph, "all_nodes") else self.model.graph:
            if any(o.name == tensor for o in node.outputs):
                return node
        return None

    def where(self, node: object) -> str:
        """Say which source layer ``node`` came from (its provenance), else its name and type."""
        from convert import ir

        prov = ir.get_provenance(node)  # type: ignore[arg-type]
        own = f"node '{printable(getattr(node, 'name', '') or '?')}' ({getattr(node, 'op_type', '?')})"
        if prov.layer or prov.file:
            return f"{own} from {prov.where()}"
        return own

    def nodes_of_type(self, op_type: str) -> list[object]:
        """Return the nodes of ``op_type`` (any domain), in graph order."""
        return [n for n in self.model.graph if n.op_type == op_type]


def describe_unsupported(found: Sequence[tuple[str, str]], onnx_file: OnnxFile | None) -> list[str]:
    """Turn the toolchain's ``(op type, tensor or node name)`` gaps into lines, one per op type with
    how many the toolchain named and where each came from (the node and its source layer; at most
    5 named per type). A gap named only by its type (a layer pnnx left unconverted) is traced to
    the file's nodes of that type."""
    by_type: dict[str, tuple[int, list[str]]] = {}
    for op_type, name in found:
        node = None
        if onnx_file is not None and name:
            node = onnx_file.producer_of(name) or next((n for n in onnx_file.model.graph if n.name == name), None)
        if node is not None:
            op_type = node.op_type  # type: ignore[attr-defined]
            wheres = [onnx_file.where(node)]  # type: ignore[union-attr]
        elif onnx_file is not None and onnx_file.nodes_of_type(op_type):
            wheres = [onnx_file.where(n) for n in onnx_file.nodes_of_type(op_type)]
        else:
            wheres = [f"'{printable(name)}'"]
        count, seen = by_type.get(op_type or "?", (0, []))
        by_type[op_type or "?"] = (count + 1, seen + [w for w in wheres if w not in seen])
    out = []
    for op_type, (count, wheres) in by_type.items():
        shown_ = ", ".join(wheres[:5]) + (f", and {len(wheres) - 5} more" if len(wheres) > 5 else "")
        out.append(f"{op_type} x{count} ({shown_})")
    return out
