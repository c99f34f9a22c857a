"""Output paths: whether one can be written, checked before any work (the API and every CLI command).

Standard library only, so that the CLI refuses a bad path without importing onnx-ir or numpy.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from ._errors import UsageError

__all__ = ["FOLDER_FORMATS", "check_writable", "default_output", "missing_folders"]


class _HasSuffix(Protocol):
    """An exporter's spec, or its catalog record: what the output's suffix is."""

    @property
    def suffix(self) -> str: ...


def check_writable(target: Path, what: str) -> None:
    """Refuse, before converting, an output whose folder cannot take a new file.

    Catches what a permission check misses when running as root: a parent that is a file,
    /proc or /sys, a read-only file system. A folder still to be made (``-o newdir/``) is checked
    at its nearest existing ancestor.

    Raises:
        UsageError: naming the path and why.
    """
    folder = target.parent if str(target.parent) else Path(".")
    probe_dir = folder
    while not probe_dir.exists() and probe_dir != probe_dir.parent:
        probe_dir = probe_dir.parent
    if not probe_dir.is_dir():
        raise UsageError(
            f"cannot write {what} '{target}': '{probe_dir}' is a file, not a folder. Choose another path."
        )
    if target.is_dir() and what != "the output":
        raise UsageError(f"cannot write {what} '{target}': it is a folder. Choose a file name.")
    try:
        fd, probe = tempfile.mkstemp(dir=probe_dir, prefix=".convert-probe-")
    except OSError as exc:
        raise UsageError(
            f"cannot write {what} '{target}': folder '{probe_dir}' does not take new files "
            f"({exc.strerror or type(exc).__name__}). Choose another path."
        ) from None
    os.close(fd)
    os.unlink(probe)


def missing_folders(target: Path) -> list[Path]:
    """Return the folders above ``target`` that do not exist yet, outermost first."""
    missing: list[Path] = []
    folder = target.parent
    while str(folder) and not folder.exists() and folder != folder.parent:
        missing.insert(0, folder)
        folder = folder.parent
    return missing


#: Source formats whose input is a model folder that converts to a folder: ``out/model<suffix>`` beside
#: the files that go with it (the ``hf`` route: external data and genai_config.json).
FOLDER_FORMATS = frozenset({"hf"})


def default_output(paths: Sequence[Path], ex: _HasSuffix, out: str | Path | None, *,
                   source_format: str | None = None) -> Path:
    """Return where the converted model goes: ``out``, ``out/<stem><suffix>`` or ``./<stem><suffix>``.

    A model folder of ``FOLDER_FORMATS`` goes to ``out/model<suffix>`` (``out`` a folder, made if need
    be; ``out`` ending in the suffix names the file), by default ``./<folder>-<format>/``.
    """
    first = paths[0]
    if source_format in FOLDER_FORMATS and first.is_dir():
        if out is None:
            target = Path.cwd() / f"{first.name}-{ex.suffix.lstrip('.')}" / ("model" + ex.suffix)
        elif str(out).endswith(ex.suffix) and not Path(out).is_dir():
            target = Path(out)
        else:
            target = Path(out) / ("model" + ex.suffix)
        if target.parent.resolve() == first.resolve():
            raise UsageError(f"the output {target} would be written into the model folder '{first}' it is converted "
                             "from; choose another folder with -o")
        return target
    stem = (first.resolve().name if first.is_dir() else first.stem) or "model"  # `convert tf:onnx .` in a SavedModel
    if out is None:
        target = Path.cwd() / (stem + ex.suffix)
    else:
        target = Path(out)
        if target.is_dir() or str(out).endswith(("/", os.sep)):  # `-o newdir/` names a folder, made if need be
            if not str(out).endswith(("/", os.sep)) and any(p.is_dir() and target.resolve() == p.resolve()
                                                            for p in paths):
                raise UsageError(f"-o {out} is the folder of the model being converted: nothing is written into "
                                 f"it unasked. Write -o {out}/ to put {stem}{ex.suffix} there, or name a file "
                                 f"(-o {out}{ex.suffix})")
            target = target / (stem + ex.suffix)
    if any(target.resolve() == p.resolve() for p in paths if p.exists()):
        raise UsageError(f"the output {target} would overwrite the input; choose another path with -o")
    return target
