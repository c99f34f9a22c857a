"""Read a batch manifest (TOML, or YAML when PyYAML is installed) into ``ModelSpec`` records.

A manifest lists models, each with its route, its files and the parity settings of the single
``convert`` command, plus ``[defaults]`` that every model inherits. Keys mirror the command-line
options (``input_shape``, ``inputs``, ``tol`` ...); format options go in an ``options`` table.
Relative paths are relative to the manifest's folder. See docs/batch.md for the schema.

    output = "converted"          # folder; each model goes into <output>/<name>/
    [defaults]
    tol = 1e-4
    [[models]]
    name = "resnet"
    route = "pytorch:onnx"
    files = ["resnet.pt2"]
    input_shape = { x = [1, 3, 224, 224] }
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from convert import formats
from convert.ir import UsageError
from convert.parity import DEFAULT_ATOL, DEFAULT_RTOL, DEFAULT_TOL

__all__ = ["MODEL_KEYS", "Manifest", "ModelSpec", "load_manifest", "parse_manifest"]

#: Keys a model entry (or ``[defaults]``) may have, with what each means (docs/batch.md lists them).
MODEL_KEYS = {
    "name": "the row's name (default: the first file's stem); unique",
    "route": "SRC:DST or 'SRC->DST'; or give 'from' and 'to'",
    "from": "source format (default: guessed from the files)",
    "to": "destination format",
    "files": "the model's files or folder (a string for one)",
    "inputs": "parity inputs, .npz by input name or .npy",
    "input_shape": "{name = [dims]} or ['name=1,3,224,224', ...]",
    "tol": "verdict: max|ours-ref| / max|ref| per output (default 1e-4)",
    "atol": "elementwise rule, reported (default 1e-4)",
    "rtol": "elementwise rule, reported (default 1e-3)",
    "seed": "seed of the random parity inputs (default 0)",
    "check": "run the parity check (default true)",
    "locate": "name the first bad layer: true, false, or absent (only on failure)",
    "on": "deployment targets to check the converted file in too: 'openvino,ncnn' or a list (docs/targets.md)",
    "fold_bn": "fold BatchNormalization into convolutions (default true)",
    "timeout": "seconds the model may take in the local pool; then its worker is killed and the row is ERROR",
    "opset": "ONNX opset to write",
    "dynamic_batch": "symbolic leading dimension",
    "strict": "warnings become errors",
    "external_data": "ONNX weights in <out>.data",
    "device": "auto, cpu or cuda: where the parity check runs (CUDA in exact fp32, TF32 off)",
    "options": "format options by name (caffe_flavor, random_weights, decode, trust_pickle, model ...)",
}
_TOP_KEYS = {"output", "defaults", "models"}
_OPTION_KEYS = ("opset", "dynamic_batch", "strict", "external_data", "device")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One model of a manifest, with its defaults applied and its paths made absolute."""

    name: str
    dest: str
    files: tuple[str, ...]
    source: str | None = None
    inputs: str | None = None
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    tol: float = DEFAULT_TOL
    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL
    seed: int = 0
    check: bool = True
    locate: bool | None = None
    on: tuple[str, ...] = ()
    fold_bn: bool = True
    timeout: float | None = None
    options: dict[str, object] = field(default_factory=dict)

    @property
    def route(self) -> str:
        """``src:dst`` (``?`` for a source to be guessed from the files)."""
        return f"{self.source or '?'}:{self.dest}"


@dataclass(frozen=True, slots=True)
class Manifest:
    """A parsed manifest: its models in order and the output folder."""

    path: Path
    models: tuple[ModelSpec, ...]
    output: Path


