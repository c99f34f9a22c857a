"""First-bad-layer localisation: which source layer's output the converted model gets wrong first.

Every node of a converted model carries its source layer in its provenance (``convert:source_layer``
in an ONNX node's metadata; a ``# from layer "KEY" ...`` comment above each layer of a Caffe
prototxt the exporter writes). The layer's output in the converted model is the output of the
last node carrying its key; a Conv that absorbed a BatchNormalization carries the BN's key in
``convert:output_of`` instead. Both models run on the same inputs with these intermediate values
exposed:

=========  ===========================================================================
source     per-layer values from the framework's own runtime
=========  ===========================================================================
onnx       ONNX Runtime with every node output made a graph output (key: node name,
           else its first output's name)
caffe      real Caffe layer by layer, or OpenCV DNN unfused, by layer name
darknet    the Darknet runtime's per-layer output buffers (key: layer index)
pytorch    the ExportedProgram torch captured, run node by node by ``torch.fx.Interpreter``
           (key: module path; the FX node name for ops outside any module)
paddle     Paddle Inference on a copy of the PIR program with a fetch op per op's main
           output (key: the op's output names); a legacy .pdmodel is not supported
tflite     TFLite's interpreter keeping every tensor (key: each op's first output tensor);
           NHWC values are compared in whichever layout the converted value is held
tensorflow the frozen, folded graph the converter read, run in a session (key: node name);
           NHWC as for TFLite

=========  ===========================================================================

and the converted side in ONNX Runtime or OpenCV DNN. Layers are visited in the source's
topological order; the first whose converted output is further than ``tol`` of the reference's
scale from the reference (the verdict's own criterion) *and* more than ``JUMP`` times the largest
error of the layers before it is reported, with where it came from and both values' statistics.
The second condition keeps float32 rounding, which grows smoothly with depth, from being named as
the cause. Layers whose values cannot be paired (no counterpart, different element
count, non-float) are counted as skipped, never guessed.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from convert import ir
from convert.formats import normalize
from convert.ir import Options

from .compare import nonfinite_agreeing_diff
from .runtime import Runtime

__all__ = ["LayerCheck", "Location", "locate"]

# A comment the Caffe exporter writes above each layer: ``# from layer "KEY" <where>``.
CAFFE_ORIGIN = re.compile(r'^\s*#\s*from layer ("(?:[^"\\]|\\.)*")\s*(.*)$')
_LAYER_NAME = re.compile(r'^\s*name\s*:\s*"((?:[^"\\]|\\.)*)"')
_MAX_PROTO = 2**31 - 2**20
# A layer is named when its error exceeds the tolerance *and* JUMP times every earlier layer's error:
# float32 rounding grows smoothly with depth (a deep net's middle layers can pass 1e-4 of their scale
# while the outputs pass), a wrong weight or op makes the error jump where it happens.
JUMP = 10.0  # what ONNX Runtime takes from bytes; larger models go through a temp folder


class LocateUnavailableError(Exception):
    """This model's layers cannot be exposed (the reason is the message)."""


@dataclass(slots=True)
class Stats:
    """Summary of one tensor."""

    min: float
    max: float
    mean: float
    std: float

    @classmethod
    def of(cls, a: np.ndarray) -> Stats:
        """Return the statistics of ``a`` (finite values only)."""
        f = a[np.isfinite(a)].astype(np.float64)
        if f.size == 0:
            return cls(math.nan, math.nan, math.nan, math.nan)
        return cls(float(f.min()), float(f.max()), float(f.mean()), float(f.std()))

    def text(self) -> str:
        """Return ``min .. max, mean, std``."""
        return f"min {self.min:.4g}  max {self.max:.4g}  mean {self.mean:.4g}  std {self.std:.4g}"


@dataclass(slots=True)
class LayerCheck:
    """One source layer's output compared."""

    key: str
    where: str
    shape: tuple[int, ...]
    error: float  # max|ours - ref| / max|ref|
    ref: Stats
    got: Stats
    #: The same rows in another order along the first axis: ``error`` is measured row by row, each
    #: converted row against its nearest reference row; ``unmatched`` rows (at most 1 %) left out.
    reordered: bool = False
    unmatched: int = 0


