"""TFLite's own interpreter as the parity reference for ``.tflite`` files.

LiteRT (``ai_edge_litert``) when installed, else TensorFlow's ``tf.lite.Interpreter``. As for the
TensorFlow runtime, rank-4 tensors are presented in NCHW unless ``--keep-nhwc``: feeds are
transposed to NHWC for the interpreter and rank-4 results back. The numbers are TFLite's own.

Float models run with the interpreter's defaults (XNNPACK). A model with quantized outputs runs
twice: TFLite's *reference kernels* (``BUILTIN_REF``: the fixed-point arithmetic that defines
TFLite's int8 semantics) give the reference, and the default optimised kernels (XNNPACK, whose
requantization is in float and differs per CPU) give a second opinion. How far the two are apart
on each output (``output_spread``) tells the verdict whether int8 rounding decides that output: in
a deep net with random weights one rounding step early on can move the logits by a third of their
range, in TFLite's own two paths as in any conversion (see ``compare_one``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from convert.ir import Options, UsageError
from convert.parity.runtime import TensorSpec

__all__ = ["TFLiteRuntime", "open_runtime"]

_TO_NCHW = (0, 3, 1, 2)
_TO_NHWC = (0, 2, 3, 1)


def _interpreter_class() -> tuple[type, object, str]:
    """Return the Interpreter class, its OpResolverType enum (None when unknown) and a name."""
    try:
        import ai_edge_litert  # type: ignore[import-not-found]
        from ai_edge_litert import interpreter as litert  # type: ignore[import-not-found]

        return (litert.Interpreter, getattr(litert, "OpResolverType", None),
                f"LiteRT {getattr(ai_edge_litert, '__version__', '')}".strip())
    except ImportError:
        pass
    from convert.frontends.tensorflow.graph import tf_module

    try:
        tf = tf_module()
    except UsageError as exc:
        raise UsageError("the TFLite parity reference needs LiteRT or TensorFlow: pip install "
                         "'convert-toolkit[tflite]' (LiteRT) or 'convert-toolkit[tensorflow]', or pass --no-check"
                         ) from exc
    return (tf.lite.Interpreter, getattr(tf.lite.experimental, "OpResolverType", None),  # type: ignore[attr-defined]
            f"TFLite interpreter (TensorFlow {tf.__version__})")  # type: ignore[attr-defined]


class TFLiteRuntime:
    """A ``.tflite`` file run by TFLite's interpreter on the CPU, one thread (quantized outputs: its
    reference kernels, with the optimised ones as a second opinion)."""

    def __init__(self, path: Path, *, keep_nhwc: bool = False, signature: str = "") -> None:
        from convert.frontends.tflite.model import read_model

        cls, resolvers, self.name = _interpreter_class()
        model = read_model(path, signature or None)  # names as the converter gives them
        self._path, self._cls, self._resolvers, self._model = path, cls, resolvers, model
        self._keep = keep_nhwc
        self._interp = cls(model_path=str(path), num_threads=1)
        self._interp.allocate_tensors()
        self._second: object | None = None
        self._reference: object | None = None  # a float model's reference kernels, made when first asked
        by_index = {d["index"]: d for d in self._interp.get_input_details()}
        self._inputs = [(name, by_index[i]) for name, i in model.inputs.items() if i in by_index]
        if len(self._inputs) != len(model.inputs):
            raise UsageError(f"{path.name}: the interpreter's inputs differ from the main subgraph's")
        self._outputs = dict(model.outputs)
        self.device = "cpu"
        # int8/uint8 activations anywhere (not only at the outputs): --locate cannot judge their layers
        self.quantized = any(t.quant is not None and t.span is None and t.dtype.kind in "iu" for t in model.tensors)
        # --input-shape is in the order the converted model declares (rank-4 inputs NCHW unless
        # --keep-nhwc), the order these inputs are presented in: no permutation.
        self.input_perms: dict[str, tuple[int, ...]] = {}
        self.notes: list[str] = []
        # The quantization step of each output computed in int8/uint8 (the DEQUANTIZE's input, or
        # the output itself, compared in its integers): the parity check allows a few steps.
        producer = {o: op for op in model.ops for o in op.outputs}
        self.output_steps: dict[str, float] = {}
        for name, index in model.outputs.items():
            tensor, op = model.tensors[index], producer.get(index)
            if tensor.quant is not None and tensor.dtype.kind in "iu":
                self.output_steps[name] = 1.0
            elif op is not None and op.name == "DEQUANTIZE" and model.tensors[op.inputs[0]].quant is not None \
                    and model.tensors[op.inputs[0]].span is None:
                self.output_steps[name] = float(model.tensors[op.inputs[0]].quant.scale[0])  # type: ignore[union-attr]
        # Quantized outputs: the reference kernels are the reference, the default kernels a second opinion.
        self.output_spread: dict[str, float] = {}
        self.output_second: dict[str, np.ndarray] = {}  # the optimised kernels' outputs, last run
        # Dynamic-range quantized operators (int8 weights read with float activations) are computed by
        # TFLite's built-in hybrid kernels, optimised and reference alike; XNNPACK quantizes their input
        # its own way (a two-layer net 1.3e-2 of scale apart): the reference kernels are the reference.
        self.dynamic_range = any(
            any(t.span is not None and t.quant is not None and t.dtype.kind in "iu" and t.dtype.itemsize == 1
                for t in ins) and any(t.span is None and t.quant is None and t.dtype == np.float32 for t in ins)
            for ins in ([model.tensors[i] for i in op.inputs if i >= 0] for op in model.ops))
        if (self.output_steps or self.dynamic_range) and resolvers is not None and hasattr(resolvers, "BUILTIN_REF"):
            self._second = self._interp
            self._interp = cls(model_path=str(path), num_threads=1,
                               experimental_op_resolver_type=resolvers.BUILTIN_REF)  # type: ignore[attr-defined]
            self._interp.allocate_tensors()  # type: ignore[attr-defined]
            self.name += ", reference kernels (optimised kernels as a second opinion)"
        # Float outputs that miss tol: no runtime runs a .tflite file in float64, so TFLite's other
        # kernel path measures what float32 rounding costs (``run_second_float32``; the verdict's rule
        # is the parity check's second-float32 rule, docs/verdict.md).
        self.float64_unavailable = "no runtime runs a .tflite file in float64"
        self.second_float32_path = ("TFLite's optimised kernels" if self._second is not None
                                    else "TFLite's reference kernels (BUILTIN_REF)")

    def inputs(self) -> Sequence[TensorSpec]:
        """Return the model's inputs (rank-4 ones in NCHW unless --keep-nhwc)."""
        out = []
        for name, detail in self._inputs:
            shape = tuple(int(d) if d >= 0 else None for d in detail.get("shape_signature", detail["shape"]))
            if len(shape) == 4 and not self._keep:
                shape = tuple(shape[p] for p in _TO_NCHW)
            out.append(TensorSpec(name, np.dtype(detail["dtype"]), shape))
        return out

    def outputs(self) -> Sequence[str]:
        """Return the output names in the subgraph's order."""
        return list(self._outputs)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once; rank-4 feeds and results are transposed between NCHW and NHWC unless --keep-nhwc.

        With a second interpreter, ``output_spread`` records how far its quantized outputs are
        from the reference's on this run, and ``output_second`` those outputs.
        """
        out = self._invoke(self._interp, feeds)
        if self._second is not None:
            other = self._invoke(self._second, feeds)
            for name in self.output_steps:
                gap = float(np.abs(out[name].astype(np.float64) - other[name].astype(np.float64)).max())
                self.output_spread[name] = max(self.output_spread.get(name, 0.0), gap)
                self.output_second[name] = other[name]
        return out

    def run_float64(self, feeds: Mapping[str, np.ndarray]) -> None:
        """No float64 run (``float64_unavailable`` says why); the parity check then asks for
        ``run_second_float32``."""
        return None

    def run_second_float32(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        """The same file on TFLite's other kernel path (``second_float32_path``): its reference kernels
        (``BUILTIN_REF``: plain loops, summing in another order than XNNPACK's) for a float model, its
        optimised kernels where the reference kernels are the reference. None without either."""
        if self._second is not None:
            return self._invoke(self._second, feeds)
        if self._reference is None:
            if self._resolvers is None or not hasattr(self._resolvers, "BUILTIN_REF"):
                return None
            self._reference = self._cls(model_path=str(self._path), num_threads=1,
                                        experimental_op_resolver_type=self._resolvers.BUILTIN_REF)  # type: ignore[attr-defined]
            self._reference.allocate_tensors()  # type: ignore[attr-defined]
        return self._invoke(self._reference, feeds)

    def _invoke(self, interp: object, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        for name, detail in self._inputs:
            if name not in feeds:
                raise UsageError(f"no value for TFLite input '{name}'")
            arr = np.asarray(feeds[name], dtype=detail["dtype"])
            if arr.ndim == 4 and not self._keep:
                arr = arr.transpose(_TO_NHWC)
            arr = np.ascontiguousarray(arr)
            current = {d["index"]: d for d in interp.get_input_details()}[detail["index"]]  # type: ignore[attr-defined]
            if tuple(arr.shape) != tuple(current["shape"]):
                interp.resize_tensor_input(detail["index"], list(arr.shape))  # type: ignore[attr-defined]
                interp.allocate_tensors()  # type: ignore[attr-defined]
            interp.set_tensor(detail["index"], arr)  # type: ignore[attr-defined]
        interp.invoke()  # type: ignore[attr-defined]
        out = {}
        for name, index in self._outputs.items():
            arr = np.array(interp.get_tensor(index))  # type: ignore[attr-defined]
            out[name] = np.ascontiguousarray(arr.transpose(_TO_NCHW)) if arr.ndim == 4 and not self._keep else arr
        return out


    def all_tensors(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every op's first output as TFLite computes it (NHWC, in op order), keyed by tensor name
        (the converted nodes' source layer), for ``convert check --locate``.

        A third interpreter keeps every tensor (``experimental_preserve_all_tensors``, which also
        keeps TFLite's default delegates out so that the intermediate tensors exist). Quantized
        tensors are dequantized (scale * (q - zero point)), as the converted model's float values.
        """
        resolver = getattr(self._resolvers, "BUILTIN_WITHOUT_DEFAULT_DELEGATES", None)
        kwargs = {"experimental_op_resolver_type": resolver} if resolver is not None else {}
        interp = self._cls(model_path=str(self._path), num_threads=1, experimental_preserve_all_tensors=True,
                           **kwargs)
        interp.allocate_tensors()  # type: ignore[attr-defined]
        self._invoke(interp, feeds)
        out: dict[str, np.ndarray] = {}
        for op in self._model.ops:
            index = op.outputs[0] if op.outputs else -1
            if index < 0:
                continue
            tensor = self._model.tensors[index]
            try:
                arr = np.array(interp.get_tensor(index))  # type: ignore[attr-defined]
            except ValueError:  # a tensor the interpreter did not keep
                continue
            if tensor.quant is not None and arr.dtype.kind in "iu" and tensor.quant.scale.size == 1:
                arr = (tensor.quant.scale[0] * (arr.astype(np.float64) - tensor.quant.zero_point[0])).astype(np.float32)
            out[tensor.name] = arr
        return out


def open_runtime(paths: Sequence[Path], options: Options) -> TFLiteRuntime:
    """Open the ``.tflite`` file for a reference run."""
    if len(paths) != 1:
        raise UsageError("tflite: give one .tflite file")
    return TFLiteRuntime(Path(paths[0]), keep_nhwc=bool(options.get("keep_nhwc", False)),
                         signature=str(options.get("tflite_signature", "") or ""))
