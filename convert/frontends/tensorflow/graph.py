"""Read a TensorFlow model (SavedModel folder, Keras ``.keras``/``.h5`` file, frozen ``.pb``) into a plain op list.

TensorFlow reads the graph; the weights are never copied. A SavedModel is loaded without its
checkpoint (no weight enters TensorFlow's memory), and each variable read becomes a constant
whose value is a view of the mapped ``variables.data`` file (``bundle.py``). A Keras model's
variables are already in memory: each read becomes a constant sharing TensorFlow's buffer
(DLPack). Either way grappler inlines the function calls and folds what does not depend on a
weight, and the converters fold the batch-norm arithmetic on the weights into the convolutions
(computed when the exporter writes them). Where that cannot follow the model (a variable read by
another op than ``ReadVariableOp``, a partitioned variable, a TF1 SavedModel, ...) the concrete
function is frozen by TensorFlow (``convert_variables_to_constants_v2``) and grappler folds it,
weights included, which copies them several times; ``TFGraph.weights`` says which path ran and
why. The result is a list of ``TFNode`` records in topological order with decoded attributes and
the static output shapes TensorFlow inferred; nothing after this module imports TensorFlow.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from convert._errors import address_space_left, resource_exhausted
from convert.ir import ModelFormatError, UsageError, shown

__all__ = [
    "TFGraph",
    "TFNode",
    "frozen_graph_function",
    "graph_from_function",
    "is_frozen_graph",
    "is_keras_file",
    "is_saved_model",
    "load_keras",
    "quiet_stderr",
    "read_graph",
    "read_runnable_graph",
    "tf_module",
    "widen_graph",
]

logger = logging.getLogger(__name__)

DEFAULT_SIGNATURE = "serving_default"


@dataclass(slots=True)
class TFNode:
    """One op of the frozen graph: data inputs as tensor names (``node:index``), decoded attributes."""

    name: str
    op: str
    inputs: list[str]
    attrs: dict[str, object]
    shapes: list[tuple[int | None, ...] | None]
    dtypes: list[np.dtype]

    def where(self) -> str:
        """Return the place of this node for messages."""
        return f"node {shown(self.name)} ({self.op})"


@dataclass(slots=True)
class TFGraph:
    """The frozen graph of one signature: nodes in order, inputs and outputs by user-facing name."""

    source: str
    nodes: list[TFNode]
    inputs: dict[str, str] = field(default_factory=dict)  # user name -> tensor name (Placeholder:0)
    outputs: dict[str, str] = field(default_factory=dict)  # user name -> tensor name
    # How the weights were read: "mapped" (views of the variables files) or why TensorFlow froze them.
    weights: str = "frozen by TensorFlow"
    # Lowered while loops left as they are: LoopCond node -> why (``recurrent.py``, ``controlflow.py``).
    loops: dict[str, str] = field(default_factory=dict)
    # Lowered conditionals not gathered into an If: first Switch node -> why (``controlflow.py``).
    conds: dict[str, str] = field(default_factory=dict)


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """Silence file descriptor 2 while TensorFlow's C++ side starts, loads and optimises.

    TensorFlow 2.21 logs start-up and grappler lines through absl to fd 2 whatever
    TF_CPP_MIN_LOG_LEVEL says; a conversion's output must stay the CLI's own lines. Python
    exceptions are unaffected (they are raised, not printed, here).
    """
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


# TensorFlow aborts the process (SIGABRT, no message) when it cannot map a thread's stack or an arena
# under ``ulimit -v``. Measured on the fuzz seed's 6-node SavedModel through the CLI, with this much
# address space left after the import: 36 and 80-175 MiB aborted (not every time), 270 MiB and more
# converted in 7 of 7 runs. Less than this is refused in one line; a large model may need more, and
# TensorFlow may still abort then.
TF_ADDRESS_SPACE = 256 << 20


def tf_module() -> object:
    """Import TensorFlow quietly, or raise a one-line ``UsageError`` naming the extra to install.

    Raises:
        UsageError: TensorFlow is not installed, or does not import (its own words).
        MemoryError: the address space left under ``ulimit -v`` is less than TensorFlow needs to run
            without aborting the process (the CLI says so in one line, as for any other limit).
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        with quiet_stderr():
            import tensorflow as tf
    except ImportError as exc:
        if resource_exhausted(exc):
            raise  # its libraries could not be mapped: the machine's limit, said as such
        if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "tensorflow":
            raise UsageError("the TensorFlow frontend needs TensorFlow: pip install "
                             "'convert-toolkit[tensorflow]'") from exc
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UsageError(f"TensorFlow is installed but does not import ({first})") from exc
    left = address_space_left()
    if left is not None and left < TF_ADDRESS_SPACE:
        raise MemoryError(f"TensorFlow needs about {TF_ADDRESS_SPACE >> 20:,} MiB more address space to run "
                          f"than the {left >> 20:,} MiB left, and aborts the process when it cannot map it")
    return tf


