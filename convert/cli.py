"""The ``convert`` command line.

    convert 'darknet->onnx' yolov4.cfg yolov4.weights -o yolov4.onnx
    convert pytorch:caffe model.pt --input-shape x=1,3,224,224
    convert check 'onnx->caffe' model.onnx --against model.prototxt --against model.caffemodel
    convert inspect model.onnx        convert formats        convert ops darknet

Exit status: 0 converted (and parity passed), 1 converted but parity failed or could not run,
2 could not convert (usage, malformed or unsupported model), 3 internal error (a bug in convert),
130 interrupted, 143 terminated. Only this module prints.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import stat
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

try:
    import click

    from . import api, formats, ir
except KeyboardInterrupt:  # Ctrl-C while the command starts: one line, not an import traceback
    from . import _interrupted_at_start

    _interrupted_at_start()
    raise

if TYPE_CHECKING:
    from .batch import Event
    from .parity import ParityReport

__all__ = ["main"]

EXIT_PARITY = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3  # a bug in convert itself, never the user's input
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
EXIT_TERMINATED = 143  # SIGTERM (128 + SIGTERM)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is so that the same clean-up as for Ctrl-C runs."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated()

_HELP = """Convert a model from PyTorch, TensorFlow, TFLite, Darknet, PaddlePaddle, Caffe or ONNX to ONNX
or Caffe, then check that the converted model computes what the original does (the parity check, on
by default).

\b
ROUTE is SRC->DST (quote it: the shell reads > as a redirection), SRC:DST, or
--from SRC --to DST. INPUT is the model: one or more files or a folder.

\b
Examples:
  convert 'onnx->onnx' model.onnx -o model17.onnx --opset 17
  convert darknet:onnx yolov4-tiny.cfg yolov4-tiny.weights -o yolo.onnx
  convert 'pytorch->caffe' model.pt --input-shape x=1,3,224,224
  convert caffe:onnx deploy.prototxt net.caffemodel --report parity.json
  convert paddle:onnx inference/ --no-check
  convert tflite:onnx mobilenet_int8.tflite -o mobilenet_int8.onnx

\b
Other commands:
  convert check ROUTE SRC... --against OUT...   parity of a pair already on disk
  convert batch MANIFEST [--junit F] [--ray A]  a manifest of models, with CI reports
  convert inspect MODEL...                      inputs, outputs, ops, parameters
  convert formats                               the routes this installation converts
  convert ops FORMAT                            the supported-op table of a format
  convert random-weights darknet CFG -o OUT     seeded test weights for a Darknet cfg

