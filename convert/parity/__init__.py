"""Parity check: run the source model in its own runtime and the converted one, compare outputs.

The source runs in its framework's runtime (PyTorch, Paddle Inference, Darknet, a Caffe runtime,
ONNX Runtime for ONNX); the converted model runs in ONNX Runtime or the Caffe runtime. Both get
the same inputs: seeded random ones shaped from the model's inputs, or the user's .npy/.npz.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from convert._tolerances import DEFAULT_ATOL, DEFAULT_RTOL, DEFAULT_TOL
from convert.formats import normalize, runtime_module
from convert.ir import ConvertError, ModelFormatError, Options, UsageError, shown

from .compare import (
    FLOAT32_ARBITER_MIN_TOL,
    FLOAT32_LIMIT,
    FLOAT64_MARGIN,
    OutputResult,
    ParityReport,
    SetItem,
    arbitrate_float64,
    arbitrate_half,
    arbitrate_second_float32,
    arbitrate_set_float64,
    arbitrate_set_second_float32,
    compare_one,
    compare_sets,
    judge_set_integers,
    mark_inexact,
    mark_unarbitrated,
    mark_undecided,
    match_outputs,
    needs_float64,
    no_spread,
    only_padding,
    set_pair_keys,
)
from .indices import IndexBound, index_bounds
from .locate import Location
from .locate import locate as locate_layers
from .runtime import Runtime, TensorSpec

__all__ = [
    "Location",
    "OutputResult",
    "ParityReport",
    "Runtime",
    "TensorSpec",
    "compare_one",
    "index_bounds",
    "load_inputs",
    "make_inputs",
    "open_runtime",
    "resolve_inputs",
    "run_parity",
    "seeded_input_method",
    "source_index_ranges",
    "source_options",
]

logger = logging.getLogger(__name__)

# Sizes given to free dimensions when no --input-shape says otherwise (the table prints the shapes
# used): batch 1, an image's height and width 224, any other free dimension 32. A size of 1 would
# check a detector on a 1x1 image and a recogniser on a 1-pixel-wide line.
FREE_SPATIAL = 224
FREE_OTHER = 32
# Integer inputs are drawn from [0, INT_HIGH), unless they index a table (``make_inputs``).
INT_HIGH = 10


def open_runtime(fmt: str, paths: Sequence[Path], options: Options) -> Runtime:
    """Open the reference runtime of format ``fmt`` on ``paths``."""
    module = runtime_module(fmt)
    if module is None:
        raise UsageError(f"no runtime is known for format '{fmt}', so its parity cannot be checked")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            raise UsageError(f"the parity runtime for '{fmt}' is not part of this installation") from exc
        raise
    return mod.open_runtime([Path(p) for p in paths], options)  # type: ignore[no-any-return]


def source_options(source_format: str, options: Options) -> Options:
    """Return the options the source's runtime opens with: ``options``, but an ONNX source on the CPU.

    An ONNX source runs in ONNX Runtime like the converted model: on the same GPU in the same mode
    the two sessions share that mode's shortcuts and differences hide. The CPU provider is the
    reference that computes the model as written; ``--device`` then picks where ours runs.
    """
    if normalize(source_format) != "onnx" or options.get("device", "auto") == "cpu":
        return options
    return dataclasses.replace(options, extra={**options.extra, "device": "cpu"})


def _concrete_shape(spec: TensorSpec, options: Options, perm: Sequence[int] | None = None) -> tuple[int, ...]:
    if spec.name in options.input_shapes:
        given = tuple(options.input_shapes[spec.name])
        # ``perm``: the runtime presents this input in another layout than --input-shape names it
        # (TensorFlow's NHWC shape, an NCHW input): take the given shape's axes in that order.
        return tuple(given[p] for p in perm) if perm is not None and len(perm) == len(given) else given
    dims = []
    rank = len(spec.shape)
    for i, d in enumerate(spec.shape):
        if isinstance(d, int) and d > 0:
            dims.append(d)
        elif i == 0:
            dims.append(1)  # batch
        elif rank == 4 and i >= 2:
            dims.append(FREE_SPATIAL)  # an image's free height/width
        else:
            dims.append(FREE_OTHER)  # channels of unknown count, sequence lengths...
    return tuple(dims)


def make_inputs(specs: Sequence[TensorSpec], options: Options, *, seed: int = 0,
                perms: Mapping[str, Sequence[int]] | None = None,
                ranges: Mapping[str, tuple[float, float, str]] | None = None,
                index_ranges: Mapping[str, IndexBound] | None = None) -> dict[str, np.ndarray]:
    """Return seeded random inputs: N(0, 1) floats, small non-negative ints, random bools.

    ``perms``: per input, the order in which the runtime presents the axes of the shape that
    ``--input-shape`` gives (a runtime's ``input_perms``). ``ranges``: float inputs whose model
    takes values in ``[lo, hi)`` (images: a runtime's ``input_ranges``) are drawn uniformly there.
    ``index_ranges``: integer inputs that index a table (``indices.index_bounds``) are drawn
    uniformly from its rows, ``[0, rows)``; other integers from ``[0, INT_HIGH)``.
    """
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for spec in specs:
        shape = _concrete_shape(spec, options, (perms or {}).get(spec.name))
        kind = spec.dtype.kind
        if kind == "f" and spec.name in (ranges or {}):
            lo, hi, _ = (ranges or {})[spec.name]
            arr = rng.uniform(lo, hi, shape).astype(spec.dtype)
        elif kind == "f":
            arr = rng.standard_normal(shape).astype(spec.dtype)
        elif kind in "iu":
            bound = (index_ranges or {}).get(spec.name)
            arr = rng.integers(0, bound.rows if bound is not None else INT_HIGH, size=shape).astype(spec.dtype)
        elif kind == "b":
            arr = rng.random(shape) > 0.5
        else:
            raise UsageError(f"input '{spec.name}' has type {spec.dtype}; pass its values with --inputs FILE.npz")
        feeds[spec.name] = arr
    return feeds


def load_inputs(path: Path, specs: Sequence[TensorSpec]) -> dict[str, np.ndarray]:
    """Read inputs from ``.npz`` (keys are input names, or arr_0.. in order) or ``.npy`` (one input)."""
    if not path.exists():
        raise UsageError(f"--inputs {path}: no such file")
    try:
        if path.suffix == ".npy":
            arrays = [np.load(path, allow_pickle=False)]
            named: dict[str, np.ndarray] = {}
        else:
            with np.load(path, allow_pickle=False) as data:
                named = {k: data[k] for k in data.files}
            arrays = []
    except (ValueError, OSError) as exc:
        raise ModelFormatError(f"--inputs {path}: not a .npy/.npz file ({exc})") from exc
    if named:
        if all(s.name in named for s in specs):
            return {s.name: named[s.name] for s in specs}
        arrays = list(named.values())
    if len(arrays) != len(specs):
        names = ", ".join(s.name for s in specs)
        raise UsageError(f"--inputs {path}: has {len(arrays)} arrays, the model takes {len(specs)} ({names})")
    return {s.name: a.astype(s.dtype, copy=False) for s, a in zip(specs, arrays, strict=True)}


def seeded_input_method(src: Runtime, feeds: Mapping[str, np.ndarray],
                        index_ranges: Mapping[str, IndexBound] | None = None) -> list[str]:
    """Say which seeded inputs were drawn from a model's own range (``input_ranges``), not N(0, 1),
    and which integers from the rows of the table they index (``index_ranges``), not [0, INT_HIGH)."""
    ranges: Mapping[str, tuple[float, float, str]] = getattr(src, "input_ranges", {})
    said = [f"input '{name}' drawn uniform in [{lo:g}, {hi:g}): {why}"
            for name, (lo, hi, why) in ranges.items() if name in feeds]
    said += [f"input {shown(name)} drawn from the integers in [0, {b.rows}): it indexes the {b.rows} rows of "
             f"{shown(b.table)} ({b.node})"
             for name, b in (index_ranges or {}).items() if name in feeds]
    return said


def resolve_inputs(src: Runtime, inputs: Path | Mapping[str, np.ndarray] | None, options: Options, *,
                   seed: int = 0, index_ranges: Mapping[str, IndexBound] | None = None) -> dict[str, np.ndarray]:
    """Return the parity inputs for ``src``: the user's (checked against its inputs) or seeded random
    ones (``index_ranges``: integer inputs that index a table, by ``src``'s input names)."""
    specs = list(src.inputs())
    if inputs is None:
        return make_inputs(specs, options, seed=seed, perms=getattr(src, "input_perms", None),
                           ranges=getattr(src, "input_ranges", None), index_ranges=index_ranges)
    if isinstance(inputs, Path):
        return load_inputs(inputs, specs)
    feeds = dict(inputs)
    missing = [s.name for s in specs if s.name not in feeds]
    if missing:
        raise UsageError(f"parity inputs lack {', '.join(missing)}")
    return feeds


def source_index_ranges(bounds: Mapping[str, IndexBound], source: Sequence[TensorSpec],
                        dest: Sequence[str]) -> dict[str, IndexBound]:
    """Key ``bounds`` (by the converted graph's input names, ``dest``) by the source's input names,
    paired as ``_rename_feeds`` pairs the feeds: by name, or else by position."""
    src_names = [s.name for s in source]
    if set(dest) <= set(src_names):
        return {n: b for n, b in bounds.items() if n in src_names}
    if len(src_names) != len(dest):
        return {}
    by_dest = dict(zip(dest, src_names, strict=True))
    return {by_dest[n]: b for n, b in bounds.items() if n in by_dest}


def _rename_feeds(feeds: Mapping[str, np.ndarray], source: Sequence[TensorSpec],
                  dest: Sequence[TensorSpec]) -> dict[str, np.ndarray]:
    src_names = [s.name for s in source]
    dst_names = [s.name for s in dest]
    if set(dst_names) <= set(src_names):
        return {n: feeds[n] for n in dst_names}
    if len(src_names) != len(dst_names):
        raise UsageError(f"the models take different inputs: source {src_names}, converted {dst_names}")
    return {d: feeds[s] for s, d in zip(src_names, dst_names, strict=True)}


class RuntimeFailedError(ConvertError):
    """A framework's runtime raised while running a model: the verdict cannot be given."""


def _refused(runtime: Runtime, *, converted: bool) -> str:
    """Why the file's own runtime refused the file ``runtime`` runs in its stead ('' : it did not),
    with, for a ``converted`` file, the advice on writing it otherwise (``refusal_hint``)."""
    why = str(getattr(runtime, "target_refused", "") or "")
    hint = str(getattr(runtime, "refusal_hint", "") or "") if converted else ""
    return f"{why}. {hint}" if why and hint else why


def _run(runtime: Runtime, what: str, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    try:
        return runtime.run(feeds)
    except ConvertError:
        raise
    except Exception as exc:  # the framework's own error (cv2.error, RuntimeError...): no verdict
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
        raise RuntimeFailedError(f"{runtime.name} could not run {what}: {type(exc).__name__}: {first}") from exc


def run_parity(
    source_format: str,
    source_paths: Sequence[Path],
    dest_format: str,
    dest_paths: Sequence[Path],
    *,
    options: Options | None = None,
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
    inputs: Path | Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    source_runtime: Runtime | None = None,
    tol: float = DEFAULT_TOL,
    locate: bool | None = None,
    dest_runtime: Runtime | None = None,
    seeded: bool | None = None,
) -> ParityReport:
    """Run both models on the same inputs and compare every output.

    ``seeded``: the inputs were drawn from ``seed`` (None: when ``inputs`` is None); an output without
    spread is then drawn once more, to tell a model whose output is constant from unlucky inputs.

    ``source_runtime`` / ``dest_runtime``: runtimes already open on the two models (``open_runtime``),
    so that checking several input sets loads each model once; None opens them from the paths.
    ``locate``: find the first source layer whose output the converted model gets wrong
    (``report.location``); None does so only when the check fails.
    """
    options = options or Options()
    src = source_runtime or open_runtime(source_format, source_paths, source_options(source_format, options))
    # seeded inputs: the converted model is opened first, for the integer inputs that index a table
    dst = (dest_runtime or open_runtime(dest_format, dest_paths, options)) if inputs is None else None
    index_ranges = _index_ranges(src, dst) if dst is not None else {}
    feeds = resolve_inputs(src, inputs, options, seed=seed, index_ranges=index_ranges)
    if dst is None:
        dst = dest_runtime or open_runtime(dest_format, dest_paths, options)
    follow = getattr(src, "follow_destination", None)  # what the converted file says of its making (a lineage)
    if follow is not None:
        follow(getattr(dst, "metadata", {}))
    src_specs = list(src.inputs())
    # A file its own runtime refused (real Caffe) is run by a stand-in (OpenCV DNN): never a PASS then.
    # Where the stand-in cannot run it either, the report says why, with nothing compared.
    source_refused, target_refused = _refused(src, converted=False), _refused(dst, converted=True)
    ref: dict[str, np.ndarray] | None = None
    got: dict[str, np.ndarray] | None = None
    shapes = ", ".join(f"{k} {'x'.join(map(str, np.shape(v)))}" for k, v in feeds.items())
    options.progress(f"parity: the source in {src.name} on {shapes}", 0, 0)  # a phase: the CLI's status line
    try:
        ref = _run(src, "the source model", feeds)
    except RuntimeFailedError as exc:
        if not source_refused:
            raise
        source_refused += f"; its stand-in failed too ({exc})"
    if ref is not None:
        dst_feeds = _rename_feeds(feeds, src_specs, list(dst.inputs()))
        options.progress(f"parity: the converted model in {dst.name}", 0, 0)
        try:
            got = _run(dst, "the converted model", dst_feeds)
        except RuntimeFailedError as exc:
            if not target_refused:
                raise
            target_refused += f"; its stand-in failed too ({exc})"
    report = ParityReport(
        source=normalize(source_format), source_runtime=src.name, source_device=src.device,
        dest=normalize(dest_format), dest_runtime=dst.name, dest_device=dst.device,
        atol=atol, rtol=rtol, tol=tol, inputs={k: list(v.shape) for k, v in feeds.items()},
        seed=seed if inputs is None else None,
        notes=[*getattr(src, "notes", []), *getattr(dst, "notes", [])],
        method=[*getattr(src, "method", []), *getattr(dst, "method", [])],
    )
    if inputs is None:
        report.method += seeded_input_method(src, feeds, index_ranges)
    report.source_refused, report.target_refused = source_refused, target_refused
    from convert.ir import FROZEN_DECISIONS  # decisions a capture froze to the example's (frontends/pytorch/frozen.py)

    report.frozen = [str(d) for d in options.extra.get(FROZEN_DECISIONS) or ()]  # type: ignore[attr-defined]
    report.on_example = bool(report.frozen) and _on_example(options, feeds)
    report.refusal_is_ours = bool(getattr(dst, "refusal_is_ours", False))
    if ref is None or got is None:
        return report
    try:
        pairs = match_outputs(list(ref), list(got))
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    steps = getattr(src, "output_steps", {})  # quantized references: the step of each output
    spreads = getattr(src, "output_spread", {})  # ... and how far its own two kernel paths are apart
    randoms = getattr(dst, "random_outputs", {})  # converted outputs computed from random draws
    seconds = getattr(src, "output_second", {})  # ... and that implementation's outputs
    report.outputs = [compare_one(r, ref[r], g, got[g], atol, rtol, tol, step=float(steps.get(r, 0.0)),
                                  spread=float(spreads.get(r, 0.0)), random=randoms.get(g, ""),
                                  second=seconds.get(r))
                      for r, g in pairs]
    set_groups = _compare_as_sets(dst, ref, got, pairs, report)
    precision = str(getattr(dst, "precision", "fp32"))  # a half-precision ONNX file of ours says so
    close = getattr(dst, "close", None)
    if dest_runtime is None and close is not None:  # opened here and done with: its memory is the arbiter's
        close()
    if precision != "fp32":
        report.precision = precision
        _settle_by_half(src, feeds, ref, pairs, report, precision)
    else:
        _settle_by_float64(src, feeds, ref, got, pairs, report, tol, set_groups)
    gap = str(getattr(src, "formula_gap", "") or "")  # the reference cannot compute the target exactly
    if gap:
        report.outputs = [mark_inexact(o, gap) for o in report.outputs]
    explain = getattr(src, "explain_verdict", None)  # what else the reference can tell (Darknet's lineage)
    if explain is not None:
        said = explain(feeds, {r: got[g] for r, g in pairs}, tol, report.passed)
        if said:
            report.notes.append(said)
    undecided = getattr(src, "undecided", {})  # outputs the reference cannot decide, with the reason
    report.outputs = [mark_undecided(o, *undecided[r]) if r in undecided else o
                      for o, (r, _) in zip(report.outputs, pairs, strict=True)]
    if seeded or (seeded is None and inputs is None):  # an output without spread on another draw too: the model's
        report.constant_anyway = _constant_on_another_draw(
            src, options, seed, pairs, report, index_ranges if inputs is None else _index_ranges(src, dst))
    # A half-precision model differs from the float32 source at every layer: no layer stands out.
    # ... and `locate` runs on FAIL, not on NOT VERIFIED (docs/verdict.md): an output without spread
    # or arbiter is not a layer gone wrong, and the layer-by-layer run costs more than the check
    failed = any(o.verdict == "FAIL" for o in report.outputs) and precision == "fp32"
    failed = failed and report.verdict == "FAIL"  # not where a frozen decision may be all that differs
    if locate or (locate is None and failed):
        report.location = _locate(source_format, source_paths, dest_format, dest_paths, src, feeds, dst_feeds,
                                  options, tol)
        report.location.outputs_differ = any(o.verdict == "FAIL" for o in report.outputs)
    return report


def _on_example(options: Options, feeds: Mapping[str, np.ndarray]) -> bool:
    """Whether ``feeds`` are the example a capture took its decisions from (``EXAMPLE_FEEDS``, in
    input order)."""
    from convert.ir import EXAMPLE_FEEDS

    example = options.extra.get(EXAMPLE_FEEDS)
    if not isinstance(example, tuple) or len(example) != len(feeds):
        return False
    return all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(example, feeds.values(), strict=True))


def _constant_on_another_draw(src: Runtime, options: Options, seed: int, pairs: Sequence[tuple[str, str]],
                              report: ParityReport,
                              index_ranges: Mapping[str, IndexBound] | None = None) -> list[str]:
    """Return the NOT VERIFIED outputs without spread that have none on a second seeded draw either:
    the model's own output is constant or near zero (zero or random weights), not the inputs' doing.
    One more run of the source, only when such an output exists."""
    flat = [r for o, (r, _) in zip(report.outputs, pairs, strict=True)
            if o.verdict == "NOT VERIFIED" and o.degenerate and "empty on these inputs" not in o.note]
    if not flat:
        return []
    try:
        again = _run(src, "the source model", resolve_inputs(src, None, options, seed=seed + 1,
                                                             index_ranges=index_ranges))
    except ConvertError:  # no second opinion: the hint stays the inputs'
        return []
    return [r for r in flat if r in again and no_spread(np.asarray(again[r]))]


def _index_ranges(src: Runtime, dst: Runtime) -> dict[str, IndexBound]:
    """The valid range of each integer input of ``src`` that indexes a table in the converted
    model (``dst``'s ``index_bounds``, where it has one) or in the source (an ONNX source's), by
    ``src``'s input names; the smaller where both say."""
    specs = list(src.inputs())
    if not any(s.dtype.kind in "iu" for s in specs):
        return {}
    found: dict[str, IndexBound] = {}
    for runtime, mapped in ((dst, True), (src, False)):
        find = getattr(runtime, "index_bounds", None)
        if find is None:
            continue
        try:
            bounds = find()
        except Exception:  # the structure could not be read: integers drawn as before
            logger.debug("index bounds of %s", runtime.name, exc_info=True)
            continue
        if mapped:
            bounds = source_index_ranges(bounds, specs, [s.name for s in runtime.inputs()])
        for name, bound in bounds.items():
            if name not in found or bound.rows < found[name].rows:
                found[name] = bound
    return found


def _compare_as_sets(dst: Runtime, ref: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray],
                     pairs: Sequence[tuple[str, str]], report: ParityReport) -> list[tuple[list[int], list[SetItem]]]:
    """Compare again, as sets, the outputs whose rows come out of an NMS, top-k or nonzero with a
    count the graph computes (``set_outputs`` and ``row_axes`` of the converted model's runtime),
    where the comparison in order did not pass: outputs with the same row count on both sides are
    paired together (a detector's boxes, scores, labels and masks). Returns the groups compared so
    (indices into ``pairs``, and their items), for the float64 rule."""
    compared: list[tuple[list[int], list[SetItem]]] = []
    origins: Mapping[str, str] = getattr(dst, "set_outputs", {})
    axes: Mapping[str, int] = getattr(dst, "row_axes", {}) if origins else {}
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (r, g) in enumerate(pairs):
        axis = axes.get(g)
        if g not in origins or axis is None or report.outputs[i].random:
            continue
        a, b = np.asarray(ref[r]), np.asarray(got[g])
        if a.ndim != b.ndim or axis >= a.ndim:
            continue
        groups.setdefault((a.shape[axis], b.shape[axis]), []).append(i)
    for members in groups.values():
        items = [SetItem(pairs[i][0], ref[pairs[i][0]], pairs[i][1], got[pairs[i][1]], axes[pairs[i][1]])
                 for i in members]
        # integers (a detector's labels) are judged exactly: one off in order is compared as a set too
        inexact_ints = any(np.asarray(it.ref).dtype.kind in "iu" and report.outputs[i].max_abs > 0
                           for i, it in zip(members, items, strict=True))
        if all(report.outputs[i].passed for i in members) and not only_padding(items) and not inexact_ints:
            continue
        origin = origins[pairs[members[0]][1]]
        results = judge_set_integers(items, compare_sets(items, origin, report.atol, report.rtol, report.tol))
        for i, result in zip(members, results, strict=True):
            report.outputs[i] = result
        compared.append((members, items))
    return compared


def _settle_by_float64(src: Runtime, feeds: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray],
                       got: Mapping[str, np.ndarray], pairs: Sequence[tuple[str, str]], report: ParityReport,
                       tol: float, set_groups: Sequence[tuple[list[int], list[SetItem]]] = ()) -> None:
    """Let a float64 run of the source judge the outputs that missed ``tol`` on their error alone,
    when the source runtime offers one (``run_float64``; PyTorch and Keras do): float32 rounding in a
    deep net may exceed ``tol`` (``compare.arbitrate_float64``). Outputs compared as sets are judged
    on their paired rows (``compare.arbitrate_set_float64``). The float64 run is asked only for the
    outputs to judge and those their rows are paired by (``needed``, where the runtime takes it).

    Where the float64 run cannot judge an output (the source has none, or not of that output), the
    source's second float32 run on other kernels measures rounding instead (``run_second_float32``,
    ``compare.arbitrate_second_float32``); where that is missing too or agrees exactly with the
    first, a runtime that offers it marks the output NOT VERIFIED with the reason
    (``compare.mark_unarbitrated``), never FAIL for the want of an arbiter, unless its error is past
    ``FLOAT64_MARGIN`` x ``FLOAT32_LIMIT`` x tol (past anything the float64 rule passes as rounding:
    the conversion's); for another runtime the verdict stands and the note says that no float64
    run judged it."""
    run64 = getattr(src, "run_float64", None)
    pending = [i for i, (r, _) in enumerate(pairs) if needs_float64(report.outputs[i], ref[r])]
    pending_sets = [(members, items) for members, items in set_groups
                    if any(needs_float64(report.outputs[i], ref[pairs[i][0]], as_set=True) for i in members)]
    if run64 is None or not (pending or pending_sets):
        return
    needed = {pairs[i][0] for i in pending}
    for members, items in pending_sets:
        keys = set(set_pair_keys(items))
        needed |= {pairs[i][0] for k, i in enumerate(members)
                   if k in keys or needs_float64(report.outputs[i], ref[pairs[i][0]], as_set=True)}
    asked = list(report.outputs)
    ref64 = _call_float64(run64, feeds, needed)
    if ref64 is not None:
        _arbitrate(report, pairs, pending, pending_sets, ref64,
                   lambda i: arbitrate_float64(report.outputs[i], ref[pairs[i][0]], got[pairs[i][1]],
                                               ref64[pairs[i][0]], tol),
                   lambda items, results, others: arbitrate_set_float64(items, results, others, tol))
    # what the float64 run did not judge (the arbiters return the result itself when they cannot)
    left = [i for i in pending if report.outputs[i] is asked[i]]
    left_sets = [(members, items, {k for k, i in enumerate(members) if report.outputs[i] is asked[i]
                                   and needs_float64(asked[i], ref[pairs[i][0]], as_set=True)})
                 for members, items in pending_sets]
    left_sets = [group for group in left_sets if group[2]]
    if not (left or left_sets):
        return
    why = (str(getattr(src, "float64_unavailable", "") or "its float64 run failed") if ref64 is None
           else "its float64 run cannot be compared with this output (another row count, non-finite values, "
                f"or a value it stores in float32, too coarse at tol < {FLOAT32_ARBITER_MIN_TOL:g})")
    run2 = getattr(src, "run_second_float32", None)
    ref2 = _second_float32(run2, feeds) if run2 is not None else None
    if ref2 is not None:
        path = str(getattr(src, "second_float32_path", "a second float32 run"))
        for i in left:
            if pairs[i][0] in ref2:
                report.outputs[i] = arbitrate_second_float32(report.outputs[i], ref[pairs[i][0]], got[pairs[i][1]],
                                                             ref2[pairs[i][0]], tol, path, why)
        for members, items, only in left_sets:
            judged = arbitrate_set_second_float32(items, [report.outputs[i] for i in members],
                                                  [ref2.get(pairs[i][0]) for i in members], tol, path, why, only)
            for i, result in zip(members, judged, strict=True):
                report.outputs[i] = result
    still = [i for i in left if report.outputs[i] is asked[i]]
    still += [members[k] for members, _, only in left_sets for k in sorted(only)
              if report.outputs[members[k]] is asked[members[k]]]
    for i in still:
        out = report.outputs[i]
        if run2 is None or out.rel_to_scale > FLOAT64_MARGIN * FLOAT32_LIMIT * tol:
            # no measure of rounding offered (the verdict stands), or an error past anything the
            # float64 rule ever passes as rounding: the conversion's; said
            beyond = "" if run2 is None else (f"; past {FLOAT64_MARGIN * FLOAT32_LIMIT:g} x tol, beyond what "
                                              "rounding ever passes for, so the conversion's")
            report.outputs[i] = dataclasses.replace(out, note=(out.note + "; " if out.note else "")
                                                    + f"not arbitrated: no float64 run of the source ({why}){beyond}")
        else:
            second = ("its second float32 run could not run" if ref2 is None
                      else "its second float32 run gives the same values or cannot be paired")
            report.outputs[i] = mark_unarbitrated(out, f"no float64 run of the source ({why}); {second}")


def _call_float64(run64: Callable[..., dict[str, np.ndarray] | None], feeds: Mapping[str, np.ndarray],
                  needed: set[str]) -> dict[str, np.ndarray] | None:
    """Call a runtime's ``run_float64``, telling it which outputs are ``needed`` where it takes them."""
    import inspect

    try:
        takes = "needed" in inspect.signature(run64).parameters
    except (TypeError, ValueError):
        takes = False
    return run64(feeds, needed=needed) if takes else run64(feeds)


def _second_float32(run2: Callable[..., dict[str, np.ndarray] | None],
                    feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    try:
        return run2(feeds)
    except Exception:  # the second path failed to run: no measure from it, the verdict says so
        logger.debug("the second float32 run failed", exc_info=True)
        return None


def _arbitrate(report: ParityReport, pairs: Sequence[tuple[str, str]], pending: Sequence[int],
               pending_sets: Sequence[tuple[list[int], list[SetItem]]], other: Mapping[str, np.ndarray],
               one: Callable[[int], OutputResult],
               group: Callable[[Sequence[SetItem], list[OutputResult], list[np.ndarray | None]], list[OutputResult]],
               ) -> None:
    """Judge the ``pending`` outputs by ``one(i)`` and the ``pending_sets`` by ``group`` against
    ``other``, another run of the source (outputs it lacks are left as they are)."""
    for i in pending:
        if pairs[i][0] in other:
            report.outputs[i] = one(i)
    for members, items in pending_sets:
        judged = group(items, [report.outputs[i] for i in members], [other.get(pairs[i][0]) for i in members])
        for i, result in zip(members, judged, strict=True):
            report.outputs[i] = result


def _settle_by_half(src: Runtime, feeds: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray],
                    pairs: Sequence[tuple[str, str]], report: ParityReport, precision: str) -> None:
    """Judge a half-precision model's outputs that missed ``tol`` on their error alone against the
    source's own run in ``precision`` (``run_half``; PyTorch has one), ``compare.arbitrate_half``."""
    pending = [i for i, (r, _) in enumerate(pairs) if needs_float64(report.outputs[i], ref[r])]
    if not pending:
        return
    run_half = getattr(src, "run_half", None)
    ref_half = run_half(feeds, precision) if run_half is not None else None
    for i in pending:
        r, _ = pairs[i]
        report.outputs[i] = arbitrate_half(report.outputs[i], ref[r], None if ref_half is None else ref_half.get(r),
                                           precision)


def _locate(source_format: str, source_paths: Sequence[Path], dest_format: str, dest_paths: Sequence[Path],
            src: Runtime, feeds: Mapping[str, np.ndarray], dst_feeds: Mapping[str, np.ndarray], options: Options,
            tol: float) -> Location:
    """Run the localisation; a failure there is reported in the location, never in place of the verdict."""
    try:
        return locate_layers(source_format, source_paths, dest_format, dest_paths, src, feeds, dst_feeds, options, tol)
    except Exception as exc:  # the verdict stands; --debug logs the traceback
        logger.debug("localisation failed", exc_info=True)
        first = (str(exc).strip().splitlines() or [""])[0]
        return Location(tol=tol, unavailable=f"the layer-by-layer run failed ({type(exc).__name__}: {first})")
