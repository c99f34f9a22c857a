"""Read a TensorFlow model (SavedModel folder or Keras 3 ``.keras`` file) into a plain op list.

TensorFlow does the reading: the serving signature's concrete function is frozen
(``convert_variables_to_constants_v2``), then grappler's constant folding runs on it (it folds
Keras' batch-norm arithmetic into the convolution weights, as TF's own inference does). The result
is a list of ``TFNode`` records in topological order with decoded attributes and the static output
shapes TensorFlow inferred; nothing after this module imports TensorFlow.
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

from convert.ir import ModelFormatError, UsageError

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
    "tf_module",
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
        return f"node '{self.name}' ({self.op})"


@dataclass(slots=True)
class TFGraph:
    """The frozen graph of one signature: nodes in order, inputs and outputs by user-facing name."""

    source: str
    nodes: list[TFNode]
    inputs: dict[str, str] = field(default_factory=dict)  # user name -> tensor name (Placeholder:0)
    outputs: dict[str, str] = field(default_factory=dict)  # user name -> tensor name


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


def tf_module() -> object:
    """Import TensorFlow quietly, or raise a one-line ``UsageError`` naming the extra to install."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        with quiet_stderr():
            import tensorflow as tf
    except ImportError as exc:
        raise UsageError("the TensorFlow frontend needs TensorFlow: pip install 'convert-toolkit[tensorflow]'") from exc
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
        try:
            with quiet_stderr():
                loaded = tf.saved_model.load(str(path))  # type: ignore[attr-defined]
        except Exception as exc:  # TF raises its own error types for unreadable folders
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ModelFormatError(f"{path.name}: TensorFlow cannot load this SavedModel: {first}") from exc
        sigs = dict(loaded.signatures)
        if signature not in sigs:
            have = ", ".join(repr(s) for s in sigs) or "none"
            raise UsageError(f"{path.name}: no signature '{signature}' (it has {have}); choose one with --signature")
        fn = sigs[signature]
        in_names = list(fn.structured_input_signature[1])
        out_names = sorted(fn.structured_outputs)  # flat outputs follow sorted keys (tf.nest)
        return fn, in_names, out_names, loaded
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
    from tensorflow.core.protobuf import meta_graph_pb2
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
    from tensorflow.python.training import saver

    with quiet_stderr():
        frozen = convert_variables_to_constants_v2(fn)
    graph = frozen.graph  # type: ignore[attr-defined]
    graph_def = graph.as_graph_def()
    if _allow_inlining(graph_def):
        logger.debug("tensorflow: unmarked nested function calls for inlining")
    meta = saver.export_meta_graph(graph_def=graph_def, graph=graph)
    fetch = meta_graph_pb2.CollectionDef()
    outputs = [t.name for t in frozen.outputs]  # type: ignore[attr-defined]
    fetch.node_list.value.extend(outputs)
    meta.collection_def["train_op"].CopyFrom(fetch)
    inputs = list(frozen.inputs)  # type: ignore[attr-defined]
    return meta, inputs, outputs


def _optimize(meta: object) -> object:
    """Inline the remaining function calls and fold constants (grappler); return the GraphDef."""
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.grappler import tf_optimizer

    config = config_pb2.ConfigProto()
    rewrite = config.graph_options.rewrite_options
    rewrite.optimizers[:] = ["function", "constfold", "dependency"]
    rewrite.meta_optimizer_iterations = 1
    with quiet_stderr():
        return tf_optimizer.OptimizeGraph(config, meta)


def _attr(value: object) -> object:
    tf = tf_module()
    kind = value.WhichOneof("value")  # type: ignore[attr-defined]
    if kind == "s":
        return value.s.decode("utf-8", "replace")  # type: ignore[attr-defined]
    if kind in ("i", "f", "b"):
        return getattr(value, kind)
    if kind == "type":
        return np.dtype(tf.as_dtype(value.type).as_numpy_dtype)  # type: ignore[attr-defined]
    if kind == "tensor":
        return tf.make_ndarray(value.tensor)  # type: ignore[attr-defined]
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


