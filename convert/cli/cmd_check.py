"""`convert check`: the parity of a model pair already on disk, with an optional baseline."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from .. import formats
from .._errors import UsageError
from ._base import (
    DEFAULT_ATOL,
    DEFAULT_RTOL,
    DEFAULT_TOL,
    EXIT_PARITY,
    LazyOptionsCommand,
    check_outputs,
    common_options,
    guard,
    looks_like_route,
    parse_route,
    parse_shapes,
    plural,
    regression_options,
    summary_word,
    write_report,
)
from ._group import cli

if TYPE_CHECKING:
    from ..parity import ParityReport

__all__: list[str] = []


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
    except UsageError:
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
    accepting = bool(kw.get("accept") and kw.get("baseline"))
    check_outputs({"the report": Path(str(kw["report"])) if kw.get("report") else None,
                   "the --baseline file": Path(str(kw["baseline"])) if accepting else None})
    if not against:
        raise UsageError("convert check needs the converted model: --against OUT (repeat for several files)")
    src, dst, inputs = (None, None, args)
    if args and looks_like_route(args[0]):
        src, dst, inputs = parse_route(args, None, None)
    sources, against = _split_against([Path(p) for p in inputs], against, src, dst)
    from .. import api

    # Darknet's batch norm differs between its two forks; the converted file records the one it was
    # made with (ONNX), and --darknet-lineage names it where the file cannot (Caffe) or to check another.
    extra = {"darknet_lineage": kw["darknet_lineage"]} if kw.get("darknet_lineage") else {}
    # the language-model check's own options (a model folder: --new-tokens, --check-by), as convert takes them
    extra |= {opt.dest: kw[opt.dest] for opt in _generation_option_specs() if kw.get(opt.dest) is not None}
    if extra:  # the source's format, read once, for the options that apply to one format only
        fmt = src or formats.detect_format(sources)
        if "darknet_lineage" in extra and fmt != "darknet":
            raise UsageError("--darknet-lineage applies to a Darknet source (.cfg + .weights)")
        for opt in _generation_option_specs():
            if opt.dest in extra and fmt != "hf":
                raise UsageError(f"{opt.flag} applies to a language-model folder (hf), the generation check")
    report = api.verify(
        sources, against, format=src, to=dst,
        atol=float(kw["atol"]), rtol=float(kw["rtol"]), tol=float(kw["tol"]),  # type: ignore[arg-type]
        inputs=kw["inputs"], seed=int(kw["seed"]), locate=kw["locate"],  # type: ignore[arg-type]
        input_shapes=parse_shapes(kw["input_shape"]), device=kw["device"],  # type: ignore[arg-type]
        on=kw.get("on"),  # type: ignore[arg-type]
        **extra,
    )
    click.echo(report.table(quiet=bool(kw.get("quiet"))))
    if kw.get("report"):
        write_report(Path(str(kw["report"])), report.to_json(), [])
    regressed = _check_baseline(report, kw)
    ok = report.passed and not regressed
    notes = len(report.notes)
    word = "FAIL" if regressed and report.passed else summary_word(report)  # the verdict's word
    click.echo(f"{word} check {report.source}:{report.dest} | "
               f"{plural(len(report.outputs), 'output')} | parity {report.verdict} ({report.dest_device}"
               + (f"; {notes} NOTE{'S' if notes > 1 else ''}: see above" if notes else "") + ")"
               + _on_summary(report)
               + (f" | REGRESSED vs {kw['baseline']}" if regressed else ""))
    return 0 if ok else EXIT_PARITY


def _check_baseline(report: ParityReport, kw: dict[str, object]) -> bool:
    """Compare with --baseline (and --accept it); return True when an output regressed."""
    from .. import batch

    path = Path(str(kw["baseline"])) if kw.get("baseline") else None
    if path is None:
        if kw.get("accept"):
            raise UsageError("--accept writes the --baseline FILE.json: give --baseline")
        return False
    lines: list[str] = []
    if path.exists() or not kw.get("accept"):
        found = batch.baseline_errors(path)
        if len(found) != 1:
            raise UsageError(f"--baseline {path} holds {len(found)} models; give the --report of this one")
        lines = batch.regressions(report, next(iter(found.values())),
                                  factor=float(kw["regression_factor"]),  # type: ignore[arg-type]
                                  floor=float(kw["regression_floor"]))  # type: ignore[arg-type]
        for line in lines:
            click.echo(f"baseline: {line}")
        if not lines and not kw.get("quiet"):
            click.echo(f"baseline: no output regressed past {kw['regression_factor']:g} x the errors of {path}")
    if kw.get("accept"):
        if not report.passed:
            kept = "is unchanged" if path.exists() else "was not written"
            click.echo(f"convert: baseline NOT accepted: parity failed; {path} {kept}", err=True)
        else:
            write_report(path, report.to_json(), [])
            click.echo(f"convert: accepted this run as the baseline {path}", err=True)
            return False
    return bool(lines)


def _generation_option_specs() -> list[object]:
    """The hf frontend's options that steer its check (``--new-tokens``, ``--check-by``)."""
    return [o for o in formats.frontend_info("hf").options if o.dest in ("new_tokens", "check_by")]


