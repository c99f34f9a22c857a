"""What every command of the CLI shares: exit statuses, printing, option groups, paths, the error guard.

Importing this module imports click and the standard library only: no onnx-ir, numpy or
framework (see docs/startup.md). ``convert.api`` and ``convert.ir`` are imported inside the
functions that run a conversion.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import stat
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import click

from .. import _paths, _signals, formats
from .._errors import ConvertError, ExportError, UsageError, printable, resource_exhausted
from .._signals import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated
from .._tolerances import DEFAULT_ATOL, DEFAULT_RTOL, DEFAULT_TOL
from .._words import cli_words

__all__ = [
    "DEFAULT_ATOL",
    "DEFAULT_RTOL",
    "DEFAULT_TOL",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_PARITY",
    "EXIT_PIPE",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "LazyOptionsCommand",
    "Terminated",
    "check_outputs",
    "check_writable",
    "click_option",
    "common_options",
    "err",
    "guard",
    "human",
    "interrupt_in",
    "looks_like_route",
    "note",
    "one_line",
    "parse_route",
    "parse_shapes",
    "plural",
    "recover_unquoted",
    "regression_options",
    "setup_logging",
    "silence_stdout",
    "size",
    "stdout_closed",
    "summary_word",
    "warn",
    "write_report",
]

EXIT_PARITY = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3  # a bug in convert itself, never the user's input
EXIT_PIPE = 141  # stdout's reader went away (128 + SIGPIPE, what a shell reports for `yes | head -1`)


logger = logging.getLogger("convert")


# ---------------------------------------------------------------------------------------
# Output helpers
# ---------------------------------------------------------------------------------------
def err(message: str) -> None:
    """Print ``convert: error: MESSAGE`` on stderr (one line, long names cut: :func:`one_line`)."""
    click.echo(f"convert: error: {one_line(message)}", err=True)


def note(message: str) -> None:
    """Print ``convert: note: MESSAGE`` on stderr (one line, long names cut: :func:`one_line`)."""
    click.echo(f"convert: note: {one_line(message)}", err=True)


def warn(message: str) -> None:
    """Print ``convert: warning: MESSAGE`` on stderr (one line, long names cut: :func:`one_line`)."""
    click.echo(f"convert: warning: {one_line(message)}", err=True)


def stdout_closed() -> bool:
    """True when stdout is a pipe or socket whose reader has gone (POLLERR/POLLHUP), or when unsure."""
    try:
        poller = select.poll()
        poller.register(sys.__stdout__.fileno(), select.POLLOUT)  # type: ignore[union-attr]
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll() (Windows), no file descriptor
        return True


def silence_stdout() -> None:
    """Point stdout at /dev/null, so that what is still buffered flushes without another EPIPE."""
    with contextlib.suppress(AttributeError, OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno())  # type: ignore[union-attr]
        os.close(devnull)


def one_line(message: str) -> str:
    """Return ``message`` on one line: control characters (a newline inside a name) escaped, a
    run of over 240 characters without a space (a megabyte-long name from a file) cut in the middle."""
    return printable(message)


def human(n: float) -> str:
    """Return a count as ``61.9 M``."""
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{int(n)}"


def size(n: int) -> str:
    """Return a byte count in KiB, MiB or GiB."""
    if n >= 1024**3:
        return f"{n / 1024**3:.2f} GiB"
    if n >= 1024**2:
        return f"{n / 1024**2:.1f} MiB"
    return f"{n / 1024:.1f} KiB"


def summary_word(report: object, not_checked: bool = False) -> str:
    """Return the first word of a summary line: OK (passed, or not asked to check), else the verdict's
    own words (FAIL, NOT VERIFIED), or NOT CHECKED when the check asked for could not run."""
    if not_checked:
        return "NOT CHECKED"
    if report is None or report.passed:  # type: ignore[attr-defined]
        return "OK"
    return str(report.verdict)  # type: ignore[attr-defined]


def plural(n: int, word: str) -> str:
    """Return ``1 output`` / ``2 outputs``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def setup_logging(verbose: int, debug: bool) -> None:
    """Send log records to stderr at the level -v/-vv/--debug ask for."""
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
# Routes and shapes
# ---------------------------------------------------------------------------------------
def looks_like_route(arg: str) -> bool:
    """True when ``arg`` is a route (``a->b``, ``a:b``, or ``a-`` as the shell leaves ``a->b``)."""
    if "->" in arg:
        return True
    if arg.endswith("-") and formats.normalize(arg[:-1]) in formats.frontend_names():
        return True
    if ":" in arg and not os.path.exists(arg):
        left, _, right = arg.partition(":")
        return bool(left) and bool(right) and "/" not in left
    return False


def _made_by_the_shell(path: Path, st: os.stat_result) -> bool:
    """True when the redirection created ``path``, False when it truncated a file that was there.

    Creating a file also changes its folder (a new entry, at the same instant), truncating one does
    not: a folder last changed before the file was, by more than a clock tick, held it already.
    """
    try:
        folder = path.parent.stat()
    except OSError:
        return True
    return folder.st_mtime_ns >= st.st_mtime_ns - 20_000_000  # 20 ms: coarse file-system clocks


