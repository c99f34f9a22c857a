"""PyTorch eager as a parity runtime: the reference for ``pytorch->X`` conversions.

Loads what the PyTorch frontend reads (TorchScript, ExportedProgram, torch.save modules under
``--trust-pickle``, a state_dict with ``--model``) and names inputs and outputs exactly as the
frontend names the converted graph's: inputs after ``forward``'s parameters, outputs
``output`` or ``output0``, ``output1``... in the order of the flattened result.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

import numpy as np

from convert.ir import Options, UsageError

from ..runtime import TensorSpec
from ._gpu import EXACT_FP32, torch_exact_fp32

__all__ = ["TorchRuntime", "module_runtime", "open_runtime", "torch_device"]

logger = logging.getLogger(__name__)

# The float64 copy ``run_float64`` makes is refused above this many bytes of parameters and buffers
# in float64 (it is made only to settle an output that missed the tolerance).
FLOAT64_COPY_LIMIT = 4 << 30


def _flatten(value: object) -> list[object]:
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _flatten(item)]
    if isinstance(value, Mapping):
        return [leaf for item in value.values() for leaf in _flatten(item)]
    return [value]


def torch_device(device: str) -> str:
    """Return where a model read from a file runs for ``--device device``: ``cuda`` when asked for
    (an error without a usable GPU) or, under ``auto``, when torch sees one; else ``cpu``."""
    import torch

    cuda = bool(torch.cuda.is_available())
    if device == "cuda" and not cuda:
        raise UsageError("--device cuda: this PyTorch sees no CUDA device (a CPU build of torch, or no GPU); "
                         "use --device cpu")
    return "cuda" if device in ("auto", "cuda") and cuda else "cpu"


def _module_device(module: object) -> str:
    """Return the device of ``module``'s first parameter or buffer (``cpu`` when it has none)."""
    import torch

    if isinstance(module, torch.nn.Module):
        for t in [*module.parameters(), *module.buffers()]:
            return str(t.device.type)
    return "cpu"


# Models that take images with values in [0, 1] and normalise them themselves: their parity inputs
# are drawn uniform in [0, 1), the input they were made for, where N(0, 1) noise often makes a
# detector detect nothing (and an empty output proves nothing).
_IMAGE_MODELS = {"torchvision.models.detection": "images in [0, 1], as torchvision's detectors take them",
                 "ultralytics.nn.tasks": "images in [0, 1], as Ultralytics' YOLO models take them"}


def image_convention(module: object) -> str:
    """Say how ``module`` wants its image input ("" when unknown): from the classes of its modules
    (an ``nn.Module``, a TorchScript module's qualified names, or an exported program's module
    stack)."""
    names: set[str] = set()
    modules = getattr(module, "modules", None)
    if callable(modules):
        for sub in modules():
            cls = type(sub)
            names.add(f"{cls.__module__}.{cls.__qualname__}")
            qual = getattr(getattr(sub, "_c", None), "qualified_name", None)
            if isinstance(qual, str):
                names.add(qual.removeprefix("__torch__."))
    nodes = getattr(getattr(module, "graph", None), "nodes", None)
    for node in nodes if nodes is not None and not callable(nodes) else []:  # an FX graph (TorchScript's is C++)
        stack = getattr(node, "meta", {}).get("nn_module_stack") or {}
        names.update(str(kind) for _, kind in stack.values() if kind is not None)
    for prefix, why in _IMAGE_MODELS.items():
        if any(n.startswith(prefix) or f"'{prefix}" in n for n in names):
            return why
    return ""


