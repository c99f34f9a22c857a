"""Every package tests/ imports is declared: a core dependency or an extra that the test command installs."""

from __future__ import annotations

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]
# The extras scripts/test installs (".[test,all,ray,yaml,hf,vision,openvino,ncnn]").
TEST_EXTRAS = ("test", "all", "ray", "yaml", "hf", "vision", "openvino", "ncnn")
# Import names whose package cannot be looked up when it is not installed here.
KNOWN = {"cv2": "opencv-python-headless", "google": "protobuf", "yaml": "pyyaml", "paddle": "paddlepaddle",
         "grpc_tools": "grpcio-tools", "tensorflow": "tensorflow-cpu"}


def _name(requirement: str) -> str:
    return re.split(r"[\s;<>=!~\[(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _imports() -> dict[str, str]:
    """Top-level module -> the first test file importing it, for every import under tests/."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        try:
            text = path.read_text()
        except FileNotFoundError:  # a test file another test process wrote and removed (test_ci_skip_rule)
            continue
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], str(path.relative_to(ROOT)))
    return found


def _local_modules() -> set[str]:
    """Modules of this checkout that tests put on sys.path (tests/**, models/**) and our own package."""
    local = {"convert"}
    for folder in ("tests", "models", "scripts", "benchmarks"):
        for path in (ROOT / folder).rglob("*.py"):
            local.add(path.stem)
            local.update(p.name for p in path.relative_to(ROOT).parents if p.name)
    return local


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    names = [_name(r) for r in project["dependencies"]]
    names += [_name(r) for extra in TEST_EXTRAS for r in extras[extra]]
    declared = set(names)
    for name in names:  # what a declared package brings (keras with tensorflow): installed with it
        try:
            declared.update(_name(r) for r in metadata.requires(name) or () if "extra ==" not in r)
        except metadata.PackageNotFoundError:
            continue
    return declared


def test_every_test_import_is_declared() -> None:
    stdlib, local = set(sys.stdlib_module_names), _local_modules()
    installed = metadata.packages_distributions()
    declared = _declared()
    missing = []
    for module, where in _imports().items():
        if module in stdlib or module in local or module == "__future__":
            continue
        if f"{module}.py" in (ROOT / where).read_text():  # a module the test writes itself
            continue
        dists = [d.lower().replace("_", "-") for d in installed.get(module, [])] or [KNOWN.get(module, module)]
        if not any(d in declared for d in dists):
            missing.append(f"{module} ({where}: package {dists[0]})")
    assert not missing, f"tests import packages no extra installed by scripts/test declares: {missing}"


def test_ci_constraints_pin_the_test_extra() -> None:
    pins = {_name(line) for line in (ROOT / "constraints" / "ci.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")}
    test_extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    assert {_name(r) for r in test_extra} <= pins, "pin every test dependency in constraints/ci.txt"
