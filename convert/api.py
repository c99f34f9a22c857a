"""The public Python API: convert, load, save, verify, routes, supported_ops.

Everything after the first argument is keyword-only. Format-specific options (those the CLI
shows as ``--decode``, ``--caffe-flavor`` ...) are passed by their ``dest`` name as keywords.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from . import formats, ir
from ._errors import resource_exhausted
from ._paths import check_writable, default_output, missing_folders
from ._tolerances import DEFAULT_ATOL, DEFAULT_RTOL, DEFAULT_TOL
from ._words import did_you_mean, speaks_python

if TYPE_CHECKING:  # the check itself is imported where it runs: a conversion without it does not
    from .parity import ParityReport
    from .parity.indices import IndexBound

__all__ = ["ConversionResult", "convert", "load", "routes", "save", "supported_ops", "verify"]

PathLike = str | Path
Sources = PathLike | Sequence[PathLike]

_OPTION_FIELDS = {"input_shapes", "strict", "dynamic_batch", "opset", "external_data"}
# convert()'s own keywords: a misspelling of one reaches **options and is answered with "did you mean".
_KEYWORDS = {"to", "dst", "out", "format", "check", "atol", "rtol", "inputs", "seed", "tol", "locate",
             "fold_batchnorm", "validate", "progress", "on_loaded"}


class InterruptedAfterWrite(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) after the output was in place: the files stay, written but unchecked."""

    def __init__(self, written: Sequence[Path]) -> None:
        super().__init__()
        self.written = list(written)


