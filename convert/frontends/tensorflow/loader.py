"""Check op support and convert a frozen TF graph (``graph.TFGraph``) into the IR.

Only ops the signature's outputs depend on are converted. A Reshape whose target is computed
(``Shape -> StridedSlice -> Pack``, as Keras' Flatten makes with a free batch) takes its target
from TensorFlow's static output shape instead, so that arithmetic is not converted at all; so
does a transposed convolution (``Conv2DBackpropInput``) its output size.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from convert.ir import (
    DataType,
    GapCollector,
    GraphBuilder,
    Model,
    Options,
    Unsupported,
    UsageError,
    convert_all,
    shown,
)
from convert.ir.given import refuse_contradicting_shape
from convert.ir.passes import EliminateCommonSubexpressions

from .context import NCHW, TF, TO_NCHW, TO_TF, TFContext
from .fold import fold_constant
from .graph import DEFAULT_SIGNATURE, TFGraph, TFNode, read_graph
from .precheck import precheck
from .rewrite import rewrite

__all__ = ["check_support", "convert_graph", "live_nodes", "load", "read"]


# The graph ``check_support`` read, kept for the ``load`` that follows it in the same conversion:
# loading and freezing a signature is most of a conversion's time (TensorFlow's import aside).
_checked: tuple[tuple[object, ...], TFGraph] | None = None


def _key(paths: Sequence[Path], options: Options) -> tuple[object, ...]:
    path = Path(paths[0]).resolve()
    stat = path.stat() if path.exists() else None
    return (str(path), stat and stat.st_mtime_ns, str(options.get("tf_signature", DEFAULT_SIGNATURE)))


def read(paths: Sequence[Path], options: Options) -> TFGraph:
    """Read the model named by ``paths`` (one SavedModel folder or ``.keras`` file)."""
    if len(paths) != 1:
        raise UsageError("tensorflow: give one SavedModel folder or one .keras file")
    precheck(Path(paths[0]))  # before TensorFlow is imported: a damaged file is refused at once
    return read_graph(Path(paths[0]), str(options.get("tf_signature", DEFAULT_SIGNATURE)))


def _static_reshape(node: TFNode) -> bool:
    shape = node.shapes[0] if node.shapes else None
    return node.op == "Reshape" and shape is not None and sum(d is None for d in shape) <= 1


def _static_conv_transpose(node: TFNode) -> bool:
    shape = node.shapes[0] if node.shapes else None
    return (node.op == "Conv2DBackpropInput" and shape is not None and len(shape) == 4
            and shape[1] is not None and shape[2] is not None)


def live_nodes(graph: TFGraph) -> list[TFNode]:
    """Return the nodes the outputs depend on, in graph order."""
    by_name = {n.name: n for n in graph.nodes}
    live: set[str] = set()
    stack = [t.split(":")[0] for t in graph.outputs.values()]
    while stack:
        name = stack.pop()
        if name in live or name not in by_name:
            continue
        live.add(name)
        node = by_name[name]
        computed_target = _static_reshape(node) and not _is_const(by_name, node.inputs[1])
        inputs = node.inputs[:1] if computed_target else node.inputs
        if _static_conv_transpose(node):
            inputs = node.inputs[1:]  # its output size is static: input_sizes (Shape(x) -> Pack) is not read
        stack.extend(t.split(":")[0] for t in inputs)
    return [n for n in graph.nodes if n.name in live]


def _is_const(by_name: dict[str, TFNode], tensor: str) -> bool:
    node = by_name.get(tensor.split(":")[0])
    return node is not None and node.op == "Const"


def _inner(node: TFNode) -> list[TFNode]:
    """The nodes of a gathered loop's body and condition, or of a conditional's branches, nested ones included."""
    from .controlflow import CondPlan, LoopPlan

    plan = node.attrs.get("plan")
    if isinstance(plan, LoopPlan):
        nodes = [*plan.body, *plan.cond_nodes]
    elif isinstance(plan, CondPlan):
        nodes = [n for _, branch, _ in plan.branches for n in branch]
    else:
        return []
    return [m for n in nodes for m in (n, *_inner(n))]


def _gaps(graph: TFGraph) -> GapCollector:
    from .ops import OPS
    from .recurrent import CONTROL_FLOW

    gaps = GapCollector()
    loop_ops: list[TFNode] = []
    # the ops inside a loop that is refused as a whole are not listed one by one
    frames = tuple(name[:name.index("/while/") + len("/while/")] for name in graph.loops if "/while/" in name)
    for node in (m for n in live_nodes(graph) for m in (n, *_inner(n))):
        if frames and node.name.startswith(frames) and node.op not in CONTROL_FLOW:
            continue
        if node.op in CONTROL_FLOW and node.op not in OPS:
            loop_ops.append(node)
        elif node.op not in OPS:
            gaps.add(node.op, f"{graph.source} node {shown(node.name)}")
    # TF control flow is one gap per loop (or conditional), with the reason it cannot be converted.
    conds = [n for n in loop_ops if n.op == "LoopCond"]
    for cond in conds:
        why = graph.loops.get(cond.name, "")
        gaps.add("while loop", f"{graph.source} node '{cond.name}'",
                 f"this loop cannot become an ONNX Loop: {why}" if why else "this loop cannot become an ONNX Loop")
    refused_conds = [(s, why) for s, why in graph.conds.items() if any(n.name == s for n in loop_ops)]
    for switch, why in refused_conds:
        gaps.add("conditional", f"{graph.source} node '{switch}'", f"this tf.cond cannot become an ONNX If: {why}")
    if loop_ops and not conds and not refused_conds:
        first = loop_ops[0]
        gaps.add(first.op, f"{graph.source} node '{first.name}'",
                 "TF control flow outside a loop or conditional that can be converted")
    return gaps


def check_support(paths: Sequence[Path], options: Options) -> list[Unsupported]:
    """Return every op type of the model without a converter (with its count and first node).

    The graph read is kept for the ``load`` of the same model that follows (it is read once).
    """
    global _checked
    graph = rewrite(read(paths, options))
    _checked = (_key(paths, options), graph)
    return _gaps(graph).items()


def load(paths: Sequence[Path], options: Options) -> Model:
    """Convert a SavedModel signature or a ``.keras`` model into the IR (NCHW inside).

    Raises:
        UsageError: bad path or signature. ModelFormatError: TensorFlow cannot load it.
        UnsupportedOpsError: every op type without a converter, at once.
        ConversionError: a converter refused a node (names it).
    """
    global _checked
    checked, _checked = _checked, None
    if checked is not None and len(paths) == 1 and checked[0] == _key(paths, options):
        graph = checked[1]
    else:
        graph = read(paths, options)
    return convert_graph(graph, options, name=Path(paths[0]).stem)


def convert_graph(graph: TFGraph, options: Options, *, name: str = "tensorflow") -> Model:
    """Convert a frozen ``TFGraph`` into the IR (see ``load``); its patterns are rewritten first (``rewrite.py``)."""
    from .ops import OPS, Converter

    rewrite(graph)
    _gaps(graph).raise_if_any(graph.source, hint="Run `convert ops tensorflow` for the supported list.")
    keep_nhwc = bool(options.get("keep_nhwc", False))
    builder = GraphBuilder(name, source=graph.source)
    ctx = TFContext(builder, options)
    nodes = live_nodes(graph)
    for node in graph.nodes:
        for i, shape in enumerate(node.shapes):
            ctx.shapes[f"{node.name}:{i}"] = shape
    for node in nodes:
        for tensor in node.inputs:
            ctx.consumers.setdefault(tensor, []).append(node)
    unknown = sorted(set(options.input_shapes) - set(graph.inputs))
    if unknown:
        raise UsageError(f"--input-shape names {', '.join(repr(n) for n in unknown)}; the inputs of "
                         f"{graph.source} are {', '.join(repr(n) for n in graph.inputs)}")
    by_name = {n.name: n for n in graph.nodes}
    for user_name, tensor in graph.inputs.items():
        node = by_name[tensor.split(":")[0]]
        shape = node.shapes[0]
        dims: list[int | str] = [("N" if i == 0 else f"{user_name}_dim{i}") if d is None else int(d)
                                 for i, d in enumerate(shape or ())]
        nchw = len(dims) == 4 and not keep_nhwc
        if nchw:
            dims = [dims[p] for p in TO_NCHW]
        if user_name in options.input_shapes:
            # --input-shape is in the order the converted model declares (NCHW unless --keep-nhwc):
            # the shape `convert inspect` prints and the hints show; TensorFlow's is NHWC
            refuse_contradicting_shape(user_name, options.input_shapes[user_name], dims, source=str(graph.source),
                                       order="NCHW: TensorFlow's NHWC transposed; --keep-nhwc keeps NHWC"
                                       if nchw else "")
            dims = list(options.input_shapes[user_name])
            tf_dims = [dims[p] for p in TO_TF] if nchw and len(dims) == 4 else dims
            ctx.shapes[tensor] = tuple(int(d) if isinstance(d, int) else None for d in tf_dims)
        value = builder.input(user_name, DataType.from_numpy(node.dtypes[0]), dims)
        ctx.values[tensor] = {NCHW if nchw else TF: value}

    def run(converter: Converter, node: TFNode) -> None:
        ctx.item = node
        if not fold_constant(node, ctx):
            converter(node, ctx)

    convert_all(nodes, OPS, key=lambda n: n.op, where=lambda n: f"{graph.source} {n.where()}", call=run,
                options=options, stage="convert tensorflow ops")
    ctx.item = None
    for user_name, tensor in graph.outputs.items():
        layout = NCHW if ctx.rank(tensor) == 4 and not keep_nhwc else TF
        builder.output(ctx.get(tensor, layout), user_name)
    layout_note = "NHWC as in TensorFlow" if keep_nhwc else "NCHW (rank-4 inputs and outputs transposed)"
    options.diagnostics.note(f"tensorflow: image tensors are {layout_note}")
    options.diagnostics.note(f"tensorflow: weights {graph.weights}")
    model = builder.build(doc=f"converted from TensorFlow {graph.source}")
    # Keras graphs repeat work: NASNet applies a separate ReLU (and pooling) layer to the same
    # tensor in each branch, and freezing keeps every copy (192 Relu where 132 are distinct).
    # Nodes with the same op, inputs and attributes are merged.
    EliminateCommonSubexpressions()(model)
    return model
