"""convert.ir loads onnx-ir without importing sympy (half of a conversion's start-up); sympy is
imported on its first real use, and symbolic dimension arithmetic gives sympy's own answers."""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import sys
import convert.ir
assert "sympy" not in sys.modules, "convert.ir imported sympy"
import onnx_ir
dim = onnx_ir.SymbolicDim("max(N, 3) + 1")
assert "sympy" not in sys.modules, "a SymbolicDim made from a string imported sympy"
assert dim.evaluate({"N": 5}) == 6 and dim.evaluate({"N": 1}) == 4
total = (dim * 2) // 3
import sympy
assert isinstance(total._expr, sympy.Expr)
assert total.evaluate({"N": 7}) == 16 // 3
print("ok", type(sys.modules["sympy"]).__name__)
"""


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_convert_ir_does_not_import_sympy_until_used():
    assert _run(_PROBE).split() == ["ok", "module"]


def test_sympy_imported_first_is_left_alone():
    """A framework that imported sympy before us (torch does) keeps its module; onnx-ir uses it."""
    out = _run("import sympy, sys\nreal = sys.modules['sympy']\nimport convert.ir, onnx_ir\n"
               "assert sys.modules['sympy'] is real\nimport onnx_ir._core as core\nassert core.sympy is real\n"
               "print(onnx_ir.SymbolicDim('N').__add__(1))")
    assert out.strip() == "N + 1"
