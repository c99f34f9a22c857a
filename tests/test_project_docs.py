"""Documentation that is generated must match the code it describes."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_supported_ops_doc_is_current() -> None:
    spec = importlib.util.spec_from_file_location("gen", ROOT / "scripts" / "gen_supported_ops.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    current = (ROOT / "docs" / "SUPPORTED_OPS.md").read_text()
    assert current == gen.render(), "docs/SUPPORTED_OPS.md is stale: run python scripts/gen_supported_ops.py"


def test_readme_commands_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "scripts/test" in readme
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/test" in ci


def test_lint_clean() -> None:
    try:
        import ruff  # noqa: F401
    except ImportError:
        import pytest

        pytest.skip("ruff is not installed")
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", "convert", "tests",
                        "benchmarks", "models", "scripts"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:]


def test_test_module_names_are_unique() -> None:
    """pytest imports test modules by basename here: two test_x.py files break collection."""
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
