"""The table of formats: which package reads, writes and runs each one.

Packages are imported on first use, so ``import convert`` and ``convert --help`` import no
framework. A format whose package is absent from this installation is simply not listed.
What the built-in formats declare (names, suffixes, options, op tables) is read from
``convert.catalog``'s cache, so listing them imports neither the packages nor onnx-ir.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from . import catalog
from ._errors import UsageError

if TYPE_CHECKING:
    from .ir import ExporterSpec, FrontendSpec

__all__ = [
    "ALIASES",
    "claimed_format_mismatch",
    "detect_format",
    "exporter",
    "exporter_info",
    "exporter_names",
    "frontend",
    "frontend_info",
    "frontend_names",
    "install_hint",
    "missing_extras",
    "missing_framework",
    "normalize",
    "noun",
    "object_frontend",
    "refuse_claimed_mismatch",
    "register_exporter",
    "register_frontend",
    "routes",
    "runtime_module",
]

_FRONTENDS = {
    "onnx": "convert.frontends.onnx",
    "pytorch": "convert.frontends.pytorch",
    "darknet": "convert.frontends.darknet",
    "caffe": "convert.frontends.caffe",
    "paddle": "convert.frontends.paddle",
    "tensorflow": "convert.frontends.tensorflow",
    "tflite": "convert.frontends.tflite",
    "hf": "convert.frontends.hf",
}
_EXPORTERS = {
    "onnx": "convert.exporters.onnx",
    "caffe": "convert.exporters.caffe",
}
# Optional packages by import name: what to call them and what to install (the extras of
# pyproject.toml). A ModuleNotFoundError for one of them is the user's set-up, not a bug.
_OPTIONAL = {
    "torch": ("PyTorch", "'convert-toolkit[torch]'"),
    "torchvision": ("torchvision", "'convert-toolkit[vision]'"),
    "timm": ("timm", "'convert-toolkit[vision]'"),
    "transformers": ("Hugging Face transformers", "'convert-toolkit[hf]'"),
    "paddle": ("PaddlePaddle", "'convert-toolkit[paddle]'"),
    "paddle2onnx": ("paddle2onnx", "'convert-toolkit[paddle2onnx]'"),
    "tensorflow": ("TensorFlow", "'convert-toolkit[tensorflow]'"),
    "keras": ("Keras (with TensorFlow)", "'convert-toolkit[tensorflow]'"),
    "ai_edge_litert": ("LiteRT", "'convert-toolkit[tflite]'"),
    "cv2": ("OpenCV", "'convert-toolkit[caffe]'"),
    "ray": ("Ray", "'convert-toolkit[ray]'"),
    "yaml": ("PyYAML", "'convert-toolkit[yaml]'"),
    "onnxscript": ("onnxscript", "'convert-toolkit[bench]'"),
}
# The built-in formats, as shipped: the ones convert.catalog caches.
_BUILTIN = {"frontends": dict(_FRONTENDS), "exporters": dict(_EXPORTERS)}
# What a format needs beyond the core install, to read it ("read") or to run the parity check
# ("check"): any one of the import names; `convert formats` says when none is installed.
_NEEDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "pytorch": ("read", ("torch",)),
    "tensorflow": ("read", ("tensorflow",)),
    "paddle": ("check", ("paddle",)),
    "caffe": ("check", ("cv2",)),
    "darknet": ("check", ("cv2",)),  # or Debian's libdarknet, which find_spec cannot see
    "tflite": ("check", ("ai_edge_litert", "tensorflow")),
    "hf": ("read", ("transformers",)),
}
# What a destination's parity check needs (the converted file runs in it).
_DEST_NEEDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "caffe": ("check", ("cv2",)),
}
# Real Caffe (scripts/build_caffe) runs Caffe files without OpenCV.
_REAL_CAFFE = "or real Caffe: scripts/build_caffe"
ALIASES = {"torch": "pytorch", "pt": "pytorch", "paddlepaddle": "paddle", "pd": "paddle",
           "tf": "tensorflow", "keras": "tensorflow", "litert": "tflite", "huggingface": "hf",
           "transformers": "hf"}


def register_frontend(name: str, module: str) -> None:
    """Make the frontend of module ``module`` (it exposes ``FRONTEND``) readable as format ``name``.

    Installed packages can do the same without code: an entry point ``name = "module"`` in the
    group ``convert.frontends`` (``convert.exporters`` for ``register_exporter``).
    """
    _FRONTENDS[normalize(name)] = module


def register_exporter(name: str, module: str) -> None:
    """Make the exporter of module ``module`` (it exposes ``EXPORTER``) writable as format ``name``."""
    _EXPORTERS[normalize(name)] = module


@functools.cache
def _add_entry_points() -> None:
    """Add the installed packages' formats (entry points), once, on the first lookup: not at import."""
    for group, table in (("convert.frontends", _FRONTENDS), ("convert.exporters", _EXPORTERS)):
        for name, value in catalog.entry_points(group).items():
            table.setdefault(name, value)