def is_saved_model(path: Path) -> bool:
    """Return True when ``path`` is a SavedModel folder."""
    return path.is_dir() and (path / "saved_model.pb").is_file()


KERAS_SUFFIXES = (".keras", ".h5", ".hdf5")


def is_frozen_graph(path: Path) -> bool:
    """Return True when ``path`` is a frozen TF1-style GraphDef (``.pb`` file, not a SavedModel's)."""
    return path.is_file() and path.suffix == ".pb" and path.name != "saved_model.pb"


def frozen_graph_function(path: Path) -> tuple[object, list[str], list[str], object]:
    """Wrap a frozen GraphDef as a concrete function: Placeholders in, unconsumed nodes out.

    Returns the function, its input and output names (node names), and its owner.
    """
    tf = tf_module()
    from google.protobuf.message import DecodeError

    graph_def = tf.compat.v1.GraphDef()  # type: ignore[attr-defined]
    try:
        graph_def.ParseFromString(path.read_bytes())
    except DecodeError as exc:
        raise ModelFormatError(f"{path.name}: not a GraphDef ({exc})") from exc
    if not graph_def.node:
        raise ModelFormatError(f"{path.name}: not a GraphDef (no nodes)")
    consumed = {i.lstrip("^").split(":")[0] for n in graph_def.node for i in n.input}
    inputs = [n.name for n in graph_def.node if n.op == "Placeholder"]
    outputs = [n.name for n in graph_def.node
               if n.name not in consumed and n.op not in ("Const", "NoOp", "Placeholder")]
    if not outputs:
        raise ModelFormatError(f"{path.name}: no output node (every node's result is consumed)")

    def body() -> None:
        tf.compat.v1.import_graph_def(graph_def, name="")  # type: ignore[attr-defined]

    with quiet_stderr():
        wrapped = tf.compat.v1.wrap_function(body, [])  # type: ignore[attr-defined]
        fn = wrapped.prune([wrapped.graph.get_tensor_by_name(f"{i}:0") for i in inputs],
                           [wrapped.graph.get_tensor_by_name(f"{o}:0") for o in outputs])
    return fn, inputs, outputs, wrapped


def is_keras_file(path: Path) -> bool:
    """Return True when ``path`` is a Keras 3 ``.keras`` archive or a legacy Keras HDF5 (``.h5``) file."""
    return path.is_file() and path.suffix in KERAS_SUFFIXES


def _concrete_function(path: Path, signature: str) -> tuple[object, list[str], list[str], object]:
    """Return the signature's concrete function, its input and output names, and its owner.

    The owner (the loaded SavedModel or Keras model) must stay alive while the function is used.
    """
    if not is_saved_model(path) and not is_keras_file(path) and not is_frozen_graph(path):
        if path.is_dir():
            raise ModelFormatError(f"{path.name}: not a SavedModel folder (no saved_model.pb in it)")
        raise UsageError(f"{path}: not a SavedModel folder, a .keras/.h5 file or a frozen .pb graph")
    if is_frozen_graph(path):
        if signature != DEFAULT_SIGNATURE:
            raise UsageError(f"{path.name}: a frozen graph has no signatures; --signature applies to SavedModels")
        return frozen_graph_function(path)
    tf = tf_module()
    if is_saved_model(path):
        return _signature(path, signature, skip_checkpoint=False)
    if is_keras_file(path):
        if signature != DEFAULT_SIGNATURE:
            raise UsageError(f"{path.name}: a Keras file has no signatures; --signature applies to SavedModels")
        model = load_keras(path)
        specs = [tf.TensorSpec(t.shape, t.dtype, name=_input_name(t, i))  # type: ignore[attr-defined]
                 for i, t in enumerate(model.inputs)]

        def call(*args: object) -> dict[str, object]:
            out = model(list(args) if len(args) > 1 else args[0], training=False)
            outs = out if isinstance(out, (list, tuple)) else [out]
            return {f"output_{i}": o for i, o in enumerate(outs)}

        fn = tf.function(call).get_concrete_function(*specs)  # type: ignore[attr-defined]
        return fn, [s.name for s in specs], sorted(fn.structured_outputs), model
    raise AssertionError("unreachable: the path was checked above")


