"""Regenerate docs/SUPPORTED_OPS.md from the registries (`convert ops FORMAT --markdown` for each).

    python scripts/gen_supported_ops.py          # rewrite the file
    python scripts/gen_supported_ops.py --check  # exit 1 if it is out of date
"""

from __future__ import annotations

import sys
from pathlib import Path

from convert import formats
from convert.cli import ops_table

DOC = Path(__file__).resolve().parents[1] / "docs" / "SUPPORTED_OPS.md"


def render() -> str:
    names = list(dict.fromkeys(formats.frontend_names() + formats.exporter_names()))
    parts = ["# Supported ops", "",
             "Generated from the registries by `python scripts/gen_supported_ops.py`; the same tables print with",
             "`convert ops FORMAT`. A test fails when this file is out of date.", ""]
    for name in names:
        parts.append(ops_table(name, markdown=True))
    return "\n".join(parts).rstrip() + "\n"


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv:
        sys.exit(0 if DOC.exists() and DOC.read_text() == text else 1)
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(text)
    print(f"wrote {DOC}")
