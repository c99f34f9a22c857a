"""The ``convert`` command line.

    convert 'darknet->onnx' yolov4.cfg yolov4.weights -o yolov4.onnx
    convert pytorch:caffe model.pt --input-shape x=1,3,224,224
    convert check 'onnx->caffe' model.onnx --against model.prototxt --against model.caffemodel
    convert inspect model.onnx        convert formats        convert ops darknet

Exit status: 0 converted (and parity passed), 1 converted but parity failed or could not run,
2 could not convert (usage, malformed or unsupported model; a missing optional framework),
3 internal error (a bug in convert), 130 interrupted, 141 stdout closed early (`convert ... | head -1`),
143 terminated. Only the CLI modules print (this one, cli_check.py for `check`, cli_batch.py for `batch`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import select
import signal
import stat
import sys
import time
from collections.abc import Sequence
from pathlib import Path

try:
    import click

    from . import api, formats, ir
except KeyboardInterrupt:  # Ctrl-C while the command starts: one line, not an import traceback
    from . import _interrupted_at_start

    _interrupted_at_start()
    raise

__all__ = ["main"]

# The console scripts (pyproject.toml [project.scripts]): `convert`, and `convert-model`, which no
# other tool uses (ImageMagick installs a `convert` too).
_SCRIPTS = ("convert", "convert-model")

EXIT_PARITY = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3  # a bug in convert itself, never the user's input
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
EXIT_PIPE = 141  # stdout's reader went away (128 + SIGPIPE, what a shell reports for `yes | head -1`)
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
  convert help [COMMAND]                        this help, or a command's

\b
Exit status: 0 converted and parity passed (or --no-check); 1 converted but parity
failed or could not run (e.g. the source framework is not installed); 2 could not
convert (usage, malformed or unsupported model; one line per problem); 3 internal
error: a bug in convert, reported as such (--debug shows the traceback); 130 interrupted
(Ctrl-C), 141 stdout was closed early (`convert inspect m.onnx | head -1`; nothing is
printed about it), 143 terminated (SIGTERM). A framework that is not installed is exit 2,
with the extra to install.
Nothing is left at the output path when it could not convert.
"""

logger = logging.getLogger("convert")


# ---------------------------------------------------------------------------------------
# Output helpers
# ---------------------------------------------------------------------------------------
def _err(message: str) -> None:
    click.echo(f"convert: error: {message}", err=True)