def _signature(path: Path, signature: str, *, skip_checkpoint: bool) -> tuple[object, list[str], list[str], object]:
    """Load a SavedModel (without restoring its variables when ``skip_checkpoint``); return the
    signature's concrete function, its input and output names, and the loaded object (its owner)."""
    tf = tf_module()
    options = tf.saved_model.LoadOptions(experimental_skip_checkpoint=skip_checkpoint)  # type: ignore[attr-defined]
    try:
        with quiet_stderr():
            loaded = tf.saved_model.load(str(path), options=options)  # type: ignore[attr-defined]
    except Exception as exc:  # TF raises its own error types for unreadable folders
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ModelFormatError(f"{path.name}: TensorFlow cannot load this SavedModel: {first}") from exc
    if not hasattr(loaded, "signatures"):  # the root object of a damaged object graph, not a SavedModel's
        raise ModelFormatError(f"{path.name}: the SavedModel's root object has no signature map "
                               "(its object graph is damaged)")
    try:
        sigs = dict(loaded.signatures)
    except (TypeError, ValueError) as exc:  # another kind of object where the signature map belongs
        raise ModelFormatError(f"{path.name}: the SavedModel's signature map is damaged "
                               f"({type(loaded.signatures).__name__} in its place)") from exc
    if signature not in sigs:
        have = ", ".join(repr(s) for s in sigs) or "none"
        raise UsageError(f"{path.name}: no signature '{signature}' (it has {have}); choose one with --signature")
    fn = sigs[signature]
    if not hasattr(fn, "structured_input_signature") or not hasattr(fn, "structured_outputs"):
        raise ModelFormatError(f"{path.name}: signature '{signature}' is a {type(fn).__name__}, not a function "
                               "(the SavedModel's object graph is damaged)")
    in_names = list(fn.structured_input_signature[1])
    out_names = sorted(fn.structured_outputs)  # flat outputs follow sorted keys (tf.nest)
    return fn, in_names, out_names, loaded


def _input_name(tensor: object, index: int) -> str:
    name = getattr(tensor, "name", "") or f"input_{index}"
    return str(name).split(":")[0]


def load_keras(path: Path) -> object:
    """Load a ``.keras`` file with Keras (no compile), as a ``ModelFormatError`` when it cannot."""
    tf_module()
    import keras

    try:
        with quiet_stderr():
            return keras.saving.load_model(str(path), compile=False)
    except Exception as exc:  # Keras raises ValueError, zipfile errors, ...
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ModelFormatError(f"{path.name}: Keras cannot load this file: {first}") from exc


# Attributes that keep grappler's function optimizer from inlining a call. Keras 3 (TF backend)
# wraps every grouped convolution (ConvNeXt's depthwise Conv2D(groups=C)) in a
# ``tf.function(jit_compile=True)``: freezing leaves it as a nested StatefulPartitionedCall whose
# node carries ``_XlaMustCompile`` and whose function carries ``_noinline``. Inlined, it is a
# plain Conv2D with the same semantics (XLA only changes how it is compiled).
_NO_INLINE_ATTRS = ("_noinline", "_XlaMustCompile")


def _allow_inlining(graph_def: object) -> int:
    """Drop the attributes that forbid inlining from every call and function; return how many."""
    dropped = 0
    nodes = list(graph_def.node)  # type: ignore[attr-defined]
    for fn in graph_def.library.function:  # type: ignore[attr-defined]
        nodes.extend(fn.node_def)
        for key in _NO_INLINE_ATTRS:
            if key in fn.attr:
                del fn.attr[key]
                dropped += 1
    for node in nodes:
        for key in _NO_INLINE_ATTRS:
            if key in node.attr:
                del node.attr[key]
                dropped += 1
    return dropped