def normalize(name: str) -> str:
    """Return the canonical spelling of a format name ('torch' -> 'pytorch')."""
    key = name.strip().lower()
    return ALIASES.get(key, key)


def _spec(table: dict[str, str], name: str, attr: str) -> object | None:
    if name not in table:  # entry points never replace a name already known (setdefault)
        _add_entry_points()
    module = table.get(name)
    if module is None:
        return None
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            return None  # this package is not part of the installation
        raise
    return getattr(mod, attr, None)


def _cached(kind: str, name: str) -> catalog.FormatInfo | None:
    """The cached declarations of built-in format ``name``; None for a format read live."""
    table = _FRONTENDS if kind == "frontends" else _EXPORTERS
    module = table.get(name)
    if module is None or _BUILTIN[kind].get(name) != module:
        return None
    return catalog.load(_BUILTIN)[kind].get(module)


def _is_frontend(spec: object) -> bool:
    if spec is None:
        return False
    from .ir import FrontendSpec  # already imported with the package that made ``spec``

    return isinstance(spec, FrontendSpec)


def _is_exporter(spec: object) -> bool:
    if spec is None:
        return False
    from .ir import ExporterSpec  # already imported with the package that made ``spec``

    return isinstance(spec, ExporterSpec)


def frontend(name: str) -> FrontendSpec:
    """Return the frontend for ``name`` or raise ``UsageError`` listing the known ones."""
    spec = _spec(_FRONTENDS, normalize(name), "FRONTEND")
    if spec is None or not _is_frontend(spec):
        raise UsageError(f"unknown source format '{name}'. Known: {', '.join(frontend_names())}")
    return spec  # type: ignore[return-value]


def exporter(name: str) -> ExporterSpec:
    """Return the exporter for ``name`` or raise ``UsageError`` listing the known ones."""
    spec = _spec(_EXPORTERS, normalize(name), "EXPORTER")
    if spec is None or not _is_exporter(spec):
        raise UsageError(f"unknown destination format '{name}'. Known: {', '.join(exporter_names())}")
    return spec  # type: ignore[return-value]


def _info_of(spec: object) -> catalog.FormatInfo:
    """A live spec's declarations in the catalog's form (for formats that are not cached)."""
    return catalog.FormatInfo(
        name=spec.name, description=spec.description,  # type: ignore[attr-defined]
        options=tuple(spec.options),  # type: ignore[attr-defined]
        ops=tuple(spec.ops()),  # type: ignore[attr-defined]
        suffixes=tuple(getattr(spec, "suffixes", ())), suffix=getattr(spec, "suffix", ""),
        companions=tuple(getattr(spec, "companions", ())),
    )


def frontend_info(name: str) -> catalog.FormatInfo:
    """Return what frontend ``name`` declares (description, suffixes, options, ops), cheaply.

    Raises:
        UsageError: no such source format.
    """
    key = normalize(name)
    info = _cached("frontends", key)
    return info if info is not None and info.ops is not None else _info_of(frontend(key))


