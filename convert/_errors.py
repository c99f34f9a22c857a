"""The error classes of ``convert.ir.errors``, without importing the rest of ``convert.ir``.

``convert/ir/__init__.py`` imports onnx-ir, and onnx-ir imports sympy when it is imported (upstream:
``onnx_ir/_core.py`` starts with ``import sympy``, in onnx-ir 1.1.0; ``ir/_sympy_later.py`` defers that
one), plus onnx and numpy: about 0.2 s of CPU even so, more than the whole of ``convert --help``
may cost (docs/startup.md).
The CLI and ``convert.formats`` raise and catch ``UsageError``/``ConvertError`` on paths that need no
model (unknown route, bad option), so they load ``ir/errors.py`` (standard library only) by itself,
under its own name. When ``convert.ir`` is imported later, its ``from .errors import ...`` finds
that module in ``sys.modules``: the classes are the same objects either way.
"""

from __future__ import annotations

import errno
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = [
    "ConversionError",
    "ConvertError",
    "ExportError",
    "ModelFormatError",
    "PassError",
    "UnsupportedOpsError",
    "UsageError",
    "address_space_left",
    "errors_module",
    "printable",
    "resource_exhausted",
    "shown",
]

_NAME = "convert.ir.errors"


def errors_module() -> ModuleType:
    """Return ``convert.ir.errors``, loading its file alone when ``convert.ir`` is not imported yet."""
    module = sys.modules.get(_NAME)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(_NAME, Path(__file__).with_name("ir") / "errors.py")
    if spec is None or spec.loader is None:  # pragma: no cover - the file ships with the package
        return importlib.import_module(_NAME)
    module = importlib.util.module_from_spec(spec)
    sys.modules[_NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(_NAME, None)
        raise
    return module


_errors = errors_module()
ConvertError = _errors.ConvertError
UsageError = _errors.UsageError
ModelFormatError = _errors.ModelFormatError
UnsupportedOpsError = _errors.UnsupportedOpsError
ConversionError = _errors.ConversionError
PassError = _errors.PassError
ExportError = _errors.ExportError
printable = _errors.printable
shown = _errors.shown


_DISK_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
# The loader's words when a shared library cannot be mapped (``import torch`` under ``ulimit -v``: its
# libraries alone map more than 2 GiB): an ImportError, but the machine's limit, not a missing package.
_MAP_FAILED = "failed to map segment from shared object"


def _mib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _fsize_limit() -> str:
    """' (files limited to 8 MiB: ulimit -f)' when the process has a file size limit, else ''."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):  # no resource module (Windows)
        return ""
    return f" (files limited to {_mib(soft)}: ulimit -f)" if soft != resource.RLIM_INFINITY else ""


def address_space_left() -> int | None:
    """Return the bytes of address space the process may still map under ``ulimit -v``, or None
    when it has no such limit (or the platform cannot tell)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft == resource.RLIM_INFINITY:
            return None
        with open("/proc/self/status") as status:
            size = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
    except (ImportError, OSError, ValueError, StopIteration):  # no resource module, no /proc
        return None
    return max(soft - size, 0)


def resource_exhausted(exc: BaseException) -> str | None:
    """Say which of the machine's limits ``exc`` ran into (memory, address space, disk), or None.

    ``exc`` counts when it, or an exception it was raised from or while handling, is a
    ``MemoryError`` or an ``OSError`` for no memory (``mmap`` under ``ulimit -v``), a full disk or a
    file over the size limit (``ulimit -f``).
    These are the machine's limits, not bugs: the CLI says so in one line, exit 2 (1 for the check).
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, MemoryError) or (isinstance(current, OSError) and current.errno == errno.ENOMEM) or (
                isinstance(current, (ImportError, OSError)) and _MAP_FAILED in str(current)):
            limit = ""
            try:
                import resource

                soft = resource.getrlimit(resource.RLIMIT_AS)[0]
                if soft != resource.RLIM_INFINITY:
                    limit = f" (address space limited to {_mib(soft)}: ulimit -v)"
            except (ImportError, OSError, ValueError):  # no resource module (Windows)
                pass
            return f"out of memory{limit}"
        if isinstance(current, OSError) and current.errno == errno.EFBIG:
            return f"over the file size limit{_fsize_limit()}"
        if isinstance(current, OSError) and current.errno in _DISK_FULL:
            where = f" at '{current.filename}'" if current.filename else ""
            return f"the disk is full{where}"
        current = current.__cause__ or current.__context__
    return None