\b
Exit status: 0 converted and parity passed (or --no-check); 1 converted but parity
failed or could not run (e.g. the source framework is not installed); 2 could not
convert (usage, malformed or unsupported model; one line per problem); 3 internal
error: a bug in convert, reported as such (--debug shows the traceback); 130 interrupted
(Ctrl-C), 143 terminated (SIGTERM).
Nothing is left at the output path when it could not convert.
"""

logger = logging.getLogger("convert")


# ---------------------------------------------------------------------------------------
# Output helpers
# ---------------------------------------------------------------------------------------
def _err(message: str) -> None:
    click.echo(f"convert: error: {message}", err=True)


def _one_line(message: str) -> str:
    """Return ``message`` on one line: control characters (a newline inside a name) escaped."""
    return re.sub(r"[\x00-\x1f\x7f]", lambda m: repr(m.group())[1:-1], message.strip())


def _human(n: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{int(n)}"


def _size(n: int) -> str:
    if n >= 1024**3:
        return f"{n / 1024**3:.2f} GiB"
    if n >= 1024**2:
        return f"{n / 1024**2:.1f} MiB"
    return f"{n / 1024:.1f} KiB"


class _Progress:
    """Turn ``progress(step, done, total)`` calls into tqdm bars on a terminal; silent otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bars: dict[str, object] = {}

    def __call__(self, step: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

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
        for bar in self.bars.values():
            bar.close()  # type: ignore[attr-defined]


def _setup_logging(verbose: int, debug: bool) -> None:
    level = logging.DEBUG if debug or verbose >= 2 else logging.INFO if verbose == 1 else logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("convert: %(levelname)s: %(name)s: %(message)s" if debug
                                           else "convert: %(levelname)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    if not debug:
        for noisy in ("onnx_ir", "onnxruntime"):
            logging.getLogger(noisy).setLevel(max(level, logging.ERROR))


# ---------------------------------------------------------------------------------------
# Route parsing
# ---------------------------------------------------------------------------------------
def _looks_like_route(arg: str) -> bool:
    if "->" in arg:
        return True
    if arg.endswith("-") and formats.normalize(arg[:-1]) in formats.frontend_names():
        return True
    if ":" in arg and not os.path.exists(arg):
        left, _, right = arg.partition(":")
        return bool(left) and bool(right) and "/" not in left
    return False


def _recover_unquoted(src: str) -> str | None:
    """`convert pytorch->caffe m.pt` reaches us as 'pytorch-' with stdout redirected to ./caffe.

    When stdout is an empty regular file in the current folder named after a known destination,
    remove that file, point stdout back at the terminal (stderr's target) and return the name.
    """
    try:
        out_stat = os.fstat(1)
    except OSError:
        return None
    if not stat.S_ISREG(out_stat.st_mode) or out_stat.st_size != 0:
        return None
    for name in formats.exporter_names() + list(formats.ALIASES):
        candidate = Path.cwd() / name
        try:
            if os.path.samestat(candidate.stat(), out_stat):
                candidate.unlink()
                sys.stdout.flush()
                os.dup2(2, 1)
                return formats.normalize(name)
        except OSError:
            continue
    return None


def _parse_route(args: list[str], src_opt: str | None, dst_opt: str | None) -> tuple[str | None, str, list[str]]:
    """Return (source or None for auto, destination, input paths)."""
    src, dst = src_opt, dst_opt
    rest = list(args)
    if rest and _looks_like_route(rest[0]):
        route = rest.pop(0)
        if "->" in route:
            src, _, dst = route.partition("->")
        elif route.endswith("-") and ":" not in route:
            src = route[:-1]
            recovered = _recover_unquoted(src)
            if recovered is None:
                raise ir.UsageError(
                    f"the route '{route}' was cut by the shell, which read '>' as a redirection: "
                    f"quote the route ('{src}->onnx') or use {src}:onnx"
                )
            dst = recovered
            click.echo(f"convert: note: the shell read '>' as a redirection; I removed the file "
                       f"'{recovered}' it created. Next time quote the route: '{src}->{recovered}' "
                       f"or use {src}:{recovered}", err=True)
        else:
            src, _, dst = route.partition(":")
    if not dst:
        raise ir.UsageError("no destination format: give a route such as 'darknet->onnx' or darknet:onnx, or --to")
    if not rest:
        raise ir.UsageError("no input model given")
    return (formats.normalize(src) if src else None), formats.normalize(dst), rest


def _parse_shapes(values: Sequence[str]) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for i, text in enumerate(values):
        name, sep, dims = text.rpartition("=")
        if not sep:
            name, dims = f"input{i}" if len(values) > 1 else "", text
        try:
            shape = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip())
        except ValueError:
            raise ir.UsageError(f"--input-shape '{text}': expected NAME=1,3,224,224") from None
        if not shape or any(d <= 0 for d in shape):
            raise ir.UsageError(f"--input-shape '{text}': dimensions must be positive integers")
        shapes[name] = shape
    return shapes


# ---------------------------------------------------------------------------------------
# Format-specific options, declared by each frontend/exporter
# ---------------------------------------------------------------------------------------
def _format_options() -> list[ir.OptionSpec]:
    seen: dict[str, ir.OptionSpec] = {}
    for name in formats.frontend_names():
        for opt in formats.frontend(name).options:
            seen.setdefault(opt.flag, opt)
    for name in formats.exporter_names():
        for opt in formats.exporter(name).options:
            seen.setdefault(opt.flag, opt)
    return list(seen.values())


def _click_option(opt: ir.OptionSpec) -> click.Option:
    kwargs: dict[str, object] = {"help": opt.help, "default": opt.default}
    if opt.is_flag:
        kwargs["is_flag"] = True
        kwargs["default"] = bool(opt.default)
    elif opt.choices:
        kwargs["type"] = click.Choice(list(opt.choices))
    elif opt.type is not None:
        kwargs["type"] = opt.type
    if opt.metavar:
        kwargs["metavar"] = opt.metavar
    kwargs["show_default"] = opt.default not in (None, False)
    return click.Option([opt.flag, opt.dest], **kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------
class _Main(click.Group):
    """A group whose default command is the conversion itself (`convert ROUTE INPUT...`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            args = ["to", *args]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage("convert", "ROUTE INPUT... [-o OUT] [OPTIONS]  |  convert COMMAND ...")

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # The conversion's own options belong on the first screen: it is the main command.
        command = self.commands["to"]
        sub = click.Context(command, info_name="convert", parent=ctx)
        rows = [r for p in command.get_params(sub) if (r := p.get_help_record(sub)) is not None]
        with formatter.section("Conversion options"):
            formatter.write_dl(rows)
        super().format_options(ctx, formatter)


@click.group(cls=_Main, help=_HELP, context_settings={"help_option_names": ["-h", "--help"],
                                                      "max_content_width": 100})
@click.version_option(package_name="convert-toolkit", prog_name="convert")
def cli() -> None:
    """Top-level group (see _HELP)."""


def _regression_options(func):  # type: ignore[no-untyped-def]
    """--regression-factor and --regression-floor, as `check` and `batch` both take them.

    The defaults are convert.batch.reports' DEFAULT_FACTOR and DEFAULT_FLOOR, written out here so
    that starting the CLI does not import the batch package.
    """
    func = click.option("--regression-floor", type=float, default=1e-6, show_default=True,
                        help="Baseline errors below FLOOR count as FLOOR (float32 noise is not a regression).")(func)
    return click.option("--regression-factor", type=float, default=10.0, show_default=True,
                        help="Regression: error > FACTOR x max(baseline error, FLOOR).")(func)


def _common(func):  # type: ignore[no-untyped-def]
    for opt in reversed([
        click.option("-v", "--verbose", count=True, help="More detail on stderr (-vv for debug logs)."),
        click.option("--debug", is_flag=True, help="Show tracebacks and validate the graph after every pass."),
    ]):
        func = opt(func)
    return func


def _run_convert(ctx: click.Context, **kw: object) -> int:
    args = list(kw.pop("args"))  # type: ignore[call-overload]
    src, dst, inputs = _parse_route(args, kw.pop("src_format"), kw.pop("dst_format"))  # type: ignore[arg-type]
    paths = [Path(p) for p in inputs]
    for p in paths:
        # A prefix (Paddle's inference/model for model.json + model.pdiparams) names no file itself.
        if not api.exists_or_prefix(p):
            raise ir.UsageError(f"{p}: no such file or folder (nor files named {p.name}.*)")
    progress = _Progress(sys.stderr.isatty() and not kw["quiet"])
    options: dict[str, object] = {
        "opset": kw.pop("opset"),
        "input_shapes": _parse_shapes(kw.pop("input_shape")),  # type: ignore[arg-type]
        "dynamic_batch": kw.pop("dynamic_batch"),
        "external_data": kw.pop("external_data"),
        "strict": kw.pop("strict"),
        "device": kw.pop("device"),
    }
    src_fmt = src or formats.detect_format(paths)
    specs = [formats.frontend(src_fmt), formats.exporter(dst)]
    allowed = {o.dest for s in specs for o in s.options}
    for opt in _format_options():
        value = kw.pop(opt.dest, None)
        default = bool(opt.default) if opt.is_flag else opt.default
        if value is not None and value != default:
            if opt.dest not in allowed:
                raise ir.UsageError(f"{opt.flag} does not apply to {src_fmt}->{dst}")
            options[opt.dest] = value
        elif opt.dest in allowed and value is not None:
            options[opt.dest] = value
    out = kw.pop("output")
    report_path = kw.pop("report")
    if report_path and any(Path(str(report_path)).resolve() == p.resolve() for p in paths):
        raise ir.UsageError(f"refusing to write the report to '{report_path}': it is an input of this conversion")
    if report_path:
        api.check_writable(Path(str(report_path)), "the report")
    quiet = bool(kw.pop("quiet"))
    loaded: dict[str, object] = {}

    def on_loaded(model: ir.Model) -> None:
        loaded.update(ir.model_stats(model))
        if not quiet:
            click.echo(f"convert: loaded {src_fmt} model: {loaded['nodes']} nodes, "
                       f"{_human(float(loaded['params']))} params ({_size(int(loaded['bytes']))})", err=True)  # type: ignore[arg-type]

    try:
        result = api.convert(
            paths, to=dst, out=out, format=src_fmt, check=bool(kw.pop("check")),  # type: ignore[arg-type]
            atol=float(kw.pop("atol")), rtol=float(kw.pop("rtol")), tol=float(kw.pop("tol")),  # type: ignore[arg-type]
            inputs=kw.pop("inputs"), seed=int(kw.pop("seed")), locate=kw.pop("locate"),  # type: ignore[arg-type]
            fold_batchnorm=bool(kw.pop("fold_bn")), validate=bool(kw.get("debug_flag")),
            progress=progress, on_loaded=on_loaded, **options,
        )
    finally:
        progress.close()
    for note in result.notes:
        click.echo(f"convert: note: {note}", err=True)
    for warning in result.warnings:
        click.echo(f"convert: warning: {warning}", err=True)
    if result.report is not None:
        click.echo(result.report.table())
        if report_path:
            _write_report(Path(str(report_path)), result.report.to_json(), result.outputs)
    if result.parity_error:
        click.echo(f"convert: parity NOT CHECKED: {result.parity_error} (--no-check skips it)", err=True)
        verdict = "parity NOT CHECKED"
    elif result.report is None:
        verdict = "parity not checked (--no-check)"
    else:
        notes = len(result.report.notes)
        verdict = (f"parity {result.report.verdict} ({result.report.dest_device}"
                   + (f"; {notes} NOTE{'S' if notes > 1 else ''}: see above" if notes else "") + ")")
    status = "OK" if result.ok else "FAIL"
    main_out = " + ".join(str(p) for p in result.outputs) if result.outputs else "-"
    click.echo(f"{status} {result.route} | {result.nodes} nodes | {_human(result.params)} params | "
               f"{result.seconds:.1f} s | {main_out} | {verdict}")
    return 0 if result.ok else EXIT_PARITY


def _write_report(path: Path, text: str, outputs: Sequence[Path]) -> None:
    try:
        path.write_text(text + "\n")
    except OSError as exc:
        done = f"converted and wrote {' + '.join(str(p) for p in outputs)}, but " if outputs else ""
        raise ir.ExportError(f"{done}cannot write the report '{path}': {exc.strerror or exc}") from exc


def _convert_options(func):  # type: ignore[no-untyped-def]
    opts = [
        click.argument("args", nargs=-1, required=True, metavar="ROUTE INPUT..."),
        click.option("-o", "--output", type=click.Path(),
                     help="Output path (a folder puts <stem><suffix> in it). Default: ./<stem><suffix>."),
        click.option("--from", "src_format", metavar="SRC", help="Source format, instead of a ROUTE."),
        click.option("--to", "dst_format", metavar="DST", help="Destination format, instead of a ROUTE."),
        click.option("--opset", type=int, default=None,
                     help="ONNX opset to write (13-21 tested); default: an ONNX source keeps its own opset, "
                          "other sources get 17. Fails loudly if an op cannot be expressed."),
        click.option("--check/--no-check", default=True, show_default=True,
                     help="Run the parity check: source runtime vs converted model on the same inputs."),
        click.option("--tol", type=float, default=api.DEFAULT_TOL, show_default=True,
                     help="Parity verdict: an output passes when max|ours-ref| / max|ref| <= TOL (error relative "
                          "to the output's scale, which float32 rounding in deep nets respects) and the reference "
                          "output has a real spread; a near-constant reference is NOT VERIFIED, never PASS."),
        click.option("--atol", type=float, default=api.DEFAULT_ATOL, show_default=True,
                     help="Parity: absolute tolerance of the elementwise rule, reported beside the verdict."),
        click.option("--rtol", type=float, default=api.DEFAULT_RTOL, show_default=True,
                     help="Parity: relative tolerance of the elementwise rule |ours-ref| <= atol + rtol*|ref| "
                          "(reported as 'allclose'; it does not decide the verdict)."),
        click.option("--locate/--no-locate", default=None,
                     help="Compare every layer's output in both runtimes and name the first source layer the "
                          "converted model gets wrong (file:line, both values' statistics). Default: only when "
                          "parity fails."),
        click.option("--input-shape", multiple=True, metavar="NAME=1,3,224,224",
                     help="Shape of an input without a fixed shape (repeat for several inputs)."),
        click.option("--inputs", type=click.Path(path_type=Path), metavar="FILE.npz",
                     help="Parity inputs (.npz by input name, or .npy); default: seeded N(0,1)."),
        click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random parity inputs."),
        click.option("--report", type=click.Path(path_type=Path), metavar="FILE.json",
                     help="Write the parity report as JSON (for CI)."),
        click.option("--external-data/--no-external-data", default=None,
                     help="ONNX: weights in <out>.data (default: only past 1.8 GiB)."),
        click.option("--dynamic-batch", is_flag=True, help="Make the leading input dimension symbolic."),
        click.option("--strict", is_flag=True, help="Treat warnings (unknown options, dropped layers) as errors."),
        click.option("--fold-bn/--no-fold-bn", default=True, show_default=True,
                     help="Fold BatchNormalization into the preceding convolution."),
        click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
                     help="Where the parity check runs: the converted model in ONNX Runtime (cuda needs "
                          "onnxruntime-gpu) and the source in its framework when it has a GPU build "
                          "(PyTorch, TensorFlow, Paddle); CUDA runs are exact fp32 (TF32 off). An ONNX "
                          "source runs on the CPU."),
        click.option("-q", "--quiet", is_flag=True, help="Only the parity table and the summary line."),
    ]
    for opt in reversed(opts):
        func = opt(func)
    for spec in _format_options():
        func.__click_params__.append(_click_option(spec))  # type: ignore[attr-defined]
    return func


def _guard(func, ctx: click.Context, debug: bool, **kw: object) -> None:  # type: ignore[no-untyped-def]
    _setup_logging(int(kw.get("verbose") or 0), debug)
    try:
        code = func(ctx, **kw)
    except ir.ConvertError as exc:
        if debug:
            raise
        _err(_one_line(str(exc)) or type(exc).__name__)
        ctx.exit(EXIT_USAGE)
    except api.InterruptedAfterWrite as exc:
        what = "terminated" if isinstance(exc.__cause__, Terminated) else "interrupted"
        _err(f"{what} during the parity check: the output was written and is kept, but it was NOT "
             f"checked: {' + '.join(str(p) for p in exc.written)}")
        ctx.exit(EXIT_TERMINATED if isinstance(exc.__cause__, Terminated) else EXIT_INTERRUPTED)
    except Terminated:
        _err("terminated; nothing was left at the output path")
        ctx.exit(EXIT_TERMINATED)
    except KeyboardInterrupt:
        _err("interrupted; nothing was left at the output path")
        ctx.exit(EXIT_INTERRUPTED)
    except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
        raise
    except Exception as exc:  # anything else is a bug in convert, not a problem with the user's model
        if debug:
            raise
        first = (str(exc).strip().splitlines() or [""])[0]
        _err(f"internal error {first}" if isinstance(exc, ir.InternalError) else
             f"internal error: {type(exc).__name__}: {first}")
        _err("this is a bug in convert, not a problem with your model: please report it with the command "
             "line and the traceback that --debug prints")
        ctx.exit(EXIT_INTERNAL)
    ctx.exit(code or 0)


class _ConvertContext(click.Context):
    @property
    def command_path(self) -> str:
        """`convert`, not `convert to`: the internal command name never shows in messages."""
        path = super().command_path
        return path[: -len(" to")] if path.endswith(" to") else path


class _ConvertCommand(click.Command):
    """The conversion command: its usage line is the tool's own, not the internal name `to`."""

    context_class = _ConvertContext

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage("convert", "ROUTE INPUT... [-o OUT] [OPTIONS]   (convert --help for more)")


@cli.command("to", cls=_ConvertCommand, hidden=True, context_settings={"max_content_width": 100})
@_convert_options
@_common
@click.pass_context
def to_cmd(ctx: click.Context, verbose: int, debug: bool, **kw: object) -> None:
    """Convert INPUT along ROUTE (the default command; see `convert --help`)."""
    _guard(_run_convert, ctx, debug, verbose=verbose, debug_flag=debug, **kw)


def _split_against(sources: list[Path], against: list[Path], src: str | None,
                   dst: str | None) -> tuple[list[Path], list[Path]]:
    """Give --against the files of the converted model that the shell put among the sources.

    ``--against a.prototxt a.caffemodel`` gives --against one value; the .caffemodel would be read
    as a second source. A source file with the destination's suffix or companion suffix (and not
    one the source format reads) belongs to the converted model.
    """
    try:
        src_fmt = src or formats.detect_format(sources[:1])
        dst_fmt = dst or formats.detect_format(against)
    except ir.UsageError:
        return sources, against
    if src_fmt == dst_fmt or dst_fmt not in formats.exporter_names():
        return sources, against
    ex = formats.exporter(dst_fmt)
    theirs = {ex.suffix, *ex.companions} - set(formats.frontend(src_fmt).suffixes)
    moved = [p for p in sources[1:] if p.suffix.lower() in theirs]
    return [p for p in sources if p not in moved], [*against, *moved]


def _run_check(ctx: click.Context, **kw: object) -> int:
    args = list(kw["args"])  # type: ignore[call-overload]
    against = [Path(p) for p in kw["against"]]  # type: ignore[attr-defined]
    if kw.get("report"):
        api.check_writable(Path(str(kw["report"])), "the report")
    if not against:
        raise ir.UsageError("convert check needs the converted model: --against OUT (repeat for several files)")
    src, dst, inputs = (None, None, args)
    if args and _looks_like_route(args[0]):
        src, dst, inputs = _parse_route(args, None, None)
    sources, against = _split_against([Path(p) for p in inputs], against, src, dst)
    report = api.verify(
        sources, against, format=src, to=dst,
        atol=float(kw["atol"]), rtol=float(kw["rtol"]), tol=float(kw["tol"]),  # type: ignore[arg-type]
        inputs=kw["inputs"], seed=int(kw["seed"]), locate=kw["locate"],  # type: ignore[arg-type]
        input_shapes=_parse_shapes(kw["input_shape"]), device=kw["device"],  # type: ignore[arg-type]
    )
    click.echo(report.table())
    if kw.get("report"):
        _write_report(Path(str(kw["report"])), report.to_json(), [])
    regressed = _check_baseline(report, kw)
    ok = report.passed and not regressed
    click.echo(f"{'OK' if ok else 'FAIL'} check {report.source}:{report.dest} | "
               f"{len(report.outputs)} outputs | parity {report.verdict} ({report.dest_device})"
               + (f" | REGRESSED vs {kw['baseline']}" if regressed else ""))
    return 0 if ok else EXIT_PARITY


def _check_baseline(report: ParityReport, kw: dict[str, object]) -> bool:
    """Compare with --baseline (and --accept it); return True when an output regressed."""
    from . import batch

    path = Path(str(kw["baseline"])) if kw.get("baseline") else None
    if path is None:
        if kw.get("accept"):
            raise ir.UsageError("--accept writes the --baseline FILE.json: give --baseline")
        return False
    lines: list[str] = []
    if path.exists() or not kw.get("accept"):
        found = batch.baseline_errors(path)
        if len(found) != 1:
            raise ir.UsageError(f"--baseline {path} holds {len(found)} models; give the --report of this one")
        lines = batch.regressions(report, next(iter(found.values())),
                                  factor=float(kw["regression_factor"]),  # type: ignore[arg-type]
                                  floor=float(kw["regression_floor"]))  # type: ignore[arg-type]
        for line in lines:
            click.echo(f"baseline: {line}")
        if not lines:
            click.echo(f"baseline: no output regressed past {kw['regression_factor']:g} x the errors of {path}")
    if kw.get("accept"):
        if not report.passed:
            click.echo(f"convert: baseline NOT accepted: parity failed; {path} is unchanged", err=True)
        else:
            _write_report(path, report.to_json(), [])
            click.echo(f"convert: accepted this run as the baseline {path}", err=True)
            return False
    return bool(lines)


@cli.command("check", context_settings={"max_content_width": 100})
@click.argument("args", nargs=-1, required=True, metavar="[ROUTE] SOURCE...")
@click.option("--against", multiple=True, required=True, metavar="OUT",
              help="The converted model (repeat for several files, e.g. .prototxt and .caffemodel).")
@click.option("--tol", type=float, default=api.DEFAULT_TOL, show_default=True,
              help="Verdict: max|ours-ref| / max|ref| <= TOL per output, with a reference that has spread.")
@click.option("--atol", type=float, default=api.DEFAULT_ATOL, show_default=True,
              help="Elementwise rule, reported beside the verdict.")
@click.option("--rtol", type=float, default=api.DEFAULT_RTOL, show_default=True,
              help="Elementwise rule, reported beside the verdict.")
@click.option("--locate/--no-locate", default=None,
              help="Compare every layer's output in both runtimes and name the first source layer the "
                   "converted model gets wrong (file:line, both values' statistics). Default: only when "
                   "parity fails.")
@click.option("--input-shape", multiple=True, metavar="NAME=1,3,224,224")
@click.option("--inputs", type=click.Path(path_type=Path), metavar="FILE.npz")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--report", type=click.Path(path_type=Path), metavar="FILE.json")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="Where both models run (CUDA in exact fp32, TF32 off; an ONNX source on the CPU).")
@click.option("--baseline", type=click.Path(path_type=Path), metavar="FILE.json",
              help="An accepted report (--report, or a batch report of one model): fail when an output's error "
                   "grew past --regression-factor times its baseline, even within --tol.")
@_regression_options
@click.option("--accept", is_flag=True, help="Write this run into --baseline when parity passed (accept it).")
@_common
@click.pass_context
def check_cmd(ctx: click.Context, verbose: int, debug: bool, **kw: object) -> None:
    """Check the parity of a model pair already on disk.

    \b
    convert check 'onnx->caffe' model.onnx --against model.prototxt --against model.caffemodel
    convert check yolov4.cfg yolov4.weights --against yolov4.onnx
    convert check model.pt2 --against model.onnx --locate     # the first layer that differs, even on PASS
    convert check m.onnx --against m.prototxt --against m.caffemodel --baseline accepted.json
    """
    _guard(_run_check, ctx, debug, verbose=verbose, **kw)


class _BatchProgress:
    """Progress of a batch: on a terminal a bar per running model (and one for the batch), else a
    line per finished model."""

    def __init__(self, total: int, tty: bool) -> None:
        from tqdm import tqdm

        self.total, self.tty, self.finished = total, tty, 0
        self.bars: dict[int, tqdm[object]] = {}
        self.overall = tqdm(total=total, desc="batch", unit="model", file=sys.stderr, position=0) if tty else None

    def __call__(self, event: Event) -> None:
        from tqdm import tqdm

        if event.kind == "done" and event.result is not None:
            self.finished += 1
            bar = self.bars.pop(event.index, None)
            if bar is not None:
                bar.close()
            row = event.result
            worst = row.worst
            err = f"err/scale {worst[1]:.2g}" if worst is not None else row.error[:100]
            line = (f"[{self.finished}/{self.total}] {row.verdict:<9} {row.name}  {row.route}  {err}  "
                    f"{row.seconds:.1f} s  {row.peak_rss / 2**20:.0f} MiB")
            line += "  (retried)" if row.attempts > 1 else ""
            if self.overall is not None:
                tqdm.write(line, file=sys.stderr)
                self.overall.update(1)
            else:
                click.echo(line, err=True)
        elif self.tty and event.kind == "started" and event.slot is not None:
            self.bars[event.index] = tqdm(total=1, desc=event.name, position=1 + event.slot, leave=False,
                                          file=sys.stderr, bar_format="{desc}: {percentage:3.0f}%|{bar}| {postfix}")
        elif event.kind == "progress" and event.index in self.bars:
            bar = self.bars[event.index]
            bar.total = max(event.total, 1)
            bar.n = event.done
            bar.set_postfix_str(event.step)

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()
        self.bars.clear()
        if self.overall is not None:
            self.overall.close()


def _run_batch(ctx: click.Context, **kw: object) -> int:
    from . import batch

    manifest = batch.load_manifest(Path(str(kw["manifest"])))
    outputs = {k: Path(str(kw[k])) for k in ("junit", "report", "summary") if kw.get(k)}
    for key, path in outputs.items():
        api.check_writable(path, f"the --{key} file")
    baseline = Path(str(kw["baseline"])) if kw.get("baseline") else None
    if kw.get("accept") and baseline is None:
        raise ir.UsageError("--accept writes the --baseline FILE.json: give --baseline")
    compare = baseline if baseline is not None and (baseline.exists() or not kw.get("accept")) else None
    names = list(kw.get("only") or ())  # type: ignore[call-overload]
    count = len(names) if names else len(manifest.models)
    progress = _BatchProgress(count, sys.stderr.isatty() and not kw.get("quiet"))
    out = Path(str(kw["output"])) if kw.get("output") else manifest.output
    try:
        result = batch.run_batch(
            manifest, out=out, workers=kw.get("workers"), ray_address=kw.get("ray"),  # type: ignore[arg-type]
            baseline=compare, factor=float(kw["regression_factor"]),  # type: ignore[arg-type]
            floor=float(kw["regression_floor"]), on_event=progress, only=names,  # type: ignore[arg-type]
        )
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the finished models' files stay
        progress.close()
        what = "terminated" if isinstance(exc, Terminated) else "interrupted"
        _err(f"{what} after {progress.finished} of {count} models; their files are in {out}; no report was written")
        return EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED
    finally:
        progress.close()
    accepted = False
    if kw.get("accept"):  # accepted: regressions are the new normal; failures never are
        accepted = all(r.verdict in (batch.PASS, batch.REGRESSED, batch.CONVERTED) for r in result.rows)
        for r in result.rows if accepted else []:
            if r.verdict == batch.REGRESSED:
                r.verdict = batch.PASS
    click.echo(result.table())
    for note in result.notes:
        click.echo(f"convert: note: {note}", err=True)
    for key, path in outputs.items():
        text = {"junit": result.junit, "report": result.to_json, "summary": result.markdown}[key]()
        _write_report(path, text.rstrip("\n"), [])
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        try:
            with open(step_summary, "a") as f:
                f.write(result.markdown() + "\n")
        except OSError as exc:
            click.echo(f"convert: warning: cannot append to $GITHUB_STEP_SUMMARY ({exc.strerror or exc})", err=True)
    if kw.get("accept") and baseline is not None:
        if accepted:
            _write_report(baseline, batch.accepted_baseline(result, baseline), [])
            click.echo(f"convert: accepted this run as the baseline {baseline}", err=True)
        else:
            click.echo(f"convert: baseline NOT accepted: a model failed or was not converted; {baseline} "
                       "is unchanged", err=True)
    click.echo(result.summary_line())
    return result.exit_status


@cli.command("batch", context_settings={"max_content_width": 100})
@click.argument("manifest", type=click.Path(path_type=Path), metavar="MANIFEST")
@click.option("-o", "--output", type=click.Path(path_type=Path), metavar="DIR",
              help="Output folder (default: the manifest's 'output'); each model goes into DIR/<name>/.")
@click.option("-j", "--workers", type=click.IntRange(min=1), default=None,
              help="Local worker processes (default: min(cores, models, 80% of available memory / "
                   "(1 GiB + 3 x the largest model's files))).")
@click.option("--ray", metavar="ADDRESS", help="Run on an existing Ray cluster (auto, host:port, ray://host:port); "
                                               "needs convert-toolkit[ray].")
@click.option("--junit", type=click.Path(path_type=Path), metavar="FILE.xml",
              help="JUnit XML: one testcase per model and output.")
@click.option("--report", type=click.Path(path_type=Path), metavar="FILE.json",
              help="JSON report (schema convert-batch-report/1, docs/batch.md).")
@click.option("--summary", type=click.Path(path_type=Path), metavar="FILE.md",
              help="Markdown summary (also appended to $GITHUB_STEP_SUMMARY when set).")
@click.option("--baseline", type=click.Path(path_type=Path), metavar="FILE.json",
              help="An accepted batch report: a passing output whose error grew past --regression-factor "
                   "times its baseline is REGRESSED (exit 1).")
@_regression_options
@click.option("--accept", is_flag=True, help="Write this run into --baseline when no model failed (accept it).")
@click.option("--model", "only", multiple=True, metavar="NAME", help="Run only this model (repeatable).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars.")
@_common
@click.pass_context
def batch_cmd(ctx: click.Context, verbose: int, debug: bool, **kw: object) -> None:
    """Convert every model of a manifest (TOML or YAML) with its parity check, for CI.

    \b
    convert batch models.toml --junit junit.xml --report batch.json --summary batch.md
    convert batch models.toml --baseline accepted.json            # fail on a 10x error growth
    convert batch models.toml --baseline accepted.json --accept   # accept this run
    convert batch models.yaml --ray auto                          # on a Ray cluster

    \b
    Continues past failures and ends with one table (model, route, verdict, worst error, time,
    peak RSS). Exit status: 0 every model passed; 1 a parity failure, a check that could not run
    or a regression; 2 a model could not be converted (or the manifest is invalid).
    Schema, reports and pool sizing: docs/batch.md.
    """
    _guard(_run_batch, ctx, debug, verbose=verbose, **kw)


def _run_inspect(ctx: click.Context, **kw: object) -> int:
    paths = [Path(p) for p in kw["models"]]  # type: ignore[attr-defined]
    fmt = formats.normalize(str(kw["fmt"])) if kw.get("fmt") else formats.detect_format(paths)
    model = api.load(paths, format=fmt, **({"input_shapes": _parse_shapes(kw["input_shape"])}  # type: ignore[arg-type]
                                             if kw.get("input_shape") else {}))
    ir.passes.InferShapes()(model)  # output shapes for the listing; reads no weight
    stats = ir.model_stats(model)

    def shape(v: ir.Value) -> str:
        if v.shape is None:
            return "?"
        return "x".join(str(d) for d in v.shape) or "scalar"

    click.echo(f"{', '.join(str(p) for p in paths)}  [{fmt}]  opset {model.graph.opset_imports.get('', '-')}")
    click.echo("inputs:")
    for v in model.graph.inputs:
        click.echo(f"  {v.name}: {v.dtype.name if v.dtype is not None else '?'} {shape(v)}")
    click.echo("outputs:")
    for v in model.graph.outputs:
        click.echo(f"  {v.name}: {v.dtype.name if v.dtype is not None else '?'} {shape(v)}")
    click.echo(f"parameters: {_human(float(stats['params']))} ({int(stats['params']):,}) in "  # type: ignore[arg-type]
               f"{len(model.graph.initializers)} tensors, {_size(int(stats['bytes']))}")  # type: ignore[arg-type]
    click.echo(f"nodes: {stats['nodes']}")
    ops = sorted(stats["ops"].items(), key=lambda kv: (-kv[1], kv[0]))  # type: ignore[attr-defined]
    for op, n in ops:
        click.echo(f"  {n:6d}  {op}")
    return 0


@cli.command("inspect", context_settings={"max_content_width": 100})
@click.argument("models", nargs=-1, required=True, metavar="MODEL...")
@click.option("--from", "fmt", metavar="FORMAT", help="Source format (guessed from the files by default).")
@click.option("--input-shape", multiple=True, metavar="NAME=1,3,224,224")
@_common
@click.pass_context
def inspect_cmd(ctx: click.Context, verbose: int, debug: bool, **kw: object) -> None:
    """Show a model's inputs, outputs, op histogram and parameter count (any source format)."""
    _guard(_run_inspect, ctx, debug, verbose=verbose, **kw)


@cli.command("formats")
def formats_cmd() -> None:
    """List the source and destination formats and the routes that work in this installation."""
    click.echo("sources:")
    for name in formats.frontend_names():
        spec = formats.frontend(name)
        click.echo(f"  {name:8s} {spec.description}")
    click.echo("destinations:")
    for name in formats.exporter_names():
        spec = formats.exporter(name)
        click.echo(f"  {name:8s} {spec.description}")
    click.echo("routes:")
    click.echo("  " + "  ".join(f"{s}->{d}" for s, d in formats.routes()))


def ops_table(fmt: str, markdown: bool = False) -> str:
    """Return the support table(s) of format ``fmt`` as text (or Markdown)."""
    name = formats.normalize(fmt)
    sections: list[tuple[str, Sequence[ir.OpSupport]]] = []
    if name in formats.frontend_names():
        sections.append((f"{name} frontend ({name} -> IR)", formats.frontend(name).ops()))
    if name in formats.exporter_names():
        sections.append((f"{name} exporter (IR -> {name})", formats.exporter(name).ops()))
    if not sections:
        raise ir.UsageError(f"unknown format '{fmt}'. Known: {', '.join(formats.frontend_names())}")
    lines: list[str] = []
    for title, rows in sections:
        if markdown:
            lines += [f"## {title}", "", "| source | maps to | notes |", "|---|---|---|"]
            lines += [f"| `{r.op}` | {r.maps_to} | {r.notes} |" for r in rows]
            lines.append("")
        else:
            lines.append(f"{title}: {len(rows)} entries")
            w = max([len(r.op) for r in rows] + [4])
            lines += [f"  {r.op.ljust(w)}  {r.maps_to}" + (f"  ({r.notes})" if r.notes else "") for r in rows]
    return "\n".join(lines)


@cli.command("ops")
@click.argument("fmt", metavar="FORMAT")
@click.option("--markdown", is_flag=True, help="Print a Markdown table (as in docs/SUPPORTED_OPS.md).")
@click.pass_context
def ops_cmd(ctx: click.Context, fmt: str, markdown: bool) -> None:
    """Print the supported-op table of a format, generated from its registry."""
    try:
        click.echo(ops_table(fmt, markdown))
    except ir.ConvertError as exc:
        _err(str(exc))
        ctx.exit(EXIT_USAGE)


def _run_random_weights(ctx: click.Context, **kw: object) -> int:
    fmt = formats.normalize(str(kw["fmt"]))
    if fmt != "darknet":
        raise ir.UsageError(f"random-weights supports darknet (a .cfg has no weights); not '{fmt}'")
    from .frontends.darknet.random_weights import write_random_weights

    cfg = Path(str(kw["cfg"]))
    if not cfg.exists():
        raise ir.UsageError(f"{cfg}: no such file")
    out = Path(str(kw["output"])) if kw.get("output") else Path.cwd() / (cfg.stem + ".weights")
    start = time.perf_counter()
    path = write_random_weights(cfg, out, seed=int(kw["seed"]))  # type: ignore[arg-type]
    click.echo(f"OK random-weights | {cfg.name} | seed {kw['seed']} | {_size(path.stat().st_size)} | "
               f"{time.perf_counter() - start:.1f} s | {path}")
    return 0


@cli.command("random-weights")
@click.argument("fmt", metavar="FORMAT")
@click.argument("cfg", metavar="CFG")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Output .weights path.")
@click.option("--seed", type=int, default=0, show_default=True)
@_common
@click.pass_context
def random_weights_cmd(ctx: click.Context, verbose: int, debug: bool, **kw: object) -> None:
    """Write seeded random weights for a Darknet cfg (sane statistics; for testing deployments)."""
    _guard(_run_random_weights, ctx, debug, verbose=verbose, **kw)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``convert`` console script and ``python -m convert``."""
    with contextlib.suppress(ValueError):  # ValueError: not the main thread (an embedding program)
        signal.signal(signal.SIGTERM, _on_sigterm)
    cli.main(args=list(argv) if argv is not None else None, prog_name="convert")
