"""What the built-in formats declare (names, descriptions, suffixes, options, op tables), cached.

``convert --help``, ``convert formats`` and ``convert ops FORMAT`` need only these declarations, but
reading them from the frontend and exporter packages imports ``convert.ir``, hence onnx-ir, which
imports numpy and onnx at load (and sympy, deferred by ``ir/_sympy_later.py``; docs/startup.md):
0.2-0.8 s of CPU for a help text. So the
declarations are written once to a JSON file in the user's cache folder
(``$XDG_CACHE_HOME/convert-toolkit``, default ``~/.cache/convert-toolkit``) and read from there.

The file's name holds a fingerprint of what the declarations come from: every ``.py`` file of the
package (path, size, modification time) and the installed onnx (the ONNX frontend's op table is
its schemas). Any edit, upgrade or reinstall changes the fingerprint, and the next command that
needs the catalog rebuilds it from the packages themselves, so it is never stale; when the cache
folder cannot be written, the declarations are simply read from the packages every time.
Formats registered by entry points or ``formats.register_*`` are not cached: they are read live.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ._specs import OpSupport, OptionSpec

__all__ = ["FormatInfo", "OpRow", "OptionInfo", "build", "cache_path", "entry_points", "fingerprint", "load"]

_PACKAGE = Path(__file__).resolve().parent
_VERSION = 1  # of the file's layout
_KEEP = 8  # catalogs kept in the cache folder (one per fingerprint: edits and upgrades make new ones)
_TYPES: dict[str, type] = {"int": int, "float": float, "str": str}


# The classes the formats declare themselves with (``ir.OptionSpec``, ``ir.OpSupport``), under the
# names this module has always used.
OptionInfo = OptionSpec
OpRow = OpSupport


@dataclass(frozen=True, slots=True)
class FormatInfo:
    """What a frontend (``suffixes``) or an exporter (``suffix``, ``companions``) declares."""

    name: str
    description: str
    options: tuple[OptionInfo, ...]
    ops: tuple[OpRow, ...] | None  # None: the table could not be read when cached; read it live
    suffixes: tuple[str, ...] = ()
    suffix: str = ""
    companions: tuple[str, ...] = ()


def _sources() -> Iterable[Path]:
    for folder, dirs, files in os.walk(_PACKAGE):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                yield Path(folder) / name


_SCAN_MAX = 4096  # entries of a sys.path folder looked at; past them it counts, as every folder once did


def _holds_installs(folder: str) -> bool:
    """Whether ``folder`` holds an installed distribution's metadata (where entry points come from).
    A folder too large to look through cheaply (a data folder on PYTHONPATH) is taken to hold some."""
    try:
        with os.scandir(folder) as entries:
            for n, entry in enumerate(entries):
                if entry.name.endswith((".dist-info", ".egg-info")) or n >= _SCAN_MAX:
                    return True
    except OSError:  # not a folder (a zip on sys.path), or unreadable
        pass
    return False


@functools.cache
def fingerprint() -> str:
    """Return the fingerprint of the package's sources, the installed packages and onnx (stat, not contents)."""
    digest = hashlib.blake2b(digest_size=12)
    digest.update(f"{_VERSION} {sys.version_info[:2]}".encode())
    files = list(_sources())
    # The folders packages are installed in: installing, upgrading or removing one changes its folder,
    # hence the entry points below. Only folders that hold an installed package's metadata count: a
    # script's own folder (sys.path[0], or [1] after a sys.path.insert) changes whenever the script
    # writes a file beside it, which made each run rebuild the catalog (+0.07 s).
    files += [Path(p) for p in sys.path if p and _holds_installs(p)]
    with contextlib.suppress(ImportError, ValueError, AttributeError, TypeError):
        spec = importlib.util.find_spec("onnx")  # finds the package without importing it
        if spec is not None and spec.submodule_search_locations:
            files.append(Path(next(iter(spec.submodule_search_locations))) / "version.py")
    for path in files:
        try:
            st = path.stat()
        except OSError:
            continue
        digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def cache_path() -> Path:
    """Return the catalog file of this fingerprint (it may not exist yet).

    Raises:
        RuntimeError: there is no cache folder (no $XDG_CACHE_HOME and no home folder).
    """
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "convert-toolkit" / f"catalog-{fingerprint()}.json"


def _option(raw: dict[str, object]) -> OptionInfo:
    typ = raw.get("type")
    return OptionInfo(
        flag=str(raw["flag"]), dest=str(raw["dest"]), help=str(raw["help"]), is_flag=bool(raw["is_flag"]),
        default=raw.get("default"), type=_TYPES[str(typ)] if typ else None,
        choices=tuple(raw.get("choices") or ()), metavar=raw.get("metavar"),  # type: ignore[arg-type, call-overload]
    )


def _info(raw: dict[str, object]) -> FormatInfo:
    return FormatInfo(
        name=str(raw["name"]), description=str(raw["description"]),
        options=tuple(_option(o) for o in raw["options"]),  # type: ignore[attr-defined]
        ops=None if raw["ops"] is None else tuple(OpRow(*row) for row in raw["ops"]),  # type: ignore[attr-defined]
        suffixes=tuple(raw.get("suffixes") or ()), suffix=str(raw.get("suffix") or ""),  # type: ignore[call-overload]
        companions=tuple(raw.get("companions") or ()),  # type: ignore[call-overload]
    )


