"""`convert formats`, `convert ops FORMAT` and `convert help [COMMAND|FORMAT]`: read from the catalog.

None of them loads a model, so none imports onnx-ir, numpy or a framework: what the formats
declare comes from ``convert.catalog``, and a missing extra is found with ``find_spec``.
"""

from __future__ import annotations

import click

from .. import catalog, formats
from .._errors import ConvertError, UsageError
from ._base import EXIT_USAGE, err
from ._group import cli

__all__ = ["ops_table"]


@cli.command("formats")
def formats_cmd() -> None:
    """List the source and destination formats and the routes that work in this installation."""
    sources = formats.frontend_names()
    dests = formats.exporter_names()
    width = max(len(n) for n in [*sources, *dests]) + 2
    missing = {n: formats.missing_extras(n) for n in sources}
    click.echo("sources:")
    for name in sources:
        extra = missing[name]
        tail = ""
        if extra is not None:
            tail = f"  [{extra[1]}]" if extra[0] == "read" else f"  [the parity check {extra[1]}]"
        click.echo(f"  {name:{width}s}{formats.frontend_info(name).description}{tail}")
    click.echo("destinations:")
    missing_dest = {n: formats.missing_extras(n, destination=True) for n in dests}
    for name in dests:
        extra = missing_dest[name]
        tail = f"  [the parity check {extra[1]}]" if extra is not None else ""
        click.echo(f"  {name:{width}s}{formats.exporter_info(name).description}{tail}")
    click.echo("routes:")  # one line per source, so that the list stays readable as formats are added
    for src in sources:
        click.echo("  " + "  ".join(f"{src}->{d}{'*' if missing[src] or missing_dest[d] else ''}"
                                    for s, d in formats.routes() if s == src))
    if any(missing.values()) or any(missing_dest.values()):
        click.echo("  (* needs an extra that is not installed: see its source or destination above)")


def ops_table(fmt: str, markdown: bool = False) -> str:
    """Return the support table(s) of format ``fmt`` as text (or Markdown)."""
    name = formats.normalize(fmt)
    sections: list[tuple[str, tuple[catalog.OpRow, ...]]] = []
    if name in formats.frontend_names():
        sections.append((f"{name} frontend ({name} -> IR)", formats.frontend_info(name).ops))
    if name in formats.exporter_names():
        sections.append((f"{name} exporter (IR -> {name})", formats.exporter_info(name).ops))
    if not sections:
        raise UsageError(f"unknown format '{fmt}'. Known: {', '.join(formats.frontend_names())}")
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
    except ConvertError as exc:
        err(str(exc))
        ctx.exit(EXIT_USAGE)


def _format_help(name: str) -> str:
    """`convert help darknet`: what the format reads or writes, and each of its options."""
    formatter = click.HelpFormatter(max_width=100)
    for kind, names, info_of in (("source", formats.frontend_names(), formats.frontend_info),
                                 ("destination", formats.exporter_names(), formats.exporter_info)):
        if name not in names:
            continue
        info = info_of(name)
        files = ", ".join(info.suffixes) if kind == "source" else ", ".join((info.suffix, *info.companions))
        extra = formats.missing_extras(name, destination=kind == "destination")
        with formatter.section(f"{name} as a {kind}"):
            formatter.write_text(info.description)
            formatter.write_text(f"Files: {files}")
            if extra is not None:
                formatter.write_text(("Not installed: " if extra[0] == "read" else "The parity check ") + extra[1])
            rows = [click_row for o in info.options if (click_row := _option_row(o)) is not None]
            if rows:
                formatter.write_paragraph()
                formatter.write_dl(rows)
            else:
                formatter.write_text("No options of its own.")
    return formatter.getvalue().rstrip("\n")


def _option_row(opt: catalog.OptionInfo) -> tuple[str, str] | None:
    """The help row of one format option, as click would print it."""
    from ._base import click_option

    option = click_option(opt)
    return option.get_help_record(click.Context(click.Command("x")))


@cli.command("help")
@click.argument("command", required=False, metavar="[COMMAND|FORMAT]")
@click.pass_context
def help_cmd(ctx: click.Context, command: str | None) -> None:
    """Show this help, a command's (`convert help inspect`) or a format's options (`convert help darknet`)."""
    root = ctx.find_root()
    if command is None:
        click.echo(root.get_help())
        return
    cmd = cli.get_command(root, command)
    if cmd is not None and command != "to":
        click.echo(cmd.get_help(click.Context(cmd, info_name=command, parent=root)))
        return
    name = formats.normalize(command)
    if name in formats.frontend_names() or name in formats.exporter_names():
        click.echo(_format_help(name))
        return
    shown = ", ".join(n for n, c in cli.commands.items() if not c.hidden)
    fmts = ", ".join(dict.fromkeys(formats.frontend_names() + formats.exporter_names()))
    err(f"no command or format '{command}'; the commands are: {shown}; the formats: {fmts}")
    ctx.exit(EXIT_USAGE)