def exporter_info(name: str) -> catalog.FormatInfo:
    """Return what exporter ``name`` declares (description, suffix, options, ops), cheaply.

    Raises:
        UsageError: no such destination format.
    """
    key = normalize(name)
    info = _cached("exporters", key)
    return info if info is not None and info.ops is not None else _info_of(exporter(key))


def frontend_names() -> list[str]:
    """Return the source formats available in this installation."""
    _add_entry_points()
    return [n for n in _FRONTENDS
            if _cached("frontends", n) is not None or _is_frontend(_spec(_FRONTENDS, n, "FRONTEND"))]


def exporter_names() -> list[str]:
    """Return the destination formats available in this installation."""
    _add_entry_points()
    return [n for n in _EXPORTERS
            if _cached("exporters", n) is not None or _is_exporter(_spec(_EXPORTERS, n, "EXPORTER"))]


def missing_extras(name: str, *, destination: bool = False) -> tuple[str, str] | None:
    """Return ``(what, message)`` when format ``name`` needs a package this installation lacks.

    ``what`` is ``"read"`` (it cannot be converted at all) or ``"check"`` (it converts, but its
    parity check cannot run). ``destination``: as a destination (the converted file's runtime).
    Looks the package up with ``find_spec``: nothing is imported.
    """
    key = normalize(name)
    need = (_DEST_NEEDS if destination else _NEEDS).get(key)
    if need is None:
        return None
    what, modules = need
    for module in modules:
        try:
            if importlib.util.find_spec(module) is not None:
                return None
        except (ImportError, ValueError):
            continue
    caffe = key == "caffe"
    if caffe:
        from ._caffe_home import find_caffe

        if find_caffe() is not None:
            return None
    return what, f"needs {install_hint(modules[0])}" + (f" ({_REAL_CAFFE})" if caffe else "")


def install_hint(module: str) -> str:
    """Return what to install for optional package ``module``: ``PyTorch: pip install 'convert-toolkit[torch]'``.

    The one place the CLI, the runtimes and ``convert formats`` take an install hint from.
    """
    label, install = _OPTIONAL[module]
    return f"{label}: pip install {install}"


def routes() -> list[tuple[str, str]]:
    """Return every ``(source, destination)`` pair that works in this installation."""
    return [(s, d) for s in frontend_names() for d in exporter_names()]


def runtime_module(name: str) -> str | None:
    """Return the module path of the reference runtime of format ``name`` (its frontend names it)."""
    spec = _spec(_FRONTENDS, normalize(name), "FRONTEND")
    return (spec.runtime or None) if _is_frontend(spec) else None  # type: ignore[attr-defined]


def object_frontend(obj: object) -> FrontendSpec:
    """Return the frontend that converts the in-memory model ``obj`` (a ``torch.nn.Module``).

    Raises:
        UsageError: no frontend of this installation converts in-memory models.
    """
    # The formats already known first, in order: asking them needs neither the installed packages'
    # entry points nor the catalog, whose fingerprint stats the toolkit's sources (4 ms of a 0.1 s
    # conversion). Entry points only add names after these, so the first match is the same.
    specs = [spec for name in list(_FRONTENDS) if _is_frontend(spec := _spec(_FRONTENDS, name, "FRONTEND"))]
    for spec in specs:  # a frontend for some objects only (hf: a PreTrainedModel) first, when it claims this one
        claims = spec.claims_object  # type: ignore[attr-defined]
        if claims is not None and spec.load_object is not None and claims(obj):  # type: ignore[attr-defined]
            return spec  # type: ignore[return-value]
    for spec in specs:
        if spec.load_object is not None and spec.claims_object is None:  # type: ignore[attr-defined]
            return spec  # type: ignore[return-value]
    for name in frontend_names():
        spec = frontend(name)
        if spec.load_object is not None and (spec.claims_object is None or spec.claims_object(obj)):
            return spec
    raise UsageError(f"cannot convert an in-memory {type(obj).__name__}: pass a file path, or install the "
                     "frontend that reads it (pip install 'convert-toolkit[torch]')")


