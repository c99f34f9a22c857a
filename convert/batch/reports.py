"""What a batch produces: its table, JSON report, JUnit XML, Markdown summary, and baseline comparison.

Every report is built from the same ``BatchResult``; each row keeps the ``ParityReport`` of the
single ``convert`` command, whose JSON form (``--report``) is embedded unchanged. The JSON schema
is ``convert-batch-report/1`` (docs/batch.md); fields are only ever added to it.
"""

from __future__ import annotations

import json
import math
import re
import socket
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from convert.ir import UsageError, shown
from convert.parity import OutputResult, ParityReport

from .worker import CONVERTED, ERROR, FAIL, PASS, REGRESSED, UNCHECKED, ModelResult

__all__ = [
    "DEFAULT_FACTOR",
    "DEFAULT_FLOOR",
    "SCHEMA",
    "BatchResult",
    "accepted_baseline",
    "apply_baseline",
    "baseline_errors",
    "exit_status",
    "regressions",
]

SCHEMA = "convert-batch-report/1"
#: A regression: today's error (relative to the output's scale) > FACTOR x max(baseline error, FLOOR).
DEFAULT_FACTOR = 10.0
DEFAULT_FLOOR = 1e-6
_ORDER = (ERROR, FAIL, UNCHECKED, REGRESSED, PASS, CONVERTED)


def exit_status(rows: Sequence[ModelResult]) -> int:
    """Return 2 when any model could not be converted, else 1 when any failed its check, else 0."""
    if any(r.verdict == ERROR for r in rows):
        return 2
    if any(r.verdict in (FAIL, UNCHECKED, REGRESSED) for r in rows):
        return 1
    return 0


def _g(x: float) -> str:
    return f"{x:.2g}" if math.isfinite(x) else str(x)


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n else "-"


def _worst_text(row: ModelResult) -> str:
    worst = row.worst
    return "-" if worst is None else _g(worst[1])