def _release_memory() -> None:
    """Collect garbage and hand freed heap pages back to the system (glibc), so a dropped copy of
    the weights does not stay in the peak of the next stage."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: the next stage reuses the memory anyway
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _freeze(fn: object) -> tuple[object, list[object], list[str]]:
    """Freeze ``fn`` into a MetaGraphDef ready for grappler; return it, the inputs and the output names.

    ``convert_variables_to_constants_v2`` inlines every call it may; calls marked ``_noinline`` or
    for XLA compilation survive it, so they are unmarked here for grappler's function optimizer.
    Only the MetaGraphDef leaves this function: the frozen function and its graph (each holding
    the weights) are dropped before grappler makes its own copies.
    """
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
    from tensorflow.python.training import saver

    with quiet_stderr():
        frozen = convert_variables_to_constants_v2(fn)
    graph = frozen.graph  # type: ignore[attr-defined]
    graph_def = graph.as_graph_def()
    if _allow_inlining(graph_def):
        logger.debug("tensorflow: unmarked nested function calls for inlining")
    meta = saver.export_meta_graph(graph_def=graph_def, graph=graph)
    outputs = [t.name for t in frozen.outputs]  # type: ignore[attr-defined]
    _fetch(meta, outputs)
    inputs = list(frozen.inputs)  # type: ignore[attr-defined]
    return meta, inputs, outputs


def _fetch(meta: object, outputs: list[str]) -> None:
    """Name ``outputs`` as the fetches grappler must keep (its "train_op" collection)."""
    from tensorflow.core.protobuf import meta_graph_pb2

    fetch = meta_graph_pb2.CollectionDef()
    fetch.node_list.value.extend(outputs)
    meta.collection_def["train_op"].CopyFrom(fetch)  # type: ignore[attr-defined]


def _optimize(meta: object, source: str = "the model") -> object:
    """Inline the remaining function calls and fold constants (grappler); return the GraphDef.

    Raises:
        ModelFormatError: grappler cannot import the graph (a damaged graph TensorFlow loaded).
    """
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.grappler import tf_optimizer

    config = config_pb2.ConfigProto()
    rewrite = config.graph_options.rewrite_options
    rewrite.optimizers[:] = ["function", "constfold", "dependency"]
    rewrite.meta_optimizer_iterations = 1
    # Grappler skips graphs under 4 nodes by default: a SavedModel without variables (Placeholder ->
    # PartitionedCall -> Identity) would keep its body in a call that nothing converts.
    rewrite.min_graph_nodes = -1
    try:
        with quiet_stderr():
            return tf_optimizer.OptimizeGraph(config, meta)
    except ValueError as exc:  # "Failed to import metagraph": a node its own graph cannot hold
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ModelFormatError(f"{source}: TensorFlow's graph optimizer cannot read the graph ({first}); "
                               "the SavedModel's graph is damaged") from exc


def _attr(value: object) -> object:
    tf = tf_module()
    kind = value.WhichOneof("value")  # type: ignore[attr-defined]
    if kind == "s":
        return value.s.decode("utf-8", "replace")  # type: ignore[attr-defined]
    if kind in ("i", "f", "b"):
        return getattr(value, kind)
    if kind == "type":
        dtype = tf.as_dtype(value.type)  # type: ignore[attr-defined]
        # variant (TensorList), resource, string: no NumPy counterpart; a converter refuses them
        return np.dtype(dtype.as_numpy_dtype) if dtype.is_numpy_compatible else np.dtype(object)
    if kind == "tensor":
        try:
            return tf.make_ndarray(value.tensor)  # type: ignore[attr-defined]
        except (TypeError, ValueError, KeyError):  # a variant tensor (an empty TensorList): no array
            return None
    if kind == "shape":
        return None if value.shape.unknown_rank else tuple(d.size for d in value.shape.dim)  # type: ignore[attr-defined]
    if kind == "list":
        lst = value.list  # type: ignore[attr-defined]
        for f in ("i", "f", "s", "b"):
            if len(getattr(lst, f)):
                items = list(getattr(lst, f))
                return [s.decode() for s in items] if f == "s" else items
        return []
    return None


@dataclass(slots=True)
class _Read:
    """A model's graph as TensorFlow holds it, with the arrays its stand-in Placeholders hold."""

    graph: object  # tf.Graph
    inputs: dict[str, str]
    outputs: dict[str, str]
    consts: dict[str, np.ndarray]  # stand-in Placeholder name -> value (variable reads, captures)
    weights: str = ""

    def tf_graph(self, source: str) -> TFGraph:
        return TFGraph(source=source, nodes=_nodes(self.graph, self.consts), inputs=self.inputs,
                       outputs=self.outputs, weights=self.weights)


def read_graph(path: Path, signature: str = DEFAULT_SIGNATURE) -> TFGraph:
    """Read the signature of a SavedModel (or a ``.keras`` model's call) into a ``TFGraph``.

    A SavedModel's weights are views of its mapped variables files (``_mapped_graph``), a Keras
    model's share TensorFlow's buffers, unless the model needs TensorFlow's freezing (the reason is
    kept in ``TFGraph.weights``). A frozen model is dropped as soon as its signature is frozen (it
    holds one copy of the weights; VGG16 at 224x224 peaked at 13.7 GiB with it alive, 8.9 GiB
    without; 1.1 GiB mapped).

    Raises:
        UsageError: not a TF model, or no such signature. ModelFormatError: TF cannot load it.
    """
    return _read(path, signature).tf_graph(path.name)


def read_runnable_graph(path: Path, signature: str = DEFAULT_SIGNATURE, *,
                        with_outputs: bool = False) -> tuple[object, ...]:
    """The ``tf.Graph`` the converter reads (for ``--locate`` and the float64 run): it, its inputs
    by user-facing name, (with ``with_outputs``, its outputs likewise,) and the values to feed its
    stand-in Placeholders (the variables) by tensor name."""
    read = _read(path, signature)
    weights = {f"{name}:0": value for name, value in read.consts.items()}
    if with_outputs:
        return read.graph, read.inputs, read.outputs, weights
    return read.graph, read.inputs, weights


# Ops whose float64 twin is not the same computation, or has no CPU kernel: no float64 run.
_NO_FLOAT64 = frozenset({"FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3"})