def recover_unquoted(src: str) -> str | None:
    """`convert pytorch->caffe m.pt` reaches us as 'pytorch-' with stdout redirected to ./caffe.

    When stdout is an empty regular file in the current folder named after a known destination,
    remove that file if the shell created it (not when it truncated a file that existed: that one is
    the user's), point stdout back at the terminal (stderr's target), say what happened, and
    return the destination's name.
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
            if not os.path.samestat(candidate.stat(), out_stat):
                continue
            created = _made_by_the_shell(candidate, out_stat)
            if created:
                candidate.unlink()
            sys.stdout.flush()
            os.dup2(2, 1)
        except OSError:
            continue
        dst = formats.normalize(name)
        what = (f"I removed the file '{name}' it created" if created else
                f"it truncated your existing file '{name}' (it is now empty; its content cannot be restored)")
        note(f"the shell read '>' as a redirection; {what}. Next time quote the route: '{src}->{dst}' "
             f"or use {src}:{dst}")
        return dst
    return None


def parse_route(args: list[str], src_opt: str | None, dst_opt: str | None) -> tuple[str | None, str, list[str]]:
    """Return (source or None for auto, destination, input paths)."""
    src, dst = src_opt, dst_opt
    rest = list(args)
    if rest and looks_like_route(rest[0]):
        route = rest.pop(0)
        if "->" in route:
            src, _, dst = route.partition("->")
        elif route.endswith("-") and ":" not in route:
            src = route[:-1]
            recovered = recover_unquoted(src)
            if recovered is None:
                raise UsageError(
                    f"the route '{route}' was cut by the shell, which read '>' as a redirection: "
                    f"quote the route ('{src}->onnx') or use {src}:onnx"
                )
            dst = recovered
        else:
            src, _, dst = route.partition(":")
    if not dst:
        raise UsageError("no destination format: give a route such as 'darknet->onnx' or darknet:onnx, or --to")
    if not rest:
        raise UsageError("no input model given")
    return (formats.normalize(src) if src else None), formats.normalize(dst), rest


def parse_shapes(values: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Parse ``--input-shape NAME=1,3,224,224`` values (a lone shape names the only input)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for i, text in enumerate(values):
        name, sep, dims = text.rpartition("=")
        if not sep:
            name, dims = f"input{i}" if len(values) > 1 else "", text
        try:
            shape = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip())
        except ValueError:
            raise UsageError(f"--input-shape '{text}': expected NAME=1,3,224,224") from None
        if not shape or any(d <= 0 for d in shape):
            raise UsageError(f"--input-shape '{text}': dimensions must be positive integers")
        shapes[name] = shape
    return shapes


# ---------------------------------------------------------------------------------------
# Output paths: one check for every command
# ---------------------------------------------------------------------------------------
def check_writable(path: Path, what: str, *, make_folder: bool = False) -> None:
    """Refuse, before any work, an output path that cannot be written.

    ``make_folder``: a missing folder is fine (it is made when writing, see ``api.convert``);
    otherwise it is refused. Either way the nearest existing folder must take new files.

    Raises:
        UsageError: naming the path and why.
    """
    _paths.check_writable(path, what)
    folder = path.parent
    if not make_folder and str(folder) and not folder.is_dir():
        raise UsageError(f"cannot write {what} '{path}': folder '{folder}' does not exist. "
                         "Create it or choose another path.")


def check_outputs(paths: dict[str, Path | None]) -> None:
    """``check_writable`` for each ``{what: path}`` given (None: not asked for), before any work."""
    for what, path in paths.items():
        if path is not None:
            check_writable(path, what)


def write_report(path: Path, text: str, outputs: Sequence[Path]) -> None:
    """Write a report file; a failure is an ``ExportError`` that says what was written before it."""
    try:
        path.write_text(text + "\n")
    except OSError as exc:
        done = f"converted and wrote {' + '.join(str(p) for p in outputs)}, but " if outputs else ""
        raise ExportError(f"{done}cannot write the report '{path}': {exc.strerror or exc}") from exc


# ---------------------------------------------------------------------------------------
# Options shared by several commands
# ---------------------------------------------------------------------------------------
def common_options(func):  # type: ignore[no-untyped-def]
    """-v/--verbose and --debug, which every command that works on a model takes."""
    for opt in reversed([
        click.option("-v", "--verbose", count=True, help="More detail on stderr (-vv for debug logs)."),
        click.option("--debug", is_flag=True, help="Show tracebacks and validate the graph after every pass."),
    ]):
        func = opt(func)
    return func


def regression_options(func):  # type: ignore[no-untyped-def]
    """--regression-factor and --regression-floor, as `check` and `batch` both take them.

    The defaults are convert.batch.reports' DEFAULT_FACTOR and DEFAULT_FLOOR, written out here so
    that starting the CLI does not import the batch package.
    """
    func = click.option("--regression-floor", type=float, default=1e-6, show_default=True,
                        help="Baseline errors below FLOOR count as FLOOR (float32 noise is not a regression).")(func)
    return click.option("--regression-factor", type=float, default=10.0, show_default=True,
                        help="Regression: error > FACTOR x max(baseline error, FLOOR).")(func)


def click_option(opt: formats.catalog.OptionInfo) -> click.Option:
    """Turn a format's declared option (``OptionSpec``/``OptionInfo``) into a click option."""
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
    kwargs["show_default"] = opt.default not in (None, False, "")
    return click.Option([opt.flag, opt.dest], **kwargs)  # type: ignore[arg-type]


