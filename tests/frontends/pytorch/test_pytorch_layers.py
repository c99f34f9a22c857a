"""The PyTorch frontend's layers (#49), read from its source: each file's imports, parsed with ``ast``
(those inside functions too), must keep the path a model takes readable.

- no import circle among the frontend's modules;
- no name with a leading underscore imported from another file of it (``from .lower import _x``,
  or ``module._x`` of a module imported as a whole);
- no file over ``MAX_LINES`` lines but the tables of ``TABLES``, each with its reason;
- every file in a layer of ``LAYERS``, and no layer importing a layer above it.

The layers, top to bottom, are those ``convert/frontends/pytorch/__init__.py``'s docstring lists.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FRONTEND = ROOT / "convert" / "frontends" / "pytorch"
PACKAGE = "convert.frontends.pytorch"

#: The layers, top to bottom: a module may import its own layer's modules and those of the layers
#: below it, never those above. Names are module paths under the package ('' is its __init__);
#: a name ending in '.*' covers a subpackage.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("entry", frozenset({""})),
    ("files", frozenset({"files", "shared"})),
    ("capture", frozenset({"capture", "tvcapture", "traced", "tracegraph", "tracevals", "tracewatch", "tsfold",
                           "tvpost", "frozen"})),
    ("lowering", frozenset({"lower", "lowering", "controlflow", "decompose", "irvalues"})),
    ("program facts", frozenset({"facts"})),
    ("ops", frozenset({"ops", "ops.*"})),
    ("torch", frozenset({"torchenv"})),
)

MAX_LINES = 800
#: Files allowed over MAX_LINES ('ops/tensor.py': why), each one table. None today.
TABLES: dict[str, str] = {}


@functools.cache
def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(FRONTEND.rglob("*.py")):
        parts = path.relative_to(FRONTEND).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ``ImportFrom`` reads from (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = f"{PACKAGE}.{module}".rstrip(".").split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _local(name: str) -> str | None:
    """``name`` (absolute) as a module of the frontend ('' for the package), or None if it is not one."""
    if name == PACKAGE:
        return ""
    return name.removeprefix(PACKAGE + ".") if name.startswith(PACKAGE + ".") else None


def _imports(module: str, path: Path, modules: dict[str, Path]) -> Iterator[tuple[str, str, int]]:
    """(imported frontend module, name taken from it or '', line) for every import of ``path``,
    function-local ones included; names bound to frontend modules are followed to their ``x._y`` uses."""
    tree = ast.parse(path.read_text(), filename=str(path))
    bound: dict[str, str] = {}  # a local name -> the frontend module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _local(_resolve(module, path.name == "__init__.py", node))
            if source is None:
                continue
            for alias in node.names:
                as_module = f"{source}.{alias.name}".lstrip(".")
                if as_module in modules:  # `from . import traced`: the module itself
                    bound[alias.asname or alias.name] = as_module
                    yield as_module, "", node.lineno
                else:
                    yield source, alias.name, node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                target = _local(alias.name)
                if target is not None:
                    if alias.asname:
                        bound[alias.asname] = target
                    yield target, "", node.lineno
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
            yield bound[node.value.id], node.attr, node.lineno


def _graph() -> dict[str, dict[str, list[tuple[str, int]]]]:
    """module -> imported module -> [(name, line)], frontend modules only, self-imports left out."""
    modules = _modules()
    edges: dict[str, dict[str, list[tuple[str, int]]]] = {m: {} for m in modules}
    for module, path in modules.items():
        for target, name, line in _imports(module, path, modules):
            if target != module and target in modules:
                edges[module].setdefault(target, []).append((name, line))
    return edges


def _layer(module: str) -> int:
    for i, (_, members) in enumerate(LAYERS):
        if module in members or any(m.endswith(".*") and module.startswith(m[:-1]) for m in members):
            return i
    raise AssertionError(f"{module or '__init__'}: in no layer of LAYERS; add it to the layer it belongs to")


def _shown(module: str) -> str:
    """The file of ``module``, relative to the package ('traced.py', 'ops/__init__.py')."""
    return _modules()[module].relative_to(FRONTEND).as_posix()


def test_the_parser_sees_imports_inside_functions() -> None:
    """The check would pass vacuously if it missed function-local imports, which the frontend uses for torch."""
    edges = _graph()
    assert "lower" in edges[""], "the package's lazy `from .lower import lower_program` was not seen"
    assert "tracegraph" in edges["traced"]


def test_no_import_circle() -> None:
    edges = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in edges[v]:
                circles.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    assert not circles, "modules importing each other in a circle: " + "; ".join(
        ", ".join(_shown(m) for m in c) for c in circles)


def test_no_private_name_crosses_files() -> None:
    edges = _graph()
    crossing = [f"{_shown(m)}:{line} takes {name} from {_shown(t)}" for m, targets in edges.items()
                for t, names in targets.items() for name, line in names
                if name.startswith("_") and not (name.startswith("__") and name.endswith("__"))]
    assert not crossing, "private names imported from another file (make them public there, or move them): " + \
        "; ".join(crossing)


@pytest.mark.parametrize("module", sorted(_modules()), ids=lambda m: _shown(m))
def test_file_size(module: str) -> None:
    path = _modules()[module]
    lines = len(path.read_text().splitlines())
    if _shown(module) in TABLES:
        return
    assert lines <= MAX_LINES, f"{_shown(module)}: {lines} lines, over {MAX_LINES}: split it (STYLE.md, 'Giant files')"


def test_no_layer_imports_a_layer_above() -> None:
    edges = _graph()
    upward = [f"{_shown(m)} ({LAYERS[_layer(m)][0]}) imports {_shown(t)} ({LAYERS[_layer(t)][0]}), line {names[0][1]}"
              for m, targets in edges.items() for t, names in targets.items() if _layer(t) < _layer(m)]
    assert not upward, "a layer imports one above it: " + "; ".join(upward)


def test_the_docstring_lists_every_file() -> None:
    """The package docstring's "the path a model takes" names each file of the frontend, so a reader
    finds every file in its layer there."""
    import convert.frontends.pytorch as frontend

    doc = frontend.__doc__ or ""
    named = {m: "ops/" if m == "ops" else _shown(m) for m in _modules() if m and not m.startswith("ops.")}
    missing = [shown for shown in named.values() if f"``{shown}``" not in doc]
    assert not missing, f"the package docstring does not list {', '.join(missing)}"