def _stdout_closed() -> bool:
    """True when stdout is a pipe or socket whose reader has gone (POLLERR/POLLHUP), or when unsure."""
    try:
        poller = select.poll()
        poller.register(sys.__stdout__.fileno(), select.POLLOUT)  # type: ignore[union-attr]
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll() (Windows), no file descriptor
        return True


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that what is still buffered flushes without another EPIPE."""
    with contextlib.suppress(AttributeError, OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno())  # type: ignore[union-attr]
        os.close(devnull)


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
_GLOBAL_OPTION = re.compile(r"-v+|--verbose|--debug")  # accepted before the command too: `convert -v inspect m.onnx`


class _Main(click.Group):
    """A group whose default command is the conversion itself (`convert ROUTE INPUT...`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        lead: list[str] = []
        while args and _GLOBAL_OPTION.fullmatch(args[0]):
            lead, args = [*lead, args[0]], args[1:]
        if args and args[0] in ("--help", "-h", "--version"):
            pass
        elif args and args[0] in self.commands:
            # -v/--debug belong to the command (`_common`); commands without them (formats, ops) ignore them.
            takes = {p.name for p in self.commands[args[0]].params} >= {"verbose", "debug"}
            args = [args[0], *(lead if takes else []), *args[1:]]
        else:
            args = ["to", *lead, *args]
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except OSError as exc:  # stdout's reader went away (`convert inspect m.onnx | head -1`): not an error
            if exc.errno != errno.EPIPE or not _stdout_closed():
                raise
            _silence_stdout()
            ctx.exit(EXIT_PIPE)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        name = ctx.find_root().info_name or "convert"
        formatter.write_usage(name, f"ROUTE INPUT... [-o OUT] [OPTIONS]  |  {name} COMMAND ...")

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
@click.version_option(package_name="convert-toolkit")  # named as invoked: convert or convert-model
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
    # Every output path is checked before any work: nothing is loaded, converted or written for a
    # conversion whose model or report cannot be written where asked.
    target = api.default_output(paths, specs[1], out)  # type: ignore[arg-type]
    made = out is not None and str(out).endswith(("/", os.sep))  # `-o newdir/`: the folder is made
    _check_writable(target, "the output", None if made else "Create it, or end -o with / to have it made.")
    if report_path:
        _check_writable(Path(str(report_path)), "the report")
    existing = {c.resolve() for c in api.written_candidates(target, specs[1]) if c.is_file()}  # type: ignore[arg-type]
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
    replaced = [p for p in result.outputs if p.resolve() in existing]
    if replaced and out is None:
        click.echo(f"convert: note: replaced the existing {' + '.join(str(p) for p in replaced)} (the default "
                   "output path; -o writes elsewhere)", err=True)
    click.echo(f"{status} {result.route} | {result.nodes} nodes | {_human(result.params)} params | "
               f"{result.seconds:.1f} s | {main_out} | {verdict}"
               + (f" | replaced {' + '.join(str(p) for p in replaced)}" if replaced else ""))
    return 0 if result.ok else EXIT_PARITY


def _check_writable(path: Path, what: str, missing_hint: str | None = "Create it or choose another path.") -> None:
    """Refuse, before any work, an output path that cannot be written (``api.check_writable``), or
    whose folder does not exist (``missing_hint`` None: the folder is made when writing).

    Raises:
        UsageError: naming the path and why.
    """
    api.check_writable(path, what)
    folder = path.parent
    if missing_hint is not None and str(folder) and not folder.is_dir():
        raise ir.UsageError(f"cannot write {what} '{path}': folder '{folder}' does not exist. {missing_hint}")


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
        if isinstance(exc, BrokenPipeError) and _stdout_closed():
            raise  # the reader of stdout went away: _Main.invoke exits quietly
        missing = formats.missing_framework(exc)  # the user's set-up, not our bug
        if missing is not None and not debug:
            _err(missing)
            ctx.exit(EXIT_USAGE)
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
        name = ctx.find_root().info_name or "convert"
        formatter.write_usage(name, f"ROUTE INPUT... [-o OUT] [OPTIONS]   ({name} --help for more)")


@cli.command("to", cls=_ConvertCommand, hidden=True, context_settings={"max_content_width": 100})
@_convert_options
@_common
@click.pass_context
def to_cmd(ctx: click.Context, verbose: int, debug: bool, **kw: object) -> None:
    """Convert INPUT along ROUTE (the default command; see `convert --help`)."""
    _guard(_run_convert, ctx, debug, verbose=verbose, debug_flag=debug, **kw)


def _frontend_options_given(fmt: str, kw: dict[str, object]) -> dict[str, object]:
    """The source-format options (`--random-weights` ...) given to `inspect`, checked against ``fmt``."""
    allowed = {o.dest for o in formats.frontend(fmt).options}
    given: dict[str, object] = {}
    for opt in _frontend_option_specs():
        value = kw.get(opt.dest)
        if value is not None and value != (bool(opt.default) if opt.is_flag else opt.default):
            if opt.dest not in allowed:
                raise ir.UsageError(f"{opt.flag} does not apply to {fmt} models")
            given[opt.dest] = value
    return given


def _frontend_option_specs() -> list[ir.OptionSpec]:
    seen: dict[str, ir.OptionSpec] = {}
    for name in formats.frontend_names():
        for opt in formats.frontend(name).options:
            seen.setdefault(opt.flag, opt)
    return list(seen.values())


def _frontend_options(func):  # type: ignore[no-untyped-def]
    for spec in _frontend_option_specs():
        func.__click_params__.append(_click_option(spec))  # type: ignore[attr-defined]
    return func


def _run_inspect(ctx: click.Context, **kw: object) -> int:
    paths = [Path(p) for p in kw["models"]]  # type: ignore[attr-defined]
    fmt = formats.normalize(str(kw["fmt"])) if kw.get("fmt") else formats.detect_format(paths)
    options = _frontend_options_given(fmt, kw)
    if kw.get("input_shape"):
        options["input_shapes"] = _parse_shapes(kw["input_shape"])  # type: ignore[arg-type]
    model = api.load(paths, format=fmt, **options)
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
@_frontend_options
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


@cli.command("help")
@click.argument("command", required=False, metavar="[COMMAND]")
@click.pass_context
def help_cmd(ctx: click.Context, command: str | None) -> None:
    """Show this help, or a command's (`convert help inspect`)."""
    root = ctx.find_root()
    if command is None:
        click.echo(root.get_help())
        return
    cmd = cli.get_command(root, command)
    if cmd is None or command == "to":
        shown = ", ".join(n for n, c in cli.commands.items() if not c.hidden)
        _err(f"no command '{command}'; the commands are: {shown}")
        ctx.exit(EXIT_USAGE)
    click.echo(cmd.get_help(click.Context(cmd, info_name=command, parent=root)))


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


from . import cli_check  # noqa: E402, F401  # registers `convert check`
from .cli_batch import _BatchProgress  # noqa: E402, F401  # registers `convert batch` (and tests use it)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``convert`` console script and ``python -m convert``."""
    with contextlib.suppress(ValueError):  # ValueError: not the main thread (an embedding program)
        signal.signal(signal.SIGTERM, _on_sigterm)
    name = os.path.basename(sys.argv[0]) if sys.argv else ""
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name=name if name in _SCRIPTS else "convert")
    except SystemExit as exc:
        try:
            sys.stdout.flush()  # what is still buffered, while we can still say how it went
        except BrokenPipeError:
            _silence_stdout()
            if not exc.code:
                raise SystemExit(EXIT_PIPE) from None
        raise