def _clean(obj: object) -> object:
    """Non-finite floats as strings ('inf', 'nan'): strict JSON has no Infinity."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if isinstance(obj, Mapping):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


@dataclass(slots=True)
class BatchResult:
    """The rows of a batch in manifest order, and how it ran."""

    manifest: str
    rows: list[ModelResult]
    seconds: float
    runner: dict[str, object]
    started: str = ""
    baseline: dict[str, object] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def exit_status(self) -> int:
        """0 all passed, 1 any parity failure (or regression), 2 any model not converted."""
        return exit_status(self.rows)

    def counts(self) -> dict[str, int]:
        """Return the number of rows per verdict (every verdict present, in a fixed order)."""
        return {v: sum(r.verdict == v for r in self.rows) for v in _ORDER}

    def summary_line(self) -> str:
        """Return the last line of the command: counts, time and the runner."""
        counts = ", ".join(f"{n} {v}" for v, n in self.counts().items() if n)
        status = {0: "OK", 1: "FAIL", 2: "ERROR"}[self.exit_status]
        where = (f"{self.runner.get('workers')} worker(s)" if self.runner.get("kind") == "local"
                 else f"Ray {self.runner.get('address')}")
        return f"{status} batch | {len(self.rows)} models: {counts} | {self.seconds:.1f} s | {where}"

    def table(self, *, timing: bool = True) -> str:
        """Return the text table: model, route, verdict, worst error, time and peak RSS (``timing``)."""
        cols = ["model", "route", "verdict", "worst err/scale"] + (["time", "peak RSS"] if timing else [])
        rows = []
        for r in self.rows:
            verdict = r.verdict + (" (retried)" if r.attempts > 1 else "")
            cells = [r.name, r.route, verdict, _worst_text(r)]
            if timing:
                cells += [f"{r.seconds:.1f} s", _mib(r.peak_rss)]
            rows.append(cells)
        widths = [max(len(c), *(len(x[i]) for x in rows)) for i, c in enumerate(cols)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip(),
                 "  ".join("-" * w for w in widths)]
        lines += ["  ".join(v.ljust(w) for v, w in zip(x, widths, strict=True)).rstrip() for x in rows]
        for r in self.rows:
            lines += [f"  {r.name}: {why}" for why in _why(r)]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        """Return the JSON report (schema ``convert-batch-report/1``) as a dict."""
        import convert

        models = []
        for r in self.rows:
            worst = r.worst
            models.append({
                "name": r.name, "route": r.route, "verdict": r.verdict, "seconds": round(r.seconds, 3),
                "peak_rss_bytes": r.peak_rss, "worst_output": worst[0] if worst else None,
                "worst_error": worst[1] if worst else None, "error": r.error or None,
                "outputs": list(r.outputs), "attempts": r.attempts, "retry_reason": r.retry_reason or None,
                "worker": r.worker, "regressions": list(r.regressions),
                "parity": json.loads(r.report.to_json()) if r.report is not None else None,
            })
        data = {
            "schema": SCHEMA, "convert_version": convert.__version__, "manifest": self.manifest,
            "started": self.started, "seconds": round(self.seconds, 3), "runner": self.runner,
            "exit_status": self.exit_status, "counts": self.counts(), "baseline": self.baseline,
            "notes": list(self.notes), "models": models,
        }
        return _clean(data)  # type: ignore[return-value]

    def to_json(self) -> str:
        """Return the JSON report as text."""
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def junit(self) -> str:
        """Return JUnit XML: one testcase per model and output (per model when it has no outputs)."""
        suite = ET.Element("testsuite", name=f"convert batch {Path(self.manifest).name}",
                           timestamp=self.started, hostname=socket.gethostname())
        tests = failures = errors = skipped = 0
        for r in self.rows:
            for case, kind, message, body in _cases(r):
                tests += 1
                case_el = ET.SubElement(suite, "testcase", **case)
                if kind == "skipped":
                    skipped += 1
                    ET.SubElement(case_el, "skipped", message=message)
                elif kind:
                    failures += kind != "error"
                    errors += kind == "error"
                    el = ET.SubElement(case_el, "error" if kind == "error" else "failure", message=message,
                                       type=kind)
                    el.text = body
                elif r.report is not None:
                    ET.SubElement(case_el, "system-out").text = r.report.table()
        suite.set("tests", str(tests))
        suite.set("failures", str(failures))
        suite.set("errors", str(errors))
        suite.set("skipped", str(skipped))
        suite.set("time", f"{self.seconds:.3f}")
        root = ET.Element("testsuites", name="convert batch", tests=str(tests), failures=str(failures),
                          errors=str(errors), skipped=str(skipped), time=f"{self.seconds:.3f}")
        root.append(suite)
        for el in root.iter():  # XML 1.0 has no control characters: a name from a file may hold them
            el.text = _xml_text(el.text)
            for key, value in el.attrib.items():
                el.set(key, _xml_text(value) or "")
        ET.indent(root)
        return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"

    def markdown(self) -> str:
        """Return a Markdown summary for a CI job page ($GITHUB_STEP_SUMMARY)."""
        icon = {PASS: "✅", CONVERTED: "☑️", REGRESSED: "📈", FAIL: "❌", UNCHECKED: "⚠️", ERROR: "💥"}
        counts = ", ".join(f"{n} {v}" for v, n in self.counts().items() if n)
        lines = [f"### convert batch: {Path(self.manifest).name} — {counts}", "",
                 "| model | route | verdict | worst err/scale | time | peak RSS |", "|---|---|---|---|---:|---:|"]
        for r in self.rows:
            worst = r.worst
            err = "–" if worst is None else f"{_g(worst[1])} (`{_md(worst[0])}`)"
            verdict = f"{icon.get(r.verdict, '')} {r.verdict}" + (" (retried)" if r.attempts > 1 else "")
            lines.append(f"| {_md(r.name)} | {r.route} | {verdict} | {err} | {r.seconds:.1f} s | {_mib(r.peak_rss)} |")
        details = [f"- **{_md(r.name)}**: {_md(why)}" for r in self.rows for why in _why(r)]
        if details:
            lines += ["", *details]
        lines += ["", f"{self.summary_line()}", ""]
        return "\n".join(lines)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _why(row: ModelResult) -> list[str]:
    """Return the lines that explain a row that did not pass (and a retry)."""
    out = []
    if row.retry_reason:
        out.append(f"ran twice: {row.retry_reason}")
    if row.error:
        out.append(row.error)
    if row.verdict == FAIL and row.report is not None:
        out += [failure_message(row.report, o) for o in row.report.outputs if not o.passed]
        out += [f"on {t.label} {t.verdict}: " + " ".join(line.split(":", 1)[-1].strip() for line in t.lines()[:3])
                for t in row.report.targets if not t.passed]
    out += row.regressions
    return out


def failure_message(report: ParityReport, o: OutputResult) -> str:
    """Return one line for an output that failed: its error, its worst element and the first bad layer."""
    idx = ",".join(map(str, o.worst_index))
    text = (f"output {shown(o.name)} {o.verdict}: err/scale {_g(o.rel_to_scale)} (tol {report.tol:g}); "
            f"worst element [{idx}]: reference {o.worst_ref:.9g}, converted {o.worst_got:.9g}")
    if o.note:
        text += f" ({o.note})"
    loc = report.location
    if loc is not None:
        if loc.first_bad is not None:
            b = loc.first_bad
            text += f"; first bad layer: {b.where or b.key} (error {_g(b.error)} of its scale)"
        elif loc.unavailable:
            text += f"; first bad layer: not available ({loc.unavailable})"
        else:
            text += "; first bad layer: none stands out (" + " ".join(loc.lines()[0].split(";")[1:]).strip() + ")"
    return text


def _xml_text(text: str | None) -> str | None:
    """Return ``text`` with the control characters XML 1.0 cannot hold escaped (``\\x01``)."""
    if text is None:
        return None
    return re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]", lambda m: repr(m.group())[1:-1], text)


def _cases(row: ModelResult) -> list[tuple[dict[str, str], str, str, str]]:
    """Return (attributes, kind, message, body) per testcase of a row; kind '' passes."""
    classname = f"convert.batch.{row.name}"
    time = f"{row.seconds:.3f}"
    if row.verdict == ERROR or row.report is None:
        case = {"classname": classname, "name": f"{row.name} [{row.route}]", "time": time}
        if row.verdict == ERROR:
            return [(case, "error", row.error, row.detail or row.error)]
        if row.verdict == UNCHECKED:
            return [(case, "unchecked", f"parity not checked: {row.error}", row.error)]
        return [(case, "skipped", "converted without a parity check (check = false)", "")]
    cases = []
    for i, o in enumerate(row.report.outputs):
        case = {"classname": classname, "name": f"{row.name} [{row.route}] output {shown(o.name)}",
                "time": time if i == 0 else "0.000"}
        regressed = [m for m in row.regressions if m.startswith(f"output {shown(o.name)}")]
        if not o.passed:
            cases.append((case, "parity", failure_message(row.report, o), row.report.table()))
        elif regressed:
            cases.append((case, "regression", regressed[0], "\n".join(regressed)))
        else:
            cases.append((case, "", "", ""))
    for t in row.report.targets:  # one testcase per deployment target (and precision)
        case = {"classname": classname, "name": f"{row.name} [{row.route}] on {t.label}", "time": f"{t.seconds:.3f}"}
        if t.verdict == "PASS":
            cases.append((case, "", "", ""))
        else:
            said = " ".join(t.lines()) or t.verdict
            cases.append((case, "target", f"{t.label} {t.verdict}: {said}", "\n".join(t.lines())))
    return cases


# -- baselines -----------------------------------------------------------------------------------
def baseline_errors(path: Path) -> dict[str, dict[str, float]]:
    """Read a baseline: a batch report (``{model: {output: error}}``) or one parity report (model ``""``).

    Raises:
        UsageError: the file is missing or is neither kind of report.
    """
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UsageError(f"--baseline {path}: no such file; run once with --accept to write it from a passing "
                         "run") from None
    except OSError as exc:
        raise UsageError(f"--baseline {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"--baseline {path}: not JSON ({exc})") from None

    def errors(parity: Mapping[str, object] | None) -> dict[str, float]:
        found: dict[str, float] = {}
        for o in (parity or {}).get("outputs", []):  # type: ignore[attr-defined]
            try:
                found[str(o["name"])] = float(o["rel_to_scale"])
            except (KeyError, TypeError, ValueError):
                continue
        return found

    if isinstance(data, dict) and data.get("schema") == SCHEMA:
        return {str(m["name"]): errors(m.get("parity")) for m in data.get("models", [])}
    if isinstance(data, dict) and isinstance(data.get("outputs"), list):
        return {"": errors(data)}
    raise UsageError(f"--baseline {path}: neither a batch report ({SCHEMA}) nor a parity report (--report)")


def regressions(report: ParityReport, base: Mapping[str, float], *, factor: float = DEFAULT_FACTOR,
                floor: float = DEFAULT_FLOOR) -> list[str]:
    """Return one line per output whose error grew past ``factor x max(baseline, floor)``."""
    found = []
    for o in report.outputs:
        before = base.get(o.name)
        if before is None:
            continue
        limit = factor * max(before, floor)
        if o.rel_to_scale > limit:
            found.append(f"output {shown(o.name)} REGRESSED: err/scale {_g(o.rel_to_scale)}, baseline {_g(before)} "
                         f"(limit {factor:g} x max(baseline, {floor:g}) = {_g(limit)})")
    return found


def apply_baseline(rows: Sequence[ModelResult], base: Mapping[str, Mapping[str, float]], *,
                   factor: float = DEFAULT_FACTOR, floor: float = DEFAULT_FLOOR) -> list[str]:
    """Mark rows that passed but regressed against the baseline; return notes (models without a baseline)."""
    notes = []
    for r in rows:
        if r.report is None:
            continue
        if r.name not in base:
            notes.append(f"{shown(r.name)} has no baseline entry; its errors become the baseline when accepted")
            continue
        r.regressions = regressions(r.report, base[r.name], factor=factor, floor=floor)
        if r.regressions and r.verdict == PASS:
            r.verdict = REGRESSED
    return notes


def accepted_baseline(result: BatchResult, previous: Path) -> str:
    """Return the JSON to store as the new baseline: this run, plus the entries ``previous`` holds
    for models this run did not convert (``--model`` picked a subset), so accepting a subset never
    drops the others."""
    data = result.to_dict()
    try:
        old = json.loads(Path(previous).read_text())
    except (OSError, ValueError):
        old = None
    if isinstance(old, dict) and old.get("schema") == SCHEMA:
        ran = {m["name"] for m in data["models"]}  # type: ignore[attr-defined]
        kept = [m for m in old.get("models", []) if isinstance(m, dict) and m.get("name") not in ran]
        if kept:
            data["models"] = [*data["models"], *kept]  # type: ignore[misc]
            data["notes"] = [*data["notes"], f"kept the accepted entries of {len(kept)} model(s) not run: "  # type: ignore[misc]
                             + ", ".join(str(m.get("name")) for m in kept)]
    return json.dumps(data, indent=2, allow_nan=False)