def widen_graph(graph: object) -> object | None:
    """Return a copy of ``graph`` (a ``tf.Graph``) computing in float64 where it computed in
    float32: every float32 ``type`` attribute (``T``, ``dtype``, ``DstT``, ...) becomes float64
    and every float32 constant is widened (exactly). None when the graph has an op in
    ``_NO_FLOAT64`` or a function library (its bodies would stay float32)."""
    tf = tf_module()
    graph_def = graph.as_graph_def()  # type: ignore[attr-defined]
    if graph_def.library.function:
        return None
    f32, f64 = tf.float32.as_datatype_enum, tf.float64.as_datatype_enum  # type: ignore[attr-defined]
    for node in graph_def.node:
        if node.op in _NO_FLOAT64:
            return None
        for value in node.attr.values():
            kind = value.WhichOneof("value")
            if kind == "type" and value.type == f32:
                value.type = f64
            elif kind == "list" and f32 in value.list.type:
                types = [f64 if t == f32 else t for t in value.list.type]
                del value.list.type[:]
                value.list.type.extend(types)
            elif kind == "tensor" and value.tensor.dtype == f32:
                array = tf.make_ndarray(value.tensor).astype(np.float64)  # type: ignore[attr-defined]
                value.tensor.CopyFrom(tf.make_tensor_proto(array))  # type: ignore[attr-defined]
    wide = tf.Graph()  # type: ignore[attr-defined]
    with wide.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")  # type: ignore[attr-defined]
    return wide


def _read(path: Path, signature: str) -> _Read:
    reason = ""
    if is_saved_model(path):
        try:
            return _mapped_graph(path, signature)
        except _NotMappableError as why:
            reason = str(why)  # fall back below, once this frame's copies are released
        logger.info("tensorflow: %s: weights not mapped (%s)", path.name, reason)
        _release_memory()
    read = _from_function(list(_concrete_function(path, signature)), source=path.name,
                          what=f"signature '{signature}'")
    if reason and not read.weights.startswith("frozen"):
        read.weights += f" (not mapped: {reason})"
    return read


class _NotMappableError(Exception):
    """Why a SavedModel's variables cannot be read as mapped views (its weights are frozen instead)."""


# The attribute a variable's value is saved under in the checkpoint's object graph.
_VARIABLE_VALUE = "VARIABLE_VALUE"
_OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"


def _bound_inputs(path: Path, signature: str) -> tuple[list[int], object] | None:
    """Return the object-graph node ids the signature's function captures (in capture order) and
    the SavedModel's object graph; None when the signature is not in it (loading then says so).

    A TF2 SavedModel records, for each concrete function, the objects it captures
    (``SavedConcreteFunction.bound_inputs``); the loader binds them to the function's captured
    inputs in that order, and restores the checkpoint by the same node ids.
    """
    from google.protobuf.message import DecodeError
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    try:
        proto.ParseFromString((path / "saved_model.pb").read_bytes())
    except (OSError, DecodeError) as exc:  # TensorFlow's own loader reports it (the frozen path)
        raise _NotMappableError(f"saved_model.pb is not readable here: {exc}") from exc
    if len(proto.meta_graphs) != 1:
        raise _NotMappableError(f"{len(proto.meta_graphs)} meta graphs")
    objects = proto.meta_graphs[0].object_graph_def
    if not objects.nodes:
        raise _NotMappableError("a TF1 SavedModel (no object graph)")
    count = len(objects.nodes)
    signatures = {c.local_name: c.node_id for c in objects.nodes[0].children}.get("signatures")
    if signatures is None:
        raise _NotMappableError("no signature map in the object graph")
    if not 0 <= signatures < count:
        raise ModelFormatError(f"saved_model.pb: the signature map is object {signatures} of {count} "
                               "(the object graph is damaged)")
    node_id = {c.local_name: c.node_id for c in objects.nodes[signatures].children}.get(signature)
    if node_id is None:
        return None
    if not 0 <= node_id < count:
        raise ModelFormatError(f"saved_model.pb: signature '{signature}' is object {node_id} of {count} "
                               "(the object graph is damaged)")
    obj = objects.nodes[node_id]
    if obj.WhichOneof("kind") == "bare_concrete_function":
        name = obj.bare_concrete_function.concrete_function_name
    elif obj.WhichOneof("kind") == "function" and len(obj.function.concrete_functions) == 1:
        name = obj.function.concrete_functions[0]
    else:
        raise _NotMappableError(f"signature '{signature}' is a {obj.WhichOneof('kind')}")
    if name not in objects.concrete_functions:
        raise _NotMappableError(f"no record of function {name}")
    bound = list(objects.concrete_functions[name].bound_inputs)
    if any(not 0 <= b < count for b in bound):
        raise ModelFormatError(f"saved_model.pb: function {name} captures an object beyond the {count} of the "
                               "object graph (it is damaged)")
    return bound, objects