class LazyOptionsCommand(click.Command):
    """A command whose format-specific options are added on first use (parsing, help), not at import.

    The options come from ``convert.catalog``; building them when the module is imported would
    read the catalog (and, the first time, import every format package) for ``convert formats`` too.
    """

    def __init__(self, *args: object, more_params: Callable[[], list[click.Parameter]], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._more_params: Callable[[], list[click.Parameter]] | None = more_params

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        if self._more_params is not None:
            more, self._more_params = self._more_params, None
            self.params.extend(more())
        return super().get_params(ctx)


# ---------------------------------------------------------------------------------------
# The guard: every exception becomes one line and an exit status
# ---------------------------------------------------------------------------------------
def interrupt_in(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C/SIGTERM behind ``exc``: itself, or one it was raised while handling.

    A signal that lands inside a clean-up can come out as another exception (``BufferError: cannot
    close exported pointers exist`` from a memory map closed while a view of it is alive) with the
    interrupt as its ``__context__``; that is still an interrupt, not a bug.
    """
    found = _signals.in_chain(exc, KeyboardInterrupt)
    return found if isinstance(found, KeyboardInterrupt) else None


def _is_internal_error(exc: BaseException) -> bool:
    driver = sys.modules.get("convert.ir.driver")  # loaded whenever one was raised
    return driver is not None and isinstance(exc, driver.InternalError)


def _limit_message(exc: BaseException, limit: str) -> str:
    """One line for an exception that ran into the machine's memory or disk: which, while doing what."""
    cause = _signals.in_chain(exc, MemoryError) or _signals.in_chain(exc, OSError) or exc
    if _is_internal_error(exc):
        doing = f"while converting {exc.where}"  # type: ignore[attr-defined]
    else:  # the innermost frame of convert's own code says what was being done
        frames = [f for f in _traceback_frames(cause) if "/convert/" in f[0].replace("\\", "/")]
        doing = f"in {frames[-1][2]} ({Path(frames[-1][0]).name}:{frames[-1][1]})" if frames else ""
    detail = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
    hint = "free some space there" if limit.startswith("the disk") else "free memory or raise the limit"
    return f"{limit} {doing}: {detail}. This is the machine's limit, not a bug in convert: {hint}"


def _traceback_frames(exc: BaseException) -> list[tuple[str, int, str]]:
    import traceback

    return [(f.filename, f.lineno or 0, f.name) for f in traceback.extract_tb(exc.__traceback__)]


def guard(func, ctx: click.Context, debug: bool, **kw: object) -> None:  # type: ignore[no-untyped-def]
    """Run a command's body: ConvertError -> one line, exit 2; an interrupt -> 130/143; a bug -> exit 3."""
    setup_logging(int(kw.get("verbose") or 0), debug)
    try:
        with cli_words():  # the API calls made here keep the command line's words in their errors
            code = func(ctx, **kw)
    except ConvertError as exc:
        if debug:
            raise
        err(one_line(str(exc)) or type(exc).__name__)
        ctx.exit(EXIT_USAGE)
    except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
        raise
    except BaseException as exc:  # sorted below: an interrupt, a closed pipe, or a bug
        interrupt = interrupt_in(exc)
        if interrupt is not None:
            err(f"{_signals.what(interrupt)}; nothing was written")
            ctx.exit(_signals.exit_status(interrupt))
        if not isinstance(exc, Exception):
            raise
        if isinstance(exc, BrokenPipeError) and stdout_closed():
            raise  # the reader of stdout went away: the group exits quietly
        missing = formats.missing_framework(exc)  # the user's set-up, not our bug
        if missing is not None and not debug:
            err(missing)
            ctx.exit(EXIT_USAGE)
        limit = resource_exhausted(exc)  # out of memory or disk: the machine's limit, not our bug
        if limit is not None and not debug:
            err(_limit_message(exc, limit))
            ctx.exit(EXIT_USAGE)
        if debug:
            raise
        first = (str(exc).strip().splitlines() or [""])[0]
        err(f"internal error {first}" if _is_internal_error(exc) else
            f"internal error: {type(exc).__name__}: {first}")
        err("this is a bug in convert, not a problem with your model: please report it with the command "
            "line and the traceback that --debug prints")
        ctx.exit(EXIT_INTERNAL)
    ctx.exit(code or 0)

