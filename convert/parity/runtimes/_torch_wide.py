"""A TorchScript module's float64 run: its graph with every float32 it fixes made float64.

``module.double()`` widens a TorchScript module's parameters, not its code. A traced graph holds
the dtype of every tensor it creates or casts as a constant (``torch.zeros(..., dtype=6)``,
``x.to(6)``: 6 is float32), taken from the example it was traced with, so a traced torchvision
detector run in float64 meets a float32 tensor it made itself ("mat1 and mat2 must have the same
dtype" inside ``roi_heads``) and has no float64 run. The widened graph is the module's own,
inlined (``inlined_graph``), with each ``dtype`` argument that is the constant float32 and each
float32 tensor constant made float64; torch's interpreter runs it on a float64 copy of the module.
It is what the traced Python code computes in float64 (the dtypes it followed from its input are
float64 there), and code that fills a float32 tensor on purpose computes it in float64 too, which
only brings the arbiter nearer the exact values. Half-precision dtypes are left as they are.

``prune``: graph outputs the caller does not need are replaced by an empty tensor before dead code
elimination, so that the float64 run computes only what the verdict asks of it (a Mask R-CNN
whose masks passed does not paste them again in float64).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator

__all__ = ["widened_forward"]

_FLOAT32 = 6  # c10::ScalarType::Float
_FLOAT64 = 7  # c10::ScalarType::Double
_ARGS = re.compile(r"^[^(]*\((.*)\)\s*->")


def _nodes(block: object) -> Iterator[object]:
    for node in block.nodes():  # type: ignore[attr-defined]
        yield node
        for inner in node.blocks():
            yield from _nodes(inner)


def _arg_names(schema: str) -> list[str]:
    """The argument names of an operator schema, in order (``*`` separators left out)."""
    found = _ARGS.match(schema)
    if found is None:
        return []
    names, depth, part = [], 0, ""
    for ch in found.group(1) + ",":
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            words = part.strip().split("=")[0].split()
            if words and words[-1] != "*":
                names.append(words[-1])
            part = ""
        else:
            part += ch
    return names


def _widen(graph: object) -> int:
    """Make every float32 the graph fixes float64 (in place); return how many were changed."""
    import torch

    changed = 0
    for node in list(_nodes(graph)):
        kind = node.kind()  # type: ignore[attr-defined]
        if kind == "prim::Constant":
            out = node.output()  # type: ignore[attr-defined]
            if out.type().kind() == "TensorType":
                value = out.toIValue()
                if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
                    with graph.insert_point_guard(node):  # type: ignore[attr-defined]
                        wide = graph.insertConstant(value.double())  # type: ignore[attr-defined]
                    out.replaceAllUsesWith(wide)
                    changed += 1
            continue
        schema = node.schema()  # type: ignore[attr-defined]
        if schema == "(no schema)":
            continue
        for i, (value, name) in enumerate(zip(node.inputs(), _arg_names(schema), strict=False)):  # type: ignore[attr-defined]
            producer = value.node()
            if name == "dtype" and producer.kind() == "prim::Constant" and value.toIValue() == _FLOAT32:
                with graph.insert_point_guard(node):  # type: ignore[attr-defined]
                    wide = graph.insertConstant(_FLOAT64)  # type: ignore[attr-defined]
                node.replaceInput(i, wide)  # type: ignore[attr-defined]
                changed += 1
    return changed


def _prune(graph: object, keep: Collection[int], count: int) -> None:
    """Replace the leaves of the graph's (tuple) result outside ``keep`` by an empty tensor, then
    drop the code only they needed. Leaves are numbered as the flattened result; a result whose
    structure is not a flat tuple of ``count`` tensors is left whole."""
    import torch

    (ret,) = list(graph.outputs())  # type: ignore[attr-defined]
    tup = ret.node()
    if tup.kind() != "prim::TupleConstruct" or len(list(tup.inputs())) != count:
        return
    if any(v.type().kind() != "TensorType" for v in tup.inputs()):
        return
    empty = None
    for i in range(count):
        if i in keep:
            continue
        if empty is None:
            with graph.insert_point_guard(tup):  # type: ignore[attr-defined]
                empty = graph.insertConstant(torch.zeros(0, dtype=torch.float64))  # type: ignore[attr-defined]
        tup.replaceInput(i, empty)
    torch._C._jit_pass_dce(graph)  # type: ignore[attr-defined]


def widened_forward(module: object, keep: Collection[int] | None = None,
                    count: int = 0) -> Callable[..., object] | None:
    """Return a function running ``module`` (a TorchScript module) in float64 on float64 inputs:
    its forward graph widened (module docstring) on a float64 copy of its parameters; None when
    no float32 is fixed in the graph (``module.double()`` then runs it as it is). ``keep``: the
    indices, among the ``count`` flattened outputs, that the caller needs (None: all)."""
    import copy
    import warnings

    import torch

    graph = module.inlined_graph  # type: ignore[attr-defined]  # a copy: the module is not changed
    changed = _widen(graph)
    if keep is not None and count:
        _prune(graph, keep, count)
    if not changed and keep is None:
        return None
    fn = torch._C._create_function_from_graph("convert_float64_forward", graph)  # type: ignore[attr-defined]
    with warnings.catch_warnings():  # ``.double()`` of a ScriptModule reads each parameter's .grad
        warnings.filterwarnings("ignore", message=r".*\.grad attribute of a Tensor that is not a leaf")
        wide = copy.deepcopy(module).double()  # type: ignore[attr-defined]
    return lambda *args: fn(wide._c, *args)
