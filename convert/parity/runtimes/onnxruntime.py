"""ONNX Runtime as a parity runtime: CUDA when onnxruntime-gpu and a GPU are present, else CPU.

On CUDA the session runs exact float32 (TF32 off, ``_gpu``): ORT's CUDA default computes
convolutions and GEMMs in TF32, as far from float32 as torch's own TF32 run.

When the CUDA provider fails to load, ONNX Runtime falls back to the CPU with only a log line,
so the provider reported is the one the session actually holds (``get_providers()[0]``).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from convert._wire import read_varint as _varint
from convert.ir import Options, UsageError

from ..indices import IndexBound
from ..runtime import TensorSpec
from ._gpu import CUDA_EP, EXACT_FP32, ORT_CUDA_OPTIONS

__all__ = ["SET_OPS", "OnnxRuntime", "describe_device", "open_runtime", "outputs_after", "session_providers"]

logger = logging.getLogger(__name__)

_ORT_TYPES = {
    "tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int16)": np.int16, "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8, "tensor(uint16)": np.uint16, "tensor(uint32)": np.uint32,
    "tensor(uint64)": np.uint64, "tensor(bool)": np.bool_, "tensor(string)": np.str_,
}


def _thread_limit() -> int:
    """Return OMP_NUM_THREADS when set to a positive integer (ORT's own pool ignores it), else 0: ORT's default."""
    try:
        return max(0, int(os.environ.get("OMP_NUM_THREADS", "")))
    except ValueError:
        return 0


def _op_names_in(path: Path, words: Sequence[str]) -> set[str]:
    """Return which of ``words`` (op types) the model file holds, without parsing its weights.

    The protobuf fields are walked on the mapped file (model -> graph -> node -> op_type, and the
    graphs of attributes and functions), jumping over everything else: an inline 100 MB initializer
    costs one jump, where a parse would load it and a byte scan would read it (0.8 s on ResNet-50).
    A file the walk cannot follow is scanned for the words instead (memory stays flat either way).
    """
    import mmap

    try:
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            try:
                found: set[str] = set()
                _walk(mapped, 0, len(mapped), _MODEL, found, 0)
                return found & set(words)
            except (ValueError, IndexError):  # not a protobuf we can follow: scan its bytes
                import re

                pattern = re.compile(b"|".join(re.escape(w.encode()) for w in sorted(words, key=len, reverse=True)))
                return {m.group().decode() for m in pattern.finditer(mapped)}
    except (OSError, ValueError):  # unreadable or empty: the session below reports it
        return set()


# Which fields lead to op types (onnx.proto field numbers): ModelProto.graph = 7 and .functions = 25,
# GraphProto.node = 1, FunctionProto.node = 7, NodeProto.op_type = 4 and .attribute = 5,
# AttributeProto.g = 6 and .graphs = 11.
_MODEL, _GRAPH, _FUNCTION, _NODE, _ATTRIBUTE, _OP_TYPE = range(6)
_LEADS = {_MODEL: {7: _GRAPH, 25: _FUNCTION}, _GRAPH: {1: _NODE}, _FUNCTION: {7: _NODE},
          _NODE: {4: _OP_TYPE, 5: _ATTRIBUTE}, _ATTRIBUTE: {6: _GRAPH, 11: _GRAPH}}


def _walk(buf: object, pos: int, end: int, kind: int, found: set[str], depth: int) -> None:
    """Add the op types inside message ``kind`` at ``buf[pos:end]`` to ``found``."""
    if depth > 64:
        raise ValueError("messages nested deeper than 64")
    leads = _LEADS[kind]
    while pos < end:
        key, pos = _varint(buf, pos)
        wire = key & 7
        if wire == 0:
            _, pos = _varint(buf, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            size, pos = _varint(buf, pos)
            if pos + size > end:
                raise ValueError("a field runs past its message")
            lead = leads.get(key >> 3)
            if lead == _OP_TYPE:
                found.add(bytes(buf[pos:pos + size]).decode("utf-8", "replace"))  # type: ignore[index]
            elif lead is not None:
                _walk(buf, pos, pos + size, lead, found, depth + 1)
            pos += size
        else:
            raise ValueError(f"wire type {wire}")
    if pos != end:
        raise ValueError("a field runs past its message")


# ONNX ops whose values come from a random generator: no seed makes them match another framework's.
RANDOM_OPS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                        "Bernoulli"})


# ONNX ops whose output rows come in an order (or a number) that near-ties decide: the rows after
# them are compared as sets by the verdict (``compare.compare_sets``). ONNX has no sort: TopK sorts.
SET_OPS = frozenset({"NonMaxSuppression", "TopK", "NonZero"})
_GATHERS = frozenset({"Gather", "GatherElements", "GatherND"})  # an integer input may index a table (``index_bounds``)


def random_outputs(path: Path) -> dict[str, str]:
    """Map each graph output that depends on a random op to that op (``RandomNormal from aten.randn
    at model.py:12``). The file is parsed (structure only) by the caller's choice: when its op names
    include a random op."""
    return outputs_after(path, RANDOM_OPS)


def outputs_after(path: Path, ops: frozenset[str]) -> dict[str, str]:
    """Map each graph output computed from one of ``ops`` (at any depth, control-flow bodies
    included) to the last such op before it, named with its source (``NonMaxSuppression 'nms'
    from torchvision.ops.nms at boxes.py:41``)."""
    from convert.ir import AttributeType, load_file

    try:
        graph = load_file(path).graph
    except Exception:  # not parseable: the session reports it
        return {}

    def holds(node: object) -> bool:
        if node.op_type in ops:  # type: ignore[attr-defined]
            return True
        for attr in node.attributes.values():  # type: ignore[attr-defined]
            graphs = [attr.value] if attr.type == AttributeType.GRAPH else \
                list(attr.value) if attr.type == AttributeType.GRAPHS else []
            if any(holds(n) for g in graphs for n in g):
                return True
        return False

    origin: dict[str, tuple[int, str]] = {}  # value -> (position of the op, the op): the latest wins
    for at, node in enumerate(graph):  # a valid graph lists its nodes in topological order
        source: tuple[int, str] | None
        if holds(node):
            meta = node.metadata_props
            kind, line = meta.get("convert:source_type", ""), meta.get("convert:source_line", "")
            where = f" from {kind}" if kind else ""
            where += f" at {meta.get('convert:source_file', '')}:{line}" if line else ""
            source = (at, node.op_type + (f" '{node.name}'" if node.name else "") + where)
        else:
            source = max((origin[v.name] for v in node.inputs if v is not None and v.name in origin), default=None)
        if source is not None:
            for out in node.outputs:
                origin[out.name] = source
    return {o.name: origin[o.name][1] for o in graph.outputs if o.name in origin}


class OnnxRuntime:
    """An ONNX model loaded in an ONNX Runtime session."""

    def __init__(self, path: Path, *, device: str = "auto") -> None:
        import onnxruntime as ort

        providers = session_providers(device, ort.get_available_providers())
        want_cuda = providers[0] != "CPUExecutionProvider"
        if device in ("auto", "cuda") and not want_cuda:
            _warn_if_both_installed()  # onnxruntime-gpu shadowed by onnxruntime: the likely cause
        if device == "cuda" and not want_cuda:
            raise UsageError("--device cuda: this onnxruntime has no CUDA provider (install convert-toolkit[gpu])")
        so = ort.SessionOptions()
        so.log_severity_level = 3
        # Pre-packing copies each MatMul/Gemm weight into MLAS's blocked layout when the session
        # opens: it pays off over many runs, but the check runs a model once or twice. Measured on a
        # 1.8 GiB decoder: session 1.5-1.6 s -> 0.06-0.13 s, a run 0.43 -> 0.57 s, peak RSS 1.89 ->
        # 1.71 GiB; the same kernels compute, unpacked (ResNet-50: no change).
        so.add_session_config_entry("session.disable_prepacking", "1")
        threads = _thread_limit()
        if threads:  # `convert batch` workers share the cores: no more threads than OpenMP is given
            so.intra_op_num_threads = threads
        self.notes: list[str] = []
        named = _op_names_in(path, ["QuantizeLinear", *RANDOM_OPS, *SET_OPS, *_GATHERS])
        self._path, self._gathers = path, bool(named & _GATHERS)
        if "QuantizeLinear" in named:
            # ORT's full optimisation fuses QDQ groups into its integer kernels, which on x86 CPUs
            # without VNNI saturate (ORT's documented U8S8 issue): the check would then measure ORT's
            # kernels, not the model. BASIC keeps the QDQ semantics (float compute, exact rounding).
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
            self.notes.append("quantized (QDQ) model: ONNX Runtime ran it with basic optimisations (QDQ "
                              "semantics); its fused integer kernels can differ on CPUs without VNNI")
        try:
            self.session = ort.InferenceSession(os.fspath(path), sess_options=so, providers=providers)
        except Exception as exc:  # ORT raises its own exception types for bad models
            first = str(exc).strip().splitlines()[0]
            if "NOT_IMPLEMENTED" in first and not want_cuda:
                first += (" (this ONNX Runtime has no CPU kernel for that op in that type: a bf16 model runs "
                          "on CUDA, --device cuda with onnxruntime-gpu)")
            raise UsageError(f"ONNX Runtime cannot load {path.name}: {first}") from exc
        self._describe_io()
        self.random_outputs = random_outputs(path) if named & RANDOM_OPS else {}  # compared by shape only
        self.set_outputs = outputs_after(path, SET_OPS) if named & SET_OPS else {}  # rows compared as sets
        self.name = f"ONNX Runtime {ort.__version__}"
        self.device = describe_device(self.session)
        # A half-precision file of ours says so (``--precision``); the check then judges it as one.
        meta = self.session.get_modelmeta().custom_metadata_map
        self.metadata: dict[str, str] = dict(meta)  # the model's metadata_props (what a source runtime may follow)
        self.precision = meta.get("convert:precision", "fp32")
        if want_cuda and not self.device.startswith(CUDA_EP):
            _warn_cuda_fallback(self.device)

    def close(self) -> None:
        """Drop the session (the model's weights and ORT's arena) once the check has run it: the
        float64 run of the source that may follow needs the memory (Keypoint R-CNN: 0.6 GB)."""
        self.session = None  # type: ignore[assignment]

    def index_bounds(self) -> dict[str, IndexBound]:
        """The integer inputs that index a table in the file (``indices.index_bounds``), with the
        rows of the smallest; the file's structure is read only when it holds a gather."""
        if not self._gathers or not any(s.dtype.kind in "iu" for s in self.inputs()):
            return {}
        from convert.ir import load_file

        from ..indices import index_bounds

        return index_bounds(load_file(self._path).graph)

    def inputs(self) -> Sequence[TensorSpec]:
        """Return the session's inputs (initializers are not inputs); known after ``close`` too."""
        return self._inputs

    def outputs(self) -> Sequence[str]:
        """Return the output names in order."""
        return self._outputs

    def _describe_io(self) -> None:
        session = self.session
        self._inputs = [TensorSpec(i.name, np.dtype(_ORT_TYPES.get(i.type, np.float32)), tuple(i.shape))
                        for i in session.get_inputs()]
        self._outputs = [o.name for o in session.get_outputs()]
        self._halves = {i.name for i in session.get_inputs() if i.type == "tensor(float16)"}
        given = {d for i in session.get_inputs() for d in (i.shape or []) if isinstance(d, str)}
        self._row_axes = {}
        for o in session.get_outputs():
            dims = list(o.shape) if o.shape is not None else []
            axis = next((i for i, d in enumerate(dims) if isinstance(d, str) and d not in given), None)
            if axis is not None:
                self._row_axes[o.name] = axis

    @property
    def row_axes(self) -> dict[str, int]:
        """Each output's first axis whose size the graph computes from the data (a detection count:
        a symbolic size that no input has), where the file declares one."""
        return dict(self._row_axes)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once on ``feeds``."""
        names = self.outputs()
        # A half-precision model with half inputs (--half-io) takes the float32 feeds rounded.
        halves = self._halves
        results = self.session.run(names, {k: np.asarray(v, np.float16) if k in halves else v
                                           for k, v in feeds.items()})
        return dict(zip(names, (np.asarray(r) for r in results), strict=True))


def session_providers(device: str, available: Sequence[str]) -> list[str | tuple[str, dict[str, str]]]:
    """Return the providers a session for ``--device device`` asks for, given ORT's ``available`` ones.

    CUDA comes with the options of an exact float32 run (``_gpu.ORT_CUDA_OPTIONS``: TF32 off), then
    the CPU as ORT's fallback for ops CUDA lacks. ``cpu``, or no CUDA provider: the CPU alone.
    """
    if device in ("auto", "cuda") and CUDA_EP in available:
        return [(CUDA_EP, dict(ORT_CUDA_OPTIONS)), "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def describe_device(session: object) -> str:
    """Name where ``session`` runs and, on CUDA, its float32 math mode as the provider reports it.

    The mode is read back from the session (``get_provider_options``), not from what was asked:
    ``CUDAExecutionProvider, fp32 (TF32 off)``, or ``... TF32 ON`` where the option did not take.
    """
    first = session.get_providers()[0]  # type: ignore[attr-defined]
    if first != CUDA_EP:
        return str(first)
    options = session.get_provider_options().get(CUDA_EP, {})  # type: ignore[attr-defined]
    mode = EXACT_FP32 if str(options.get("use_tf32", "1")) == "0" else "TF32 ON (fp32 results differ)"
    return f"{CUDA_EP}, {mode}"


@functools.cache
def _both_installed() -> bool:
    from importlib import metadata

    names = []
    for dist in ("onnxruntime", "onnxruntime-gpu"):
        try:
            metadata.version(dist)
            names.append(dist)
        except metadata.PackageNotFoundError:
            pass
    return len(names) == 2


@functools.cache  # once per process: a check opens two sessions
def _warn_if_both_installed() -> None:
    if _both_installed():
        logger.warning(
            "no CUDA provider: onnxruntime and onnxruntime-gpu are both installed and share one module. "
            "Fix: pip uninstall -y onnxruntime onnxruntime-gpu && pip install onnxruntime-gpu"
        )


@functools.cache
def _warn_cuda_fallback(device: str) -> None:
    hint = " (onnxruntime and onnxruntime-gpu are both installed)" if _both_installed() else \
        " (check the CUDA and cuDNN libraries onnxruntime-gpu needs)"
    logger.warning("the CUDA provider did not load; ONNX Runtime runs on %s%s", device, hint)


def open_runtime(paths: Sequence[Path], options: Options) -> OnnxRuntime:
    """Open the .onnx in ``paths`` (the first one ending in .onnx)."""
    onnx_paths = [Path(p) for p in paths if str(p).endswith(".onnx")] or [Path(paths[0])]
    return OnnxRuntime(onnx_paths[0], device=str(options.get("device", "auto")))
