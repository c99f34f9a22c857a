"""Which integer inputs of a converted graph index a table, and how many rows the smallest has.

The check draws integer inputs it is not given; an input that indexes an embedding (PyTorch's
``Embedding``, TensorFlow's ``embedding_lookup``/``Gather``, Paddle's ``lookup_table``, ONNX's
``Gather`` on an initializer: all a ``Gather`` in the converted graph) must be drawn below the
rows of the table, or the source fails before anything is compared. The input is followed
through ops that move its values without changing them (casts, reshapes, slices, ...) to each
``Gather``, ``GatherElements`` or ``GatherND`` that takes it as indices, and the table's size
along the gathered axis is read from its shape (no weight is read).
"""

from __future__ import annotations

from dataclasses import dataclass

from convert import ir

__all__ = ["IndexBound", "index_bounds"]

# Ops whose output holds (some of) the values of an input unchanged: which inputs. ``Where`` is
# Keras 3's wrap of negative indices (``where(ids < 0, ids + n, ids)``).
_FIRST = frozenset({0})
_MOVES: dict[str, frozenset[int] | None] = {
    **dict.fromkeys(("Identity", "Cast", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Expand", "Tile",
                     "Slice", "Split", "Gather", "GatherElements", "Unique"), _FIRST),
    "Concat": None, "Where": frozenset({1, 2}),  # None: any input
}
_GATHERS = frozenset({"Gather", "GatherElements", "GatherND"})


@dataclass(frozen=True, slots=True)
class IndexBound:
    """An integer input's valid range ``[0, rows)``: the rows of the smallest table it indexes."""

    rows: int
    table: str  # the table's name (an initializer's, or the value's)
    node: str  # the node that gathers from it: "Gather 'embed'"


def _rows(node: ir.Node, value: ir.Value) -> int | None:
    """How many entries of ``node``'s data input ``value`` (its indices) selects among, when static."""
    data = node.inputs[0]
    shape = data.shape if data is not None else None
    if shape is None:
        return None
    dims = list(shape)
    if node.op_type == "GatherND":
        batch = int(node.attributes["batch_dims"].value) if "batch_dims" in node.attributes else 0
        depth = value.shape[-1] if value.shape is not None and len(value.shape) else None
        if not isinstance(depth, int) or depth < 1:
            return None
        sizes = dims[batch:batch + depth]
    else:
        axis = int(node.attributes["axis"].value) if "axis" in node.attributes else 0
        if not -len(dims) <= axis < len(dims):
            return None
        sizes = [dims[axis]]
    return min(sizes) if sizes and all(isinstance(d, int) and d > 0 for d in sizes) else None


def index_bounds(graph: ir.Graph) -> dict[str, IndexBound]:
    """Return, for each integer input of ``graph`` that indexes a table (directly or through ops
    that move its values unchanged), the smallest such table's rows."""
    found: dict[str, IndexBound] = {}
    for inp in graph.inputs:
        dtype = inp.dtype
        if inp.is_initializer() or dtype is None or not dtype.is_integer():
            continue
        best: IndexBound | None = None
        seen = {id(inp)}
        todo = [inp]
        while todo:
            value = todo.pop()
            for use in value.uses():
                node, at = use.node, use.idx
                if node.op_type in _GATHERS and node.domain in ("", "ai.onnx") and at == 1:
                    rows = _rows(node, value)
                    if rows is not None and (best is None or rows < best.rows):
                        data = node.inputs[0]
                        best = IndexBound(rows, (data.name or "") if data is not None else "",
                                          f"{node.op_type} '{node.name}'" if node.name else node.op_type)
                    continue
                if node.op_type not in _MOVES or node.domain not in ("", "ai.onnx"):
                    continue
                moved = _MOVES[node.op_type]
                if moved is not None and at not in moved:
                    continue
                for out in node.outputs[:1] if node.op_type != "Split" else node.outputs:
                    if id(out) not in seen and (out.dtype is None or out.dtype.is_integer()):
                        seen.add(id(out))
                        todo.append(out)
        if best is not None:
            found[inp.name or ""] = best
    return found