def load_manifest(path: Path) -> Manifest:
    """Read ``path`` (``.toml``, or ``.yaml``/``.yml`` with PyYAML installed).

    Raises:
        UsageError: the file is missing, unreadable, or breaks the schema (naming the model and key).
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"manifest '{path}': {exc.strerror or exc}") from None
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise UsageError(f"manifest '{path}': reading YAML needs PyYAML (pip install "
                             "'convert-toolkit[yaml]'), or write the manifest as TOML") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise UsageError(f"manifest '{path}': not valid YAML: {' '.join(str(exc).split())}") from None
    elif suffix == ".toml":
        try:
            import tomllib
        except ImportError:  # Python 3.10
            import tomli as tomllib  # type: ignore[no-redef]
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(f"manifest '{path}': not valid TOML: {exc}") from None
    else:
        raise UsageError(f"manifest '{path}': expected a .toml, .yaml or .yml file")
    if not isinstance(data, Mapping):
        raise UsageError(f"manifest '{path}': expected a table with a 'models' list at the top")
    return parse_manifest(data, base=path.resolve().parent, path=path)


def parse_manifest(data: Mapping[str, object], *, base: Path, path: Path | None = None) -> Manifest:
    """Check the manifest's data against the schema and apply the defaults.

    Raises:
        UsageError: naming the model (by name or position) and the offending key.
    """
    where = f"manifest '{path}'" if path is not None else "manifest"
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise UsageError(f"{where}: unknown top-level key(s) {', '.join(map(repr, unknown))}; "
                         f"expected {', '.join(sorted(_TOP_KEYS))}")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, Mapping):
        raise UsageError(f"{where}: 'defaults' must be a table")
    _check_keys(defaults, f"{where}: [defaults]", allow_name=False)
    entries = data.get("models")
    if not isinstance(entries, list) or not entries:
        raise UsageError(f"{where}: needs a non-empty 'models' list ([[models]] in TOML)")
    models: list[ModelSpec] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries, 1):
        if not isinstance(entry, Mapping):
            raise UsageError(f"{where}: model #{i} must be a table")
        label = f"{where}: model #{i}" + (f" '{entry['name']}'" if isinstance(entry.get("name"), str) else "")
        _check_keys(entry, label, allow_name=True)
        merged = {**defaults, **entry}
        merged["options"] = _table(entry.get("options"), label)
        spec = _spec(merged, base, label)
        spec = _with_defaults(spec, _default_options(defaults, f"{where}: [defaults]"))
        if spec.name in seen:
            raise UsageError(f"{label}: the name '{spec.name}' is already used by model #{seen[spec.name]}; "
                             "give each model a unique name")
        seen[spec.name] = i
        models.append(spec)
    output = data.get("output", "convert-batch")
    if not isinstance(output, str) or not output:
        raise UsageError(f"{where}: 'output' must be a folder name")
    return Manifest(path=Path(path) if path else base, models=tuple(models), output=(base / output))


def _format_options() -> set[str]:
    """Every option some format takes (``caffe_flavor``, ``decode`` ...), by its keyword name."""
    names = {o.dest for n in formats.frontend_names() for o in formats.frontend_info(n).options}
    names |= {o.dest for n in formats.exporter_names() for o in formats.exporter_info(n).options}
    return names | {"device", *_OPTION_KEYS}


def _default_options(defaults: Mapping[str, object], label: str) -> dict[str, object]:
    """The ``options`` of ``[defaults]``; one that no format takes (a misspelling) is refused here."""
    options = _table(defaults.get("options"), label)
    unknown = sorted(set(options) - _format_options())
    if unknown:
        raise UsageError(f"{label}: no format takes the option(s) {', '.join(map(repr, unknown))} "
                         "(`convert --help` lists each format's options)")
    return options


def _with_defaults(spec: ModelSpec, defaults: dict[str, object]) -> ModelSpec:
    """Give ``spec`` the default options its route takes (``caffe_flavor`` only where it converts to Caffe):
    a default applies to the routes that take it; the model's own options win and are all kept."""
    if not defaults:
        return spec
    source = spec.source
    if source is None:  # guessed from the files, as the conversion will
        try:
            source = formats.detect_format([Path(p) for p in spec.files])
        except UsageError:  # the row says why when it runs: every default goes along
            return replace(spec, options={**defaults, **spec.options})
    takes = {o.dest for o in formats.frontend_info(source).options}
    takes |= {o.dest for o in formats.exporter_info(spec.dest).options} | {"device", *_OPTION_KEYS}
    return replace(spec, options={**{k: v for k, v in defaults.items() if k in takes}, **spec.options})


def _check_keys(entry: Mapping[str, object], label: str, *, allow_name: bool) -> None:
    allowed = set(MODEL_KEYS) - (set() if allow_name else {"name", "files"})
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise UsageError(f"{label}: unknown key(s) {', '.join(map(repr, unknown))}; format options go in "
                         f"'options', and the keys are: {', '.join(sorted(allowed))}")


def _table(value: object, label: str) -> dict[str, object]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UsageError(f"{label}: 'options' must be a table of format options")
    return {str(k).replace("-", "_"): v for k, v in value.items()}


