"""`convert ROUTE INPUT... -o OUT`: the conversion, the default command (registered as the hidden `to`).

An interrupt (Ctrl-C, SIGTERM) at any moment is reported as what is on disk: nothing (the
writers remove their temporary files), the output written but not checked, or written and
checked (a signal while the result is printed). See ``_Outputs.interrupted``.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .. import _paths, _signals, catalog, formats
from .._errors import UsageError
from ._base import (
    DEFAULT_ATOL,
    DEFAULT_RTOL,
    DEFAULT_TOL,
    EXIT_PARITY,
    LazyOptionsCommand,
    check_writable,
    click_option,
    common_options,
    err,
    guard,
    human,
    interrupt_in,
    note,
    one_line,
    parse_route,
    parse_shapes,
    size,
    summary_word,
    warn,
    write_report,
)
from ._group import cli, write_conversion_options

if TYPE_CHECKING:
    from ..api import ConversionResult
    from ..ir import ExporterSpec, Model

__all__ = ["format_options"]


def format_options() -> list[catalog.OptionInfo]:
    """Every format's own options (a flag two formats share appears once), from the catalog."""
    seen: dict[str, catalog.OptionInfo] = {}
    for name in formats.frontend_names():
        for opt in formats.frontend_info(name).options:
            seen.setdefault(opt.flag, opt)
    for name in formats.exporter_names():
        for opt in formats.exporter_info(name).options:
            seen.setdefault(opt.flag, opt)
    return list(seen.values())