def _captured_values(path: Path, fn: object, bound: list[int],
                     objects: object) -> tuple[dict[str, np.ndarray], set[str]]:
    """Return the value of each captured tensor by placeholder name (variables as mapped views), and
    which of them are variables (resource handles read by ``ReadVariableOp``)."""
    from google.protobuf.message import DecodeError
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    from .bundle import Bundle

    internal = list(fn.graph.internal_captures)  # type: ignore[attr-defined]
    external = list(fn.captured_inputs)  # type: ignore[attr-defined]
    if len(internal) != len(bound) or len(external) != len(bound):
        raise _NotMappableError(f"the function captures {len(internal)} tensors; its record names {len(bound)}")
    values: dict[str, np.ndarray] = {}
    variables: set[str] = set()
    bundle: Bundle | None = None
    checkpoint = trackable_object_graph_pb2.TrackableObjectGraph()
    for placeholder, captured, node_id in zip(internal, external, bound, strict=True):
        kind = objects.nodes[node_id].WhichOneof("kind")  # type: ignore[attr-defined]
        name = placeholder.op.name
        if kind == "constant":
            values[name] = np.asarray(captured.numpy())
            continue
        if kind != "variable":
            raise _NotMappableError(f"the signature captures a {kind}")
        if bundle is None:
            bundle = Bundle(path / "variables" / "variables")
            if _OBJECT_GRAPH_KEY not in bundle.entries:
                raise _NotMappableError("the variables have no object graph")
            object_graph = bundle.entries[_OBJECT_GRAPH_KEY]
            try:
                checkpoint.ParseFromString(bundle.string(_OBJECT_GRAPH_KEY))
            except DecodeError as exc:  # a damaged variables file: the file's fault
                shard = bundle.shard_path(object_graph.shard)
                raise ModelFormatError(f"{path.name}/variables/{shard.name}: the checkpoint's object graph "
                                       f"is damaged ({exc})") from exc
        if node_id >= len(checkpoint.nodes):
            raise _NotMappableError(f"object {node_id} is not in the checkpoint")
        key = next((a.checkpoint_key for a in checkpoint.nodes[node_id].attributes if a.name == _VARIABLE_VALUE), None)
        entry = bundle.entries.get(key or "")
        if entry is None or entry.sliced or entry.dtype == np.dtype(object):
            what = "partitioned" if entry and entry.sliced else "not a plain tensor"
            raise _NotMappableError(f"variable '{key}' is {what}")
        declared = objects.nodes[node_id].variable.shape  # type: ignore[attr-defined]
        if not declared.unknown_rank and (len(declared.dim) != len(entry.shape) or any(
                d.size >= 0 and d.size != n for d, n in zip(declared.dim, entry.shape, strict=True))):
            shape = [d.size if d.size >= 0 else None for d in declared.dim]
            raise ModelFormatError(f"{path.name}/variables/variables.index: variable '{key}' has shape "
                                   f"{list(entry.shape)}; saved_model.pb declares {shape}")
        values[name] = bundle.array(entry.key)
        variables.add(name)
    return values, variables


def _mapped_graph(path: Path, signature: str) -> _Read:
    """Read a SavedModel signature with each variable read as a constant viewing the mapped
    variables file (see the module's docstring).

    Raises:
        _NotMappableError: the model needs TensorFlow's freezing (the reason). UsageError: no such
        signature. ModelFormatError: TensorFlow cannot load it, or its variables files are damaged.
    """
    tf_module()  # first: it silences TensorFlow's start-up lines, which any import of it prints
    found = _bound_inputs(path, signature)
    fn, in_names, out_names, _loaded = _signature(path, signature, skip_checkpoint=True)
    if found is None:  # _signature knows the signature when the object graph did not
        raise _NotMappableError(f"signature '{signature}' is not in the object graph")
    values, variables = _captured_values(path, fn, *found)
    read = _with_values(fn, in_names, out_names, values, variables, source=path.name,
                        what=f"signature '{signature}'")
    read.weights = (f"{len(variables)} variables mapped from variables/ (read when written)" if variables
                    else "none (no variables)")
    return read


def _live_values(fn: object) -> tuple[dict[str, np.ndarray], set[str]]:
    """Return the value of each tensor a concrete function captures, by placeholder name, and which
    are variables: a variable's value shares TensorFlow's buffer (DLPack: no copy is made)."""
    tf = tf_module()
    internal = list(fn.graph.internal_captures)  # type: ignore[attr-defined]
    external = list(fn.captured_inputs)  # type: ignore[attr-defined]
    by_handle = {id(v.handle): v for v in fn.graph.variables}  # type: ignore[attr-defined]
    values: dict[str, np.ndarray] = {}
    variables: set[str] = set()
    for placeholder, captured in zip(internal, external, strict=True):
        name = placeholder.op.name
        if captured.dtype != tf.resource:  # type: ignore[attr-defined]
            values[name] = np.asarray(captured.numpy())
            continue
        variable = by_handle.get(id(captured))
        if variable is None:
            raise _NotMappableError("the function captures a resource that is not a variable")
        try:
            values[name] = np.from_dlpack(variable.read_value())
        except (TypeError, BufferError, RuntimeError) as exc:  # a dtype DLPack lacks (string, ...)
            raise _NotMappableError(f"variable '{variable.name}' cannot be shared ({exc})") from exc
        variables.add(name)
    return values, variables


