"""docs/paddle.md's op table is the registry's (regenerate: python tests/frontends/paddle/test_docs.py --write)."""

from __future__ import annotations

import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[3] / "docs" / "paddle.md"
BEGIN, END = "<!-- ops:begin -->", "<!-- ops:end -->"


def render() -> str:
    """One row per converter: every Paddle spelling (ProgramDesc and PIR), the ONNX ops, notes."""
    from convert.frontends.paddle import supported_ops
    from convert.frontends.paddle.ops import OPS

    rows: dict[object, list[str]] = {}
    for key, func in OPS.items():
        rows.setdefault(func, []).append(str(key))
    notes = {row.op: row for row in supported_ops()}
    lines = ["| Paddle op (ProgramDesc / PIR spellings) | ONNX (opset 17) | Notes |", "|---|---|---|"]
    for keys in sorted(rows.values(), key=lambda k: k[0]):
        row = notes[keys[0]]
        names = ", ".join(f"`{k}`" for k in keys)
        cells = [c.replace("|", "\\|") for c in (row.maps_to, row.notes)]
        lines.append(f"| {names} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def _block(text: str) -> str:
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip()


def test_op_table_matches_registry() -> None:
    assert _block(DOC.read_text()) == render(), "stale op table: python tests/frontends/paddle/test_docs.py --write"


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    text = DOC.read_text()
    head, rest = text.split(BEGIN, 1)
    DOC.write_text(f"{head}{BEGIN}\n{render()}\n{END}{rest.split(END, 1)[1]}")
