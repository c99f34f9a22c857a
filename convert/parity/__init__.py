"""Parity check: run the source model in its own runtime and the converted one, compare outputs.

The source runs in its framework's runtime (PyTorch, Paddle Inference, Darknet, a Caffe runtime,
ONNX Runtime for ONNX); the converted model runs in ONNX Runtime or the Caffe runtime. Both get
the same inputs: seeded random ones shaped from the model's inputs, or the user's .npy/.npz.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from convert._tolerances import DEFAULT_ATOL, DEFAULT_RTOL, DEFAULT_TOL
from convert.formats import normalize, runtime_module
from convert.ir import ConvertError, ModelFormatError, Options, UsageError, shown

from .compare import OutputResult, ParityReport, compare_one, match_outputs
from .indices import IndexBound, index_bounds
from .locate import Location
from .locate import locate as locate_layers
from .rules import Case, judge_outputs
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
    close = getattr(dst, "close", None)  # opened here and done with: its memory is the arbiters'

    def draw_again() -> dict[str, np.ndarray] | None:  # the seeded inputs once more (``rules.draw_again``)
        ranges = index_ranges if inputs is None else _index_ranges(src, dst)
        try:
            return _run(src, "the source model", resolve_inputs(src, None, options, seed=seed + 1,
                                                                index_ranges=ranges))
        except ConvertError:  # no second opinion: the hint stays the inputs'
            return None

    case = Case(src, dst, feeds, ref, got, pairs, report, precision=str(getattr(dst, "precision", "fp32")),
                redraw=draw_again if seeded or (seeded is None and inputs is None) else None,
                release=close if dest_runtime is None else None)
    judge_outputs(case)  # the rules of docs/verdict.md, in its order (``rules.RULES``)
    # A half-precision model differs from the float32 source at every layer: no layer stands out.
    # ... and `locate` runs on FAIL, not on NOT VERIFIED (docs/verdict.md): an output without spread
    # or arbiter is not a layer gone wrong, and the layer-by-layer run costs more than the check
    failed = any(o.verdict == "FAIL" for o in report.outputs) and case.precision == "fp32"
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