def _generation_params() -> list[click.Parameter]:
    """Those options for `check`, unset by default (only an hf source may take them)."""
    out: list[click.Parameter] = []
    for opt in _generation_option_specs():
        choice = click.Choice(list(opt.choices)) if opt.choices else opt.type  # type: ignore[attr-defined]
        out.append(click.Option([opt.flag, opt.dest], type=choice, default=None,  # type: ignore[attr-defined]
                                metavar=opt.metavar or None,  # type: ignore[attr-defined]
                                help=f"{opt.help} (default: {opt.default})"))  # type: ignore[attr-defined]
    return out


@cli.command("check", cls=LazyOptionsCommand, context_settings={"max_content_width": 100},
             more_params=_generation_params)
@click.argument("args", nargs=-1, required=True, metavar="[ROUTE] SOURCE...")
@click.option("--against", multiple=True, required=True, metavar="OUT",
              help="The converted model (repeat for several files, e.g. .prototxt and .caffemodel).")
@click.option("--tol", type=float, default=DEFAULT_TOL, show_default=True,
              help="Verdict: max|ours-ref| / max|ref| <= TOL per output, with a reference that has spread.")
@click.option("--atol", type=float, default=DEFAULT_ATOL, show_default=True,
              help="Elementwise rule, reported beside the verdict.")
@click.option("--rtol", type=float, default=DEFAULT_RTOL, show_default=True,
              help="Elementwise rule, reported beside the verdict.")
@click.option("--locate/--no-locate", default=None,
              help="Compare every layer's output in both runtimes and name the first source layer the "
                   "converted model gets wrong (file:line, both values' statistics). Default: only when "
                   "parity fails.")
@click.option("--on", "on", metavar="TARGET[,TARGET]", default=None,
              help="Also check the converted file in these deployment toolchains: openvino, rknn, ncnn (tensorrt is "
                   "refused: no GPU path yet). One row per target; a target's FAIL fails the check.")
@click.option("--input-shape", multiple=True, metavar="NAME=1,3,224,224")
@click.option("--inputs", type=click.Path(path_type=Path), metavar="FILE.npz")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--report", type=click.Path(path_type=Path), metavar="FILE.json")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="Where both models run (CUDA in exact fp32, TF32 off; an ONNX source on the CPU).")
@click.option("--darknet-lineage", type=click.Choice(["auto", "original", "alexeyab"]), default=None,
              help="A Darknet source: the batch norm the model was converted with (default: what an ONNX file "
                   "records, else auto).")
@click.option("--baseline", type=click.Path(path_type=Path), metavar="FILE.json",
              help="An accepted report (--report, or a batch report of one model): fail when an output's error "
                   "grew past --regression-factor times its baseline, even within --tol.")
@regression_options
@click.option("--accept", is_flag=True, help="Write this run into --baseline when parity passed (accept it).")
@click.option("-q", "--quiet", is_flag=True, help="Only the parity table, regressions and the summary line.")
@common_options
@click.pass_context
def check_cmd(ctx: click.Context, verbose: int, debug: bool, **kw: object) -> None:
    """Check the parity of a model pair already on disk.

    \b
    convert check 'onnx->caffe' model.onnx --against model.prototxt --against model.caffemodel
    convert check yolov4.cfg yolov4.weights --against yolov4.onnx
    convert check model.pt2 --against model.onnx --locate     # the first layer that differs, even on PASS
    convert check model.pt2 --against model.onnx --on openvino,ncnn   # and in the deployment toolchains
    convert check m.onnx --against m.prototxt --against m.caffemodel --baseline accepted.json
    convert check hf:onnx llama/ --against out/model.onnx --new-tokens 32   # generation, as convert ran it
    """
    guard(_run_check, ctx, debug, verbose=verbose, **kw)


def _on_summary(report: object) -> str:
    """`` | on openvino PASS, ...`` for the summary line when the check ran on targets (``--on``)."""
    if not getattr(report, "targets", None):
        return ""
    from ..targets import summary

    return summary(report)