@dataclass(slots=True)
class Location:
    """The result of a localisation: the first layer out of tolerance, if any."""

    tol: float
    compared: int = 0
    skipped: int = 0
    first_bad: LayerCheck | None = None
    checks: list[LayerCheck] = field(default_factory=list)
    unavailable: str = ""  # why nothing could be localised
    #: Whether an output of the check FAILed: when none did, no layer in tolerance hides a difference.
    outputs_differ: bool = True

    def lines(self) -> list[str]:
        """Return the report's lines for the terminal."""
        if self.unavailable:
            return [f"locate: not available: {self.unavailable}"]
        head = f"locate: compared {self.compared} layers ({self.skipped} without a comparable counterpart)"
        bad = self.first_bad
        if bad is None:
            if not self.checks:
                return [f"{head}: no layer could be paired"]
            top = max(self.checks, key=lambda c: c.error)
            if top.error <= self.tol and not self.outputs_differ:
                return [f"{head}; every one is within tol={self.tol:g} of its scale, and no output failed "
                        "either: there is no difference to locate", *self._reordered_line()]
            if top.error <= self.tol:
                return [f"{head}; every one is within tol={self.tol:g} of its scale, so any difference arises "
                        "after the last compared layer (an output head, or a layer without counterpart)",
                        *self._reordered_line()]
            return [f"{head}; no layer stands out: the error grows gradually with depth (float32 rounding), "
                    f"largest {top.error:.3g} of its scale at {top.where or top.key}", *self._reordered_line()]
        shape = "x".join(map(str, bad.shape)) or "scalar"
        return [
            f"{head}; first layer out of tolerance, in topological order:",
            f"  {bad.where or bad.key}: error {bad.error:.3g} of its scale (tol {self.tol:g}), shape {shape}"
            + (f" (its rows in another order{f', {bad.unmatched} without a counterpart' if bad.unmatched else ''}: "
               "compared row by row)" if bad.reordered else ""),
            f"    reference  {bad.ref.text()}",
            f"    converted  {bad.got.text()}",
            *self._reordered_line(),
        ]

    def _reordered_line(self) -> list[str]:
        moved = [c for c in self.checks if c.reordered]
        if not moved:
            return []
        first = moved[0]
        return [f"  {len(moved)} layer(s) hold the reference's rows in another order, from {first.where or first.key} "
                "on (a sort, top-k or NMS ordered near-ties differently); each of their rows was compared with "
                "its nearest reference row"]

    def to_dict(self) -> dict[str, object]:
        """Return the JSON form (for ``--report``)."""
        first = None
        if self.first_bad is not None:
            b = self.first_bad
            first = {"layer": b.key, "where": b.where, "shape": list(b.shape), "error": b.error,
                     "reordered": b.reordered, "reference": vars_of(b.ref), "converted": vars_of(b.got)}
        return {"tol": self.tol, "compared": self.compared, "skipped": self.skipped, "first_bad": first,
                "unavailable": self.unavailable or None}


def vars_of(stats: Stats) -> dict[str, float]:
    """Return ``stats`` as a dict."""
    return {"min": stats.min, "max": stats.max, "mean": stats.mean, "std": stats.std}


# -- ONNX ----------------------------------------------------------------------------------------
def onnx_source_key(node: ir.Node) -> str:
    """Return the layer key the ONNX frontend gives a node (see ``frontends.onnx.reader.load``).

    A node that carries provenance from an earlier conversion keeps it; any other is its own
    layer, keyed by its name, else its first output's.
    """
    if node.metadata_props.get("convert:source_file"):
        return ir.output_key(node)
    return node.name or next((o.name for o in node.outputs if o.name), "")


def _onnx_layers(model: ir.Model, key_of: Callable[[ir.Node], str]) -> dict[str, tuple[str, list[ir.Value]]]:
    """Return {key: (where, outputs)} of the last node of each key, in graph order."""
    found: dict[str, tuple[str, list[ir.Value]]] = {}
    for node in model.graph:
        key = key_of(node)
        if not key:
            continue
        prov = ir.get_provenance(node)
        where = prov.where() if prov.layer else ir.Provenance(file=prov.file, layer=key, kind=node.op_type).where()
        if prov.layer and key != prov.layer:
            where += f" + '{key}' folded in"
        found.pop(key, None)  # keep the last node of the key, at its position
        used = [o for o in node.outputs if o.name and (o.uses() or o.is_graph_output())]
        found[key] = (where, used or [o for o in node.outputs if o.name])
    return found


