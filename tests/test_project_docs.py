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


def test_wheel_carries_license_and_metadata(tmp_path: Path) -> None:
    """The wheel holds the LICENSE (Apache-2.0, as pyproject says), and its metadata names every input
    format in the summary, the authors and the classifiers (#33: `pip show` had none of them)."""
    import shutil
    import zipfile

    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")
    src = tmp_path / "src"  # a copy: a build in the clone would leave build/ behind
    shutil.copytree(ROOT / "convert", src / "convert", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path / "dist"), str(src)], check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("convert_toolkit-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    summary = next(line for line in meta.splitlines() if line.startswith("Summary:"))
    for fmt in ("PyTorch", "TensorFlow", "TFLite", "PaddlePaddle", "Darknet", "Caffe", "ONNX"):
        assert fmt in summary, (fmt, summary)
    assert "Author: " in meta and "Classifier: License :: OSI Approved :: Apache Software License" in meta
    assert not any(n.startswith(("tests/", "benchmarks/", "models/")) for n in names)