def _with_values(fn: object, in_names: Sequence[str], out_names: Sequence[str], values: dict[str, np.ndarray],
                 variables: set[str], *, source: str, what: str) -> _Read:
    """Inline and fold ``fn`` with grappler (no weight in it) and make each variable read a constant.

    ``values`` holds each captured tensor's value by its placeholder's name; ``variables`` names
    the captures that are variable handles, whose ``ReadVariableOp`` reads become constants.

    Raises:
        _NotMappableError: a variable is read by another op, or as another type.
    """
    tf = tf_module()
    from tensorflow.core.framework import node_def_pb2
    from tensorflow.python.training import saver

    graph_def = fn.graph.as_graph_def()  # type: ignore[attr-defined]
    _allow_inlining(graph_def)
    meta = saver.export_meta_graph(graph_def=graph_def, graph=fn.graph)  # type: ignore[attr-defined]
    outputs = [t.name for t in fn.outputs]  # type: ignore[attr-defined]
    _fetch(meta, outputs)
    flat = list(fn.inputs)  # type: ignore[attr-defined]
    placeholders = [t.name for t in flat[:len(flat) - len(values)]]  # the captures come last
    input_order = _ordered_inputs(fn, in_names)
    del graph_def
    optimized = _optimize(meta, source)
    del meta
    consts: dict[str, np.ndarray] = {}
    kept = []
    # A while loop (a Keras RNN's, lowered) takes each variable's handle into its frame through an
    # Enter (and Identity) node and reads it there: those nodes stand for the variable itself.
    values, variables = dict(values), set(variables)
    grew = True
    while grew:
        grew = False
        for node in optimized.node:
            if node.op in ("Enter", "Identity") and node.name not in variables and node.input \
                    and node.input[0].split(":")[0] in variables:
                values[node.name] = values[node.input[0].split(":")[0]]
                variables.add(node.name)
                grew = True
    for node in optimized.node:
        if node.name in variables:
            continue  # the resource handle; its reads become constants below
        if node.name in values:
            consts[node.name] = values[node.name]  # a captured constant
        read = [i.split(":")[0] for i in node.input if i.split(":")[0] in variables]
        if read and node.op != "ReadVariableOp":
            raise _NotMappableError(f"{node.op} node '{node.name}' reads a variable directly")
        if read:
            array = values[read[0]]
            if np.dtype(tf.as_dtype(node.attr["dtype"].type).as_numpy_dtype) != array.dtype:  # type: ignore[attr-defined]
                raise _NotMappableError(f"node '{node.name}' reads {array.dtype} variable as another type")
            stand_in = node_def_pb2.NodeDef(name=node.name, op="Placeholder")
            stand_in.attr["dtype"].type = node.attr["dtype"].type
            stand_in.attr["shape"].shape.CopyFrom(tf.TensorShape(array.shape).as_proto())  # type: ignore[attr-defined]
            consts[node.name] = array
            node = stand_in
        # Control edges from a variable's handle order reads after initialisation: not needed here.
        kept_inputs = [i for i in node.input if i.lstrip("^").split(":")[0] not in variables]
        if len(kept_inputs) != len(node.input):
            del node.input[:]
            node.input.extend(kept_inputs)
        kept.append(node)
    del optimized.node[:]
    optimized.node.extend(kept)
    graph = tf.Graph()  # type: ignore[attr-defined]
    with graph.as_default():
        tf.graph_util.import_graph_def(optimized, name="")  # type: ignore[attr-defined]
    del optimized
    if len(placeholders) != len(in_names):
        raise ModelFormatError(f"{source}: {what} has {len(in_names)} inputs but its graph "
                               f"takes {len(placeholders)} tensors")
    if len(outputs) != len(out_names):
        raise ModelFormatError(f"{source}: {what} has {len(out_names)} outputs but its graph "
                               f"computes {len(outputs)} tensors")
    return _Read(graph, dict(zip(input_order, placeholders, strict=True)), dict(zip(out_names, outputs, strict=True)),
                 consts)