def _run_onnx_with(model: ir.Model, values: Sequence[ir.Value],
                   feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run ``model`` with ``values`` made graph outputs; return them by name."""
    import onnxruntime as ort

    for value in values:
        if not value.is_graph_output():
            model.graph.outputs.append(value)
    names = [v.name for v in values]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    weights = sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)
    if weights < _MAX_PROTO:
        session = ort.InferenceSession(ir.serialize_inline(model), sess_options=so, providers=["CPUExecutionProvider"])
        out = session.run(names, dict(feeds))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / "model.onnx"
            ir.save_model(model, copy, external_data="model.onnx.data")
            session = ort.InferenceSession(str(copy), sess_options=so, providers=["CPUExecutionProvider"])
            out = session.run(names, dict(feeds))
    return {n: np.asarray(v) for n, v in zip(names, out, strict=True)}


def _onnx_path(paths: Sequence[Path]) -> Path:
    return next((Path(p) for p in paths if str(p).endswith(".onnx")), Path(paths[0]))


def _onnx_dest(paths: Sequence[Path], keys: Sequence[str], feeds: Mapping[str, np.ndarray],
               options: Options) -> dict[str, tuple[str, list[np.ndarray]]]:
    model = ir.load_file(_onnx_path(paths))
    layers = _onnx_layers(model, ir.output_key)
    wanted = [k for k in keys if k in layers]
    values = list({id(v): v for k in wanted for v in layers[k][1]}.values())
    got = _run_onnx_with(model, values, feeds)
    return {k: (layers[k][0], [got[v.name] for v in layers[k][1]]) for k in wanted}


def _onnx_source(paths: Sequence[Path], runtime: Runtime, feeds: Mapping[str, np.ndarray],
                 options: Options) -> dict[str, list[np.ndarray]]:
    model = ir.load_file(_onnx_path(paths))
    layers = _onnx_layers(model, onnx_source_key)
    values = list({id(v): v for _, outs in layers.values() for v in outs}.values())
    got = _run_onnx_with(model, values, feeds)
    return {k: [got[v.name] for v in outs] for k, (_, outs) in layers.items()}


# -- Caffe ---------------------------------------------------------------------------------------
def caffe_origins(prototxt: Path) -> dict[str, tuple[str, str]]:
    """Return {key: (layer name, where)} from the exporter's ``# from layer`` comments (last layer per key)."""
    found: dict[str, tuple[str, str]] = {}
    pending: tuple[str, str] | None = None
    for line in prototxt.read_text(errors="replace").splitlines():
        m = CAFFE_ORIGIN.match(line)
        if m:
            pending = (json.loads(m.group(1)), m.group(2).strip())
            continue
        n = _LAYER_NAME.match(line)
        if n and pending is not None:
            key, where = pending
            found.pop(key, None)
            found[key] = (json.loads(f'"{n.group(1)}"'), where)
            pending = None
    return found


def _caffe_runtime(paths: Sequence[Path], options: Options) -> object:
    from .runtimes.caffe_runtime import open_runtime

    return open_runtime(paths, options)


def _caffe_dest(paths: Sequence[Path], keys: Sequence[str], feeds: Mapping[str, np.ndarray],
                options: Options) -> dict[str, tuple[str, list[np.ndarray]]]:
    from convert.frontends.caffe.frontend import split_paths
    from convert.frontends.caffe.reader import read_prototxt

    proto, _ = split_paths(paths)
    layers = read_prototxt(Path(proto)).layers
    origins = caffe_origins(Path(proto))
    if not origins:  # a prototxt written without origins: layers named as the source's
        origins = {layer.name: (layer.name, f"'{layer.name}'") for layer in layers}
    consumed = {b for layer in layers if layer.type != "Silence" for b in layer.bottoms}  # Silence: the unused
    tops = {layer.name: list(layer.tops) for layer in layers}
    wanted = [k for k in keys if k in origins]
    runtime = _caffe_runtime(paths, options)
    values = runtime.layer_outputs(feeds, [origins[k][0] for k in wanted])  # type: ignore[attr-defined]
    result: dict[str, tuple[str, list[np.ndarray]]] = {}
    for k in wanted:
        name, where = origins[k]
        if name not in values:
            continue
        outs = values[name]
        used = [a for a, t in zip(outs, tops.get(name, []), strict=False) if t in consumed]
        result[k] = (where, used or outs)  # a Slice's unused parts are not the layer's output
    return result


def _caffe_source(paths: Sequence[Path], runtime: Runtime, feeds: Mapping[str, np.ndarray],
                  options: Options) -> dict[str, list[np.ndarray]]:
    from convert.frontends.caffe.frontend import split_paths
    from convert.frontends.caffe.reader import read_prototxt

    proto, _ = split_paths(paths)
    names = [layer.name for layer in read_prototxt(Path(proto)).layers if layer.type != "Input"]
    rt = runtime if hasattr(runtime, "layer_outputs") else _caffe_runtime(paths, options)
    values = rt.layer_outputs(feeds, names)  # type: ignore[attr-defined]
    return {n: values[n] for n in names if n in values}


# -- Darknet -------------------------------------------------------------------------------------
def _darknet_source(paths: Sequence[Path], runtime: Runtime, feeds: Mapping[str, np.ndarray],
                    options: Options) -> dict[str, list[np.ndarray]]:
    outputs = runtime.all_layer_outputs(feeds)  # type: ignore[attr-defined]
    return {str(i): [a] for i, a in sorted(outputs.items())}


# -- PyTorch -------------------------------------------------------------------------------------
def _torch_source(paths: Sequence[Path], runtime: Runtime, feeds: Mapping[str, np.ndarray],
                  options: Options) -> dict[str, list[np.ndarray]]:
    import copy

    import torch
    from torch.export.graph_signature import InputKind

    from convert.frontends.pytorch import _capture
    from convert.frontends.pytorch.lower import layer_key

    if paths:
        program, _, _ = _capture(paths, copy.copy(options))
    else:  # an in-memory nn.Module (the Python API): captured as load_module captures it
        from convert.frontends.pytorch.capture import export_module

        module = runtime.module  # type: ignore[attr-defined]
        example = tuple(torch.from_numpy(np.ascontiguousarray(feeds[s.name])) for s in runtime.inputs())
        program = export_module(module, example, copy.copy(options), type(module).__name__)
    gm = program.graph_module  # type: ignore[attr-defined]
    state = program.state_dict  # type: ignore[attr-defined]
    consts = getattr(program, "constants", {})
    users = iter(torch.from_numpy(np.ascontiguousarray(feeds[s.name])) for s in runtime.inputs())
    args = []
    for spec in program.graph_signature.input_specs:  # type: ignore[attr-defined]
        if spec.kind == InputKind.USER_INPUT:
            args.append(next(users))
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            args.append(state[spec.target] if spec.target in state else consts[spec.target])
        else:
            args.append(consts[spec.target])
    groups: dict[str, torch.fx.Node] = {}
    for node in gm.graph.nodes:
        if node.op == "call_function":
            key = layer_key(node)
            groups.pop(key, None)
            groups[key] = node
    wanted = {node: key for key, node in groups.items() if key}
    captured: dict[str, list[np.ndarray]] = {}

    class _Capture(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> object:
            result = super().run_node(n)
            if n in wanted:
                leaves = result if isinstance(result, (list, tuple)) else [result]
                # copied: a later in-place op of the graph (hardswish_, relu_) would rewrite a view
                captured[wanted[n]] = [t.detach().numpy().copy() for t in leaves if isinstance(t, torch.Tensor)]
            return result

    with torch.no_grad():
        _Capture(gm).run(*args)
    return {k: captured[k] for k in groups if k in captured}


# -- Paddle --------------------------------------------------------------------------------------
def _paddle_source(paths: Sequence[Path], runtime: Runtime, feeds: Mapping[str, np.ndarray],
                   options: Options) -> dict[str, list[np.ndarray]]:
    """Run Paddle Inference on a copy of the PIR program with a fetch op added for each op's main
    output (the parameters are linked, not copied)."""
    import copy
    import json
    import os

    from convert.frontends.paddle.context import layer_key
    from convert.frontends.paddle.loader import read_program, resolve

    from .runtimes.paddle import PaddleRuntime

    files = resolve([Path(p) for p in paths])
    if files.program.suffix != ".json" or files.params is None:
        raise LocateUnavailableError("layer-by-layer runs need a PIR program (.json) with a combined .pdiparams")
    doc = json.loads(files.program.read_text())
    raw_ops = doc["program"]["regions"][0]["blocks"][0]["ops"]
    fetches = [o for o in raw_ops if o.get("#") == "1.fetch"]
    fetched = {i.get("%") for f in fetches for i in f.get("I", [])}  # a value fetched twice breaks Paddle
    ids = [int(v) for v in re.findall(r'"%": (\d+)', json.dumps(doc))]
    next_id = max(ids, default=0) + 1
    keys: dict[str, str] = {}
    for op in read_program(files.program).ops:
        outs = raw_ops[op.index].get("O") or []
        out = (outs if isinstance(outs, list) else [outs])[:1]
        tt = out[0].get("TT") or {} if out else {}
        if not out or out[0].get("%") in fetched or tt.get("#") != "0.t_dtensor" or \
                (tt.get("D") or [{}])[0].get("#") != "0.t_f32":
            continue
        col = len(fetches) + len(keys)
        name = f"convert_locate_{col}"
        fetch = copy.deepcopy(fetches[0])
        fetch["A"] = [{"AT": {"#": "0.a_str", "D": name}, "N": "name"}, {"AT": {"#": "0.a_i32", "D": col}, "N": "col"}]
        fetch["I"] = [{"%": out[0]["%"]}]
        fetch["O"] = [{"%": next_id, "TT": copy.deepcopy(tt)}]
        next_id += 1
        raw_ops.append(fetch)
        keys[name] = layer_key(op)
    with tempfile.TemporaryDirectory(prefix="convert-locate-") as tmp:
        program = Path(tmp) / files.program.name
        program.write_text(json.dumps(doc))
        params = Path(tmp) / files.params.name
        os.symlink(files.params.resolve(), params)
        values = PaddleRuntime([program, params], device="cpu").run(feeds)
    return {keys[n]: [values[n]] for n in keys if n in values}


# -- TFLite -------------------------------------------------------------------------------------
def _tflite_source(paths: Sequence[Path], runtime: Runtime, feeds: Mapping[str, np.ndarray],
                   options: Options) -> dict[str, list[np.ndarray]]:
    if getattr(runtime, "output_steps", None) or getattr(runtime, "quantized", False):
        raise LocateUnavailableError("a quantized model's layers differ by rounding steps, which the layer check's "
                                     "tolerance (a fraction of each layer's scale) does not model")
    tensors = runtime.all_tensors(feeds)  # type: ignore[attr-defined]
    return {name: [value] for name, value in tensors.items()}


def _tensorflow_source(paths: Sequence[Path], runtime: Runtime, feeds: Mapping[str, np.ndarray],
                       options: Options) -> dict[str, list[np.ndarray]]:
    return {name: [value] for name, value in runtime.all_tensors(feeds).items()}  # type: ignore[attr-defined]


_SOURCES: dict[str, Callable[..., dict[str, list[np.ndarray]]]] = {
    "tensorflow": _tensorflow_source,
    "tflite": _tflite_source,
    "paddle": _paddle_source,
    "onnx": _onnx_source,
    "caffe": _caffe_source,
    "darknet": _darknet_source,
    "pytorch": _torch_source,
}
_DESTS: dict[str, Callable[..., dict[str, tuple[str, list[np.ndarray]]]]] = {
    "onnx": _onnx_dest,
    "caffe": _caffe_dest,
}


def _error(ref: np.ndarray, got: np.ndarray) -> float:
    r = ref.astype(np.float64)
    g = got.astype(np.float64)
    diff = nonfinite_agreeing_diff(r, g)  # NaN on both sides at a place agrees, as in the verdict
    finite = r[np.isfinite(r)]
    scale = float(np.abs(finite).max()) if finite.size else 0.0
    worst = float(diff.max()) if diff.size else 0.0
    if scale > 0:
        return worst / scale
    return 0.0 if worst == 0 else math.inf


def _row_matched_error(ref: np.ndarray, got: np.ndarray) -> tuple[float, int]:
    """The error once each converted row (first axis) is paired with the reference row nearest to
    it among those of the closest sums, and how many rows were left out: a layer downstream of a
    sort, top-k or NMS that ordered near-ties differently holds the reference's rows in another
    order, and, where the count is cut (the top 1000 proposals), a few rows at the cut may differ
    too: up to 1 % of the rows (none below 100) are left out of the error, and those more than
    JUMP times the error from every row are counted. ``inf`` when there are no rows."""
    if ref.ndim < 1 or ref.shape[0] < 2 or ref.shape != got.shape:
        return math.inf, 0
    r = ref.reshape(ref.shape[0], -1).astype(np.float64)
    g = got.reshape(got.shape[0], -1).astype(np.float64)
    if not (np.isfinite(r).all() and np.isfinite(g).all()):
        return math.inf, 0
    scale = float(np.abs(r).max()) or 1.0
    sums = r.sum(axis=1)
    order = np.argsort(sums, kind="stable")
    keys = sums[order]
    at = np.searchsorted(keys, g.sum(axis=1))
    nearest = np.full(len(g), np.inf)
    for shift in range(-2, 3):  # the rows of the closest sums: rounding can swap neighbours
        cand = order[np.clip(at + shift, 0, len(order) - 1)]
        nearest = np.minimum(nearest, np.abs(g - r[cand]).max(axis=1))
    kept = float(np.sort(nearest)[len(g) - 1 - len(g) // 100])
    return kept / scale, int((nearest > max(JUMP * kept, 1e-7 * scale)).sum())  # rows clearly without a match


def _pair(refs: Sequence[np.ndarray], gots: Sequence[np.ndarray], *,
          nhwc: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
    """Pair the layer's first float reference output with the converted output of the same size.

    ``nhwc``: the reference is a TensorFlow value (NHWC when rank 4) and the converter holds it in
    NCHW or, around ops that need it, in NHWC: the orientation whose shape is the counterpart's is
    compared; where both fit (C = H = W), the closer one; a counterpart of another shape is not
    paired. Otherwise the counterpart is read in the reference's shape.
    """
    for r in refs:
        r = np.asarray(r)
        if r.dtype.kind != "f" or r.size == 0:
            continue
        for g in gots:
            g = np.asarray(g)
            if g.dtype.kind != "f" or g.size != r.size:
                continue
            if not nhwc:
                return r, g.reshape(r.shape)
            fits = [c for c in ([r.transpose(0, 3, 1, 2)] if r.ndim == 4 else []) + [r] if c.shape == g.shape]
            if not fits:
                return None
            return min(((c, g) for c in fits), key=lambda pair: _error(*pair))
        return None
    return None


def locate(source_format: str, source_paths: Sequence[Path], dest_format: str, dest_paths: Sequence[Path],
           runtime: Runtime, feeds: Mapping[str, np.ndarray], dest_feeds: Mapping[str, np.ndarray],
           options: Options, tol: float, *, dest_layers: Callable[..., dict[str, tuple[str, list[np.ndarray]]]]
           | None = None) -> Location:
    """Compare every source layer's output with its counterpart; return the first out of ``tol``.

    ``dest_layers``: computes the converted side's layers instead of ONNX Runtime or the Caffe
    runtime (a deployment target's toolchain, ``convert.targets.check``), with the signature of
    the ``_DESTS`` functions.
    """
    src, dst = normalize(source_format), normalize(dest_format)
    result = Location(tol=tol)
    source = _SOURCES.get(src)
    dest = dest_layers or _DESTS.get(dst)
    if source is None:
        result.unavailable = f"the {src} runtime cannot expose intermediate layers"
        return result
    options.progress(f"locate: every layer of the source in {getattr(runtime, 'name', src)}", 0, 0)  # a phase
    try:
        refs = source([Path(p) for p in source_paths], runtime, feeds, options)
    except LocateUnavailableError as exc:
        result.unavailable = str(exc)
        return result
    if dest is None:
        result.unavailable = f"no intermediate layers can be read from a {dst} model"
        return result
    options.progress(f"locate: the converted model's {len(refs)} layers", 0, 0)
    gots = dest([Path(p) for p in dest_paths], list(refs), dest_feeds, options)
    nhwc = src in ("tflite", "tensorflow")
    for done, (key, ref_values) in enumerate(refs.items(), 1):
        options.progress("locate: comparing layers", done, len(refs))
        if key not in gots:
            result.skipped += 1
            continue
        where, got_values = gots[key]
        pair = _pair(ref_values, got_values, nhwc=nhwc)
        if pair is None:
            result.skipped += 1
            continue
        r, g = pair
        check = LayerCheck(key, where, tuple(r.shape), _error(r, g), Stats.of(r), Stats.of(g))
        if not check.error <= tol:
            matched_error, left_out = _row_matched_error(r, g)
            if matched_error * JUMP <= check.error:  # far closer row by row: the rows are in another order
                check.error, check.reordered, check.unmatched = matched_error, True, left_out
        worst = max((c.error for c in result.checks), default=0.0)
        result.checks.append(check)
        result.compared += 1
        # Out of tolerance, and not float32 rounding grown layer by layer: a jump over every earlier error.
        if result.first_bad is None and not check.error <= tol and not check.error <= JUMP * worst:
            result.first_bad = check
    return result
