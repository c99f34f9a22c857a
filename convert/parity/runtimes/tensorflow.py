"""TensorFlow itself as the parity reference: the SavedModel signature (or the Keras model) called eagerly.

The converted model takes and returns rank-4 image tensors in NCHW unless ``--keep-nhwc``; this
runtime then presents the same interface: it takes NCHW feeds, transposes them to NHWC for
TensorFlow, and transposes rank-4 results back. The numbers are TensorFlow's own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from convert.ir import Options, UsageError
from convert.parity.runtime import TensorSpec

from ._gpu import EXACT_FP32, tensorflow_exact_fp32

__all__ = ["TensorFlowRuntime", "open_runtime"]

_TO_NCHW = (0, 3, 1, 2)
_TO_NHWC = (0, 2, 3, 1)


class TensorFlowRuntime:
    """A SavedModel signature or ``.keras`` model run eagerly by TensorFlow, on the CPU or, on a GPU
    build with a GPU (``--device auto``/``cuda``), on the GPU in exact float32 (TF32 off, ``_gpu``)."""

    def __init__(self, path: Path, *, signature: str = "serving_default", keep_nhwc: bool = False,
                 device: str = "cpu") -> None:
        from convert.frontends.tensorflow.graph import (
            frozen_graph_function,
            is_frozen_graph,
            is_keras_file,
            is_saved_model,
            load_keras,
            tf_module,
        )

        tf = tf_module()
        self._tf = tf
        gpus = tf.config.list_physical_devices("GPU")  # type: ignore[attr-defined]
        if device == "cuda" and not gpus:
            raise UsageError("--device cuda: this TensorFlow sees no GPU (tensorflow-cpu, or no CUDA device); "
                             "use --device cpu")
        on_gpu = device in ("auto", "cuda") and bool(gpus)
        self._place = "/GPU:0" if on_gpu else "/CPU:0"
        self._keep = keep_nhwc
        self._path, self._signature = path, signature
        if is_saved_model(path):
            loaded = tf.saved_model.load(str(path))  # type: ignore[attr-defined]
            if signature not in loaded.signatures:
                raise UsageError(f"{path.name}: no signature '{signature}'")
            fn = loaded.signatures[signature]
            self._keep_alive = loaded
            specs = fn.structured_input_signature[1]
            self._specs = [(name, np.dtype(s.dtype.as_numpy_dtype), tuple(s.shape.as_list()))
                           for name, s in specs.items()]
            self._call = lambda feeds: fn(**feeds)
            self._outputs = sorted(fn.structured_outputs)
        elif is_frozen_graph(path):
            fn, in_names, out_names, owner = frozen_graph_function(path)
            self._keep_alive = owner
            self._specs = [(t.name.split(":")[0], np.dtype(t.dtype.as_numpy_dtype),
                            tuple(t.shape.as_list()) if t.shape.rank is not None else ())
                           for t in fn.inputs]  # type: ignore[attr-defined]

            def call_pb(feeds: Mapping[str, object]) -> dict[str, object]:
                outs = fn(*[feeds[n] for n in in_names])  # type: ignore[operator]
                return dict(zip(out_names, outs, strict=True))

            self._call = call_pb
            self._outputs = list(out_names)
        elif is_keras_file(path):
            model = load_keras(path)
            self._keep_alive = model
            self._specs = [(str(t.name).split(":")[0], np.dtype(t.dtype if isinstance(t.dtype, str)
                                                                   else t.dtype.as_numpy_dtype),
                            tuple(t.shape)) for t in model.inputs]  # type: ignore[attr-defined]
            names = [s[0] for s in self._specs]

            def call(feeds: Mapping[str, object]) -> dict[str, object]:
                args = [feeds[n] for n in names]
                out = model(args if len(args) > 1 else args[0], training=False)  # type: ignore[operator]
                outs = out if isinstance(out, (list, tuple)) else [out]
                return {f"output_{i}": o for i, o in enumerate(outs)}

            self._call = call
            self._keras = model
            n_out = len(model.outputs)  # type: ignore[attr-defined]
            self._outputs = sorted(f"output_{i}" for i in range(n_out))
        else:
            raise UsageError(f"{path}: not a SavedModel folder, a .keras/.h5 file or a frozen .pb graph")
        self.name = f"TensorFlow {tf.__version__}"  # type: ignore[attr-defined]
        # --input-shape is in the order the converted model declares (rank-4 inputs NCHW unless
        # --keep-nhwc), the order these inputs are presented in: no permutation.
        self.input_perms: dict[str, tuple[int, ...]] = {}
        self.device = f"gpu:0, {EXACT_FP32}" if on_gpu else "cpu"

    def inputs(self) -> Sequence[TensorSpec]:
        """Return the signature's inputs (rank-4 ones in NCHW unless --keep-nhwc)."""
        out = []
        for name, dtype, shape in self._specs:
            if len(shape) == 4 and not self._keep:
                shape = tuple(shape[p] for p in _TO_NCHW)
            out.append(TensorSpec(name, dtype, shape))
        return out

    def outputs(self) -> Sequence[str]:
        """Return the output names (the signature's keys, sorted as TensorFlow flattens them)."""
        return list(self._outputs)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once; rank-4 feeds and results are transposed between NCHW and NHWC unless --keep-nhwc."""
        tf_feeds = {}
        for name, dtype, _ in self._specs:
            if name not in feeds:
                raise UsageError(f"no value for TensorFlow input '{name}'")
            arr = np.asarray(feeds[name], dtype=dtype)
            if arr.ndim == 4 and not self._keep:
                arr = arr.transpose(_TO_NHWC)
            tf_feeds[name] = self._tf.constant(np.ascontiguousarray(arr))  # type: ignore[attr-defined]
        with self._tf.device(self._place), tensorflow_exact_fp32():  # type: ignore[attr-defined]
            result = self._call(tf_feeds)
        out = {}
        for name in self._outputs:
            arr = np.asarray(result[name])
            out[name] = np.ascontiguousarray(arr.transpose(_TO_NCHW)) if arr.ndim == 4 and not self._keep else arr
        return out

    def run_float64(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        """Run the source again in float64 with the same weights, for the float64 rule of the verdict
        (``compare.arbitrate_float64``); None where TensorFlow cannot.

        A Keras model is rebuilt from its config with the float64 dtype policy and the weights
        widened. A SavedModel or frozen graph (or a Keras model that cannot be rebuilt) is run as
        the graph the converter read (``read_runnable_graph``: inlined and folded by grappler, the
        variables fed as values) with every float32 type in it made float64: the ops' ``T``/``dtype``
        attributes, the constants and the fed weights. It is TensorFlow's own kernels in float64;
        an op without a float64 CPU kernel (the fused batch norm) means no float64 run.
        """
        model = getattr(self, "_keras", None)
        if model is not None:
            result = self._keras_float64(model, feeds)
            if result is not None:
                return result
        try:
            return self._graph_float64(feeds)
        except Exception:  # an op TF has no float64 kernel for, ...: no float64 run
            return None

    def _keras_float64(self, model: object, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        def widen(item: object) -> object:
            if isinstance(item, dict):
                if item.get("class_name") == "DTypePolicy" and isinstance(item.get("config"), dict):
                    return {**item, "config": {**item["config"], "name": "float64"}}
                return {k: widen(v) for k, v in item.items()}
            if isinstance(item, list):
                return [widen(v) for v in item]
            return "float64" if item == "float32" else item

        try:
            wide = type(model).from_config(widen(model.get_config()))  # type: ignore[attr-defined]
            wide.set_weights([np.asarray(w, np.float64) for w in model.get_weights()])  # type: ignore[attr-defined]
        except Exception:  # a model Keras cannot rebuild from its config
            return None
        names = [s[0] for s in self._specs]
        args = []
        for name, _, _ in self._specs:
            arr = np.asarray(feeds[name], dtype=np.float64)
            args.append(np.ascontiguousarray(arr.transpose(_TO_NHWC) if arr.ndim == 4 and not self._keep else arr))
        try:
            with self._tf.device("/CPU:0"):  # type: ignore[attr-defined]
                out = wide(args if len(names) > 1 else args[0], training=False)
        except Exception:  # a layer without a float64 kernel
            return None
        outs = out if isinstance(out, (list, tuple)) else [out]
        result = {}
        for i, o in enumerate(outs):
            arr = np.asarray(o)
            result[f"output_{i}"] = np.ascontiguousarray(arr.transpose(_TO_NCHW)) if arr.ndim == 4 and not self._keep \
                else arr
        if any(r.dtype != np.float64 for r in result.values()):
            return None  # a layer kept float32: not a float64 run
        return result

    def _graph_float64(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        from convert.frontends.tensorflow.graph import quiet_stderr, read_runnable_graph, widen_graph

        tf = self._tf
        with quiet_stderr():
            graph, inputs, outputs, weights = read_runnable_graph(self._path, self._signature, with_outputs=True)
            wide = widen_graph(graph)  # type: ignore[arg-type]
        if wide is None:
            return None
        feed_dict = {}
        for name, value in weights.items():
            arr = np.asarray(value)
            feed_dict[wide.get_tensor_by_name(name)] = arr.astype(np.float64) if arr.dtype == np.float32 else arr  # type: ignore[attr-defined]
        for name, dtype, _ in self._specs:
            arr = np.asarray(feeds[name], dtype=np.float64 if dtype == np.float32 else dtype)
            if arr.ndim == 4 and not self._keep:
                arr = arr.transpose(_TO_NHWC)
            feed_dict[wide.get_tensor_by_name(inputs[name])] = np.ascontiguousarray(arr)  # type: ignore[attr-defined]
        names = list(self._outputs)
        with tf.compat.v1.Session(graph=wide) as session:  # type: ignore[attr-defined]
            values = session.run([wide.get_tensor_by_name(outputs[n]) for n in names], feed_dict)  # type: ignore[attr-defined]
        result = {}
        for name, value in zip(names, values, strict=True):
            arr = np.asarray(value)
            if arr.dtype != np.float64:
                return None  # an output computed in another type: not a float64 run
            result[name] = np.ascontiguousarray(arr.transpose(_TO_NCHW)) if arr.ndim == 4 and not self._keep else arr
        return result

    def all_tensors(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every float op output of the folded graph the converter read, as TensorFlow computes it
        (NHWC, in graph order), keyed by node name (the converted nodes' source layer), for
        ``convert check --locate``. The graph is read again here and run in a session with its
        weights fed; every value is held at once."""
        from convert.frontends.tensorflow.graph import quiet_stderr, read_runnable_graph

        tf = self._tf
        with quiet_stderr():
            graph, inputs, weights = read_runnable_graph(self._path, self._signature)
        # The variables' stand-ins are fed their (mapped or shared) values.
        feed_dict = {graph.get_tensor_by_name(name): value for name, value in weights.items()}  # type: ignore[attr-defined]
        for name, dtype, _ in self._specs:
            arr = np.asarray(feeds[name], dtype=dtype)
            if arr.ndim == 4 and not self._keep:
                arr = arr.transpose(_TO_NHWC)
            feed_dict[graph.get_tensor_by_name(inputs[name])] = np.ascontiguousarray(arr)  # type: ignore[attr-defined]
        ops = [op for op in graph.get_operations()  # type: ignore[attr-defined]
               if op.outputs and op.type not in ("Const", "Placeholder", "Identity")
               and op.outputs[0].dtype.is_floating]
        # the graph as the converter read it: the session's own grappler pass would fuse ops away
        config = tf.compat.v1.ConfigProto()  # type: ignore[attr-defined]
        config.graph_options.rewrite_options.disable_meta_optimizer = True
        config.graph_options.optimizer_options.opt_level = tf.compat.v1.OptimizerOptions.L0  # type: ignore[attr-defined]
        with tf.compat.v1.Session(graph=graph, config=config) as session:  # type: ignore[attr-defined]
            values = session.run([op.outputs[0] for op in ops], feed_dict)
        return {op.name: np.asarray(v) for op, v in zip(ops, values, strict=True)}


def open_runtime(paths: Sequence[Path], options: Options) -> TensorFlowRuntime:
    """Open the SavedModel folder or ``.keras`` file for an eager reference run."""
    if len(paths) != 1:
        raise UsageError("tensorflow: give one SavedModel folder or one .keras file")
    return TensorFlowRuntime(Path(paths[0]), signature=str(options.get("tf_signature", "serving_default")),
                             keep_nhwc=bool(options.get("keep_nhwc", False)),
                             device=str(options.get("device", "auto")))