def read_graph(path: Path, signature: str = DEFAULT_SIGNATURE) -> TFGraph:
    """Freeze and fold the signature of a SavedModel (or a ``.keras`` model's call) into a ``TFGraph``.

    The loaded model is dropped as soon as the signature is frozen (it holds one copy of the
    weights; VGG16 at 224x224 peaked at 13.7 GiB with it alive, 8.9 GiB without).

    Raises:
        UsageError: not a TF model, or no such signature. ModelFormatError: TF cannot load it.
    """
    return graph_from_function(list(_concrete_function(path, signature)), source=path.name,
                               what=f"signature '{signature}'")


def graph_from_function(fn: object, in_names: Sequence[str] = (), out_names: Sequence[str] = (), *,
                        source: str, what: str = "the function") -> TFGraph:
    """Freeze and fold a concrete function (``tf.function(...).get_concrete_function()``) into a ``TFGraph``.

    ``in_names`` are the user-facing input names, ``out_names`` the output names in the order of
    the function's flat outputs. ``fn`` may instead be the list ``[fn, in_names, out_names, owner]``
    (``_concrete_function``'s result): the list is emptied once the function is frozen, so the
    function and its owner (the loaded model, with its variables) can be freed before grappler runs.
    """
    graph, inputs, outputs = frozen_graph(fn, in_names, out_names, source=source, what=what)
    nodes = []
    for op in graph.get_operations():
        nodes.append(TFNode(
            name=op.name,
            op=op.type,
            inputs=[t.name for t in op.inputs],
            attrs={k: _attr(v) for k, v in op.node_def.attr.items() if not k.startswith("_")},
            shapes=[None if o.shape.rank is None else tuple(o.shape.as_list()) for o in op.outputs],
            dtypes=[np.dtype(o.dtype.as_numpy_dtype) if o.dtype.is_numpy_compatible else np.dtype(object)
                    for o in op.outputs],
        ))
    return TFGraph(source=source, nodes=nodes, inputs=inputs, outputs=outputs)


def frozen_graph(fn: object, in_names: Sequence[str] = (), out_names: Sequence[str] = (), *,
                 source: str, what: str = "the function") -> tuple[object, dict[str, str], dict[str, str]]:
    """Freeze and fold a concrete function (or ``_concrete_function``'s list, see
    ``graph_from_function``) into a ``tf.Graph``; return it with its inputs and outputs by
    user-facing name (tensor names). The graph the converter reads, and ``--locate`` runs."""
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
    graph_def = _optimize(meta)
    del meta
    graph = tf.Graph()  # type: ignore[attr-defined]
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")  # type: ignore[attr-defined]
    del graph_def
    _release_memory()
    if len(placeholders) != len(in_names):
        raise ModelFormatError(f"{source}: {what} has {len(in_names)} inputs but its graph "
                               f"takes {len(placeholders)} tensors")
    # A signature's inputs are its Placeholders in the order of its structured input signature.
    return graph, dict(zip(input_order, placeholders, strict=True)), dict(zip(out_names, outs, strict=True))


def read_frozen_graph(path: Path, signature: str = DEFAULT_SIGNATURE) -> tuple[object, dict[str, str], dict[str, str]]:
    """``frozen_graph`` of a SavedModel signature, a ``.keras`` model's call or a frozen ``.pb``."""
    return frozen_graph(list(_concrete_function(path, signature)), source=path.name, what=f"signature '{signature}'")


def _ordered_inputs(fn: object, names: Sequence[str]) -> list[str]:
    """Return the user-facing input names in the order of the function's flat inputs."""
    flat = [t.name.split(":")[0] for t in fn.inputs]  # type: ignore[attr-defined]
    ordered = [n for n in flat if n in names]
    return ordered if len(ordered) == len(names) else list(names)
