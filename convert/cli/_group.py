"""The ``convert`` group: the default command is the conversion itself, and the help is laid out here.

``convert --help`` shows the common options first, the parity options next, and one line per
format naming its own options; ``convert help FORMAT`` explains those (``help.py``).
"""

from __future__ import annotations

import errno
import re
import sys

import click

from .. import __version__, _signals, formats
from ._base import EXIT_PIPE, err, silence_stdout, stdout_closed

__all__ = ["PARITY_FLAGS", "cli", "format_option_rows", "format_rows"]

HELP = """Convert a model from PyTorch, TensorFlow, TFLite, Darknet, PaddlePaddle, Caffe or ONNX to ONNX
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
  convert help [COMMAND|FORMAT]                 this help, a command's, or a format's options
"""

EPILOG = """\b
Exit status: 0 converted and parity passed (or --no-check); 1 converted but parity
failed, was NOT VERIFIED or could not run (its reference framework is not installed,
say); 2 could not convert (one line per problem, nothing written), a framework needed
to read the model that is not installed included (the line names the extra, e.g. pip
install 'convert-toolkit[torch]'); 3 internal error (a bug in convert, never your
model's fault: one line asking for a report, the traceback with --debug); 130
interrupted by Ctrl-C and 143 by SIGTERM (the message says what is on disk: nothing,
the output kept but NOT checked, or written and checked); 141 when whatever reads
stdout stops early (convert inspect m.onnx | head -1: no message, as yes | head -1).
"""

# The conversion's options shown under "Parity options" rather than with the common ones.
PARITY_FLAGS = ("tol", "atol", "rtol", "locate", "on")
_GLOBAL_OPTION = re.compile(r"-v+|--verbose|--debug")  # accepted before the command too: `convert -v inspect m.onnx`


def format_rows(kind: str, name: str) -> tuple[str, str] | None:
    """The help row of one format's options: ('darknet (source)', '--decode, --random-weights ...')."""
    info = formats.frontend_info(name) if kind == "source" else formats.exporter_info(name)
    if not info.options:
        return None
    flags = ", ".join(o.flag + (f" {o.metavar}" if o.metavar else "") for o in info.options)
    return f"{name} ({kind})", flags


def format_option_rows() -> list[tuple[str, str]]:
    """One help row per format that has options of its own, sources then destinations."""
    rows = [format_rows("source", n) for n in formats.frontend_names()]
    rows += [format_rows("destination", n) for n in formats.exporter_names()]
    return [r for r in rows if r is not None]


def write_conversion_options(ctx: click.Context, formatter: click.HelpFormatter, command: click.Command,
                             extra: list[tuple[str, str]] | None = None) -> None:
    """The conversion's options: common ones (and ``extra``, the group's own), parity, then per format."""
    sub = click.Context(command, info_name=ctx.info_name, parent=ctx.parent or ctx)
    fmt_dests = {o.dest for n in formats.frontend_names() for o in formats.frontend_info(n).options}
    fmt_dests |= {o.dest for n in formats.exporter_names() for o in formats.exporter_info(n).options}
    common: list[tuple[str, str]] = []
    parity: list[tuple[str, str]] = []
    for param in command.get_params(sub):
        if param.name in fmt_dests or param.name == "help" or not isinstance(param, click.Option):
            continue
        row = param.get_help_record(sub)
        if row is not None:
            (parity if param.name in PARITY_FLAGS else common).append(row)
    with formatter.section("Options"):
        formatter.write_dl(common + (extra or []))
    with formatter.section("Parity options"):
        formatter.write_dl(parity)
    with formatter.section("Format options (`convert help FORMAT` explains them)"):
        formatter.write_dl(format_option_rows())


class _Main(click.Group):
    """A group whose default command is the conversion itself (`convert ROUTE INPUT...`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        lead: list[str] = []
        while args and _GLOBAL_OPTION.fullmatch(args[0]):
            lead, args = [*lead, args[0]], args[1:]
        if not args:  # `convert` alone: the help, as `convert --help`
            args = ["--help"]
        elif args[0] in ("--help", "-h", "--version"):
            pass
        elif args and args[0] in self.commands:
            # -v/--debug belong to the command (`common_options`); commands without them (formats, ops) ignore them.
            takes = {p.name for p in self.commands[args[0]].params} >= {"verbose", "debug"}
            args = [args[0], *(lead if takes else []), *args[1:]]
        else:
            args = ["to", *lead, *args]
        return super().parse_args(ctx, args)

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: object) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)  # type: ignore[arg-type]
        except KeyboardInterrupt as exc:  # while the arguments are read: click would say "Aborted!", exit 1
            err(f"{_signals.what(exc)}; nothing was written")
            sys.exit(_signals.exit_status(exc))

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except OSError as exc:  # stdout's reader went away (`convert inspect m.onnx | head -1`): not an error
            if exc.errno != errno.EPIPE or not stdout_closed():
                raise
            silence_stdout()
            ctx.exit(EXIT_PIPE)
        except KeyboardInterrupt as exc:  # outside a command's guard (its options being read, say)
            err(f"{_signals.what(exc)}; nothing was written")
            ctx.exit(_signals.exit_status(exc))

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        name = ctx.find_root().info_name or "convert"
        formatter.write_usage(name, f"ROUTE INPUT... [-o OUT] [OPTIONS]  |  {name} COMMAND ...")

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # The conversion is the main command: its options, then the group's own (--version, -h) once.
        own = [r for p in self.get_params(ctx) if (r := p.get_help_record(ctx)) is not None]
        write_conversion_options(ctx, formatter, self.commands["to"], own)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands are listed in the help text ("Other commands"), with their arguments."""


@click.group(cls=_Main, help=HELP, epilog=EPILOG,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__)  # named as invoked: convert or convert-model
def cli() -> None:
    """Top-level group (see HELP)."""
