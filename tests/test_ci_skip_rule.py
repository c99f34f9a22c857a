"""The CI rule of tests/conftest.py: a skip for a missing runtime fails when CI is set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CASE = '''
import pytest

def test_needs_a_runtime():
    pytest.skip("some reference runtime is not installed")
'''


def test_skip_for_missing_runtime_fails_in_ci(tmp_path: Path) -> None:
    tests = Path(__file__).resolve().parent
    case = tests / "frontends" / f"test_zz_ci_rule_{os.getpid()}.py"
    case.write_text(CASE)
    try:
        env = {**os.environ, "CI": "true"}
        ci = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(case)],
                            capture_output=True, text=True, timeout=120, env=env, cwd=tests.parent)
        env.pop("CI")
        local = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(case)],
                               capture_output=True, text=True, timeout=120, env=env, cwd=tests.parent)
    finally:
        case.unlink()
    assert ci.returncode == 1 and "1 failed" in ci.stdout, ci.stdout
    assert "skipped in CI" in ci.stdout
    assert local.returncode == 0 and "1 skipped" in local.stdout, local.stdout


MODULE_CASE = '''
import pytest

pytest.importorskip("no_such_reference_runtime_module")


def test_never_collected():
    pass
'''


def test_module_skipped_at_import_fails_in_ci(tmp_path: Path) -> None:
    """``pytest.importorskip`` at a module's top skips the whole file at collection: CI fails it too."""
    tests = Path(__file__).resolve().parent
    case = tests / "frontends" / f"test_zz_ci_module_rule_{os.getpid()}.py"
    case.write_text(MODULE_CASE)
    try:
        env = {**os.environ, "CI": "true"}
        ci = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(case)],
                            capture_output=True, text=True, timeout=120, env=env, cwd=tests.parent)
        env.pop("CI")
        local = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(case)],
                               capture_output=True, text=True, timeout=120, env=env, cwd=tests.parent)
    finally:
        case.unlink()
    assert ci.returncode != 0 and "skipped in CI" in ci.stdout, ci.stdout
    assert local.returncode == 5 and "1 skipped" in local.stdout, local.stdout  # 5: nothing ran, no failure