def missing_framework(exc: BaseException) -> str | None:
    """Return the one-line message for ``exc`` when it says an optional framework is not installed.

    ``exc`` is a ``ModuleNotFoundError`` for a known optional package itself (``torch``, ``cv2``
    ...), raised anywhere under a conversion; anything else (a missing module of our own, a
    missing submodule of an installed framework) returns None: that is not the user's set-up.
    """
    if not isinstance(exc, ModuleNotFoundError) or not exc.name or exc.name not in _OPTIONAL:
        return None
    what, install = _OPTIONAL[exc.name]
    return f"this needs {what}, which is not installed (no module named '{exc.name}'): pip install {install}"


# How a message names a file of each format: "m.onnx is an ONNX model, not a Darknet cfg".
_NOUNS = {"onnx": "an ONNX model", "darknet": "a Darknet cfg", "caffe": "a Caffe deploy prototxt",
          "pytorch": "a PyTorch file", "paddle": "a Paddle inference model", "tensorflow": "a TensorFlow model",
          "tflite": "a TFLite flatbuffer"}


def noun(name: str) -> str:
    """Return how a message names a file of format ``name`` ('a Darknet cfg')."""
    return _NOUNS.get(normalize(name), f"a {name} model")


def claimed_format_mismatch(claimed: str, paths: Sequence[Path]) -> str | None:
    """Return the format the files ``paths`` are when it is not ``claimed`` (a route naming the wrong
    source: `convert darknet:onnx m.onnx`), or None when they may well be ``claimed``'s.

    They may be when one has a suffix the claimed format reads, its sniffer takes one, or the files
    are not recognised at all (the frontend then says what it expected).
    """
    claimed = normalize(claimed)
    existing = [Path(p) for p in paths if Path(p).exists()]
    if not existing or claimed not in frontend_names():
        return None
    if any(p.suffix.lower() in frontend_info(claimed).suffixes for p in existing):
        return None
    try:
        detected = detect_format(existing)
    except UsageError:
        return None
    if detected == claimed:
        return None
    for p in existing:
        try:
            if frontend(claimed).sniff(p):
                return None
        except (OSError, ValueError):
            continue
    return detected


def refuse_claimed_mismatch(claimed: str, paths: Sequence[Path], dest: str) -> None:
    """Refuse a source format the files are not, naming the one they are (before any output path check).

    Raises:
        UsageError: ``m.onnx is an ONNX model, not a Darknet cfg: convert it as onnx (onnx:onnx)``.
    """
    detected = claimed_format_mismatch(claimed, paths)
    if detected is not None:
        shown = ", ".join(str(p) for p in paths)
        raise UsageError(f"{shown} {'is' if len(paths) == 1 else 'are'} {noun(detected)}, not "
                         f"{noun(claimed)}: convert {'it' if len(paths) == 1 else 'them'} as {detected} "
                         f"({detected}:{normalize(dest)}), or name no source format to have it detected")


def detect_format(paths: Sequence[Path]) -> str:
    """Guess the source format of ``paths`` from suffixes, then from the frontends' sniffers."""
    names = frontend_names()
    for path in paths:
        for name in names:
            if path.suffix.lower() in frontend_info(name).suffixes:
                return name
    for path in paths:  # files, and folders (a SavedModel, a Paddle model folder)
        for name in names:
            if not path.exists():
                continue
            try:
                if frontend(name).sniff(path):
                    return name
            except OSError:  # a sniffer that opens a file, handed a folder
                continue
    shown = ", ".join(str(p) for p in paths)
    raise UsageError(f"cannot tell the format of {shown}: name it, e.g. 'darknet:onnx' or --from darknet")
