"""`convert batch`: a manifest of models converted and checked, with CI reports (docs/batch.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .. import _signals
from .._errors import UsageError
from ._base import check_outputs, common_options, err, guard, interrupt_in, one_line, regression_options, write_report
from ._group import cli

if TYPE_CHECKING:
    from ..batch import Event

__all__: list[str] = []


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
    from .. import batch

    manifest = batch.load_manifest(Path(str(kw["manifest"])))
    outputs = {k: Path(str(kw[k])) for k in ("junit", "report", "summary") if kw.get(k)}
    check_outputs({f"the --{key} file": path for key, path in outputs.items()})
    baseline = Path(str(kw["baseline"])) if kw.get("baseline") else None
    if kw.get("accept") and baseline is None:
        raise UsageError("--accept writes the --baseline FILE.json: give --baseline")
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
    except BaseException as exc:  # Ctrl-C or SIGTERM: the finished models' files stay
        interrupt = interrupt_in(exc)
        if interrupt is None:
            raise
        progress.close()
        what = _signals.what(interrupt)
        err(f"{what} after {progress.finished} of {count} models; their files are in {out}; no report was written")
        return _signals.exit_status(interrupt)
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
        click.echo(f"convert: note: {one_line(note)}", err=True)
    for key, path in outputs.items():
        text = {"junit": result.junit, "report": result.to_json, "summary": result.markdown}[key]()
        write_report(path, text.rstrip("\n"), [])
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        try:
            with open(step_summary, "a") as f:
                f.write(result.markdown() + "\n")
        except OSError as exc:
            click.echo(f"convert: warning: cannot append to $GITHUB_STEP_SUMMARY ({exc.strerror or exc})", err=True)
    if kw.get("accept") and baseline is not None:
        if accepted:
            write_report(baseline, batch.accepted_baseline(result, baseline), [])
            click.echo(f"convert: accepted this run as the baseline {baseline}", err=True)
        else:
            kept = "is unchanged" if baseline.exists() else "was not written"
            click.echo(f"convert: baseline NOT accepted: a model failed or was not converted; {baseline} {kept}",
                       err=True)
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
@regression_options
@click.option("--accept", is_flag=True, help="Write this run into --baseline when no model failed (accept it).")
@click.option("--model", "only", multiple=True, metavar="NAME", help="Run only this model (repeatable).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars.")
@common_options
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
    guard(_run_batch, ctx, debug, verbose=verbose, **kw)
