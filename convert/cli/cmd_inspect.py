"""`convert inspect MODEL...`: a model's inputs, outputs, op histogram and parameter count."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from .. import catalog, formats
from .._errors import UsageError
from ._base import LazyOptionsCommand, click_option, common_options, guard, human, one_line, parse_shapes, size
from ._group import cli

if TYPE_CHECKING:
    from ..ir import Value

__all__: list[str] = []


def _frontend_option_specs() -> list[catalog.OptionInfo]:
    seen: dict[str, catalog.OptionInfo] = {}
    for name in formats.frontend_names():
        for opt in formats.frontend_info(name).options:
            seen.setdefault(opt.flag, opt)
    return list(seen.values())


def _frontend_options_given(fmt: str, kw: dict[str, object]) -> dict[str, object]:
    """The source-format options (`--random-weights` ...) given to `inspect`, checked against ``fmt``."""
    allowed = {o.dest for o in formats.frontend_info(fmt).options}
    given: dict[str, object] = {}
    for opt in _frontend_option_specs():
        value = kw.get(opt.dest)
        if value is not None and value != (bool(opt.default) if opt.is_flag else opt.default):
            if opt.dest not in allowed:
                raise UsageError(f"{opt.flag} does not apply to {fmt} models")
            given[opt.dest] = value
    return given


def _run_inspect(ctx: click.Context, **kw: object) -> int:
    paths = [Path(p) for p in kw["models"]]  # type: ignore[attr-defined]
    fmt = formats.normalize(str(kw["fmt"])) if kw.get("fmt") else formats.detect_format(paths)
    options = _frontend_options_given(fmt, kw)
    if kw.get("input_shape"):
        options["input_shapes"] = parse_shapes(kw["input_shape"])  # type: ignore[arg-type]
    from .. import api, ir

    model = api.load(paths, format=fmt, **options)
    ir.passes.InferShapes()(model)  # output shapes for the listing; reads no weight
    stats = ir.model_stats(model)

    def shape(v: Value) -> str:
        if v.shape is None:
            return "?"
        return "x".join(str(d) for d in v.shape) or "scalar"

    # an opset is the ONNX file's own; other formats have none (their IR's is ours, not the file's)
    opset = f"  opset {model.graph.opset_imports.get('', '-')}" if fmt == "onnx" else ""
    click.echo(f"{', '.join(str(p) for p in paths)}  [{fmt}]{opset}")
    click.echo("inputs:")
    for v in model.graph.inputs:
        click.echo(f"  {one_line(v.name)}: {v.dtype.name if v.dtype is not None else '?'} {shape(v)}")
    click.echo("outputs:")
    for v in model.graph.outputs:
        click.echo(f"  {one_line(v.name)}: {v.dtype.name if v.dtype is not None else '?'} {shape(v)}")
    click.echo(f"parameters: {human(float(stats['params']))} ({int(stats['params']):,}) in "  # type: ignore[arg-type]
               f"{len(model.graph.initializers)} tensors, {size(int(stats['bytes']))}")  # type: ignore[arg-type]
    click.echo(f"nodes: {stats['nodes']}")
    ops = sorted(stats["ops"].items(), key=lambda kv: (-kv[1], kv[0]))  # type: ignore[attr-defined]
    for op, n in ops:
        click.echo(f"  {n:6d}  {op}")
    return 0


@cli.command("inspect", cls=LazyOptionsCommand, context_settings={"max_content_width": 100},
             more_params=lambda: [click_option(o) for o in _frontend_option_specs()])
@click.argument("models", nargs=-1, required=True, metavar="MODEL...")
@click.option("--from", "fmt", metavar="FORMAT", help="Source format (guessed from the files by default).")
@click.option("--input-shape", multiple=True, metavar="NAME=1,3,224,224")
@common_options
@click.pass_context
def inspect_cmd(ctx: click.Context, verbose: int, debug: bool, **kw: object) -> None:
    """Show a model's inputs, outputs, op histogram and parameter count (any source format)."""
    guard(_run_inspect, ctx, debug, verbose=verbose, **kw)