class TorchRuntime:
    """A PyTorch model run eagerly, on the CPU or on CUDA in exact float32 (TF32 off, ``_gpu``).

    ``device``: where to run. A module that is not there is moved there for each run and moved
    back after (``restore``: an in-memory module the caller owns), or moved once (a module read
    from a file, which only this runtime holds).
    """

    def __init__(self, module: object, inputs: Sequence[TensorSpec], *, device: str = "cpu",
                 restore: bool = False) -> None:
        import torch

        self.module = module
        self._inputs = list(inputs)
        self.name = f"PyTorch {torch.__version__.split('+')[0]}"
        self._where = device
        self._home = _module_device(module)
        self._restore = restore and self._home != device
        if device != self._home and not self._restore:
            module.to(device)  # type: ignore[attr-defined]
            self._home = device
        self.device = f"{torch.cuda.get_device_name(0)} (cuda), {EXACT_FP32}" if device == "cuda" else "cpu"
        self._outputs: list[str] | None = None
        #: Why the last ``run_float64`` gave no float64 run ("" when it did).
        self.float64_unavailable = ""
        #: What ``run_second_float32`` changes, for the verdict's note.
        self.second_float32_path = "PyTorch's float32 run with oneDNN off (convolutions as im2col + GEMM)"
        # Float image inputs of a model with a known convention get values in [0, 1) (see make_inputs).
        why = image_convention(module)
        self.input_ranges = {s.name: (0.0, 1.0, why) for s in self._inputs
                             if why and s.dtype.kind == "f" and len(s.shape) in (3, 4)}

    def inputs(self) -> Sequence[TensorSpec]:
        """Return the inputs (names as the converted graph has them)."""
        return self._inputs

    def outputs(self) -> Sequence[str]:
        """Return the output names; the count is known after a first run, so run once if needed."""
        if self._outputs is None:
            feeds = {s.name: np.zeros([int(d) for d in s.shape], dtype=s.dtype) for s in self._inputs}  # type: ignore[arg-type]
            self.run(feeds)
        assert self._outputs is not None
        return self._outputs

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once on ``feeds`` and return every (flattened) output by name."""
        from convert.frontends.pytorch.lower import output_names

        leaves = self._leaves(self.module, feeds)
        names = output_names(len(leaves))
        self._outputs = names
        return {n: t.detach().cpu().numpy() for n, t in zip(names, leaves, strict=True)}

    def _leaves(self, module: object, feeds: Mapping[str, np.ndarray], *, wide: bool = False) -> list[object]:
        """Run ``module`` on ``feeds`` (float inputs widened to float64 when ``wide``); return every
        tensor of its (nested) result, in order."""
        import torch

        args = [torch.from_numpy(np.ascontiguousarray(feeds[s.name])).to(self._where) for s in self._inputs]
        if wide:
            args = [a.double() if a.is_floating_point() else a for a in args]
        movable = self._restore and hasattr(module, "to")
        if movable:
            module.to(self._where)  # type: ignore[attr-defined]
        try:
            with torch.no_grad(), torch_exact_fp32():
                result = module(*args)  # type: ignore[operator]
            return [r.cpu() for r in _flatten(result) if isinstance(r, torch.Tensor)]
        finally:
            if movable:
                module.to(self._home)  # type: ignore[attr-defined]

    def run_half(self, feeds: Mapping[str, np.ndarray], precision: str) -> dict[str, np.ndarray] | None:
        """Run a copy of the model cast whole to ``precision`` (``fp16``: ``module.half()``; ``bf16``)
        on ``feeds`` (float inputs cast too), on this runtime's device: what half precision costs
        this model in its own framework, the yardstick of a half-precision conversion. None when
        the model cannot run so (an op without a half kernel on this device)."""
        import torch

        from convert.frontends.pytorch.lower import output_names

        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[precision]
        module = self.module
        if not isinstance(module, torch.nn.Module):
            return None
        try:
            half = copy.deepcopy(module).to(dtype)
            args = [torch.from_numpy(np.ascontiguousarray(feeds[s.name])).to(self._where) for s in self._inputs]
            args = [a.to(dtype) if a.is_floating_point() else a for a in args]
            half.to(self._where)
            with torch.no_grad(), torch_exact_fp32():
                result = half(*args)
            leaves = [r.float().cpu() if r.is_floating_point() else r.cpu()
                      for r in _flatten(result) if isinstance(r, torch.Tensor)]
        except Exception as exc:  # no half kernel for some op here: no yardstick, the verdict says so
            logger.info("no %s run of the source: %s: %s", precision, type(exc).__name__, str(exc).strip()[:200])
            return None
        return {n: t.detach().numpy() for n, t in zip(output_names(len(leaves)), leaves, strict=True)}

    def run_float64(self, feeds: Mapping[str, np.ndarray],
                    needed: Collection[str] | None = None) -> dict[str, np.ndarray] | None:
        """Run a float64 copy of the model on ``feeds`` (float inputs widened): the arbiter when an
        output misses the tolerance by float32 rounding. None when that is no float64 run (the reason
        in ``float64_unavailable``): a model over ``FLOAT64_COPY_LIMIT``, one that cannot be copied or
        widened, or one that casts a float output to half precision.

        A TorchScript module runs its graph widened (``_torch_wide``: a traced graph fixes float32
        wherever its code made or cast a tensor, and ``.double()`` alone widens only its weights);
        only the outputs in ``needed`` (names; None: all) are computed where the graph's result is a
        flat tuple, and only those are returned. An output an ``nn.Module`` stores in float32 itself
        (torchvision's keypoint decoding fills float32 tensors whatever its input's dtype) is
        returned as float32: computed in float64, it is float64's value rounded once, which
        ``compare.arbitrate_float64`` uses only where the tolerance is far above that rounding
        (``FLOAT32_ARBITER_MIN_TOL``)."""
        import torch

        from convert.frontends.pytorch.lower import output_names

        from ._torch_wide import widened_forward

        self.float64_unavailable = ""
        module = self.module
        tensors = [*module.parameters(), *module.buffers()] if isinstance(module, torch.nn.Module) else []
        if sum(t.numel() for t in tensors if t.is_floating_point()) * 8 > FLOAT64_COPY_LIMIT:
            return self._no_float64(f"its weights exceed {FLOAT64_COPY_LIMIT >> 30} GiB in float64")
        names = self._outputs
        keep = None if needed is None or names is None else {i for i, n in enumerate(names) if n in needed}
        runner: object = None
        if isinstance(module, torch.jit.ScriptModule):
            try:
                runner = widened_forward(module, keep, len(names or []))
            except Exception:  # a graph the widening cannot read: the module as it is, in float64
                logger.debug("the TorchScript graph was not widened", exc_info=True)
        try:
            if runner is None:
                runner = copy.deepcopy(module).double()  # type: ignore[attr-defined]
            leaves = self._leaves(runner, feeds, wide=True)
        except Exception as exc:  # a model that cannot run in float64: no arbiter, the verdict says so
            first = (str(exc).strip().splitlines() or [""])[-1][:200]
            return self._no_float64(f"it cannot run in float64 ({type(exc).__name__}: {first})")
        if any(t.is_floating_point() and t.dtype not in (torch.float64, torch.float32) for t in leaves):
            return self._no_float64("it casts an output to half precision")
        result = {n: t.detach().cpu().numpy() for n, t in zip(output_names(len(leaves)), leaves, strict=True)}
        return result if needed is None else {n: a for n, a in result.items() if n in needed}

    def _no_float64(self, why: str) -> None:
        logger.info("no float64 run of the source: %s", why)
        self.float64_unavailable = why
        return None

    def run_second_float32(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        """Run the model again in float32 on another kernel path (oneDNN off: convolutions by
        PyTorch's own im2col and GEMM, which sum in another order): how far two of PyTorch's own
        float32 runs are apart measures what float32 rounding costs this model on ``feeds`` where
        no float64 run can (``compare.arbitrate_second_float32``). None when PyTorch has no such
        path here (built without oneDNN, or a model on CUDA)."""
        import torch

        if self._where != "cpu" or not torch.backends.mkldnn.is_available():
            return None
        import warnings

        with warnings.catch_warnings():  # "TF32 acceleration on top of oneDNN is available for Intel GPUs"
            warnings.simplefilter("ignore", UserWarning)
            with torch.backends.mkldnn.flags(enabled=False):
                return self.run(feeds)


def open_runtime(paths: Sequence[Path], options: Options) -> TorchRuntime:
    """Open the PyTorch model in ``paths[0]`` for eager execution."""
    try:
        import torch
    except ImportError as exc:
        raise UsageError("the PyTorch runtime needs torch: pip install 'convert-toolkit[torch]'") from exc
    from convert.frontends.pytorch import _load_needing_torchvision, _quiet
    from convert.frontends.pytorch.capture import forward_input_names, resolve_shapes, script_input_names
    from convert.frontends.pytorch.files import (
        CHECKPOINT,
        EXPORTED_PROGRAM,
        TORCHSCRIPT,
        archive_mentions,
        check_pt2_payloads,
        classify,
        load_checkpoint,
        load_torchscript,
        traced_input_dtypes,
        traced_input_shapes,
    )

    path = Path(paths[0])
    where = torch_device(str(options.get("device", "auto")))
    kind = classify(path)
    dtypes: list[str] | None = None
    if kind == EXPORTED_PROGRAM:
        from convert.frontends.pytorch.shared import recall_program

        # the program the conversion loaded, when it is still as torch loaded it; else read again
        program = recall_program(options, path)
        if program is None:  # read here first (`convert check`): checked as the conversion checks it
            check_pt2_payloads(path, trust=bool(options.get("trust_pickle", False)))
            program = _load_needing_torchvision(lambda: _quiet(lambda: torch.export.load(path)), path.name,
                                                lambda: archive_mentions(path, b"torch.ops.torchvision."))
        users = [s.arg.name for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
        vals = {n.name: n.meta.get("val") for n in program.graph.nodes if n.op == "placeholder"}
        specs = [TensorSpec(n, np.dtype(str(vals[n].dtype).replace("torch.", "")), tuple(vals[n].shape))
                 for n in users]
        return TorchRuntime(program.module(), specs, device=where)
    if kind == TORCHSCRIPT:
        # a traced torchvision detector names torchvision::nms: torchvision is imported to read it, as
        # the conversion reads it (`convert check` reads the file here first)
        module: object = _load_needing_torchvision(lambda: load_torchscript(path), path.name)
        names = script_input_names(module)  # type: ignore[arg-type]
        traced = traced_input_shapes(path)
        if not options.input_shapes and traced is not None and len(traced) == len(names):
            options = copy.copy(options)
            options.input_shapes = dict(zip(names, traced, strict=True))
        dtypes = traced_input_dtypes(path)
    elif kind == CHECKPOINT:
        module = load_checkpoint(path, options)
        if isinstance(module, torch.jit.ScriptModule):
            names = script_input_names(module)
        else:
            names = forward_input_names(module)
        module.eval()
    else:
        raise UsageError(f"{path}: not a PyTorch file")
    shapes = resolve_shapes(names, options, path.name)
    if dtypes is None or len(dtypes) != len(names):
        dtypes = ["float32"] * len(names)
    return TorchRuntime(module, [TensorSpec(n, np.dtype(d if d != "bfloat16" else "float32"), s)
                                 for n, s, d in zip(names, shapes, dtypes, strict=True)], device=where)


def module_runtime(module: object, example_inputs: object, options: Options) -> TorchRuntime:
    """Wrap an in-memory ``nn.Module`` (the Python API's source) as the reference runtime.

    ``options``' device: ``auto`` runs the module where it lives; ``cuda``/``cpu`` there.

    Inputs are named as ``load_module`` names the converted graph's (``forward``'s parameters),
    with the example inputs' shapes and dtypes.
    """
    import torch

    from convert.frontends.pytorch.capture import forward_input_names

    example = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)  # type: ignore[arg-type]
    names = forward_input_names(module)[: len(example)]  # type: ignore[arg-type]
    if len(names) != len(example):
        names = [f"input{i}" for i in range(len(example))]
    specs = [TensorSpec(n, np.dtype(str(x.dtype).replace("torch.", "")), tuple(x.shape))
             for n, x in zip(names, example, strict=True)]
    module.eval()  # type: ignore[attr-defined]
    # The caller's module runs where it lives under ``auto``; ``--device cuda``/``cpu`` moves it
    # there for each run and back after, so the caller's object is left as it was.
    device = str(options.get("device", "auto"))
    where = _module_device(module) if device == "auto" else torch_device(device)
    return TorchRuntime(module, specs, device=where, restore=True)
