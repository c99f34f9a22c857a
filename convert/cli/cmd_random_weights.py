"""`convert random-weights darknet CFG -o OUT`: seeded test weights for a Darknet cfg."""

from __future__ import annotations

import time
from pathlib import Path

import click

from .. import formats
from .._errors import UsageError
from ._base import common_options, guard, size
from ._group import cli

__all__: list[str] = []


def _run_random_weights(ctx: click.Context, **kw: object) -> int:
    fmt = formats.normalize(str(kw["fmt"]))
    if fmt != "darknet":
        raise UsageError(f"random-weights supports darknet (a .cfg has no weights); not '{fmt}'")
    cfg = Path(str(kw["cfg"]))
    if not cfg.exists():
        raise UsageError(f"{cfg}: no such file")
    from ..frontends.darknet.random_weights import write_random_weights

    out = Path(str(kw["output"])) if kw.get("output") else Path.cwd() / (cfg.stem + ".weights")
    start = time.perf_counter()
    path = write_random_weights(cfg, out, seed=int(kw["seed"]))  # type: ignore[arg-type]
    click.echo(f"OK random-weights | {cfg.name} | seed {kw['seed']} | {size(path.stat().st_size)} | "
               f"{time.perf_counter() - start:.1f} s | {path}")
    return 0


@cli.command("random-weights")
@click.argument("fmt", metavar="FORMAT")
@click.argument("cfg", metavar="CFG")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Output .weights path.")
@click.option("--seed", type=int, default=0, show_default=True)
@common_options
@click.pass_context
def random_weights_cmd(ctx: click.Context, verbose: int, debug: bool, **kw: object) -> None:
    """Write seeded random weights for a Darknet cfg (sane statistics; for testing deployments)."""
    guard(_run_random_weights, ctx, debug, verbose=verbose, **kw)