@dataclass(slots=True)
class ConversionResult:
    """What a conversion produced."""

    route: str
    outputs: list[Path]
    nodes: int
    params: int
    weight_bytes: int
    seconds: float
    report: ParityReport | None = None
    #: Why the parity check asked for could not run (its runtime is missing, or failed).
    parity_error: str = ""
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when converted and the parity check passed or was not asked for."""
        if self.parity_error:
            return False
        return self.report is None or self.report.passed


def _paths(src: Sources) -> list[Path]:
    if isinstance(src, (str, Path)):
        return [Path(src)]
    return [Path(p) for p in src]


def _known_dests(*specs: ir.FrontendSpec | ir.ExporterSpec) -> set[str]:
    return {o.dest for s in specs for o in s.options} | {"device"}


def make_options(
    specs: Sequence[ir.FrontendSpec | ir.ExporterSpec],
    values: Mapping[str, object],
    *,
    progress: ir.ProgressFn | None = None,
) -> ir.Options:
    """Build ``Options`` from keyword values; unknown keywords are a ``UsageError``."""
    opts = ir.Options()
    known = _known_dests(*specs)
    unknown = [k for k in values if k not in _OPTION_FIELDS and k not in known]
    if unknown:
        choices = ", ".join(sorted(_OPTION_FIELDS | known))
        anywhere = _OPTION_FIELDS | known | _KEYWORDS  # a misspelled keyword of convert() lands here too
        guesses = "".join(did_you_mean(k, anywhere) for k in unknown)
        raise ir.UsageError(f"unknown option(s) {', '.join(unknown)}{guesses}; this route takes: {choices}")
    for key, value in values.items():
        if key in _OPTION_FIELDS:
            if value is not None:
                setattr(opts, key, dict(value) if key == "input_shapes" else value)  # type: ignore[arg-type]
        else:
            opts.extra[key] = value
    opts.diagnostics = ir.Diagnostics(strict=bool(values.get("strict", False)))
    if progress is not None:
        opts.progress = progress
    return opts


@speaks_python
def load(src: Sources, *, format: str | None = None, **options: object) -> ir.Model:
    """Read a model into the IR without reading its weights.

    Args:
        src: the model file(s): ``model.onnx``; ``net.cfg`` + ``net.weights``; ``deploy.prototxt``
            + ``net.caffemodel``; a Paddle folder or prefix; ``model.pt``/``model.pt2``.
        format: the source format; guessed from the files when omitted.
        **options: format-specific options by name (see ``convert ops`` / ``convert --help``).

    Returns:
        The IR model (unoptimised; ``convert`` runs the standard passes).
    """
    paths = _paths(src)
    fmt = formats.normalize(format) if format else formats.detect_format(paths)
    if format:
        formats.refuse_claimed_mismatch(fmt, paths, "onnx")
    fe = formats.frontend(fmt)
    opts = make_options([fe], options)
    return _load(fe, paths, opts)


def exists_or_prefix(p: Path) -> bool:
    """A file, a folder, or a prefix naming files (Paddle's inference/model for model.json + .pdiparams)."""
    return p.exists() or any(p.parent.glob(p.name + ".*"))


def _load(fe: ir.FrontendSpec, paths: Sequence[Path], opts: ir.Options) -> ir.Model:
    for p in paths:
        if not exists_or_prefix(p):
            raise ir.UsageError(f"{p}: no such file or folder")
    if fe.check_support is not None:
        gaps = list(fe.check_support(paths, opts))
        if gaps:
            raise ir.UnsupportedOpsError(
                paths[0].name, gaps, hint=f"Run `convert ops {fe.name}` for the supported list."
            )
    return fe.load(paths, opts)


@speaks_python
def save(model: ir.Model, path: PathLike, *, format: str | None = None, **options: object) -> list[Path]:
    """Write ``model`` to ``path`` in ``format`` (guessed from the suffix when omitted).

    Returns:
        Every file written, the main one first.
    """
    path = Path(path)
    fmt = formats.normalize(format) if format else _format_from_suffix(path)
    ex = formats.exporter(fmt)
    opts = make_options([ex], options)
    plan = _check_export(ex, model, opts)
    return _write_making_folders(path, opts,
                                 lambda: plan.write(path) if plan is not None else ex.save(model, path, opts))


def _write_making_folders(target: Path, opts: ir.Options, write: Callable[[], Sequence[Path]]) -> list[Path]:
    """Run ``write`` after making the folders ``target`` lacks (said in a note), for every exporter alike.

    ``-o new/sub/m.onnx`` and ``-o new/`` both make what is missing, as ``mkdir -p`` would; if the
    write fails or is interrupted, the folders made here are removed again: nothing is left.
    """
    made = missing_folders(target)
    if made:
        target.parent.mkdir(parents=True, exist_ok=True)
        opts.diagnostics.note(f"made the folder '{made[-1]}' for the output")
    try:
        return list(write())
    except BaseException as exc:
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        if isinstance(exc, OSError):
            raise write_error(exc, target) from exc
        raise


def _format_from_suffix(path: Path) -> str:
    for name in formats.exporter_names():
        if path.suffix.lower() == formats.exporter(name).suffix:
            return name
    raise ir.UsageError(f"cannot tell the format of '{path}' from its suffix; pass format=")


def _check_export(ex: ir.ExporterSpec, model: ir.Model, opts: ir.Options) -> ir.ExportPlan | None:
    """Raise when ``ex`` cannot express ``model``; return the exporter's plan (one lowering) if it makes one."""
    plan = ex.plan(model, opts) if ex.plan is not None else None
    gaps = list(plan.gaps) if plan is not None else list(ex.check(model, opts)) if ex.check is not None else []
    if gaps:
        raise ir.UnsupportedOpsError(
            f"export to {ex.name}: the model '{model.graph.name or 'graph'}'", gaps,
            hint=f"Run `convert ops {ex.name}` for what {ex.name} can express; nothing was written.",
        )
    return plan


def _files_read(paths: Sequence[Path], model: ir.Model) -> set[Path]:
    """Every file a conversion reads: the inputs (a folder's files, a prefix's files) and weight files."""
    found = set(ir.source_files(model))
    for p in paths:
        if p.is_dir():
            found.update(q.resolve() for q in p.iterdir() if q.is_file())
        elif p.exists():
            found.add(p.resolve())
        else:  # a prefix such as inference/model for model.json + model.pdiparams
            found.update(q.resolve() for q in p.parent.glob(p.name + ".*") if q.is_file())
    return found


def written_candidates(target: Path, ex: ir.ExporterSpec) -> list[Path]:
    """The files an export to ``target`` may write: the main file, companions, ONNX external data."""
    names = [target, target.with_name(target.name + ".data"), target.with_suffix(ex.suffix)]
    names += [target.with_suffix(c) for c in ex.companions]
    names += [target.with_name(target.name + s) for s in (ex.suffix, *ex.companions)]
    return names


def refuse_overwrite(read: set[Path], written: Sequence[Path]) -> None:
    """Refuse, before writing anything, an output path that is one of the files the conversion reads.

    Raises:
        UsageError: naming the file and the input it would destroy.
    """
    for w in written:
        resolved = w.resolve()
        if resolved in read or (w.exists() and any(r.exists() and os.path.samefile(w, r) for r in read)):
            raise ir.UsageError(
                f"refusing to write '{w}': it is one of the files this conversion reads, and writing it "
                "would destroy the input. Choose another -o."
            )


def write_error(exc: OSError, target: Path) -> ir.ExportError:
    """Return the one-line error for an OSError while writing ``target`` (full disk, I/O error ...)."""
    if exc.errno == errno.ENOSPC:
        try:
            free = shutil.disk_usage(target.parent if str(target.parent) else ".").free
            room = f" ({free / 2**20:.1f} MiB free there)"
        except OSError:
            room = ""
        return ir.ExportError(f"cannot write '{target}': the disk is full{room}. Nothing was written; free some "
                              "space or choose another -o.")
    if exc.errno == errno.ENOMEM:  # mmap under ``ulimit -v``: the machine's limit, said as such
        return ir.ExportError(f"cannot write '{target}': {resource_exhausted(exc)}: {exc.strerror or exc}. Nothing "
                              "was written; free memory or raise the limit.")
    return ir.ExportError(f"cannot write '{target}': {exc.strerror or exc}. Nothing was written.")


@speaks_python  # errors say out=, opset=, input_shapes=, not -o, --opset, --input-shape
@ir.sparing_existing_objects  # the caller's objects are not re-walked by each full collection
def convert(
    src: Sources | object,
    example_inputs: object = None,
    *,
    to: str | None = None,
    dst: str | None = None,
    out: PathLike | None = None,
    format: str | None = None,
    check: bool = True,
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
    inputs: PathLike | Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    tol: float = DEFAULT_TOL,
    locate: bool | None = None,
    on: str | Sequence[str] | None = None,
    fold_batchnorm: bool = True,
    validate: bool = False,
    progress: ir.ProgressFn | None = None,
    on_loaded: Callable[[ir.Model], None] | None = None,
    **options: object,
) -> ConversionResult:
    """Convert a model file (or an in-memory ``torch.nn.Module``) to another format.

    Args:
        src: the source file(s) or, for PyTorch, an ``nn.Module``.
        example_inputs: for an ``nn.Module``: a tensor or tuple of tensors to trace with.
        to: the destination format (``"onnx"``, ``"caffe"``); ``dst`` is an alias.
        out: the output path (a folder puts ``<stem><suffix>`` in it); default ``./<stem><suffix>``.
        format: the source format; guessed from the files when omitted.
        check: run the parity check after converting.
        tol: the parity verdict: an output passes when ``max|ours-ref| / max|ref| <= tol`` and the
            reference output has a real spread.
        atol, rtol: numpy's elementwise rule ``|ours-ref| <= atol + rtol*|ref|``, reported beside the verdict.
        inputs: parity inputs (``.npy``/``.npz`` path or a name->array mapping); seeded random by default.
        seed: the seed of the random parity inputs.
        locate: compare every layer's output to name the first the converted model gets wrong
            (``report.location``); None (the default) does so when parity fails.
        on: deployment targets (``"openvino,ncnn"`` or a list; ``convert.targets``) to check the
            converted file in after the usual check: one ``report.targets`` entry per target.
        fold_batchnorm: fold BatchNormalization into the preceding Conv.
        validate: validate the graph after every pass (slower; for debugging).
        progress: ``progress(step, done, total)`` for long steps.
        on_loaded: called with the IR right after loading (for inspection).
        **options: ``opset``, ``input_shapes``, ``dynamic_batch``, ``external_data``, ``strict``
            and format-specific options by name.

    Returns:
        A ``ConversionResult``; its ``report`` holds the parity table when ``check`` is on.

    Raises:
        ConvertError: the model could not be converted (nothing is left at the output path).
    """
    start = time.perf_counter()
    dest = to or dst
    if dest is None:
        raise ir.UsageError("convert() needs to= (the destination format, e.g. 'onnx' or 'caffe')")
    ex = formats.exporter(dest)
    on_targets = _targets_asked(on, ex.name, check)
    module_src = not isinstance(src, (str, Path, list, tuple))
    if module_src:
        fe = formats.object_frontend(src)
        fmt = fe.name
        opts = make_options([fe, ex], options, progress=progress)
        assert fe.load_object is not None
        model = fe.load_object(src, example_inputs, opts)
        paths: list[Path] = []
    else:
        paths = _paths(src)  # type: ignore[arg-type]
        fmt = formats.normalize(format) if format else formats.detect_format(paths)
        if format:  # files of another format than the one named: say which they are
            formats.refuse_claimed_mismatch(fmt, paths, ex.name)
        fe = formats.frontend(fmt)
        opts = make_options([fe, ex], options, progress=progress)
        opts.progress(f"reading the {fmt} model", 0, 0)  # a phase (total 0): the CLI's status line
        model = _load(fe, paths, opts)
    if ex.name == "caffe":
        _fix_free_batch(model, opts)
    if on_loaded is not None:
        on_loaded(model)
    # Open the reference runtime and settle the parity inputs before writing anything, so that a bad
    # --inputs file is an error with nothing written; a missing runtime only skips the check.
    src_runtime = None
    feeds = None
    index_ranges: dict[str, IndexBound] = {}
    parity_error = ""
    if check and fe.verdict is None:  # a frontend with a check of its own runs it after writing
        from .parity import index_bounds, open_runtime, resolve_inputs, source_index_ranges, source_options
        try:
            if module_src and fe.object_runtime is not None:
                src_runtime = fe.object_runtime(src, example_inputs, opts)  # type: ignore[assignment]
            else:
                src_runtime = open_runtime(fmt, paths, source_options(fmt, opts))
        except ir.ConvertError as exc:
            parity_error = f"the {fmt} reference runtime is unavailable: {exc}"
        if src_runtime is not None:
            given = Path(inputs) if isinstance(inputs, (str, Path)) else inputs
            example = opts.extra.get(ir.EXAMPLE_FEEDS)
            specs = src_runtime.inputs()
            if given is None and isinstance(example, tuple) and len(example) == len(specs):
                given = {spec.name: arr for spec, arr in zip(specs, example, strict=True)}
                opts.diagnostics.note("the parity check ran on the example inputs, which the capture took sizes "
                                      "from (give --inputs to check others)")
            # integer inputs that index a table in the converted graph are drawn from its rows
            index_ranges = source_index_ranges(index_bounds(model.graph), specs, [v.name or "" for v in
                                                                                 model.graph.inputs])
            feeds = resolve_inputs(src_runtime, given, opts, seed=seed, index_ranges=index_ranges)
    target = (default_output(paths, ex, out, source_format=fmt) if paths
              else _object_output(fe, out, ex.suffix))
    refuse_overwrite(_files_read(paths, model), written_candidates(target, ex))
    check_writable(target, "the output")
    _warn_suffix(target, ex, opts)
    opts.progress("optimising the graph", 0, 0)
    ir.passes.standard_pipeline(fold_batchnorm=fold_batchnorm, validate=validate)(model)
    plan = _check_export(ex, model, opts)
    opts.progress(f"writing {target.name}", 0, 0)
    written = _write_making_folders(target, opts, lambda: plan.write(target) if plan is not None
                                    else ex.save(model, target, opts))
    if fe.write_beside is not None:  # what goes beside the model (genai_config.json)
        written += list(fe.write_beside(model, written, opts))
    stats = ir.model_stats(model)
    result = ConversionResult(
        route=f"{fmt}:{ex.name}", outputs=written, nodes=int(stats["nodes"]),  # type: ignore[call-overload]
        params=int(stats["params"]), weight_bytes=int(stats["bytes"]),  # type: ignore[call-overload]
        seconds=0.0, notes=list(opts.diagnostics.notes), warnings=list(opts.diagnostics.warnings),
    )
    result.parity_error = parity_error
    if src_runtime is not None:
        from .parity import run_parity, seeded_input_method

        try:
            result.report = _run_parity_kept(written, lambda: run_parity(
                fmt, paths, ex.name, written, options=opts, atol=atol, rtol=rtol, inputs=feeds, seed=seed,
                source_runtime=src_runtime, tol=tol, locate=locate,
                seeded=inputs is None and ir.EXAMPLE_FEEDS not in opts.extra))
        except ir.ConvertError as exc:
            result.parity_error = f"the parity check failed to run: {exc}"
        except Exception as exc:  # out of memory or disk in the check: the file is written, exit 1
            limit = resource_exhausted(exc)
            if limit is None:
                raise
            result.parity_error = f"the parity check stopped, {limit}: {exc}"
    if check and fe.verdict is not None:
        verdict = fe.verdict
        try:
            result.report = _run_parity_kept(written, lambda: verdict(  # type: ignore[arg-type, return-value]
                src if module_src else paths, written, opts, tol=tol, seed=seed, inputs=inputs))
        except ir.ConvertError as exc:
            result.parity_error = f"the check failed to run: {exc}"
    if result.report is not None:  # the report records the seed whenever the inputs were seeded
        seeded = inputs is None and ir.EXAMPLE_FEEDS not in opts.extra
        result.report.seed = seed if seeded else None
        if seeded and src_runtime is not None and feeds is not None:
            result.report.method += seeded_input_method(src_runtime, feeds, index_ranges)
        if on_targets and feeds is not None:
            from .targets.check import check_targets

            result.report.targets = _run_parity_kept(written, lambda: check_targets(  # type: ignore[arg-type, return-value]
                on_targets, source_format=fmt, source_paths=paths, dest_format=ex.name, dest_paths=written,
                source_runtime=src_runtime, feeds=feeds, options=opts, tol=tol, atol=atol, rtol=rtol, locate=locate))
    result.seconds = time.perf_counter() - start
    result.notes = list(opts.diagnostics.notes)
    result.warnings = list(opts.diagnostics.warnings)
    return result


def _object_output(fe: ir.FrontendSpec, out: PathLike | None, suffix: str) -> Path:
    """Where an in-memory model's conversion goes: ``out``, by default ``./model<suffix>``; for a frontend
    that writes files beside the model, ``out`` names a folder (``out/model<suffix>``) unless it ends in
    the suffix, by default ``./model/``."""
    if fe.write_beside is None:
        return Path(out or ("model" + suffix))
    if out is None:
        return Path("model") / ("model" + suffix)
    return Path(out) if str(out).endswith(suffix) and not Path(out).is_dir() else Path(out) / ("model" + suffix)


def _warn_suffix(target: Path, ex: ir.ExporterSpec, opts: ir.Options) -> None:
    """Warn when the output's name ends in a suffix that is not the destination format's (an ONNX file
    written as ``wrong.prototxt``). A Caffe output's name is a base: only another format's suffix counts."""
    suffix = target.suffix.lower()
    if suffix in (ex.suffix, *ex.companions):
        return
    if ex.companions:
        others = {s for n in formats.exporter_names() for s in (formats.exporter_info(n).suffix,
                                                                 *formats.exporter_info(n).companions)}
        others |= {s for n in formats.frontend_names() for s in formats.frontend_info(n).suffixes}
        if suffix not in others:
            return
        opts.diagnostics.warn(f"the output name '{target.name}' ends in '{suffix}', another format's suffix: "
                              f"{ex.name} is written as '{target.name}{ex.suffix}' + "
                              f"'{target.name}{ex.companions[0]}'")
        return
    said = f"ends in '{target.suffix}'" if suffix else "has no suffix"
    opts.diagnostics.warn(f"the output '{target}' {said}, not '{ex.suffix}': the {ex.name} file is written "
                          "under that name all the same")


def _fix_free_batch(model: ir.Model, opts: ir.Options) -> None:
    """Give each input's free leading (batch) dimension the size 1, and say so: a Caffe net has a
    fixed batch, as the parity check's free batch is 1. ``--input-shape`` names another."""
    fixed = []
    for v in model.graph.inputs:
        dims = list(v.shape) if v.shape is not None else []
        if v.is_initializer() or not dims or isinstance(dims[0], int) or v.name in opts.input_shapes:
            continue
        v.shape = ir.Shape([1, *dims[1:]])
        fixed.append(v.name)
    if fixed:
        names = ", ".join(f"'{n}'" for n in fixed)
        opts.diagnostics.note(f"free batch of {names} set to 1 (a Caffe net has a fixed batch); "
                              "--input-shape NAME=N,... gives another")


def _run_parity_kept(written: Sequence[Path], run: Callable[[], ParityReport]) -> ParityReport:
    """Run the parity check; an interrupt now says that the output exists, written but unchecked."""
    try:
        return run()
    except InterruptedAfterWrite:
        raise
    except KeyboardInterrupt as exc:
        raise InterruptedAfterWrite(written) from exc


@speaks_python
def verify(
    src: Sources,
    converted: Sources,
    *,
    format: str | None = None,
    to: str | None = None,
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
    inputs: PathLike | Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    tol: float = DEFAULT_TOL,
    locate: bool | None = None,
    on: str | Sequence[str] | None = None,
    **options: object,
) -> ParityReport:
    """Compare a model already converted with its source, each in its own runtime.

    ``locate`` (None: only when parity fails) names the first source layer whose output the
    converted model gets wrong, in ``report.location``. ``on``: deployment targets to check the
    converted file in as well (``report.targets``).
    """
    src_paths, dst_paths = _paths(src), _paths(converted)
    fmt = formats.normalize(format) if format else formats.detect_format(src_paths)
    dfmt = formats.normalize(to) if to else formats.detect_format(dst_paths)
    specs: list[ir.FrontendSpec | ir.ExporterSpec] = [formats.frontend(fmt)]
    if dfmt in formats.exporter_names():
        specs.append(formats.exporter(dfmt))
    opts = make_options(specs, options)
    for p in [*src_paths, *dst_paths]:
        if not exists_or_prefix(p):
            raise ir.UsageError(f"{p}: no such file or folder")
    feeds = Path(inputs) if isinstance(inputs, (str, Path)) else inputs
    verdict = specs[0].verdict  # type: ignore[union-attr]
    if verdict is not None:  # the frontend's own check (a language model: its generation)
        return verdict(src_paths, dst_paths, opts, tol=tol, seed=seed, inputs=inputs)  # type: ignore[no-any-return]
    from .parity import run_parity

    on_targets = _targets_asked(on, dfmt, True)
    if not on_targets:
        return run_parity(fmt, src_paths, dfmt, dst_paths, options=opts, atol=atol, rtol=rtol, inputs=feeds,
                          seed=seed, tol=tol, locate=locate)
    from .parity import open_runtime, resolve_inputs, seeded_input_method, source_options
    from .targets.check import check_targets

    src_runtime = open_runtime(fmt, src_paths, source_options(fmt, opts))
    given = resolve_inputs(src_runtime, feeds, opts, seed=seed)
    report = run_parity(fmt, src_paths, dfmt, dst_paths, options=opts, atol=atol, rtol=rtol, inputs=given,
                        seed=seed, tol=tol, locate=locate, source_runtime=src_runtime)
    if feeds is None:  # seeded inputs, given to the check as arrays: the report says so as without --on
        report.seed = seed
        report.method += seeded_input_method(src_runtime, given)
    report.targets = check_targets(on_targets, source_format=fmt, source_paths=src_paths, dest_format=dfmt,
                                   dest_paths=dst_paths, source_runtime=src_runtime, feeds=given, options=opts,
                                   tol=tol, atol=atol, rtol=rtol, locate=locate)
    return report


def _targets_asked(on: str | Sequence[str] | None, dest_format: str, check: bool) -> list[str]:
    """Return the deployment targets of ``on``, refused before any work where they cannot run."""
    from . import targets

    names = targets.parse_targets(on)
    if names and not check:
        raise ir.UsageError(f"--on {','.join(names)} checks the converted file against the source: it needs the "
                            "parity check (drop --no-check)")
    targets.check_available(names, formats.normalize(dest_format))
    return names


def routes() -> list[tuple[str, str]]:
    """Return every (source, destination) pair this installation converts."""
    return formats.routes()


def supported_ops(frontend: str) -> list[ir.OpSupport]:
    """Return the support table of a frontend (or, if there is none of that name, an exporter)."""
    name = formats.normalize(frontend)
    if name in formats.frontend_names():
        return list(formats.frontend(name).ops())
    return list(formats.exporter(name).ops())
