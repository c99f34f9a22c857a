"""Program facts: what the captures and the lowering both need to know about a program.

A program here is an FX graph (an ExportedProgram's, or the fast capture's ``TracedProgram``) or,
while the fast capture reads it, a TorchScript graph. Both the captures (``traced*.py``,
``tsfold.py``) and the lowering (``lower*.py``, ``controlflow.py``) ask the same questions of it,
answered here once:

- **which op a call is**: ``op_key`` ('aten.conv2d', 'getitem'), and the higher-order calls that
  hold graphs (``COND``, ``WHILE_LOOP``, ``SUBGRAPH_ARGS``), read with ``get_attr_of``;
- **views and writes**: the arguments an op writes (``written_args``), whose memory that is
  (``written_bases``), whether a result shares its input's memory (``is_view``, ``view_source``);
- **sizes that depend on data**: the one rule, ``size_depends_on_data`` (nonzero, nms, a boolean
  mask...), read off a TorchScript node (``script_size_depends_on_data``) or an FX node
  (``fx_size_depends_on_data``);
- **constants**: how large a value is (``nbytes``), the bound under which a constant result is
  computed at conversion (``FOLD_MAX_BYTES``), and whether a tensor has values at all (``valueless``).

Everything takes the program's own objects (FX nodes, TorchScript nodes, torch tensors) and
imports nothing else of the frontend.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable, Sequence

__all__ = ["COND", "DATA_DEPENDENT_OPS", "FOLD_MAX_BYTES", "SUBGRAPH_ARGS", "WHILE_LOOP", "fx_size_depends_on_data",
           "get_attr_of", "is_view", "nbytes", "op_key", "script_index_dtypes", "script_size_depends_on_data",
           "size_depends_on_data", "tagged_dynamic", "valueless", "view_source", "written_args", "written_bases"]

# -- which op a call is -------------------------------------------------------------------------

#: The op keys of torch's higher-order control flow, and which arguments of each call are its graphs.
COND = "torch.ops.higher_order.cond"
WHILE_LOOP = "torch.ops.higher_order.while_loop"
SUBGRAPH_ARGS = {COND: (1, 3), WHILE_LOOP: (0, 2)}


def op_key(target: object) -> str:
    """Return the op-table key of an FX call target: 'aten.conv2d', 'getitem', 'torchvision.nms'."""
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return str(schema.name).replace("::", ".")
    if target is operator.getitem:
        return "getitem"
    module = getattr(target, "__module__", "") or ""
    name = getattr(target, "__name__", repr(target))
    return f"{module.replace('_operator', 'operator')}.{name}" if module else name


def get_attr_of(module: object, target: str) -> object:
    """The attribute a ``get_attr`` node names ('layer1.0.weight', 'true_graph_0') of ``module``."""
    obj: object = module
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


# -- views and writes ---------------------------------------------------------------------------

def written_args(node: object) -> list[object]:
    """Return the FX nodes an op writes to: arguments its schema marks ``Tensor(a!)``."""
    import torch.fx

    schema = getattr(node.target, "_schema", None)  # type: ignore[attr-defined]
    if schema is None:
        return []
    args, kwargs = node.args, node.kwargs  # type: ignore[attr-defined]
    out: list[object] = []
    for i, arg in enumerate(schema.arguments):
        info = arg.alias_info
        if info is None or not info.is_write:
            continue
        a = args[i] if i < len(args) and not arg.kwarg_only else kwargs.get(arg.name)
        if isinstance(a, torch.fx.Node):
            out.append(a)
    return out


def written_bases(nodes: Sequence[object]) -> list[object]:
    """The nodes whose memory the in-place ops among ``nodes`` write: each written argument followed
    back through views and earlier in-place results to the node that made its memory."""
    bases: list[object] = []
    for node in nodes:
        if getattr(node, "op", None) != "call_function":
            continue
        for base in written_args(node):
            while getattr(base, "op", None) == "call_function" and (is_view(base) or written_args(base)):
                base = view_source(base) if is_view(base) else base.args[0]  # type: ignore[attr-defined]
            bases.append(base)
    return bases


def is_view(node: object) -> bool:
    """Return True when ``node``'s result may share memory with an input (a view op's schema, or a
    piece of the list a view op returns: ``split``, ``unbind``, ``chunk``)."""
    if getattr(node, "op", None) != "call_function":
        return False
    if node.target is operator.getitem:  # type: ignore[attr-defined]
        return is_view(node.args[0])  # type: ignore[attr-defined]
    schema = getattr(node.target, "_schema", None)  # type: ignore[attr-defined]
    if schema is None or not schema.returns:
        return False
    info = schema.returns[0].alias_info
    return info is not None and not info.is_write


def view_source(node: object) -> object:
    """The tensor view ``node`` is taken of (through ``getitem`` for a piece of a list of views)."""
    source = node.args[0]  # type: ignore[attr-defined]
    return source.args[0] if node.target is operator.getitem else source  # type: ignore[attr-defined]


# -- sizes that depend on data ------------------------------------------------------------------

#: Ops whose result length depends on the values of their inputs (also refused by meta kernels), by
#: their name in any namespace (aten, torchvision).
DATA_DEPENDENT_OPS = frozenset({"nonzero", "nonzero_numpy", "argwhere", "masked_select", "_unique2", "unique_dim",
                                "unique_consecutive", "nms", "repeat_interleave", "bincount", "_unique",
                                "unique_dim_consecutive"})

# the index ops whose result size a boolean (or uint8) mask makes the data's, and those masks' dtypes
_MASKED_INDEX = frozenset({"index", "index_put", "index_put_"})
_MASK_DTYPES = frozenset({"bool", "uint8"})
_SCRIPT_DTYPES = {"Bool": "bool", "Byte": "uint8"}  # TorchScript's scalar type names of the masks'


def size_depends_on_data(namespace: str, name: str, *, inputs: int, masks: Callable[[], Iterable[str]]) -> bool:
    """Whether the result size of op ``namespace::name`` depends on the values of its inputs.

    The one rule of the frontend: what the fast capture gives a symbolic size (and refuses to freeze
    a number of), and what ``tsfold.concretize`` leaves symbolic. True for

    - an op of ``DATA_DEPENDENT_OPS``, in any namespace (aten's nonzero, torchvision's nms);
    - ``where(condition)`` (one input): nonzero, as a tuple of index tensors;
    - an aten index (``x[mask]``, ``x[mask] = v``) by a boolean or uint8 mask: ``masks()`` gives the
      dtype names of its index tensors ('bool', 'int64'), asked only for these ops;
    - any other aten op torch tags ``dynamic_output_shape`` (``tagged_dynamic``).

    Args:
        namespace: 'aten', 'torchvision'...
        name: the op's name in it ('nonzero', 'index_put_').
        inputs: how many inputs the call has.
        masks: the dtype names of the index tensors of an index op.
    """
    if name in DATA_DEPENDENT_OPS or (name == "where" and inputs == 1):
        return True
    if namespace != "aten":
        return False
    if name in _MASKED_INDEX:
        return any(dtype in _MASK_DTYPES for dtype in masks())
    return tagged_dynamic(name)


@functools.cache
def tagged_dynamic(name: str) -> bool:
    """Whether torch tags an overload of ``aten::name`` ``dynamic_output_shape``."""
    import torch

    packet = getattr(torch.ops.aten, name, None)
    return packet is not None and any(
        torch.Tag.dynamic_output_shape in getattr(packet, o).tags for o in packet.overloads())


def script_index_dtypes(node: object) -> list[str]:
    """The dtype names of the index tensors of TorchScript index ``node`` (its second input, a list),
    as far as the graph records them (a file records none)."""
    import torch

    indices = list(node.inputs())[1].node().inputs()  # type: ignore[attr-defined]  # the index list
    # None entries (``x[:, idx]``: a whole dimension) have no scalar type: asking raises in torch's C++
    return [_SCRIPT_DTYPES.get(str(m.type().scalarType()), str(m.type().scalarType())) for m in indices
            if isinstance(m.type(), torch._C.TensorType)]


def script_size_depends_on_data(node: object) -> bool:
    """``size_depends_on_data`` of a TorchScript node (a trace's, or a file's)."""
    namespace, _, name = node.kind().partition("::")  # type: ignore[attr-defined]
    return size_depends_on_data(namespace, name, inputs=node.inputsSize(),  # type: ignore[attr-defined]
                                masks=lambda: script_index_dtypes(node))


def fx_size_depends_on_data(node: object, value_of: Callable[[object], object]) -> bool:
    """``size_depends_on_data`` of an FX node; ``value_of`` gives the value of an argument node (its meta
    value, or what a run of the graph computed), for the dtypes of an index's masks."""
    import torch
    import torch.fx

    namespace, _, name = op_key(node.target).partition(".")  # type: ignore[attr-defined]

    def masks() -> list[str]:
        indices = node.args[1] if len(node.args) > 1 else []  # type: ignore[attr-defined]
        values = [value_of(i) for i in indices or [] if isinstance(i, torch.fx.Node)]
        return [str(v.dtype).removeprefix("torch.") for v in values if isinstance(v, torch.Tensor)]

    return size_depends_on_data(namespace, name, inputs=len(node.args) + len(node.kwargs),  # type: ignore[attr-defined]
                                masks=masks)


# -- constants ----------------------------------------------------------------------------------

#: Constant subgraphs whose results are at most this large are evaluated by torch at conversion
#: (the lowering's folding; the fast capture runs the same ops of constants while it reads a trace).
FOLD_MAX_BYTES = 1 << 20


def nbytes(val: object) -> int:
    """The bytes of a value (a tensor, or tensors in lists and tuples); a symbolic size counts as huge."""
    import torch

    if isinstance(val, torch.Tensor):
        numel = val.numel()
        return int(numel) * val.element_size() if isinstance(numel, int) else 1 << 62
    if isinstance(val, (list, tuple)):
        return sum(nbytes(v) for v in val)
    return 0


def valueless(tensor: object) -> bool:
    """Whether ``tensor`` has no values: on the meta device, or a FakeTensor of a capture."""
    if getattr(tensor, "is_meta", False) is True:
        return True
    from torch._subclasses.fake_tensor import is_fake

    return bool(is_fake(tensor))