def _route(merged: Mapping[str, object], label: str) -> tuple[str | None, str]:
    src, dst = merged.get("from"), merged.get("to")
    route = merged.get("route")
    if route is not None:
        if not isinstance(route, str):
            raise UsageError(f"{label}: 'route' must be a string such as 'pytorch:onnx'")
        sep = "->" if "->" in route else ":"
        left, found, right = route.partition(sep)
        if not found or not right:
            raise UsageError(f"{label}: route '{route}' should read SRC:DST or SRC->DST")
        src, dst = left or None, right
    if not isinstance(dst, str) or not dst:
        raise UsageError(f"{label}: no destination: give 'route' (e.g. 'onnx:caffe') or 'to'")
    try:
        source = formats.frontend(src).name if isinstance(src, str) and src else None
        return source, formats.exporter(dst).name
    except UsageError as exc:
        raise UsageError(f"{label}: {exc}") from None


def _float(merged: Mapping[str, object], key: str, default: float, label: str) -> float:
    value = merged.get(key, default)
    try:  # YAML 1.1 reads 1e-4 (no dot) as a string
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise UsageError(f"{label}: '{key}' must be a number, not {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise UsageError(f"{label}: '{key}' must be a non-negative number, not {value!r}")
    return number


def _shapes(value: object, label: str) -> dict[str, tuple[int, ...]]:
    if value is None:
        return {}
    items: list[tuple[str, object]]
    if isinstance(value, Mapping):
        items = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, (str, list)):
        texts = [value] if isinstance(value, str) else value
        items = []
        for text in texts:
            name, sep, dims = str(text).rpartition("=")
            if not sep:
                raise UsageError(f"{label}: input_shape '{text}' should read NAME=1,3,224,224")
            items.append((name, dims))
    else:
        raise UsageError(f"{label}: input_shape must be a table {{name = [dims]}} or a list of 'NAME=dims'")
    shapes: dict[str, tuple[int, ...]] = {}
    for name, dims in items:
        parts = dims.replace("x", ",").split(",") if isinstance(dims, str) else dims
        try:
            shape = tuple(int(d) for d in parts)  # type: ignore[union-attr]
        except (TypeError, ValueError):
            raise UsageError(f"{label}: input_shape of '{name}' must be a list of integers, not {dims!r}") from None
        if not shape or any(d <= 0 for d in shape):
            raise UsageError(f"{label}: input_shape of '{name}': dimensions must be positive integers")
        shapes[name] = shape
    return shapes


def _spec(merged: dict[str, object], base: Path, label: str) -> ModelSpec:
    src, dst = _route(merged, label)
    files = merged.get("files")
    if isinstance(files, str):
        files = [files]
    if not isinstance(files, list) or not files or not all(isinstance(f, str) and f for f in files):
        raise UsageError(f"{label}: 'files' must list the model's files (a string for one)")
    paths = tuple(str(base / f) for f in files)
    name = merged.get("name", Path(files[0].rstrip("/")).stem)
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        raise UsageError(f"{label}: 'name' must be a non-empty string without '/'")
    inputs = merged.get("inputs")
    if inputs is not None and not isinstance(inputs, str):
        raise UsageError(f"{label}: 'inputs' must be the path of a .npz or .npy file")
    for key in ("check", "fold_bn"):
        if not isinstance(merged.get(key, True), bool):
            raise UsageError(f"{label}: '{key}' must be true or false")
    locate = merged.get("locate")
    if locate is not None and not isinstance(locate, bool):
        raise UsageError(f"{label}: 'locate' must be true or false")
    on = merged.get("on", [])
    if not isinstance(on, (str, list)) or not all(isinstance(t, str) for t in ([on] if isinstance(on, str) else on)):
        raise UsageError(f"{label}: 'on' must name deployment targets: 'openvino,ncnn' or a list of names")
    from convert.targets import parse_targets

    targets = tuple(parse_targets(on))
    seed = merged.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise UsageError(f"{label}: 'seed' must be an integer")
    options = dict(merged["options"])  # type: ignore[call-overload]
    for key in _OPTION_KEYS:
        if key in merged:
            options[key] = merged[key]
    return ModelSpec(
        name=name, dest=dst, files=paths, source=src,
        inputs=str(base / inputs) if inputs else None,
        input_shapes=_shapes(merged.get("input_shape"), label),
        tol=_float(merged, "tol", DEFAULT_TOL, label), atol=_float(merged, "atol", DEFAULT_ATOL, label),
        rtol=_float(merged, "rtol", DEFAULT_RTOL, label), seed=seed,
        check=bool(merged.get("check", True)), locate=locate, on=targets, fold_bn=bool(merged.get("fold_bn", True)),
        timeout=_float(merged, "timeout", 0.0, label) or None,
        options=options,
    )
