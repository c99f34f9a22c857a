"""Compare two runtimes' outputs: max abs/rel error, error relative to scale, cosine, verdict.

An output passes when its error relative to the output's scale, ``max |ours - ref| / max |ref|``,
is at most ``tol`` (default 1e-4). This is the criterion float32 arithmetic allows in a deep net:
rounding grows with depth and with the output's magnitude, so an element near zero may differ
relatively much while the output is right; numpy's elementwise rule ``|ours - ref| <= atol +
rtol * |ref|`` fails such correct conversions on one element. That rule is still computed and
reported beside the verdict (``allclose``, with the count of elements outside it).

A reference output with no real spread (all values near zero, or constant) proves nothing: the
output is then *not verified* and does not pass, whatever the error, so a model whose random
inputs saturate it is never called PASS. Give real inputs with ``--inputs``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from .._errors import printable, shown

if TYPE_CHECKING:
    from convert.targets.base import TargetResult

    from .locate import Location

__all__ = [
    "OutputResult",
    "ParityReport",
    "SetItem",
    "arbitrate_float64",
    "arbitrate_half",
    "arbitrate_second_float32",
    "arbitrate_set_float64",
    "arbitrate_set_second_float32",
    "compare_sets",
    "judge_set_integers",
    "mark_inexact",
    "mark_unarbitrated",
    "mark_undecided",
    "match_outputs",
    "nan_agreement_note",
    "needs_float64",
    "no_spread",
    "nonfinite_agreeing_diff",
    "only_padding",
    "set_pair_keys",
]


@dataclass(slots=True)
class OutputResult:
    """The comparison of one output."""

    name: str
    ref_name: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    rel_to_scale: float
    cosine: float
    ref_scale: float
    ref_std: float
    passed: bool
    note: str = ""
    allclose_bad: int = 0
    degenerate: bool = False
    differs: bool = False  # clearly different whatever the reference's spread (shape, NaN, error)
    #: The element with the largest absolute error: its index and both values (for CI messages).
    worst_index: tuple[int, ...] = ()
    worst_ref: float = 0.0
    worst_got: float = 0.0
    #: The reference's own implementations disagree on this output by more than the allowance (a
    #: quantized output whose rounding the net amplifies), and ours is within that disagreement.
    unstable: bool = False
    #: The converted model computes this output from random draws (ONNX RandomNormal...): the two
    #: runtimes' generators differ, so only its shape was compared.
    random: bool = False
    #: The source's own float32 run is farther than ``FLOAT32_LIMIT * tol`` from its float64 run on
    #: this output, and ours no farther: the net amplifies rounding too much to judge a conversion.
    amplified: bool = False
    #: Passed by the float64 arbitration (``arbitrate_float64``), not within ``tol`` of the reference.
    by_float64: bool = False
    #: A half-precision model's output judged against the source's own half-precision run
    #: (``arbitrate_half``): passed by that rule.
    by_half: bool = False
    #: ... or not judged: the source has no half-precision run to measure what half costs.
    half_unjudged: bool = False
    #: The reference cannot compute the function the conversion targets exactly (a Darknet batch norm
    #: whose variances its own formula cannot express): an error beyond ``tol`` is not ours to blame.
    ref_inexact: bool = False
    #: Rows after an NMS, top-k or nonzero compared as a set (``compare_sets``), not in order.
    as_set: bool = False
    #: ... whose reference has a constant float output (saturated scores): which rows are kept is
    #: decided by ties, differently in each runtime, so rows that do not pair prove nothing.
    tied: bool = False
    #: Why the reference cannot decide this output whatever the numbers (it cannot express a layer
    #: the output is computed from; the source leaves open which function is meant): NOT VERIFIED
    #: with this reason, never PASS or FAIL (``mark_undecided``).
    undecided: str = ""
    #: Missed ``tol`` on its error alone, and nothing measured what float32 rounding costs the
    #: source here (no float64 run, and its second float32 path gave the same values): why. NOT
    #: VERIFIED, never a FAIL for the want of an arbiter.
    unarbitrated: str = ""
    #: Passed by the source's second float32 path (``arbitrate_second_float32``): no float64 run.
    by_second: bool = False

    @property
    def verdict(self) -> str:
        """PASS, FAIL, or NOT VERIFIED (a degenerate, unstable, amplified or random output whose shape agrees)."""
        if self.passed:
            return "PASS"
        unjudged = (self.degenerate or self.unstable or self.random or self.amplified or self.half_unjudged
                    or self.ref_inexact or self.tied or bool(self.undecided) or bool(self.unarbitrated))
        return "NOT VERIFIED" if unjudged and not self.differs else "FAIL"


@dataclass(slots=True)
class ParityReport:
    """What ran, on which inputs, and how each output compared."""

    source: str
    source_runtime: str
    source_device: str
    dest: str
    dest_runtime: str
    dest_device: str
    atol: float
    rtol: float
    inputs: dict[str, list[int]] = field(default_factory=dict)
    tol: float = 1e-4
    outputs: list[OutputResult] = field(default_factory=list)
    seed: int | None = 0
    notes: list[str] = field(default_factory=list)  # what the references could not verify
    #: How the references were run where it is not the obvious way (weights matched to a formula,
    #: inputs drawn from an image's range): said, not counted as notes.
    method: list[str] = field(default_factory=list)
    location: Location | None = None  # the first layer out of tolerance (convert check --locate)
    precision: str = "fp32"  # the converted model's compute precision (``--precision``)
    #: The runtime the converted file is for refused it (another runtime computed the outputs): why.
    target_refused: str = ""
    #: ... and the refusal is a limit of what is installed here, not of the target: NOT VERIFIED, not FAIL.
    refusal_is_ours: bool = False
    #: The source's own runtime refused the source (its Caffe; another runtime, or none, stood in
    #: as the reference): why. Never PASS then: NOT VERIFIED, or FAIL where an output fails.
    source_refused: str = ""
    #: Outputs without spread on a second seeded draw too: constant whatever the input (their weights').
    constant_anyway: list[str] = field(default_factory=list)
    #: The converted file checked in deployment toolchains (``--on``): one ``convert.targets.base.TargetResult``
    #: per target and precision; a target's FAIL fails the report like any output's.
    targets: list[TargetResult] = field(default_factory=list)
    #: Decisions on tensor values the conversion froze to the example's outcome (PyTorch's
    #: ``--freeze-data-branches``), each 'file:line `code` (the example: True)': the file holds only
    #: for inputs that decide alike, so a pass is "PASS on the example's branch", never a plain PASS.
    frozen: list[str] = field(default_factory=list)
    #: ... and the inputs compared are that example (elsewhere a difference may be a frozen decision:
    #: NOT VERIFIED, not FAIL).
    on_example: bool = False

    @property
    def passed(self) -> bool:
        """True when every output passed (and there was at least one), in the runtime the file is for,
        and no rule of the verdict says otherwise (``verdict`` is a PASS)."""
        return self.verdict.startswith("PASS")

    @property
    def verdict(self) -> str:
        """PASS (or "PASS on the example's branch"); NOT VERIFIED when no output failed but some could
        not be judged (or the target runtime is not installed here); else FAIL (an output, or the
        target runtime refusing the file): the outputs' verdicts, then each rule's (``rules.settle_report``)."""
        from .rules import settle_report

        return settle_report(self)

    def to_json(self) -> str:
        """Return the report as JSON (for ``--report``)."""
        data = asdict(self)
        data["passed"] = self.passed
        data["verdict"] = self.verdict
        data["location"] = self.location.to_dict() if self.location is not None else None
        data["targets"] = [t.to_dict() for t in self.targets]
        data["criterion"] = "max|ours-ref| / max|ref| <= tol, reference spread required"
        for item, out in zip(data["outputs"], self.outputs, strict=True):
            item["verdict"] = out.verdict
            for key, value in item.items():  # strict JSON: a random output's errors, a shape mismatch's
                if isinstance(value, float) and not math.isfinite(value):
                    item[key] = None
        return json.dumps(data, indent=2, default=_json_default)

    def table(self, *, quiet: bool = False) -> str:
        """Return a plain-text table, one row per output, and the lines that say what it means.

        An output's note longer than ``_NOTE_INLINE`` characters is numbered in its row and said
        below the table, so that the table keeps its width. ``quiet``: the table alone (``-q``).
        """
        head = (f"parity: {self.source} on {self.source_runtime} [{self.source_device}]  vs  "
                f"{self.dest} on {self.dest_runtime} [{self.dest_device}]"
                + (f"  ({self.precision} model vs the float32 source)" if self.precision != "fp32" else ""))
        cols = ["output", "shape", "max abs", "max rel", "err/scale", "cosine", "allclose", "result"]
        below: list[str] = []  # the long notes, numbered
        rows = [[_cell(o.name), "x".join(map(str, o.shape)) or "scalar", *(["-"] * 5 if o.random else [
                 f"{o.max_abs:.3g}", f"{o.max_rel:.3g}", f"{o.rel_to_scale:.3g}", f"{o.cosine:.6f}",
                 "yes" if not o.allclose_bad else f"no ({o.allclose_bad} el.)"]),
                 _result_cell(o, below)] for o in self.outputs]
        widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]
        line = "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))
        out = [head, line, "  ".join("-" * w for w in widths)]
        out += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
        out += below
        if quiet:
            return "\n".join(printable(line).rstrip() for line in out)
        verdict = replace(self, targets=[]).verdict if self.targets else self.verdict  # the targets': below
        shapes = ", ".join(f"{k} {'x'.join(map(str, v))}" for k, v in self.inputs.items())
        by64 = sum(o.passed and o.by_float64 for o in self.outputs)
        settled = (f" or, {by64} of them, at most {FLOAT64_MARGIN:g}x as far from the source's float64 run as "
                   "its own float32 run (float32 rounding)" if by64 else "")
        by_second = sum(o.passed and o.by_second for o in self.outputs)
        settled += (f" or, {by_second} of them (no float64 run), at most {FLOAT64_MARGIN:g}x as far from the "
                    "nearer of the source's two float32 runs on different kernels as those are apart"
                    if by_second else "")
        by_half = sum(o.passed and o.by_half for o in self.outputs)
        settled += (f" or, {by_half} of them (a half-precision model), at most {HALF_MARGIN:g}x as far from "
                    "the float32 source as the source's own half-precision run" if by_half else "")
        out.append(f"{verdict}: {sum(o.passed for o in self.outputs)}/{len(self.outputs)} outputs within "
                   f"tol={self.tol:g} of the output's scale (max|ours-ref| / max|ref|){settled}; "
                   f"allclose: atol={self.atol:g} rtol={self.rtol:g}; inputs: {shapes}")
        large = [o for o in self.outputs if o.passed and o.allclose_bad and not o.random]
        if large:  # a PASS beside "allclose: no" and a large max abs (boxes in pixels): say why that is fine
            o = max(large, key=lambda r: r.ref_scale)
            out.append(f"why PASS beside allclose 'no': {shown(o.name)} reaches {o.ref_scale:.3g} (its scale), and its "
                       f"error is {o.rel_to_scale:.2g} of that, within tol; allclose's atol/rtol are absolute and "
                       "relative per element, which flags large or near-zero elements, so it is shown, not decisive")
        if self.source_refused:
            seen = (f"the reference outputs above are {self.source_runtime}'s, standing in for it" if self.outputs
                    else "nothing was compared")
            out.append(f"NOT VERIFIED: the source's own runtime refused it: {self.source_refused}; {seen}")
        if self.frozen:
            decided = "; ".join(self.frozen[:4]) + (f"; and {len(self.frozen) - 4} more" if len(self.frozen) > 4
                                                   else "")
            out.append(("NOT VERIFIED beyond the example's branch: " if self.on_example or self.passed else
                        "NOT VERIFIED: these inputs are not the example the file was built on, and ")
                       + f"the conversion froze {len(self.frozen)} decision(s) on tensor values to the example's "
                       f"outcome ({decided}, --freeze-data-branches): an input that decides otherwise gets the "
                       "example's path, which " + ("this check does not see" if self.on_example or self.passed
                                                   else "may be all that differs here"))
        if self.target_refused:
            out.append(("NOT VERIFIED: " if self.refusal_is_ours else "FAIL: ") + self.target_refused
                       + (f"; the outputs above are {self.dest_runtime}'s, not the target's" if self.outputs
                          else "; nothing was compared"))
        out += [f"how: {line}" for line in self.method]
        out += [f"NOTE: {note}" for note in self.notes]
        unverified = [o.name for o in self.outputs if o.verdict == "NOT VERIFIED" and o.degenerate]
        unstable = [o.name for o in self.outputs if o.verdict == "NOT VERIFIED" and o.unstable]
        amplified = [o.name for o in self.outputs if o.verdict == "NOT VERIFIED" and o.amplified]
        random = [o.name for o in self.outputs if o.verdict == "NOT VERIFIED" and o.random]
        half = [o.name for o in self.outputs if o.verdict == "NOT VERIFIED" and o.half_unjudged]
        tied = [o.name for o in self.outputs if o.verdict == "NOT VERIFIED" and o.tied]
        if tied:
            out.append(f"NOT VERIFIED: the rows of {', '.join(shown(n) for n in tied)} come out of an NMS or top-k "
                       "over scores that are all equal on these inputs (see the note): which rows are kept is "
                       "decided by ties. Give real inputs with --inputs FILE.npz (images for a detector).")
        undecided: dict[str, list[str]] = {}
        for o in self.outputs:
            if o.verdict == "NOT VERIFIED" and o.undecided:
                undecided.setdefault(o.undecided, []).append(o.name)
        for reason, names in undecided.items():
            out.append(f"NOT VERIFIED: {', '.join(shown(n) for n in names)}: {reason}"
                       + ("" if reason.endswith((".", "?", "!")) else "."))
        unarbitrated: dict[str, list[str]] = {}
        for o in self.outputs:
            if o.verdict == "NOT VERIFIED" and o.unarbitrated:
                unarbitrated.setdefault(o.unarbitrated, []).append(o.name)
        for reason, names in unarbitrated.items():
            out.append(f"NOT VERIFIED: {', '.join(shown(n) for n in names)} {'miss' if len(names) > 1 else 'misses'} "
                       f"tol on the error alone, and nothing here measures what float32 rounding costs the "
                       f"source: {reason}. Give inputs with --inputs FILE.npz, or check the model where it runs "
                       "in float64 (the Python API with the nn.Module).")
        inexact = [o.name for o in self.outputs if o.verdict == "NOT VERIFIED" and o.ref_inexact]
        if inexact:
            out.append(f"NOT VERIFIED: {', '.join(shown(n) for n in inexact)} "
                       f"{'miss' if len(inexact) > 1 else 'misses'} tol, and the reference cannot compute the "
                       "conversion's function exactly on these weights (see the note): the difference may be the "
                       "reference's.")
        if half:
            out.append(f"NOT VERIFIED: {', '.join(shown(n) for n in half)} of a half-precision model "
                       f"{'miss' if len(half) > 1 else 'misses'} tol, and the source framework has no "
                       "half-precision run here to tell what half precision itself costs (see the note). "
                       "Check the float32 conversion, or run the source where it has one (PyTorch).")
        if random:
            verb = "depend" if len(random) > 1 else "depends"
            out.append(f"NOT VERIFIED: {', '.join(shown(n) for n in random)} {verb} on random draws (see the "
                       "output's note), which no seed makes equal across runtimes; only shapes were compared. "
                       "Pass the noise as an input to check the rest of the model.")
        if unstable:
            out.append(f"NOT VERIFIED: on {', '.join(shown(n) for n in unstable)} the reference's own kernels "
                       "(its reference and its optimised implementation) disagree by more than the "
                       f"{QUANT_STEPS} quantization steps allowed: the net amplifies int8 rounding, so no "
                       "conversion can be judged on these inputs (see the output's note).")
        if amplified:
            out.append(f"NOT VERIFIED: on {', '.join(shown(n) for n in amplified)} the source's own float32 run is "
                       f"more than {FLOAT32_LIMIT:g} x tol from its float64 run (or, where it has none, from its "
                       "second float32 run): the net amplifies rounding too much for any float32 conversion to be "
                       "judged on these inputs (see the output's note).")
        empty = [o.name for o in self.outputs if o.verdict == "NOT VERIFIED" and "empty on these inputs" in o.note]
        unverified = [n for n in unverified if n not in empty]
        if empty:
            out.append(f"NOT VERIFIED: {', '.join(shown(n) for n in empty)} {'are' if len(empty) > 1 else 'is'} "
                       "empty on both sides on these inputs (a detector that detects nothing on random "
                       "input, say): nothing was compared. Give real inputs with --inputs FILE.npz (images "
                       "for a detector).")
        if unverified:
            constant = [o.name for o in self.outputs if o.name in unverified and "integer output" in o.note]
            out.append(f"NOT VERIFIED: the reference output{'s' if len(unverified) > 1 else ''} "
                       f"{', '.join(shown(n) for n in unverified)} {'have' if len(unverified) > 1 else 'has'} no "
                       "spread (near zero or constant) on these inputs, so agreement proves nothing. "
                       + ("Nor on a second, differently seeded draw: the model's own output is constant or near "
                          "zero whatever the input (zero, random or untrained weights, say), so other inputs "
                          "(--inputs FILE.npz) will hardly help; check the model with its trained weights."
                          if set(unverified) <= set(self.constant_anyway) else
                          "Give real inputs with --inputs FILE.npz.")
                       + (f" {', '.join(shown(n) for n in constant)}: an integer output constant on these inputs "
                          "is judged exactly where it labels rows compared as a set whose other outputs vary (a "
                          "single-class detector's labels beside its boxes); here nothing beside it varies."
                          if constant else ""))
        if self.location is not None:
            out += self.location.lines()
        if self.targets:
            from convert.targets.base import targets_table

            out += targets_table(self.targets)
        return "\n".join(printable(line).rstrip() if line.strip() else line for line in out)


_CELL = 40  # an output name longer than this is cut in the middle in the table
_NOTE_INLINE = 40  # an output's note longer than this is said below the table, not in its row


def _result_cell(o: OutputResult, below: list[str]) -> str:
    """Return the result cell of ``o``: its verdict, with its note when short, else the note's number
    (the note itself appended to ``below``)."""
    if not o.note:
        return o.verdict
    if len(o.note) <= _NOTE_INLINE:
        return f"{o.verdict} ({o.note})"
    below.append(f"  ({len(below) + 1}) {_cell(o.name)}: {o.note}")
    return f"{o.verdict} ({len(below)})"


def _cell(name: str) -> str:
    """Return an output name for the table: escaped, and quoted with its length where cut."""
    text = shown(name, _CELL)
    return text[1:-1] if text.endswith("'") else text


def _json_default(obj: object) -> object:
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    return str(obj)


def match_outputs(ref_names: Sequence[str], got_names: Sequence[str]) -> list[tuple[str, str]]:
    """Pair outputs by name when every reference name is present, else by position."""
    if set(ref_names) <= set(got_names):
        return [(n, n) for n in ref_names]
    if len(ref_names) != len(got_names):
        raise ValueError(
            f"the models have different outputs: reference {list(ref_names)}, converted {list(got_names)}"
        )
    return list(zip(ref_names, got_names, strict=True))


# A quantized reference output (int8/uint8 dequantized) also passes within this many of its
# quantization steps: TFLite's fixed-point requantization and ONNX's float QuantizeLinear round a
# value that lies near half a step apart (one step), and such a step can move the next op's result.
QUANT_STEPS = 2


def nonfinite_agreeing_diff(ref: np.ndarray, got: np.ndarray) -> np.ndarray:
    """Return ``|ref - got|`` elementwise, where non-finite values agree when they are equal (an
    infinity of the same sign) or NaN on both sides (both runtimes computed no number there: the
    log or square root of a negative value): 0 there; any other non-finite pair is infinitely far.
    A NaN on one side only is not agreement (``compare_one`` FAILs it)."""
    diff = np.abs(ref - got)
    agree = (ref == got) | (np.isnan(ref) & np.isnan(got))
    return np.where(np.isfinite(ref) & np.isfinite(got), diff, np.where(agree, 0.0, np.inf))


def nan_agreement_note(ref: np.ndarray, got: np.ndarray) -> str:
    """Say where the two sides' NaNs are: on one side only (a FAIL; the note starts with 'NaN'), or
    how many elements were NaN on both sides (agreement: compared as equal, the rest by value); ''
    when neither side has one."""
    nan_r, nan_g = np.isnan(ref), np.isnan(got)
    ours, theirs = int(np.count_nonzero(nan_g & ~nan_r)), int(np.count_nonzero(nan_r & ~nan_g))
    if ours or theirs:
        said = ([f"{ours} element{'s' if ours != 1 else ''} where ours is NaN and the reference is not"] if ours
                else []) + ([f"{theirs} where the reference is NaN and ours is not"] if theirs else [])
        return "NaN on one side only: " + "; ".join(said)
    both = int(np.count_nonzero(nan_r & nan_g))
    if not both:
        return ""
    return (f"{both} of {ref.size} element{'s' if ref.size != 1 else ''} NaN on both sides (the same "
            "positions: agreement), the rest compared by value")


def compare_one(ref_name: str, ref: np.ndarray, name: str, got: np.ndarray, atol: float, rtol: float,
                tol: float = 1e-4, step: float = 0.0, spread: float = 0.0, random: str = "",
                second: np.ndarray | None = None) -> OutputResult:
    """Compare one pair of arrays.

    ``random``: the random op the converted output depends on (``RandomNormal 'eps' from
    aten.randn_like at vae.py:9``); such an output is NOT VERIFIED when its shape and dtype kind
    agree, never PASS.

    ``step``: the reference's quantization step (0 for float outputs). ``spread``: how far the
    reference's own two implementations are apart on this output (max abs); when that is more than
    the ``QUANT_STEPS`` allowance and ours is within twice it of the reference, or of the reference's
    second implementation's output (``second``), the output is NOT VERIFIED (rounding, amplified by
    the net, decides it), not FAIL; farther from both is FAIL.
    """
    ref = np.asarray(ref)
    got = np.asarray(got)
    if ref.shape != got.shape:
        if ref.size == got.size:
            got = got.reshape(ref.shape)
            note = f"reshaped from {got.shape}"
        else:
            return OutputResult(name, ref_name, tuple(got.shape), math.inf, math.inf, math.inf, 0.0, 0.0, 0.0,
                                False, f"shape {tuple(got.shape)} != reference {tuple(ref.shape)}", differs=True)
    else:
        note = ""
    if random:
        same_kind = (ref.dtype.kind in "biu") == (got.dtype.kind in "biu")
        return OutputResult(name, ref_name, tuple(ref.shape), math.nan, math.nan, math.nan, math.nan, 0.0, 0.0,
                            False, f"draws random numbers ({random}): the runtimes' generators differ, only the "
                            "shape was compared" if same_kind else f"dtype {got.dtype} != reference {ref.dtype}",
                            differs=not same_kind, random=True)
    if ref.dtype.kind in "biu" and got.dtype.kind in "biu":
        r64, g64 = ref.astype(np.int64).astype(np.float64), got.astype(np.int64).astype(np.float64)
    else:
        r64, g64 = ref.astype(np.float64), got.astype(np.float64)
    if r64.size == 0:
        # Nothing compared proves nothing (a detector that detects nothing on noise): NOT VERIFIED.
        return OutputResult(name, ref_name, tuple(ref.shape), 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, False,
                            "empty on these inputs: nothing was compared", degenerate=True)
    nan_mismatch = bool(np.any(np.isnan(r64) != np.isnan(g64)))
    finite = np.isfinite(r64) & np.isfinite(g64)
    diff = nonfinite_agreeing_diff(r64, g64)
    worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape))
    max_abs = float(diff[worst])
    scale = float(np.abs(r64[np.isfinite(r64)]).max()) if np.isfinite(r64).any() else 0.0
    rel = diff / np.maximum(np.abs(r64), 1e-12)
    max_rel = float(np.where(diff == 0, 0.0, rel).max())
    rel_to_scale = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
    rf, gf = r64[finite].ravel(), g64[finite].ravel()
    denom = float(np.linalg.norm(rf) * np.linalg.norm(gf))
    cosine = float(np.dot(rf, gf) / denom) if denom > 0 else (1.0 if max_abs == 0 else 0.0)
    allclose_bad = int(np.count_nonzero(diff > atol + rtol * np.abs(np.where(finite, r64, 0.0))))
    std = float(rf.std()) if rf.size else 0.0
    degenerate = scale < 1e-6 or std <= 1e-6 * scale
    within = rel_to_scale <= tol or (scale < 1e-6 and max_abs <= atol)  # near-zero outputs: absolute error
    if step > 0 and not within and max_abs <= QUANT_STEPS * step * (1 + 1e-6):
        within = True
        note = (note + "; " if note else "") + (f"quantized output: off by {max_abs / step:.3g} quantization "
                                                f"step(s) of {step:.3g}, {QUANT_STEPS} allowed")
    # Three int8 implementations of a net that amplifies rounding are each some way from the others,
    # at distances that vary from input to input: ours may sit nearer the optimised kernels than the
    # reference (random-weight DenseNet121, one input: reference-optimised 27 steps, ours-optimised
    # 34, ours-reference 56). Ours must be within twice that spread of the nearer of the two.
    unstable = step > 0 and not within and spread > QUANT_STEPS * step * (1 + 1e-6)
    beside = (float(np.abs(g64 - np.asarray(second, dtype=np.float64).reshape(g64.shape)).max())
              if unstable and second is not None and np.asarray(second).size == g64.size else math.inf)
    unstable = unstable and min(max_abs, beside) <= 2 * spread * (1 + 1e-6)
    if unstable:
        near = f", {beside / step:.3g} from its optimised kernels" if math.isfinite(beside) else ""
        note = (note + "; " if note else "") + (
            f"quantized output: off by {max_abs / step:.3g} steps of {step:.3g}{near}; the reference's own "
            f"kernels differ by {spread / step:.3g} steps here")
    passed = (not nan_mismatch) and within and not degenerate
    if not nan_mismatch:
        note = "; ".join(x for x in (note, nan_agreement_note(r64, g64)) if x)
    if nan_mismatch:
        note = nan_agreement_note(r64, g64)  # starts with "NaN": no arbiter settles it
    elif degenerate:
        what = ("reference is degenerate (near zero or constant)" if ref.dtype.kind == "f"
                else "reference is constant (an integer output)" if ref.dtype.kind in "iu"
                else "reference is constant")
        note = (note + "; " if note else "") + what
    return OutputResult(name, ref_name, tuple(ref.shape), max_abs, max_rel, rel_to_scale, cosine, scale, std,
                        passed, note, allclose_bad, degenerate, nan_mismatch or (not within and not unstable),
                        worst, float(r64[worst]), float(g64[worst]), unstable)


# Float32 rounding in a deep net can exceed ``tol`` by itself. When an output misses ``tol`` and the
# source runtime can run the model in float64, the float64 run arbitrates: the output passes when ours
# is at most FLOAT64_MARGIN times as far from it as the source's own float32 run, and that run is
# within FLOAT32_LIMIT x tol of it (a net whose float32 run is farther cannot be judged: NOT
# VERIFIED). Two runtimes' rounding errors are alike but not equal, and their maxima over a small
# output vary: on torchvision's ResNet-18 (10 logits) ours was 1.29x torch's on one input, 0.5x to 1x
# on others. A conversion error worth the name (a wrong op, eps, layout) is far above both.
FLOAT64_MARGIN = 2.0
FLOAT32_LIMIT = 10.0
#: An output the source's float64 run stores in float32 (its code fills a float32 tensor) arbitrates
#: only at this tolerance or above: its own rounding, at most 6e-8 of scale, then moves either
#: distance by under 1 % of ``tol``. Below it, that output has no arbiter and its verdict stands.
FLOAT32_ARBITER_MIN_TOL = 1e-5


# A half-precision model (``--precision fp16/bf16``) is compared with the float32 source and judged
# by what half precision itself costs: the output passes when ours is at most HALF_MARGIN times as far
# from the float32 source as the source framework's own run in that precision (the whole model cast
# to half, PyTorch's ``module.half()``). Our rule keeps reductions and normalisations in float32, so
# it is usually nearer than that run; a wrong op or layout is far outside it. No such run: NOT
# VERIFIED, never a silently looser tolerance.
HALF_MARGIN = 2.0


def arbitrate_half(result: OutputResult, ref: np.ndarray, ref_half: np.ndarray | None,
                   precision: str) -> OutputResult:
    """Judge ``result`` (a half-precision model's output that missed ``tol`` on its error alone)
    against the source's own ``precision`` run ``ref_half`` (None: there is none)."""
    if ref_half is None:
        note = (result.note + "; " if result.note else "") + (
            f"{precision} model: {result.rel_to_scale:.2g} from the float32 source; no {precision} run of the "
            "source to judge that against")
        return replace(result, note=note, half_unjudged=True, differs=False)
    r32 = np.asarray(ref, dtype=np.float64)
    rh = np.asarray(ref_half, dtype=np.float64)
    if rh.shape != r32.shape:
        return result
    scale = float(np.abs(r32).max())
    if scale == 0:
        return result
    theirs = float(np.abs(np.where(np.isfinite(rh), rh, np.inf) - r32).max()) / scale
    ours = result.rel_to_scale
    note = (result.note + "; " if result.note else "") + (
        f"{precision} model: ours {ours:.2g} from the float32 source, the source's own {precision} run "
        f"{theirs:.2g} ({HALF_MARGIN:g}x allowed)")
    if not math.isfinite(theirs) or ours > HALF_MARGIN * theirs:
        return replace(result, note=note)
    return replace(result, note=note, passed=True, differs=False, by_half=True)


def mark_inexact(result: OutputResult, reason: str) -> OutputResult:
    """NOT VERIFIED, not FAIL, for an output that missed ``tol`` on its error alone while the reference
    cannot compute the conversion's function exactly (``reason`` says why); other results unchanged."""
    if result.passed or result.random or not math.isfinite(result.rel_to_scale) or result.note.startswith("NaN"):
        return result
    note = (result.note + "; " if result.note else "") + reason
    return replace(result, note=note, ref_inexact=True, differs=False)


def mark_undecided(result: OutputResult, label: str, reason: str) -> OutputResult:
    """NOT VERIFIED, whatever the numbers, for an output the reference cannot decide (``reason``,
    said once below the table; ``label`` in the output's row): never PASS, never FAIL."""
    return replace(result, passed=False, differs=False, degenerate=False, ref_inexact=False, note=label,
                   undecided=reason)


def no_spread(ref: np.ndarray) -> bool:
    """Whether a reference output is degenerate as ``compare_one`` judges it: near zero, or constant."""
    r64 = np.asarray(ref, dtype=np.float64)
    finite = r64[np.isfinite(r64)]
    if finite.size == 0:
        return True
    scale = float(np.abs(finite).max())
    return scale < 1e-6 or float(finite.std()) <= 1e-6 * scale


def needs_float64(result: OutputResult, ref: np.ndarray, *, as_set: bool = False) -> bool:
    """Whether ``result`` failed on the error alone (not shape, NaN, spread or random draws), on a
    float output: the case a float64 run of the source can settle."""
    return (not result.passed and not result.degenerate and not result.random and not result.unstable
            and result.as_set == as_set  # paired rows: judged by ``arbitrate_set_float64``
            and not result.tied
            and math.isfinite(result.rel_to_scale)  # a shape mismatch's error is infinite
            and np.asarray(ref).dtype.kind == "f" and not result.note.startswith("NaN"))


def arbitrate_float64(result: OutputResult, ref: np.ndarray, got: np.ndarray, ref64: np.ndarray,
                      tol: float) -> OutputResult:
    """Judge ``result`` (failed on its error alone) against the source run in float64, ``ref64``."""
    if np.asarray(ref64).dtype == np.float32 and tol < FLOAT32_ARBITER_MIN_TOL:
        return result  # stored in float32 by the source itself: too coarse an arbiter at this tol
    r32 = np.asarray(ref, dtype=np.float64)
    r64 = np.asarray(ref64, dtype=np.float64)
    ours = np.asarray(got, dtype=np.float64).reshape(r32.shape)
    if r64.shape != r32.shape or not np.isfinite(r64).all():
        return result
    scale = float(np.abs(r64).max())
    if scale == 0:
        return result
    theirs_err = float(np.abs(r32 - r64).max()) / scale
    ours_err = float(np.abs(ours - r64).max()) / scale
    said = (f"float64 run of the source: ours {ours_err:.2g} from it, the source's own float32 run "
            f"{theirs_err:.2g}")
    note = (result.note + "; " if result.note else "") + said
    if theirs_err > FLOAT32_LIMIT * tol:
        # the net amplifies rounding too much for any float32 conversion to be judged on these inputs
        # (docs/verdict.md), ours however far: Mask R-CNN's masks pasted a pixel apart, torch's own
        # float32 run 0.17 from float64 on one row, ours 0.85 on another, was a FAIL
        return replace(result, note=note, amplified=True, differs=False)
    if ours_err > FLOAT64_MARGIN * theirs_err:
        return replace(result, note=note)
    return replace(result, note=note + " (float32 rounding)", passed=True, differs=False, by_float64=True)


# -- outputs compared as sets ----------------------------------------------------------------------
# The rows of a detector's outputs come out of an NMS, a top-k or a nonzero: their order (and, at a
# threshold, their number) is decided by near-ties that float rounding may break either way. Such
# outputs are compared as sets: each converted row is paired with the nearest reference row, the
# outputs that share the row count (boxes, scores, labels, masks) paired together.

#: Rows of at most this many values take part in the pairing distance (boxes, scores, labels; not
#: a mask's pixels, which follow their box).
PAIR_KEY_SIZE = 64


@dataclass(frozen=True, slots=True)
class SetItem:
    """One output of a set group: both sides, and the axis along which its rows lie."""

    ref_name: str
    ref: np.ndarray
    name: str
    got: np.ndarray
    axis: int


def _rows(a: np.ndarray, axis: int) -> np.ndarray:
    moved = np.moveaxis(np.asarray(a), axis, 0)
    return moved.reshape(moved.shape[0], math.prod(moved.shape[1:]))


def only_padding(items: Sequence[SetItem]) -> bool:
    """Whether both sides of a group hold nothing but padding rows (``_trailing_padding``): "no
    detection" on both sides, which proves nothing."""
    ref_rows = [_rows(it.ref, it.axis) for it in items]
    got_rows = [_rows(it.got, it.axis) for it in items]
    return (_trailing_padding(ref_rows) == ref_rows[0].shape[0]
            and _trailing_padding(got_rows) == got_rows[0].shape[0])


def _trailing_padding(rows: Sequence[np.ndarray]) -> int:
    """How many rows at the end are padding on every output of the group: all zeros or all -1
    (a runtime's fixed-size detection buffer: OpenCV's 100 rows of zeros, Caffe's row of -1)."""
    n = rows[0].shape[0]
    pad = np.ones(n, bool)
    for r in rows:
        pad &= ((r == 0) | (r == -1)).all(axis=1) if r.shape[1] else True
    count = 0
    while count < n and pad[n - 1 - count]:
        count += 1
    return count


def _pair_rows(ref_rows: Sequence[np.ndarray], got_rows: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Pair converted rows with reference rows, nearest first (greedy on the largest per-output
    error relative to that output's scale). Returns (reference indices, converted indices)."""
    n, m = ref_rows[0].shape[0], got_rows[0].shape[0]
    if n == 0 or m == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    keys = [k for k, r in enumerate(ref_rows) if r.shape[1] <= PAIR_KEY_SIZE] or list(range(len(ref_rows)))
    dist = np.zeros((m, n))
    for k in keys:
        r = ref_rows[k].astype(np.float64)
        g = got_rows[k].astype(np.float64)
        scale = float(np.abs(r[np.isfinite(r)]).max()) if np.isfinite(r).any() else 1.0
        scale = scale or 1.0
        step = max(1, int(2e7 // max(1, n * r.shape[1])))  # bounded memory: rows of g in chunks
        for lo in range(0, m, step):
            d = np.abs(g[lo:lo + step, None, :] - r[None, :, :]).max(axis=2, initial=0.0) / scale
            dist[lo:lo + step] = np.maximum(dist[lo:lo + step], np.where(np.isnan(d), np.inf, d))
    got_idx, ref_idx = [], []
    taken_g = np.zeros(m, bool)
    taken_r = np.zeros(n, bool)
    for flat in np.argsort(dist, axis=None, kind="stable"):
        i, j = divmod(int(flat), n)
        if taken_g[i] or taken_r[j]:
            continue
        taken_g[i] = taken_r[j] = True
        got_idx.append(i)
        ref_idx.append(j)
        if len(got_idx) == min(n, m):
            break
    order = np.argsort(ref_idx, kind="stable")  # the reference's order
    return np.asarray(ref_idx)[order], np.asarray(got_idx)[order]


def compare_sets(items: Sequence[SetItem], origin: str, atol: float, rtol: float, tol: float) -> list[OutputResult]:
    """Compare a group of outputs whose rows (``SetItem.axis``) come out of ``origin`` (an NMS, top-k
    or nonzero) as a set: trailing padding rows dropped on either side (said in the note; a group of
    nothing but padding is then empty: NOT VERIFIED), each converted row paired
    with its nearest reference row across the group, the paired rows compared like any output, and
    rows without a counterpart on either side a FAIL (counted in the note)."""
    ref_rows = [_rows(it.ref, it.axis) for it in items]
    got_rows = [_rows(it.got, it.axis) for it in items]
    n, m = ref_rows[0].shape[0], got_rows[0].shape[0]
    said = []
    pad_r, pad_g = _trailing_padding(ref_rows), _trailing_padding(got_rows)
    if pad_r:
        said.append(f"{pad_r} padding row{'s' if pad_r > 1 else ''} of the reference dropped")
        n -= pad_r
    if pad_g:
        said.append(f"{pad_g} padding row{'s' if pad_g > 1 else ''} of ours dropped")
        m -= pad_g
    ref_rows = [r[:n] for r in ref_rows]
    got_rows = [g[:m] for g in got_rows]
    ri, gi = _pair_rows(ref_rows, got_rows)
    lost_r, lost_g = n - len(ri), m - len(gi)
    head = f"rows compared as a set after {origin}: {len(ri)} paired"
    if lost_r or lost_g:
        head += f"; {lost_r} reference row(s) and {lost_g} of ours without a counterpart"
    note = "; ".join([head, *said])
    results = []
    for it, r, g in zip(items, ref_rows, got_rows, strict=True):
        tail = np.moveaxis(np.asarray(it.ref), it.axis, 0).shape[1:]
        ref_p = r[ri].reshape(len(ri), *tail)
        got_p = g[gi].reshape(len(gi), *tail)
        res = compare_one(it.ref_name, ref_p, it.name, got_p, atol, rtol, tol)
        res = replace(res, shape=tuple(np.asarray(it.got).shape), as_set=True,
                      note=note + (f"; {res.note}" if res.note else ""))
        if lost_r or lost_g:
            res = replace(res, passed=False, differs=True, degenerate=False)
        results.append(res)
    constant = [it.ref_name for it, r in zip(items, results, strict=True)
                if np.asarray(it.ref).dtype.kind == "f" and np.asarray(it.ref).size and r.degenerate]
    if constant and not all(r.passed or r.degenerate for r in results):
        said_tie = (f"'{constant[0]}' is constant on these inputs (saturated): the rows kept are decided by ties, "
                    "differently in each runtime")
        results = [r if r.passed else replace(r, tied=True, differs=False, note=f"{r.note}; {said_tie}")
                   for r in results]
    return results


def arbitrate_set_float64(items: Sequence[SetItem], results: Sequence[OutputResult],
                          ref64: Sequence[np.ndarray | None], tol: float) -> list[OutputResult]:
    """The float64 rule for a group compared as a set (``compare_sets``): the source's float64 run
    (``ref64``, one array per item; None for a member the run did not compute, which neither needs
    it nor pairs rows) is paired with the reference row by row, as ours was, and each member that
    missed ``tol`` on its error alone is judged by ``arbitrate_float64`` on the paired rows. Nothing
    is judged when a side has rows without a counterpart, or when the float64 run keeps another
    number of rows (its own NMS decided otherwise: no arbiter)."""
    return _arbitrate_set(items, results, ref64, lambda res, r, g, w: arbitrate_float64(res, r, g, w, tol))


def set_pair_keys(items: Sequence[SetItem]) -> list[int]:
    """The members of a set group whose rows take part in pairing them (``PAIR_KEY_SIZE``): what a
    second run of the source must compute for its rows to be paired with the reference's."""
    sizes = [_rows(it.ref, it.axis).shape[1] for it in items]
    return [k for k, n in enumerate(sizes) if n <= PAIR_KEY_SIZE] or list(range(len(items)))


def _arbitrate_set(items: Sequence[SetItem], results: Sequence[OutputResult], other: Sequence[np.ndarray | None],
                   judge: Callable[[OutputResult, np.ndarray, np.ndarray, np.ndarray], OutputResult],
                   only: Collection[int] | None = None) -> list[OutputResult]:
    """Pair another run of the source (``other``: one array per item, or None) with the reference
    row by row, as ours was, and ``judge`` each member that missed ``tol`` on its error alone on
    the paired rows (``judge(result, ref rows, our rows, other rows)``; ``only``: of these members).
    Nothing is judged when a side has rows without a counterpart, or when the other run keeps
    another number of rows."""
    have = [k for k, a in enumerate(other) if a is not None]
    pending = [k for k, res in enumerate(results) if needs_float64(res, items[k].ref, as_set=True) and k in have
               and (only is None or k in only)]
    if not pending or not set(set_pair_keys(items)) <= set(have):
        return list(results)
    ref_rows = [_rows(it.ref, it.axis) for it in items]
    got_rows = [_rows(it.got, it.axis) for it in items]
    w_rows = {k: _rows(np.asarray(other[k]), items[k].axis) for k in have}
    n = ref_rows[0].shape[0] - _trailing_padding(ref_rows)
    m = got_rows[0].shape[0] - _trailing_padding(got_rows)
    nw = w_rows[have[0]].shape[0] - _trailing_padding([w_rows[k] for k in have])
    if n != m or n != nw or any(ref_rows[k].shape[1:] != w_rows[k].shape[1:] for k in have):
        return list(results)
    ref_rows, got_rows = [r[:n] for r in ref_rows], [g[:m] for g in got_rows]
    w_rows = {k: w[:n] for k, w in w_rows.items()}
    ri, gi = _pair_rows(ref_rows, got_rows)
    ri_w, wi = _pair_rows([ref_rows[k] for k in have], [w_rows[k] for k in have])
    if len(ri) != n or len(ri_w) != n:
        return list(results)
    wide = np.empty(n, np.int64)
    wide[ri_w] = wi  # the other run's row paired with each reference row
    out = list(results)
    for k in pending:
        tail = np.moveaxis(np.asarray(items[k].ref), items[k].axis, 0).shape[1:]
        ref_p = ref_rows[k][ri].reshape(len(ri), *tail)
        got_p = got_rows[k][gi].reshape(len(gi), *tail)
        w_p = w_rows[k][wide[ri]].reshape(len(ri), *tail)
        out[k] = judge(results[k], ref_p, got_p, w_p)
    return out


def arbitrate_second_float32(result: OutputResult, ref: np.ndarray, got: np.ndarray, ref2: np.ndarray,
                             tol: float, path: str, why: str) -> OutputResult:
    """Judge ``result`` (failed on its error alone, and the source has no float64 run: ``why``)
    by the source's second float32 run ``ref2`` on other kernels (``path``): how far the source's
    two float32 runs are apart measures what float32 rounding costs here. The output passes if ours
    is at most ``FLOAT64_MARGIN`` times that from the nearer of the two, and is NOT VERIFIED if
    they are more than ``FLOAT32_LIMIT`` x tol apart (the net amplifies rounding too much to judge).
    Two runs that agree exactly measure nothing: ``result`` is returned unchanged."""
    r32 = np.asarray(ref, dtype=np.float64)
    r2 = np.asarray(ref2, dtype=np.float64)
    if r2.shape != r32.shape or not np.isfinite(r2).all() or not np.isfinite(r32).all():
        return result
    ours = np.asarray(got, dtype=np.float64).reshape(r32.shape)
    scale = float(np.abs(r32).max())
    apart = float(np.abs(r32 - r2).max()) / scale if scale else 0.0
    if apart == 0.0:
        return result
    from_first = float(np.abs(ours - r32).max()) / scale
    from_second = float(np.abs(ours - r2).max()) / scale
    note = (result.note + "; " if result.note else "") + (
        f"no float64 run of the source ({why}); its second float32 run ({path}) is {apart:.2g} from its "
        f"first, ours {from_first:.2g} from the first and {from_second:.2g} from the second")
    if apart > FLOAT32_LIMIT * tol:  # as the float64 rule: no float32 conversion can be judged here
        return replace(result, note=note, amplified=True, differs=False)
    if min(from_first, from_second) > FLOAT64_MARGIN * apart:
        return replace(result, note=note)
    return replace(result, note=note + " (float32 rounding)", passed=True, differs=False, by_second=True)


def arbitrate_set_second_float32(items: Sequence[SetItem], results: Sequence[OutputResult],
                                 ref2: Sequence[np.ndarray | None], tol: float, path: str, why: str,
                                 only: Collection[int] | None = None) -> list[OutputResult]:
    """``arbitrate_second_float32`` for a group compared as a set, on rows paired as
    ``arbitrate_set_float64`` pairs them; ``only``: the members to judge (those no float64 run
    judged; None: every member that missed tol on its error alone)."""
    return _arbitrate_set(items, results, ref2,
                          lambda res, r, g, w: arbitrate_second_float32(res, r, g, w, tol, path, why), only)


def mark_unarbitrated(result: OutputResult, why: str) -> OutputResult:
    """NOT VERIFIED, not FAIL, for an output that missed ``tol`` on its error alone where nothing
    measured what float32 rounding costs the source (``why``): a correct file is never FAILed for
    the want of an arbiter. Said in the output's note and below the table."""
    note = (result.note + "; " if result.note else "") + f"not arbitrated: {why}"
    return replace(result, note=note, unarbitrated=why, differs=False)


def _rows_vary(item: SetItem) -> bool:
    """Whether the reference rows of ``item`` (less trailing padding) are at least two, not all equal."""
    rows = _rows(item.ref, item.axis)
    rows = rows[:rows.shape[0] - _trailing_padding([rows])]
    return rows.shape[0] >= 2 and bool((rows != rows[:1]).any())


def judge_set_integers(items: Sequence[SetItem], results: Sequence[OutputResult]) -> list[OutputResult]:
    """Judge the integer members of a group compared as a set (a detector's labels) exactly: one
    that differs on a paired row FAILs whatever ``tol`` (a class is right or wrong), and one that
    is constant on these inputs (a single-class detector's labels, or one class found) PASSes when
    it is equal on every paired row and a float member of the group has a real spread (the boxes
    it labels vary), where alone it would be NOT VERIFIED for want of spread."""
    varied = any(np.asarray(it.ref).dtype.kind == "f" and not res.degenerate and res.as_set
                 and math.isfinite(res.rel_to_scale) and _rows_vary(it) for it, res in zip(items, results, strict=True))
    out = list(results)
    for k, (it, res) in enumerate(zip(items, results, strict=True)):
        if np.asarray(it.ref).dtype.kind not in "iu" or np.asarray(it.got).dtype.kind not in "iub" \
                or not res.as_set or not math.isfinite(res.max_abs) or "without a counterpart" in res.note:
            continue
        if res.max_abs > 0:
            if res.passed:
                said = f"integer output: {res.max_abs:g} off on a paired row, judged exactly"
                out[k] = replace(res, passed=False, differs=True, note=f"{res.note}; {said}")
        elif res.degenerate and varied and int(np.prod(res.shape)) > 0:
            said = res.note.replace("; reference is constant (an integer output)", "")
            out[k] = replace(res, passed=True, degenerate=False, differs=False,
                             note=f"{said}; integer output, constant on these inputs: equal on every paired "
                                  "row, judged exactly beside the rows it labels, which vary")
    return out