def graph_from_function(fn: object, in_names: Sequence[str] = (), out_names: Sequence[str] = (), *,
                        source: str, what: str = "the function") -> TFGraph:
    """Read a concrete function (``tf.function(...).get_concrete_function()``) into a ``TFGraph``.

    Its variables' values are shared with TensorFlow's buffers (``_live_values``: no copy); where
    that cannot follow the function, it is frozen and folded by TensorFlow (``frozen_graph``) and
    ``TFGraph.weights`` says why. ``in_names`` are the user-facing input names, ``out_names`` the
    output names in the order of the function's flat outputs. ``fn`` may instead be the list
    ``[fn, in_names, out_names, owner]`` (``_concrete_function``'s result): the list is emptied,
    so the function's owner (the loaded model) is not kept alive by the caller.
    """
    return _from_function(fn, in_names, out_names, source=source, what=what).tf_graph(source)


def _from_function(fn: object, in_names: Sequence[str] = (), out_names: Sequence[str] = (), *,
                   source: str, what: str) -> _Read:
    if isinstance(fn, list):
        parts = fn
        fn, in_names, out_names, _owner = parts  # type: ignore[misc]
        parts.clear()
    try:
        values, variables = _live_values(fn)
        read = _with_values(fn, in_names, out_names, values, variables, source=source, what=what)
    except _NotMappableError as why:
        reason = str(why)  # fall back below, once this frame's copies are released
    else:
        read.weights = (f"{len(variables)} variables shared with TensorFlow's memory (not copied)" if variables
                        else "none (no variables)")
        return read
    logger.info("tensorflow: %s: weights frozen by TensorFlow (%s)", source, reason)
    frozen, inputs, outputs = frozen_graph(fn, in_names, out_names, source=source, what=what)
    return _Read(frozen, inputs, outputs, {}, weights=f"frozen by TensorFlow ({reason})")


def _nodes(graph: object, consts: dict[str, np.ndarray]) -> list[TFNode]:
    """Return the ops of ``graph`` as ``TFNode`` records; the ops named in ``consts`` (stand-ins
    for variable reads) become ``Const`` nodes holding those arrays."""
    nodes = []
    for op in graph.get_operations():  # type: ignore[attr-defined]
        value = consts.get(op.name)
        if value is not None:
            nodes.append(TFNode(name=op.name, op="Const", inputs=[], attrs={"value": value, "dtype": value.dtype},
                                shapes=[tuple(value.shape)], dtypes=[value.dtype]))
            continue
        nodes.append(TFNode(
            name=op.name,
            op=op.type,
            inputs=[t.name for t in op.inputs],
            attrs={k: _attr(v) for k, v in op.node_def.attr.items() if not k.startswith("_")},
            shapes=[None if o.shape.rank is None else tuple(o.shape.as_list()) for o in op.outputs],
            dtypes=[np.dtype(o.dtype.as_numpy_dtype) if o.dtype.is_numpy_compatible else np.dtype(object)
                    for o in op.outputs],
        ))
    return nodes


def frozen_graph(fn: object, in_names: Sequence[str] = (), out_names: Sequence[str] = (), *,
                 source: str, what: str = "the function") -> tuple[object, dict[str, str], dict[str, str]]:
    """Freeze and fold a concrete function (or ``_concrete_function``'s list, see
    ``graph_from_function``) into a ``tf.Graph``; return it with its inputs and outputs by
    user-facing name (tensor names): the graph the converter reads where the weights cannot be
    shared or mapped."""
    tf = tf_module()
    owner: object = None
    if isinstance(fn, list):
        parts = fn
        fn, in_names, out_names, owner = parts  # type: ignore[misc]
        parts.clear()  # the caller's list no longer keeps the model alive
    meta, frozen_inputs, outs = _freeze(fn)
    input_order = _ordered_inputs(fn, in_names)
    placeholders = [t.name for t in frozen_inputs if t.dtype != tf.resource]  # type: ignore[attr-defined]
    del fn, owner, frozen_inputs
    _release_memory()
    graph_def = _optimize(meta, source)
    del meta
    graph = tf.Graph()  # type: ignore[attr-defined]
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")  # type: ignore[attr-defined]
    del graph_def
    _release_memory()
    if len(placeholders) != len(in_names):
        raise ModelFormatError(f"{source}: {what} has {len(in_names)} inputs but its graph "
                               f"takes {len(placeholders)} tensors")
    if len(outs) != len(out_names):
        raise ModelFormatError(f"{source}: {what} has {len(out_names)} outputs but its graph "
                               f"computes {len(outs)} tensors")
    # A signature's inputs are its Placeholders in the order of its structured input signature.
    return graph, dict(zip(input_order, placeholders, strict=True)), dict(zip(out_names, outs, strict=True))


def _ordered_inputs(fn: object, names: Sequence[str]) -> list[str]:
    """Return the user-facing input names in the order of the function's flat inputs."""
    flat = [t.name.split(":")[0] for t in fn.inputs]  # type: ignore[attr-defined]
    ordered = [n for n in flat if n in names]
    return ordered if len(ordered) == len(names) else list(names)
