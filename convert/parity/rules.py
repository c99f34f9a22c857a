"""The rules of the verdict, one small function each, applied in order by one driver.

docs/verdict.md lists these rules in the order of ``RULES``, each with the function that applies it,
and ``tests/parity/test_verdict_rules.py`` checks that the two agree. A rule is a ``Rule``: its name
(the doc's), ``when`` (why it does not apply to a check, '' when it does), ``judge`` (what it does to
the outputs' results) and ``settle`` (what it does to the report's verdict). ``judge_outputs`` runs the
judges in order on a ``Case``, the state of one check once both sides have run; ``settle_report``
folds the outputs' verdicts and then each rule's ``settle`` into the report's verdict. A new regime
is one more ``Rule`` in ``RULES`` and one more bullet in docs/verdict.md.

The arithmetic of each rule (error over scale, the float64 arbiter, the pairing of rows) lives in
``compare.py``; the runtimes say what they can offer (``run_float64``, ``set_outputs``...); this
module decides which rule applies, and in what order.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .compare import (
    FLOAT32_ARBITER_MIN_TOL,
    FLOAT32_LIMIT,
    FLOAT64_MARGIN,
    OutputResult,
    ParityReport,
    SetItem,
    arbitrate_float64,
    arbitrate_half,
    arbitrate_second_float32,
    arbitrate_set_float64,
    arbitrate_set_second_float32,
    compare_one,
    compare_sets,
    judge_set_integers,
    mark_inexact,
    mark_unarbitrated,
    mark_undecided,
    needs_float64,
    no_spread,
    only_padding,
    set_pair_keys,
)
from .runtime import Runtime

__all__ = [
    "RULES",
    "Case",
    "Rule",
    "compare_as_sets",
    "compare_outputs",
    "draw_again",
    "judge_outputs",
    "mark_reference_gaps",
    "measure_in_steps",
    "outputs_verdict",
    "settle_by_float64",
    "settle_by_half",
    "settle_by_second_float32",
    "settle_frozen",
    "settle_refusals",
    "settle_report",
    "settle_targets",
]

logger = logging.getLogger(__name__)

#: A group of outputs compared as a set: indices into ``Case.pairs``, and their items.
SetGroup = tuple[list[int], list[SetItem]]


@dataclass(slots=True)
class Left:
    """What the float64 rule left unjudged, for the second float32 rule: the results before it
    (``asked``), the outputs and set members it did not judge, and why."""

    asked: list[OutputResult]
    outputs: list[int]
    sets: list[tuple[list[int], list[SetItem], set[int]]]
    why: str


@dataclass(slots=True)
class Case:
    """One check as the rules see it, once both sides have run on the same inputs.

    ``pairs``: each (reference output, converted output), in the report's order. ``redraw``: runs
    the source on a second seeded draw (None: the inputs were not seeded; returns None where the
    source cannot run on it). ``release``: frees the converted model's runtime (its memory is the
    arbiters'), or None where the caller keeps it open.
    """

    src: Runtime
    dst: Runtime
    feeds: Mapping[str, np.ndarray]
    ref: Mapping[str, np.ndarray]
    got: Mapping[str, np.ndarray]
    pairs: list[tuple[str, str]]
    report: ParityReport
    precision: str = "fp32"
    redraw: Callable[[], Mapping[str, np.ndarray] | None] | None = None
    release: Callable[[], None] | None = None
    #: Filled by the rules as they go: the groups compared as sets, what the float64 rule left.
    set_groups: list[SetGroup] = field(default_factory=list)
    left: Left | None = None

    @property
    def tol(self) -> float:
        """The tolerance of the check (the report's)."""
        return self.report.tol


def _applies(case: Case) -> str:
    return ""


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule of the verdict (docs/verdict.md, under the same ``name``).

    ``when(case)``: '' when the rule applies to the check, else why not (said in the debug log).
    ``judge(case)``: rewrites ``case.report.outputs`` (or the report's notes). ``settle(report,
    verdict)``: the report's verdict after this rule, given the verdict before it. ``runs_source``:
    the rule may run the source again, so the converted model's runtime is released before it.
    """

    name: str
    judge: Callable[[Case], None] | None = None
    when: Callable[[Case], str] = _applies
    settle: Callable[[ParityReport, str], str] | None = None
    runs_source: bool = False

    @property
    def functions(self) -> list[str]:
        """The names of the functions that apply this rule (as docs/verdict.md names them)."""
        return [f.__name__ for f in (self.judge, self.settle) if f is not None]


# -- Scale -------------------------------------------------------------------------------------------
def compare_outputs(case: Case) -> None:
    """Compare each output pair by its error relative to the reference's scale (``compare_one``: a
    reference without spread, or empty, is NOT VERIFIED; NaN on both sides agrees, on one side
    FAILs; an output computed from random draws has its shape compared only)."""
    rep = case.report
    randoms: Mapping[str, str] = getattr(case.dst, "random_outputs", {})
    rep.outputs = [compare_one(r, case.ref[r], g, case.got[g], rep.atol, rep.rtol, rep.tol, random=randoms.get(g, ""))
                   for r, g in case.pairs]


# -- Quantized ---------------------------------------------------------------------------------------
def _steps(case: Case) -> Mapping[str, float]:
    return getattr(case.src, "output_steps", {})  # quantized references: the step of each output


def _quantized(case: Case) -> str:
    steps = _steps(case)
    return "" if any(float(steps.get(r, 0.0)) > 0 for r, _ in case.pairs) else "no quantized reference output"


def measure_in_steps(case: Case) -> None:
    """Measure each quantized output again in its quantization steps, with the reference's second
    kernel path as the measure of what rounding costs (``compare_one``'s ``step``, ``spread``,
    ``second``: the runtime's ``output_steps``, ``output_spread``, ``output_second``)."""
    rep = case.report
    steps = _steps(case)
    spreads: Mapping[str, float] = getattr(case.src, "output_spread", {})  # how far its two kernel paths are apart
    seconds: Mapping[str, np.ndarray] = getattr(case.src, "output_second", {})  # ... and the second one's outputs
    randoms: Mapping[str, str] = getattr(case.dst, "random_outputs", {})
    for i, (r, g) in enumerate(case.pairs):
        step = float(steps.get(r, 0.0))
        if step > 0:
            rep.outputs[i] = compare_one(r, case.ref[r], g, case.got[g], rep.atol, rep.rtol, rep.tol, step=step,
                                         spread=float(spreads.get(r, 0.0)), random=randoms.get(g, ""),
                                         second=seconds.get(r))


# -- Sets --------------------------------------------------------------------------------------------
def _has_sets(case: Case) -> str:
    return "" if getattr(case.dst, "set_outputs", {}) else "no output comes out of an NMS, top-k or nonzero"


def compare_as_sets(case: Case) -> None:
    """Compare again, as sets, the outputs whose rows come out of an NMS, top-k or nonzero with a
    count the graph computes (``set_outputs`` and ``row_axes`` of the converted model's runtime),
    where the comparison in order did not pass: outputs with the same row count on both sides are
    paired together (a detector's boxes, scores, labels and masks). The groups compared so go to
    ``case.set_groups``, for the float64 rule."""
    report, pairs, ref, got = case.report, case.pairs, case.ref, case.got
    origins: Mapping[str, str] = getattr(case.dst, "set_outputs", {})
    axes: Mapping[str, int] = getattr(case.dst, "row_axes", {}) if origins else {}
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (r, g) in enumerate(pairs):
        axis = axes.get(g)
        if g not in origins or axis is None or report.outputs[i].random:
            continue
        a, b = np.asarray(ref[r]), np.asarray(got[g])
        if a.ndim != b.ndim or axis >= a.ndim:
            continue
        groups.setdefault((a.shape[axis], b.shape[axis]), []).append(i)
    for members in groups.values():
        items = [SetItem(pairs[i][0], ref[pairs[i][0]], pairs[i][1], got[pairs[i][1]], axes[pairs[i][1]])
                 for i in members]
        # integers (a detector's labels) are judged exactly: one off in order is compared as a set too
        inexact_ints = any(np.asarray(it.ref).dtype.kind in "iu" and report.outputs[i].max_abs > 0
                           for i, it in zip(members, items, strict=True))
        if all(report.outputs[i].passed for i in members) and not only_padding(items) and not inexact_ints:
            continue
        origin = origins[pairs[members[0]][1]]
        results = judge_set_integers(items, compare_sets(items, origin, report.atol, report.rtol, report.tol))
        for i, result in zip(members, results, strict=True):
            report.outputs[i] = result
        case.set_groups.append((members, items))


# -- Float64 -----------------------------------------------------------------------------------------
def _pending(case: Case) -> tuple[list[int], list[SetGroup]]:
    """The outputs (and set groups) that missed tol on their error alone: what an arbiter may judge."""
    outs, pairs, ref = case.report.outputs, case.pairs, case.ref
    pending = [i for i, (r, _) in enumerate(pairs) if needs_float64(outs[i], ref[r])]
    pending_sets = [(members, items) for members, items in case.set_groups
                    if any(needs_float64(outs[i], ref[pairs[i][0]], as_set=True) for i in members)]
    return pending, pending_sets


def _float64_applies(case: Case) -> str:
    if case.precision != "fp32":
        return f"a {case.precision} model (the half-precision rule judges it)"
    if getattr(case.src, "run_float64", None) is None:
        return f"{case.src.name} has no float64 run"
    pending, pending_sets = _pending(case)
    return "" if pending or pending_sets else "no output missed tol on its error alone"


def settle_by_float64(case: Case) -> None:
    """Let a float64 run of the source judge the outputs that missed tol on their error alone
    (``run_float64``; PyTorch and TensorFlow offer one): float32 rounding in a deep net may exceed
    tol (``compare.arbitrate_float64``). Outputs compared as sets are judged on their paired rows
    (``compare.arbitrate_set_float64``). The float64 run is asked only for the outputs to judge and
    those their rows are paired by (``needed``, where the runtime takes it). What it does not judge
    goes to ``case.left``, for the second float32 rule."""
    report, pairs, ref, got, tol = case.report, case.pairs, case.ref, case.got, case.tol
    run64 = getattr(case.src, "run_float64", None)
    if run64 is None:  # ``when`` says so
        return
    pending, pending_sets = _pending(case)
    needed = {pairs[i][0] for i in pending}
    for members, items in pending_sets:
        keys = set(set_pair_keys(items))
        needed |= {pairs[i][0] for k, i in enumerate(members)
                   if k in keys or needs_float64(report.outputs[i], ref[pairs[i][0]], as_set=True)}
    asked = list(report.outputs)
    ref64 = _call_float64(run64, case.feeds, needed)
    if ref64 is not None:
        for i in pending:
            if pairs[i][0] in ref64:
                report.outputs[i] = arbitrate_float64(report.outputs[i], ref[pairs[i][0]], got[pairs[i][1]],
                                                      ref64[pairs[i][0]], tol)
        for members, items in pending_sets:
            judged = arbitrate_set_float64(items, [report.outputs[i] for i in members],
                                           [ref64.get(pairs[i][0]) for i in members], tol)
            for i, result in zip(members, judged, strict=True):
                report.outputs[i] = result
    # what the float64 run did not judge (the arbiters return the result itself when they cannot)
    left = [i for i in pending if report.outputs[i] is asked[i]]
    left_sets = [(members, items, {k for k, i in enumerate(members) if report.outputs[i] is asked[i]
                                   and needs_float64(asked[i], ref[pairs[i][0]], as_set=True)})
                 for members, items in pending_sets]
    left_sets = [group for group in left_sets if group[2]]
    why = (str(getattr(case.src, "float64_unavailable", "") or "its float64 run failed") if ref64 is None
           else "its float64 run cannot be compared with this output (another row count, non-finite values, "
                f"or a value it stores in float32, too coarse at tol < {FLOAT32_ARBITER_MIN_TOL:g})")
    case.left = Left(asked, left, left_sets, why)


def _call_float64(run64: Callable[..., dict[str, np.ndarray] | None], feeds: Mapping[str, np.ndarray],
                  needed: set[str]) -> dict[str, np.ndarray] | None:
    """Call a runtime's ``run_float64``, telling it which outputs are ``needed`` where it takes them."""
    try:
        takes = "needed" in inspect.signature(run64).parameters
    except (TypeError, ValueError):
        takes = False
    return run64(feeds, needed=needed) if takes else run64(feeds)


# -- Second float32 run ------------------------------------------------------------------------------
def _left_by_float64(case: Case) -> str:
    if case.left is None:
        return "the float64 rule did not run"
    return "" if case.left.outputs or case.left.sets else "the float64 run judged every output it was asked for"


def settle_by_second_float32(case: Case) -> None:
    """Where the float64 run could not judge an output, let the source's second float32 run on other
    kernels measure rounding (``run_second_float32``, ``compare.arbitrate_second_float32``); where
    that is missing too or agrees exactly with the first, a runtime that offers it marks the output
    NOT VERIFIED with the reason (``compare.mark_unarbitrated``), never FAIL for the want of an
    arbiter, unless its error is past ``FLOAT64_MARGIN`` x ``FLOAT32_LIMIT`` x tol (past anything
    the float64 rule passes as rounding: the conversion's); for another runtime the verdict stands
    and the note says that no float64 run judged it."""
    report, pairs, ref, got, tol = case.report, case.pairs, case.ref, case.got, case.tol
    if case.left is None:  # the float64 rule did not run (``when`` says so)
        return
    asked, left, left_sets, why = case.left.asked, case.left.outputs, case.left.sets, case.left.why
    run2 = getattr(case.src, "run_second_float32", None)
    ref2 = _second_float32(run2, case.feeds) if run2 is not None else None
    if ref2 is not None:
        path = str(getattr(case.src, "second_float32_path", "a second float32 run"))
        for i in left:
            if pairs[i][0] in ref2:
                report.outputs[i] = arbitrate_second_float32(report.outputs[i], ref[pairs[i][0]], got[pairs[i][1]],
                                                             ref2[pairs[i][0]], tol, path, why)
        for members, items, only in left_sets:
            judged = arbitrate_set_second_float32(items, [report.outputs[i] for i in members],
                                                  [ref2.get(pairs[i][0]) for i in members], tol, path, why, only)
            for i, result in zip(members, judged, strict=True):
                report.outputs[i] = result
    still = [i for i in left if report.outputs[i] is asked[i]]
    still += [members[k] for members, _, only in left_sets for k in sorted(only)
              if report.outputs[members[k]] is asked[members[k]]]
    for i in still:
        out = report.outputs[i]
        if run2 is None or out.rel_to_scale > FLOAT64_MARGIN * FLOAT32_LIMIT * tol:
            # no measure of rounding offered (the verdict stands), or an error past anything the
            # float64 rule ever passes as rounding: the conversion's; said
            beyond = "" if run2 is None else (f"; past {FLOAT64_MARGIN * FLOAT32_LIMIT:g} x tol, beyond what "
                                              "rounding ever passes for, so the conversion's")
            report.outputs[i] = dataclasses.replace(out, note=(out.note + "; " if out.note else "")
                                                    + f"not arbitrated: no float64 run of the source ({why}){beyond}")
        else:
            second = ("its second float32 run could not run" if ref2 is None
                      else "its second float32 run gives the same values or cannot be paired")
            report.outputs[i] = mark_unarbitrated(out, f"no float64 run of the source ({why}); {second}")


def _second_float32(run2: Callable[..., dict[str, np.ndarray] | None],
                    feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    try:
        return run2(feeds)
    except Exception:  # the second path failed to run: no measure from it, the verdict says so
        logger.debug("the second float32 run failed", exc_info=True)
        return None


# -- Half precision ----------------------------------------------------------------------------------
def _half(case: Case) -> str:
    return "" if case.precision != "fp32" else "a float32 model"


def settle_by_half(case: Case) -> None:
    """Judge a half-precision model's outputs that missed tol on their error alone against the
    source's own run in that precision (``run_half``; PyTorch has one), ``compare.arbitrate_half``."""
    report, pairs, ref = case.report, case.pairs, case.ref
    report.precision = case.precision
    pending = [i for i, (r, _) in enumerate(pairs) if needs_float64(report.outputs[i], ref[r])]
    if not pending:
        return
    run_half = getattr(case.src, "run_half", None)
    ref_half = run_half(case.feeds, case.precision) if run_half is not None else None
    for i in pending:
        r, _ = pairs[i]
        report.outputs[i] = arbitrate_half(report.outputs[i], ref[r], None if ref_half is None else ref_half.get(r),
                                           case.precision)


# -- Reference gaps (Darknet) ------------------------------------------------------------------------
def _gaps(case: Case) -> str:
    src = case.src
    offered = (getattr(src, "formula_gap", None) is not None or getattr(src, "explain_verdict", None) is not None
               or getattr(src, "undecided", None) is not None)
    return "" if offered else f"{src.name} computes every output as the source does"


def mark_reference_gaps(case: Case) -> None:
    """Mark what the reference cannot compute as the source does: every output that missed tol while
    the reference cannot express the conversion's function on these weights (``formula_gap``:
    ``compare.mark_inexact``), and the outputs it cannot decide whatever the numbers (``undecided``,
    after ``explain_verdict``, which may add a note: ``compare.mark_undecided``). Darknet's
    references do: a batch norm of the other lineage, a layer OpenCV ignores, NaN from negative
    variances, an assumed lineage whose forks differ on these weights."""
    src, report, pairs = case.src, case.report, case.pairs
    gap = str(getattr(src, "formula_gap", "") or "")  # the reference cannot compute the target exactly
    if gap:
        report.outputs = [mark_inexact(o, gap) for o in report.outputs]
    explain = getattr(src, "explain_verdict", None)  # what else the reference can tell (Darknet's lineage)
    if explain is not None:
        said = explain(case.feeds, {r: case.got[g] for r, g in pairs}, case.tol, report.passed)
        if said:
            report.notes.append(said)
    undecided = getattr(src, "undecided", {})  # outputs the reference cannot decide, with the reason
    report.outputs = [mark_undecided(o, *undecided[r]) if r in undecided else o
                      for o, (r, _) in zip(report.outputs, pairs, strict=True)]


# -- Another draw ------------------------------------------------------------------------------------
def _flat(case: Case) -> list[str]:
    """The reference outputs NOT VERIFIED for want of spread (not empty ones)."""
    return [r for o, (r, _) in zip(case.report.outputs, case.pairs, strict=True)
            if o.verdict == "NOT VERIFIED" and o.degenerate and "empty on these inputs" not in o.note]


def _redraw(case: Case) -> str:
    if case.redraw is None:
        return "the inputs were not seeded"
    return "" if _flat(case) else "every output has a spread"


def draw_again(case: Case) -> None:
    """Draw the seeded inputs once more, only when an output is NOT VERIFIED for want of spread, and
    record those without spread on that draw too (``report.constant_anyway``): the model's own
    output is constant or near zero (zero or random weights), not the inputs' doing. No verdict
    changes; the hint below the table does."""
    if case.redraw is None:  # ``when`` says so
        return
    flat = _flat(case)
    again = case.redraw()
    if again is None:  # no second opinion: the hint stays the inputs'
        return
    case.report.constant_anyway = [r for r in flat if r in again and no_spread(np.asarray(again[r]))]


# -- Frozen decisions, refusals, deployment targets: the report's verdict ---------------------------
def settle_frozen(report: ParityReport, verdict: str) -> str:
    """A file whose conversion froze decisions on tensor values to the example's (PyTorch's
    ``--freeze-data-branches``, ``report.frozen``) passes as "PASS on the example's branch", never a
    plain PASS; on inputs other than that example (``report.on_example``) a difference is NOT
    VERIFIED, not FAIL: it may be the frozen decision."""
    if not report.frozen:
        return verdict
    if verdict == "PASS":
        return "PASS on the example's branch"
    if not report.on_example and report.outputs:  # inputs the file was not built for
        return "NOT VERIFIED"
    return verdict


def settle_refusals(report: ParityReport, verdict: str) -> str:
    """A file its own runtime refused (real Caffe; ``report.target_refused``, ``source_refused``),
    run by a stand-in (OpenCV DNN), is never a PASS: a converted file Caffe refuses FAILs, unless
    the refusal is a limit of this installation (``refusal_is_ours``: NOT VERIFIED); a refused
    source is NOT VERIFIED (FAIL where an output fails), and so is a check where nothing could be
    compared because the stand-in failed too."""
    if report.target_refused and not report.refusal_is_ours:
        return "FAIL"
    if (report.source_refused or report.target_refused) and (verdict.startswith("PASS") or not report.outputs):
        return "NOT VERIFIED"
    return verdict


def settle_targets(report: ParityReport, verdict: str) -> str:
    """The converted file checked in deployment toolchains (``--on``, ``report.targets``, each by
    these same rules): a target's FAIL fails the report, and a pass needs every target's pass."""
    if any(t.verdict == "FAIL" for t in report.targets):
        return "FAIL"
    if verdict.startswith("PASS") and not all(t.passed for t in report.targets):
        return "NOT VERIFIED"
    return verdict


#: The rules, in the order they are applied and the order docs/verdict.md gives them.
RULES: tuple[Rule, ...] = (
    Rule("Scale", judge=compare_outputs),
    Rule("Quantized", judge=measure_in_steps, when=_quantized),
    Rule("Sets", judge=compare_as_sets, when=_has_sets),
    Rule("Float64", judge=settle_by_float64, when=_float64_applies, runs_source=True),
    Rule("No float64 run", judge=settle_by_second_float32, when=_left_by_float64, runs_source=True),
    Rule("Half precision", judge=settle_by_half, when=_half, runs_source=True),
    Rule("Reference gaps", judge=mark_reference_gaps, when=_gaps, runs_source=True),
    Rule("Another draw", judge=draw_again, when=_redraw, runs_source=True),
    Rule("Frozen decisions", settle=settle_frozen),
    Rule("Caffe targets and sources", settle=settle_refusals),
    Rule("Deployment targets", settle=settle_targets),
)


def judge_outputs(case: Case, rules: Sequence[Rule] = RULES) -> None:
    """Apply each rule's ``judge`` to ``case``, in order, where its ``when`` lets it. The converted
    model's runtime is released (``case.release``) before the first rule that may run the source
    again: that run needs the memory (Keypoint R-CNN's float64 run: 0.6 GB)."""
    released = False
    for rule in rules:
        if rule.runs_source and not released and case.release is not None:
            case.release()
            released = True
        if rule.judge is None:
            continue
        why_not = rule.when(case)
        if why_not:
            logger.debug("verdict rule %r does not apply: %s", rule.name, why_not)
            continue
        rule.judge(case)


def outputs_verdict(outputs: Sequence[OutputResult]) -> str:
    """The verdict of the outputs alone: PASS when every output passed (and there is one), NOT
    VERIFIED when none failed, else FAIL (no output compared is a FAIL until a rule says why)."""
    if outputs and all(o.passed for o in outputs):
        return "PASS"
    if outputs and all(o.verdict != "FAIL" for o in outputs):
        return "NOT VERIFIED"
    return "FAIL"


def settle_report(report: ParityReport, rules: Sequence[Rule] = RULES) -> str:
    """The report's verdict: the outputs' (``outputs_verdict``), then each rule's ``settle`` in order."""
    verdict = outputs_verdict(report.outputs)
    for rule in rules:
        if rule.settle is not None:
            verdict = rule.settle(report, verdict)
    return verdict