class _Progress:
    """Turn ``progress(step, done, total)`` calls into tqdm bars on a terminal; silent otherwise.

    A call with ``total`` 0 names a phase (reading, writing, the parity check's runs, locate's): one
    status line, replaced by the next phase and cleared at the end.
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bars: dict[str, object] = {}
        self.status: object | None = None

    def __call__(self, step: str, done: int, total: int) -> None:
        if step in ("writing weights", "caffe weights"):
            _signals.phase("write")  # test hook (convert/_signals.py)
        if not self.enabled:
            return
        from tqdm import tqdm

        if total <= 0:
            if self.status is None:
                self.status = tqdm(total=0, bar_format="convert: {desc}...", leave=False, file=sys.stderr)
            self.status.set_description_str(step)  # type: ignore[attr-defined]
            return
        bar = self.bars.get(step)
        if bar is None:
            unit_scale = total > 10_000
            bar = tqdm(total=total, desc=step, unit="B" if unit_scale else "it", unit_scale=unit_scale,
                       unit_divisor=1024, leave=False, file=sys.stderr)
            self.bars[step] = bar
        bar.update(done - bar.n)  # type: ignore[attr-defined]
        if done >= total:
            bar.close()  # type: ignore[attr-defined]

    def close(self) -> None:
        for bar in [*self.bars.values(), *([self.status] if self.status is not None else [])]:
            bar.close()  # type: ignore[attr-defined]


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


class _Outputs:
    """The files a conversion may write, as they were before it: what an interrupt left is told from them."""

    def __init__(self, target: Path, ex: ExporterSpec) -> None:
        from .. import api

        self.target = target
        self.candidates = list(dict.fromkeys(api.written_candidates(target, ex)))
        self.before = {c: _stamp(c) for c in self.candidates}
        folder = target.parent if str(target.parent) else Path(".")
        self.folder = folder
        self.temps_before = set(self._temps())

    def existing(self) -> set[Path]:
        """The candidates that were files before the conversion (resolved)."""
        return {c.resolve() for c, s in self.before.items() if s is not None and c.is_file()}

    def _temps(self) -> list[Path]:
        # The writers' temporary files and folders: .<name>.<random>.tmp beside the output.
        if not self.folder.is_dir():
            return []
        return [p for c in self.candidates for p in self.folder.glob(f".{c.name}.*.tmp")]

    def interrupted(self, interrupt: KeyboardInterrupt, result: ConversionResult | None) -> tuple[str, int]:
        """Return the message and exit status for an interrupt, after tidying what the conversion left."""
        from .. import api

        what = _signals.what(interrupt)
        code = _signals.exit_status(interrupt)
        for tmp in set(self._temps()) - self.temps_before:  # a signal inside a writer's own clean-up
            with contextlib.suppress(OSError):
                shutil.rmtree(tmp) if tmp.is_dir() else tmp.unlink()
        if result is not None:  # the conversion returned: the signal came while its result was printed
            outs = " + ".join(str(p) for p in result.outputs)
            if result.report is None:
                state = "NOT checked (--no-check)" if not result.parity_error else "parity NOT CHECKED"
            else:
                state = f"checked (parity {result.report.verdict})"
            return f"{what} while printing the result: {outs} was written and {state}", code
        after_write = isinstance(interrupt, api.InterruptedAfterWrite)
        changed = [c for c in self.candidates if _stamp(c) != self.before[c]]
        if after_write or _stamp(self.target) != self.before[self.target]:
            # The main file is renamed into place last: with it there, the output is complete.
            written = interrupt.written if after_write else [c for c in changed if c.exists()]  # type: ignore[attr-defined]
            when = "during the parity check" if after_write else "after writing the output"
            return (f"{what} {when}: the output was written and is kept, but it was NOT checked: "
                    f"{' + '.join(str(p) for p in written)}"), code
        replaced = []
        for path in changed:  # part of an output: new files go, replaced ones cannot come back
            if self.before[path] is None:
                with contextlib.suppress(OSError):
                    path.unlink()
            elif path.exists():
                replaced.append(path)
        if replaced:
            return (f"{what} while writing: {' + '.join(str(p) for p in replaced)} was replaced, but the output is "
                    "incomplete; convert again"), code
        return f"{what}; nothing was left at the output path", code


def _convert_options(func):  # type: ignore[no-untyped-def]
    opts = [
        click.argument("args", nargs=-1, required=True, metavar="ROUTE INPUT..."),
        click.option("-o", "--output", type=click.Path(),
                     help="Output path (a folder puts <stem><suffix> in it; missing folders are made). "
                          "Default: ./<stem><suffix>."),
        click.option("--from", "src_format", metavar="SRC", help="Source format, instead of a ROUTE."),
        click.option("--to", "dst_format", metavar="DST", help="Destination format, instead of a ROUTE."),
        click.option("--check/--no-check", default=True, show_default=True,
                     help="Run the parity check: the source against the converted model."),
        click.option("--input-shape", multiple=True, metavar="NAME=1,3,224,224",
                     help="Shape of an input without a fixed shape (repeat for several inputs)."),
        click.option("--inputs", type=click.Path(path_type=Path), metavar="FILE.npz",
                     help="Parity inputs (.npz by input name, or .npy); default: seeded N(0,1)."),
        click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random parity inputs."),
        click.option("--report", type=click.Path(path_type=Path), metavar="FILE.json",
                     help="Write the parity report as JSON (for CI)."),
        click.option("--opset", type=int, default=None,
                     help="ONNX opset to write; default: an ONNX source's own, else 17. Fails loudly "
                          "if an op cannot be expressed."),
        click.option("--external-data/--no-external-data", default=None,
                     help="ONNX: weights in <out>.data (default: only past 1.8 GiB)."),
        click.option("--dynamic-batch", is_flag=True, help="Make the leading input dimension symbolic."),
        click.option("--strict", is_flag=True, help="Treat warnings (unknown options, dropped layers) as errors."),
        click.option("--fold-bn/--no-fold-bn", default=True, show_default=True,
                     help="Fold BatchNormalization into the preceding convolution."),
        click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
                     help="Where the parity check runs (cuda: ONNX Runtime with onnxruntime-gpu, the source "
                          "on its framework's GPU build; exact fp32, TF32 off)."),
        click.option("-q", "--quiet", is_flag=True,
                     help="Only the parity table and the summary line (warnings and errors still on stderr)."),
        click.option("--tol", type=float, default=DEFAULT_TOL, show_default=True,
                     help="Parity verdict: an output passes when max|ours-ref| / max|ref| <= TOL (error relative "
                          "to the output's scale, which float32 rounding in deep nets respects) and the reference "
                          "output has a real spread; a near-constant reference is NOT VERIFIED, never PASS."),
        click.option("--atol", type=float, default=DEFAULT_ATOL, show_default=True,
                     help="Parity: absolute tolerance of the elementwise rule, reported beside the verdict."),
        click.option("--rtol", type=float, default=DEFAULT_RTOL, show_default=True,
                     help="Parity: relative tolerance of the elementwise rule |ours-ref| <= atol + rtol*|ref| "
                          "(reported as 'allclose'; it does not decide the verdict)."),
        click.option("--locate/--no-locate", default=None,
                     help="Compare every layer's output in both runtimes and name the first source layer the "
                          "converted model gets wrong (file:line, both values' statistics). Default: only when "
                          "parity fails."),
        click.option("--on", "on", metavar="TARGET[,TARGET]", default=None,
                     help="Also check the converted file in these deployment toolchains, after the usual check: "
                          "openvino, rknn (the Rockchip NPU simulator), ncnn; comma-separated (tensorrt is refused: "
                          "no GPU path yet). One row per target; a target's FAIL fails the check. Extras: "
                          "convert-toolkit[openvino], [ncnn], [rknn]."),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


class _ConvertContext(click.Context):
    @property
    def command_path(self) -> str:
        """`convert`, not `convert to`: the internal command name never shows in messages."""
        path = super().command_path
        return path[: -len(" to")] if path.endswith(" to") else path


class _ConvertCommand(LazyOptionsCommand):
    """The conversion command: the tool's own usage line, and the help laid out as the group's."""

    context_class = _ConvertContext

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        name = ctx.find_root().info_name or "convert"
        formatter.write_usage(name, f"ROUTE INPUT... [-o OUT] [OPTIONS]   ({name} --help for more)")

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        write_conversion_options(ctx, formatter, self, [("-h, --help", "Show this message and exit.")])


@cli.command("to", cls=_ConvertCommand, hidden=True, context_settings={"max_content_width": 100},
             more_params=lambda: [click_option(o) for o in format_options()])
@_convert_options
@common_options
@click.pass_context
def to_cmd(ctx: click.Context, verbose: int, debug: bool, **kw: object) -> None:
    """Convert INPUT along ROUTE (the default command; see `convert --help`)."""
    guard(_run_convert, ctx, debug, verbose=verbose, debug_flag=debug, **kw)


def _route_options(src_fmt: str, dst: str, kw: dict[str, object]) -> dict[str, object]:
    """The format options given, checked against the route (``--decode`` only for darknet sources)."""
    infos = [formats.frontend_info(src_fmt), formats.exporter_info(dst)]
    allowed = {o.dest for s in infos for o in s.options}
    options: dict[str, object] = {}
    for opt in format_options():
        value = kw.pop(opt.dest, None)
        default = bool(opt.default) if opt.is_flag else opt.default
        if value is not None and value != default:
            if opt.dest not in allowed:
                raise UsageError(f"{opt.flag} does not apply to {src_fmt}->{dst}")
            options[opt.dest] = value
        elif opt.dest in allowed and value is not None:
            options[opt.dest] = value
    return options


def _run_convert(ctx: click.Context, **kw: object) -> int:
    args = list(kw.pop("args"))  # type: ignore[call-overload]
    src, dst, inputs = parse_route(args, kw.pop("src_format"), kw.pop("dst_format"))  # type: ignore[arg-type]
    paths = [Path(p) for p in inputs]
    for p in paths:
        # A prefix (Paddle's inference/model for model.json + model.pdiparams) names no file itself.
        if not (p.exists() or any(p.parent.glob(p.name + ".*"))):
            raise UsageError(f"{p}: no such file or folder (nor files named {p.name}.*)")
    options: dict[str, object] = {
        "opset": kw.pop("opset"),
        "input_shapes": parse_shapes(kw.pop("input_shape")),  # type: ignore[arg-type]
        "dynamic_batch": kw.pop("dynamic_batch"),
        "external_data": kw.pop("external_data"),
        "strict": kw.pop("strict"),
        "device": kw.pop("device"),
    }
    src_fmt = src or formats.detect_format(paths)
    if src:  # before the output path's checks: the real problem first (`convert darknet:onnx m.onnx`)
        formats.refuse_claimed_mismatch(src, paths, dst)
    options.update(_route_options(src_fmt, dst, kw))  # an unknown format is refused here, cheaply
    out = kw.pop("output")
    report_path = kw.pop("report")
    if report_path and any(Path(str(report_path)).resolve() == p.resolve() for p in paths):
        raise UsageError(f"refusing to write the report to '{report_path}': it is an input of this conversion")
    # Every output path is checked before any work: nothing is loaded, converted or written for a
    # conversion whose model or report cannot be written where asked. Missing folders of the model's
    # path are made when it is written (and said); a report's folder must exist.
    target = _paths.default_output(paths, formats.exporter_info(dst), out,  # type: ignore[arg-type]
                                   source_format=formats.normalize(src_fmt))
    check_writable(target, "the output", make_folder=True)
    if report_path:
        check_writable(Path(str(report_path)), "the report")
    # The conversion itself: onnx-ir, numpy and the route's packages are imported from here on.
    outputs = _Outputs(target, formats.exporter(dst))
    quiet = bool(kw.pop("quiet"))
    progress = _Progress(sys.stderr.isatty() and not quiet)
    result: ConversionResult | None = None
    try:
        result = _convert(paths, dst, src_fmt, out, quiet, progress, options, kw)
        return _print_result(result, out, report_path, outputs.existing(), quiet)  # type: ignore[arg-type]
    except BaseException as exc:
        interrupt = interrupt_in(exc)
        if interrupt is None:
            raise
        progress.close()
        message, code = outputs.interrupted(interrupt, result)
        err(message)
        return code


def _convert(paths: list[Path], dst: str, src_fmt: str, out: object, quiet: bool, progress: _Progress,
             options: dict[str, object], kw: dict[str, object]) -> ConversionResult:
    from .. import api, ir

    def on_loaded(model: Model) -> None:
        _signals.phase("read")  # test hook (convert/_signals.py)
        if not quiet:
            stats = ir.model_stats(model)
            click.echo(f"convert: loaded {src_fmt} model: {stats['nodes']} nodes, "
                       f"{human(float(stats['params']))} params ({size(int(stats['bytes']))})",  # type: ignore[arg-type]
                       err=True)

    try:
        return api.convert(  # type: ignore[no-any-return]
            paths, to=dst, out=out, format=src_fmt, check=bool(kw.pop("check")),
            atol=float(kw.pop("atol")), rtol=float(kw.pop("rtol")), tol=float(kw.pop("tol")),  # type: ignore[arg-type]
            inputs=kw.pop("inputs"), seed=int(kw.pop("seed")), locate=kw.pop("locate"),  # type: ignore[arg-type]
            on=kw.pop("on", None),  # type: ignore[arg-type]
            fold_batchnorm=bool(kw.pop("fold_bn")), validate=bool(kw.get("debug_flag")),
            progress=progress, on_loaded=on_loaded, **options,
        )
    finally:
        progress.close()


def _print_result(result: ConversionResult, out: object, report_path: object, existing: set[Path],
                  quiet: bool = False) -> int:
    for line in [] if quiet else result.notes:  # -q: the table, the summary line, warnings and errors
        note(line)
    for warning in result.warnings:
        warn(warning)
    if result.report is not None:
        click.echo(result.report.table(quiet=quiet))
        if report_path:
            write_report(Path(str(report_path)), result.report.to_json(), result.outputs)
    if result.parity_error:
        # the source failing on the drawn inputs: inputs it takes are the way to a verdict
        ran = "could not run the source model" in result.parity_error
        hint = "give inputs it takes with --inputs FILE.npz, or --no-check skips it" if ran else "--no-check skips it"
        click.echo(f"convert: parity NOT CHECKED: {one_line(result.parity_error)} ({hint})", err=True)
        verdict = "parity NOT CHECKED"
    elif result.report is None:
        verdict = "parity not checked (--no-check)"
    else:
        notes = len(result.report.notes)
        verdict = (f"parity {result.report.verdict} ({result.report.dest_device}"
                   + (f"; {notes} NOTE{'S' if notes > 1 else ''}: see above" if notes else "") + ")"
                   + _on_summary(result.report))
    status = summary_word(result.report, bool(result.parity_error))
    main_out = " + ".join(str(p) for p in result.outputs) if result.outputs else "-"
    replaced = [p for p in result.outputs if p.resolve() in existing]
    if replaced and out is None and not quiet:
        note(f"replaced the existing {' + '.join(str(p) for p in replaced)} (the default output path; "
             "-o writes elsewhere)")
    _signals.phase("summary")  # test hook (convert/_signals.py)
    click.echo(f"{status} {result.route} | {result.nodes} nodes | {human(result.params)} params | "
               f"{result.seconds:.1f} s | {main_out} | {verdict}"
               + (f" | replaced {' + '.join(str(p) for p in replaced)}" if replaced else ""))
    if _signals.is_command():  # the last line is out: from here a Ctrl-C or SIGTERM changes nothing
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        _signals.ignore()
    return 0 if result.ok else EXIT_PARITY


def _on_summary(report: object) -> str:
    """`` | on openvino PASS, ...`` for the summary line when the check ran on targets (``--on``)."""
    if not getattr(report, "targets", None):
        return ""
    from ..targets import summary

    return summary(report)
