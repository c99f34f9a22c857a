"""Decisions on tensor values that a capture would freeze to the example's: found, named, refused.

A Python ``if`` on a tensor's value (``if y.mean() > 0``), a loop on one (``while y.abs().max() >
1``), a number read from one (``k = int(y.argmax())``) and a branch on a size that depends on the
data (``if boxes.numel() > 0``) cannot be recorded as graph operations by any of torch's
captures: ``torch.export.draft_export`` and ``torch.jit.trace`` take the example's outcome and
the file computes that path for every input. Nothing in the file says so; an input that decides
otherwise gets a wrong result, which a check on the example cannot see.

So such a capture is refused by default, with the ``file:line`` and source line of each decision
(``frozen``), and the hint to write the branch as ``torch.cond`` (ONNX ``If``) and
the loop as ``while_loop`` (ONNX ``Loop``), which convert for every input. Freezing is the user's
choice (``--freeze-data-branches``, ``freeze_data_branches=True``): then each decision is named
in a note and recorded under ``FROZEN_DECISIONS``, and the parity check runs on the example and
says for which inputs its verdict holds ("PASS on the example's branch"), never a plain PASS.

Part of the capture layer (``__init__``'s "the path a model takes"): the captures that freeze a
decision (``capture.py``'s draft and jit.trace paths, ``traced.py``) record it here.
"""

from __future__ import annotations

import linecache
import os
from collections.abc import Iterable, Mapping, Sequence

from convert.ir import EXAMPLE_FEEDS, FROZEN_DECISIONS, ConversionError, Options, printable

__all__ = ["FREEZE_OPTION", "decision_at", "decisions_of_draft", "decisions_of_warnings", "freezing", "frozen",
           "keep_example", "listed", "source_line"]

#: ``OptionSpec.dest`` of ``--freeze-data-branches`` (and the Python API's keyword).
FREEZE_OPTION = "freeze_data_branches"

#: How many decisions a message lists before it says how many more there are.
_SHOWN = 4
#: A source line is cut to this many characters in a message.
_CODE_CHARS = 72

# The messages of torch's TracerWarning where the trace makes a tensor a Python value (a branch, a
# number): the trace records the example's value as a constant.
_TRACER_NUMBER = "Converting a tensor to a Python"
_HINT = ("Write a branch as torch.cond(pred, true_fn, false_fn, operands) and a loop as "
         "torch._higher_order_ops.while_loop(cond_fn, body_fn, carried), which convert to ONNX If and Loop "
         "for every input; or pass --freeze-data-branches to keep the example's path, checked on the example "
         "only")


def freezing(options: Options) -> bool:
    """Whether the user asked for decisions on data to be frozen to the example's."""
    return bool(options.get(FREEZE_OPTION, False))


def keep_example(options: Options, example: Sequence[object]) -> None:
    """Record the example the capture settled sizes (and any frozen decision) from: the parity check runs on it."""
    options.extra[EXAMPLE_FEEDS] = tuple(x.detach().cpu().numpy() for x in example)  # type: ignore[attr-defined]


def source_line(filename: str, lineno: int) -> str:
    """The stripped source line ``filename:lineno`` (cut to a message's width), or ''."""
    text = linecache.getline(filename, lineno).strip()
    return _cut(text)


def _cut(code: str) -> str:
    """The first line of ``code`` without its comment, cut to a message's width."""
    first = _uncommented((code.strip().splitlines() or [""])[0]).strip()
    return first if len(first) <= _CODE_CHARS else first[: _CODE_CHARS - 3] + "..."


def _uncommented(line: str) -> str:
    """``line`` without a trailing ``# comment`` (a '#' inside a string stays)."""
    import io
    import tokenize

    try:
        for token in tokenize.generate_tokens(io.StringIO(line).readline):
            if token.type == tokenize.COMMENT:
                return line[: token.start[1]]
    except (tokenize.TokenError, SyntaxError):  # an unfinished line (the head of a block): as it is
        pass
    return line


def _decision(filename: str, lineno: int, code: str, taken: str) -> str:
    """'file.py:12 `if y.mean() > 0:` (the example: True)'."""
    code = _cut(code) or source_line(filename, lineno)
    place = f"{os.path.basename(filename)}:{lineno}"
    return f"{place}{f' `{code}`' if code else ''}{f' (the example: {taken})' if taken else ''}"


