"""Every Python example of the README and docs/ runs as written, as a script, from a copy of the
repository's layout (``models/``), and ends with exit 0.

docs/new_frontend.md's block is a module (a frontend), run by ``test_new_frontend_guide.py``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MODULES = {"new_frontend.md"}  # blocks that define a module rather than run


def _blocks() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        if doc.name in MODULES:
            continue
        for i, code in enumerate(re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)):
            found.append((f"{doc.name}#{i + 1}", code))
    return found


BLOCKS = _blocks()


def test_there_are_examples_to_run() -> None:
    assert {name.split("#")[0] for name, _ in BLOCKS} >= {"README.md", "batch.md"}


@pytest.mark.slow
@pytest.mark.parametrize(("name", "code"), BLOCKS, ids=[b[0] for b in BLOCKS])
def test_python_example_runs_as_written(name: str, code: str, tmp_path: Path) -> None:
    shutil.copytree(ROOT / "models" / "darknet", tmp_path / "models" / "darknet")
    script = tmp_path / "example.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{name}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
