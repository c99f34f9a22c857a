"""Import onnx-ir without importing sympy: sympy is loaded on its first real use.

onnx-ir 1.x imports sympy when it loads (``_core.py`` for ``SymbolicDim`` arithmetic,
``_symbolic_shapes.py`` for the functions a dimension expression may call). Importing sympy is
0.2-0.6 s of CPU, half of every conversion's start-up, and most conversions never do symbolic
arithmetic on a dimension: a 1.5 GiB ONNX copy spends more time importing sympy than copying
(docs/startup.md, docs/performance.md). This is the hot path the issue asks to keep at ``cp``'s
speed, so we defer the import ourselves instead of accepting the library's cost.

While onnx-ir's modules load, ``sys.modules["sympy"]`` is a stand-in. What they read from it at
import time (``sympy.Max`` and the like, stored in a table) are callables that import sympy when
called. Afterwards the stand-in leaves ``sys.modules`` (so ``import sympy`` anywhere else, torch
included, gets the real module) and forwards every attribute it is asked for to the real sympy,
imported on first use. If onnx-ir reads sympy in any other way at import (a newer release), the
plain import is done instead: slower, never wrong.
"""

from __future__ import annotations

import importlib
import sys
import types

from .gcwindow import existing_objects_spared

__all__ = ["import_onnx_ir"]  # called once, below, when convert.ir loads

# onnx-ir modules that the toolkit imports at load; all of them load inside the window.
_MODULES = ("onnx_ir", "onnx_ir.convenience", "onnx_ir.external_data", "onnx_ir.passes.common")


def _real_sympy() -> types.ModuleType:
    module = sys.modules.get("sympy")
    if module is None or isinstance(module, _SympyLater):
        sys.modules.pop("sympy", None)
        module = importlib.import_module("sympy")
    return module


class _Deferred:
    """A sympy function read at import time: the real one is looked up when it is called."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *args: object, **kwargs: object) -> object:
        return getattr(_real_sympy(), self._name)(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<sympy.{self._name}, loaded on first call>"


class _SympyLater(types.ModuleType):
    """``sympy`` as onnx-ir's modules see it: deferred names while they load, the real module after."""

    def __init__(self) -> None:
        super().__init__("sympy")
        self.__dict__["_loading"] = True

    def __getattr__(self, name: str) -> object:
        if self.__dict__["_loading"]:
            if name.startswith("__"):  # __path__, __spec__: a submodule import -> plain import
                raise AttributeError(name)
            return _Deferred(name)
        return getattr(_real_sympy(), name)


def import_onnx_ir() -> types.ModuleType:
    """Import onnx-ir (and the submodules the toolkit uses) and return it; sympy stays unloaded."""
    if "onnx_ir" in sys.modules or "sympy" in sys.modules:
        for name in _MODULES:
            importlib.import_module(name)
        return sys.modules["onnx_ir"]
    stand_in = _SympyLater()
    sys.modules["sympy"] = stand_in
    try:
        for name in _MODULES:
            importlib.import_module(name)
    except Exception:  # any surprise: forget the half-loaded modules, import plainly
        for name in [n for n in sys.modules if n == "onnx_ir" or n.startswith("onnx_ir.")]:
            del sys.modules[name]
        sys.modules.pop("sympy", None)
        for name in _MODULES:
            importlib.import_module(name)
        return sys.modules["onnx_ir"]
    finally:
        stand_in.__dict__["_loading"] = False
        if sys.modules.get("sympy") is stand_in:
            del sys.modules["sympy"]
    return sys.modules["onnx_ir"]


# importing onnx-ir and onnx allocates enough to set off a full collection, which in a process that
# has imported torch walks its 300,000+ objects (0.15 s: more than a small model's whole capture):
# they are spared, as during a conversion (gcwindow.py)
with existing_objects_spared():
    import_onnx_ir()