def decision_at(filename: str, lineno: int, taken: object) -> str:
    """A decision the trace saw made at ``filename:lineno`` (``taken``: its outcome on the example, a
    bool; anything else is not said)."""
    return _decision(filename, lineno, "", str(taken) if isinstance(taken, bool) else "")


def decisions_of_draft(failures: Iterable[object], names: Mapping[int, str], torch_folder: str,
                       package: str) -> list[str]:
    """The decisions of ``torch.export.draft_export``'s DATA_DEPENDENT_ERROR ``failures``, each at
    the innermost frame of the model's code (``names``: torch's interned file names).

    torch's report says what it specialised in sympy terms (``Eq(u0, 1) = True``: the branch's
    bool was True; ``u0 = 11``: the number read was 11) and where; the place and its source line
    are what a user can act on.
    """
    found: list[str] = []
    for failure in failures:
        data = getattr(failure, "data", {}) or {}
        frames = [fr for fr in data.get("user_stack") or [] if isinstance(fr, Mapping)]
        place = None
        for fr in reversed(frames):
            filename = names.get(fr.get("filename"))  # type: ignore[call-overload]
            if isinstance(filename, str) and not filename.startswith((torch_folder, package)):
                place = (filename, int(fr.get("line") or 0), str(fr.get("loc") or ""))
                break
        result = str(data.get("result", ""))
        count = int(data.get("occurrences") or 1)
        taken = result + (f", decided {count} times" if count > 1 else "")
        if place is None:  # no frame of the model's: torch's own expression is all there is
            found.append(f"`{printable(str(data.get('expr', '?')))}` (the example: {taken})")
            continue
        filename, lineno, loc = place
        locals_loc = str((data.get("frame_locals") or {}).get("loc") or "")
        found.append(_decision(filename, lineno, locals_loc or loc, taken))
    return _unique(found)


def decisions_of_warnings(warnings: Sequence[object]) -> list[str]:
    """The decisions a ``torch.jit.trace`` froze, from its recorded TracerWarnings (each at the
    model's line that made a tensor a Python value)."""
    import torch

    tracer_warning = getattr(torch.jit, "TracerWarning", ())
    found = []
    for w in warnings:
        if issubclass(getattr(w, "category", type(None)), tracer_warning) and _TRACER_NUMBER in str(
                getattr(w, "message", "")):
            found.append(_decision(str(w.filename), int(w.lineno), "", ""))  # type: ignore[attr-defined]
    return _unique(found)


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def listed(decisions: Sequence[str]) -> str:
    """The decisions as a message lists them: the first few, then how many more."""
    shown = "; ".join(printable(d) for d in decisions[:_SHOWN])
    more = len(decisions) - _SHOWN
    return shown + (f"; and {more} more" if more > 0 else "")


def frozen(options: Options, source: str, decisions: Sequence[str], how: str) -> None:
    """Refuse a capture that froze ``decisions`` (the default), or record them (the user's choice).

    Args:
        options: the conversion's options; with ``--freeze-data-branches`` the decisions are added
            to ``options.extra[FROZEN_DECISIONS]`` and named in a note.
        source: the module's name, for the message.
        decisions: what ``decisions_of_draft`` / ``decisions_of_warnings`` found (none: nothing to do).
        how: the capture that froze them ('torch.export.draft_export', 'the trace').

    Raises:
        ConversionError: the decisions, each with its file:line and source line, and the hint.
    """
    if not decisions:
        return
    n = len(decisions)
    what = f"{n} Python use{'s' if n > 1 else ''} of tensor values (a branch, a loop's test, a number)"
    if not freezing(options):
        raise ConversionError(
            f"module {source}",
            f"{what} cannot be captured as graph operations: {how} would freeze "
            f"{'each' if n > 1 else 'it'} to the example's outcome ({listed(decisions)}), and the file would "
            f"compute the example's path for every input. {_HINT}")
    kept = options.extra.setdefault(FROZEN_DECISIONS, [])
    assert isinstance(kept, list)
    kept.extend(d for d in decisions if d not in kept)
    options.diagnostics.note(
        f"--freeze-data-branches: {how} froze {what} of {source} to the example's outcome "
        f"({listed(decisions)}): the file holds only for inputs that decide alike, and the parity check "
        "runs on the example")