def _describe(spec: object, kind: str) -> dict[str, object] | None:
    """The JSON record of a live ``FrontendSpec``/``ExporterSpec``; None if it cannot be cached."""
    options = []
    for o in spec.options:  # type: ignore[attr-defined]
        typ = o.type.__name__ if o.type is not None else None
        if typ is not None and _TYPES.get(typ) is not o.type:
            return None
        if not isinstance(o.default, (str, int, float, bool, type(None))):
            return None
        options.append({"flag": o.flag, "dest": o.dest, "help": o.help, "is_flag": o.is_flag, "default": o.default,
                        "type": typ, "choices": list(o.choices), "metavar": o.metavar})
    try:
        ops: list[list[str]] | None = [[r.op, r.maps_to, r.notes] for r in spec.ops()]  # type: ignore[attr-defined]
    except Exception:  # a broken op table fails `convert ops` for that format (read live), not every command
        ops = None
    record: dict[str, object] = {
        "name": spec.name, "description": spec.description, "options": options,  # type: ignore[attr-defined]
        "ops": ops,
    }
    if kind == "frontends":
        record["suffixes"] = list(spec.suffixes)  # type: ignore[attr-defined]
    else:
        record["suffix"] = spec.suffix  # type: ignore[attr-defined]
        record["companions"] = list(spec.companions)  # type: ignore[attr-defined]
    return record


def build(modules: dict[str, dict[str, str]]) -> dict[str, object]:
    """Read the declarations of ``modules`` (``{"frontends": {name: module}, "exporters": ...}``) live.

    This imports every one of those packages (and so onnx-ir): it is what the cache saves.
    """
    data: dict[str, object] = {"frontends": {}, "exporters": {}}
    for kind, attr in (("frontends", "FRONTEND"), ("exporters", "EXPORTER")):
        for module in modules[kind].values():
            try:
                spec = getattr(importlib.import_module(module), attr, None)
            except ModuleNotFoundError:
                spec = None
            # None: not importable or not describable here; the caller reads it live.
            data[kind][module] = _describe(spec, kind) if spec is not None else None  # type: ignore[index]
    return data


def _read(path: Path) -> dict[str, object] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("version") == _VERSION else None


def _write(data: dict[str, object]) -> None:
    """Write the cache file atomically, and drop the oldest catalogs; a failure only costs speed."""
    with contextlib.suppress(OSError, RuntimeError):
        path = cache_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        import tempfile

        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".catalog-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(data, fh)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        old = sorted(path.parent.glob("catalog-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for stale in old[_KEEP:]:
            stale.unlink()


@functools.cache
def _data() -> dict[str, object]:
    """The cache file's contents (an empty catalog when it is missing or damaged), read once."""
    try:
        path = cache_path()
    except RuntimeError:  # no home folder: no cache, the packages are read every time
        return {"version": _VERSION}
    return _read(path) or {"version": _VERSION}


@functools.cache
def _catalog(modules_key: str) -> dict[str, dict[str, FormatInfo]]:
    modules = json.loads(modules_key)
    data = _data()
    wanted = {(kind, m) for kind in ("frontends", "exporters") for m in modules[kind].values()}
    have = {(k, m) for k in ("frontends", "exporters") for m in data.get(k, {})}  # type: ignore[attr-defined]
    if wanted <= have:
        try:
            return _records(data)
        except (KeyError, TypeError, ValueError, AttributeError):  # a damaged file: rebuilt, not trusted
            pass
    data.update(build(modules))
    _write(data)
    return _records(data)


def _records(data: dict[str, object]) -> dict[str, dict[str, FormatInfo]]:
    return {kind: {m: _info(r) for m, r in data.get(kind, {}).items() if r is not None}  # type: ignore[attr-defined]
            for kind in ("frontends", "exporters")}


def entry_points(group: str) -> dict[str, str]:
    """Return the installed packages' entry points of ``group`` (``name: module``), cached like the rest.

    ``importlib.metadata`` reads every installed distribution (about 15 ms of CPU); the cache is
    keyed by the folders they are installed in, so an install or removal is seen at once.
    """
    data = _data()
    cached = data.get("entry_points")
    if not isinstance(cached, dict):
        cached = data["entry_points"] = {}
    if not isinstance(cached.get(group), dict):
        from importlib.metadata import entry_points as installed

        cached[group] = {ep.name: ep.value for ep in installed(group=group)}
        _write(data)
    return {str(k): str(v) for k, v in cached[group].items()}


def load(modules: dict[str, dict[str, str]]) -> dict[str, dict[str, FormatInfo]]:
    """Return ``{"frontends": {module: FormatInfo}, "exporters": ...}`` for the built-in ``modules``.

    Read from the cache file when it is there, else built (importing the packages) and cached.
    A module that cannot be imported or described is absent: the caller reads it live.
    """
    return _catalog(json.dumps(modules, sort_keys=True))
