"""Capture a model as an ExportedProgram: torch.export for modules, TorchScript converted.

``torch.export`` (non-strict) keeps the high-level ATen ops (conv2d, batch_norm, linear, ...).
Where it cannot capture a module because of a data-dependent guard (a detector's NMS, a branch
on tensor values), the module is traced with ``torch.jit.trace`` instead, and the traced graph
converted to an ExportedProgram; the summary says so.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import logging
import os
import re
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from convert.ir import ConversionError, ModelFormatError, Options, UsageError

from .torchenv import PACKAGE, quiet_torch, torch_folder
from .tvpost import offset_batched_nms, paste_expanded_masks, traced_decode_heatmaps

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["export_module", "forward_input_names", "make_example_inputs", "quiet_torch", "resolve_shapes",
           "script_input_names", "script_to_program"]

logger = logging.getLogger(__name__)

_DATA_DEPENDENT = ("data-dependent", "data dependent", "GuardOnDataDependentSymNode",
                   "Could not guard on", "unbacked", "Dynamic control flow is not supported")


def _is_data_dependent(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if type(seen).__name__ == "GuardOnDataDependentSymNode":
            return True
        text = str(seen)
        if any(marker in text for marker in _DATA_DEPENDENT):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def forward_input_names(module: torch.nn.Module) -> list[str]:
    """Return the names of ``module.forward``'s positional parameters."""
    try:
        params = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def script_input_names(script: torch.jit.ScriptModule, source: str = "the TorchScript file") -> list[str]:
    """Return the input names of a TorchScript module's ``forward`` (without ``self``).

    Raises:
        ModelFormatError: the module has no ``forward`` (a damaged or hand-edited archive).
    """
    forward = getattr(script, "forward", None)
    schema = getattr(forward, "schema", None)
    if schema is None:
        raise ModelFormatError(f"{source}: the TorchScript module has no forward method to convert")
    return [a.name for a in schema.arguments[1:]]


def resolve_shapes(names: Sequence[str], options: Options, source: str) -> list[tuple[int, ...]]:
    """Return the shape of each input from ``options.input_shapes`` (by name or as ``input0``...).

    Raises:
        UsageError: when an input has no shape, naming the flag to pass.
    """
    given = dict(options.input_shapes)
    known = {*names, *(f"input{i}" for i in range(len(names))), *([""] if len(names) == 1 else [])}
    unknown = [k for k in given if k not in known]
    if unknown:
        raise UsageError(f"{source}: --input-shape names {', '.join(repr(k) for k in unknown)}, "
                         f"which the model does not have (inputs: {', '.join(names)})")
    shapes: list[tuple[int, ...]] = []
    for i, name in enumerate(names):
        shape = given.pop(name, None)
        if shape is None:
            shape = given.pop(f"input{i}", None)
        if shape is None and len(names) == 1 and "" in given:  # an unnamed --input-shape is the only input's
            shape = given.pop("")
        if shape is None:
            listed = ", ".join(f"'{n}'" for n in names)
            raise UsageError(
                f"{source}: the shape of input '{name}' is unknown (inputs: {listed}). "
                f"Pass --input-shape {name}=1,3,224,224 (one per input; 'input{i}' works too)"
            )
        shapes.append(tuple(int(d) for d in shape))
    if given:
        raise UsageError(f"{source}: --input-shape names {', '.join(repr(k) for k in given)}, "
                         f"which the model does not have (inputs: {', '.join(names)})")
    return shapes


def make_example_inputs(shapes: Sequence[Sequence[int]], seed: int = 0,
                        dtypes: Sequence[str] | None = None) -> tuple[torch.Tensor, ...]:
    """Return seeded example inputs of ``shapes``: float32, or the ``dtypes`` named ('int64', 'bool').

    Integer inputs (token ids, attention masks) are 0 or 1, valid for any embedding or mask.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = []
    for i, s in enumerate(shapes):
        name = dtypes[i] if dtypes is not None and i < len(dtypes) else "float32"
        dtype = getattr(torch, name, torch.float32)
        if dtype.is_floating_point:
            out.append(torch.rand(tuple(s), generator=gen).to(dtype))
        else:
            out.append(torch.randint(0, 2, tuple(s), generator=gen).to(dtype))
    return tuple(out)


def script_to_program(script: torch.jit.ScriptModule, example: Sequence[torch.Tensor], source: str,
                      traced_from: str | None = None) -> object:
    """Convert a TorchScript module to an ExportedProgram with torch's TorchScript converter.

    ``traced_from``: why torch.export failed on the module this was traced from (the message then
    says so, instead of suggesting torch.export.save, which would fail the same way).
    """
    import torch

    if _torch_minor() < TORCHSCRIPT_MIN_TORCH:  # the converter's API we drive (tsfold) is 2.6's
        need = ".".join(map(str, TORCHSCRIPT_MIN_TORCH))
        raise UsageError(f"{source}: reading a TorchScript file needs torch>={need} (its TorchScript converter); "
                         f"this is torch {torch.__version__}. Upgrade torch, or save the model with "
                         "torch.export.save (.pt2), which this torch reads")
    try:
        from torch._export import converter  # noqa: F401  # what script_to_exported drives
    except ImportError as exc:
        raise UsageError(f"{source}: this torch version cannot convert TorchScript graphs; "
                         f"install torch>={'.'.join(map(str, TORCHSCRIPT_MIN_TORCH))}") from exc
    from .tsfold import concretize, script_to_exported

    try:
        with quiet_torch():
            program = script_to_exported(script, example)
            concretize(program, example)
            return program
    except Exception as exc:
        why = _first_line(exc).rstrip(".")
        where = _script_node_place(script, why)
        if traced_from is not None:
            raise ConversionError(f"module {source}", f"torch.export failed ({traced_from}), its draft mode too, "
                                  f"and torch could not convert the traced graph: {why}{where}") from exc
        if _traced_torchvision_detection(script):
            raise ConversionError(
                f"TorchScript model {source}",
                f"torch could not convert this traced torchvision detector ({why}{where}); torchvision's "
                f"tracing-only code computes image sizes as tensors and Mask/Keypoint R-CNN's post-processing "
                f"as scripted loops, which are replaced where they have the form torchvision {_tv_version()} "
                f"traces. Convert the module instead, convert.convert(model, example) in Python: "
                f"torchvision's detectors are captured by torch.export there") from exc
        hint = ("Save the model with torch.export.save instead (a Python loop is unrolled there, a "
                "data-dependent branch can be written with torch.cond, a data-dependent loop with "
                "torch._higher_order_ops.while_loop)")
        raise ConversionError(f"TorchScript model {source}",
                              f"torch could not convert the scripted graph: {why}{where}. {hint}") from exc


#: The oldest torch whose TorchScript converter has the API ``tsfold`` drives (2.5's
#: ``get_block_to_lifted_attrs`` returns one mapping, 2.6's two; 2.4's has neither): measured by
#: running the TorchScript tests on torch 2.4.1, and reading 2.5.1's and 2.6.0's converter.
TORCHSCRIPT_MIN_TORCH = (2, 6)


def _torch_minor() -> tuple[int, int]:
    """torch's (major, minor) version, from ``torch.__version__`` ("2.14.1+cpu" -> (2, 14))."""
    import torch

    found = re.match(r"(\d+)\.(\d+)", str(torch.__version__))
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def _tv_version() -> str:
    return str(getattr(sys.modules.get("torchvision"), "__version__", "?"))


def _traced_torchvision_detection(script: torch.jit.ScriptModule) -> bool:
    """Whether ``script`` holds code traced from torchvision's detection models
    (``torchvision/models/detection/``), as its source ranges say (a file saved without them: False)."""
    import re

    pattern = re.compile(r'File "[^"]*torchvision[/\\]models[/\\]detection[/\\]')
    try:
        graph = script.inlined_graph  # type: ignore[attr-defined]  # kept alive while its nodes are read
        return any(pattern.search(str(node.sourceRange())) for node in graph.nodes())
    except Exception:  # source ranges are best effort
        return False


def _script_node_place(script: torch.jit.ScriptModule, message: str) -> str:
    """Return ' (at file:line)' for the first node of the kind torch names in ``message`` ('prim::Loop')."""
    import re

    m = re.search(r"node ([a-z]+::\w+)", message)
    if m is None:
        return ""
    try:
        graph = script.inlined_graph  # type: ignore[attr-defined]  # kept alive while its nodes are read
        nodes = graph.findAllNodes(m.group(1))
        text = str(nodes[0].sourceRange()) if nodes else ""
    except Exception:  # source ranges are best effort: a file saved without debug info has none
        return ""
    lines = text.splitlines()
    place = re.search(r'File "([^"]+)", line (\d+)', lines[0]) if lines else None
    if place is None:
        return ""
    return f" (at {os.path.basename(place.group(1))}:{place.group(2)})"  # the line where the node starts


def _export_dynamic_batch(module: torch.nn.Module, example: Sequence[torch.Tensor], options: Options,
                          source: str) -> object | None:
    """Export with dimension 0 of every input symbolic; None (with a warning) when the model fixes it.

    torch specialises sizes 0 and 1, so a batch-1 example is doubled for the capture. When the batch
    stays static, ``options.dynamic_batch`` is turned off: the file then declares the batch it takes
    (the writer would otherwise name dimension 0 of every input and output ``batch``).
    """
    import torch
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    auto = getattr(torch.export.Dim, "AUTO", None)
    if auto is None:
        return _static_batch(options, "--dynamic-batch needs torch>=2.6 (torch.export.Dim.AUTO); the batch stays "
                                      "static")
    batched = tuple(torch.cat([x, x]) if x.dim() and x.shape[0] == 1 else x for x in example)
    dynamic = tuple({0: auto} if x.dim() else None for x in batched)
    try:
        with torch.no_grad(), quiet_torch():
            program = torch.export.export(module, batched, dynamic_shapes=dynamic, strict=False)
    except Exception as exc:
        return _static_batch(options, f"--dynamic-batch: torch.export could not keep the batch of {source} "
                                      f"symbolic ({_first_line(exc)}); the batch stays static")
    users = [n for n in program.graph.nodes if n.op == "placeholder"][-len(batched):]
    # A size torch specialised may still be a SymInt, of a constant expression (a loop over the batch,
    # `list(x)` in torchvision's detectors, made it 2, the doubled example's): that is a fixed size.
    if all(is_concrete_int(n.meta["val"].shape[0]) for n in users if n.meta["val"].dim()):
        return _static_batch(options, f"--dynamic-batch: {source} fixes its batch size (torch.export "
                                      "specialised it); the batch stays static")
    return program


def _static_batch(options: Options, warning: str) -> None:
    """Warn that the batch stays static, and keep it so in the file (``options.dynamic_batch`` off)."""
    options.diagnostics.warn(warning)
    options.dynamic_batch = False


@contextlib.contextmanager
def attributes_kept(module: torch.nn.Module) -> Iterator[None]:
    """Put every submodule's attributes back as they were once the block ends.

    torch.export runs ``forward`` on fake tensors. A forward that caches tensors on its module
    (ultralytics' Detect head stores its anchors and strides on the first call) would otherwise
    leave FakeTensors behind, and the caller's model would fail on its next eager call. Only the
    attribute containers are copied, never the weights.
    """
    saved = []
    for sub in module.modules():
        state = dict(sub.__dict__)
        inner = {k: copy.copy(v) for k, v in state.items() if type(v) in (dict, list, set)}
        saved.append((sub, state, inner))
    try:
        yield
    finally:
        for sub, state, inner in saved:
            sub.__dict__.clear()
            sub.__dict__.update(state)
            for key, contents in inner.items():
                container = state[key]
                container.clear()
                if isinstance(container, list):
                    container.extend(contents)
                else:
                    container.update(contents)


@contextlib.contextmanager
def _replaced(modules: Sequence[str], name: str, replacement: object) -> Iterator[None]:
    """Put ``replacement`` in place of attribute ``name`` of each loaded module of ``modules`` that
    holds the first one's object (a re-export), and restore them afterwards."""
    loaded = [sys.modules.get(m) for m in modules]
    original = getattr(loaded[0], name, None)
    patched = [m for m in loaded if m is not None and original is not None and getattr(m, name, None) is original]
    for module in patched:
        setattr(module, name, replacement)
    try:
        yield
    finally:
        for module in patched:
            setattr(module, name, original)


def _batched_nms_replacement() -> object | None:
    """Return what replaces torchvision's ``batched_nms`` while a model is captured (None when
    torchvision's module is not loaded): ``tvpost.offset_batched_nms`` with torchvision's ``nms``,
    one NMS over class-separated boxes (torchvision's own branches on data twice, which no capture
    of a detector, whose box count is data, survives)."""
    boxes = sys.modules.get("torchvision.ops.boxes")
    nms = getattr(boxes, "nms", None)
    if nms is None:
        return None

    def batched_nms(boxes_: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor,
                    iou_threshold: float) -> torch.Tensor:
        return offset_batched_nms(boxes_, scores, idxs, iou_threshold, nms)

    return batched_nms


def _multiscale_roi_align_replacement() -> object | None:
    """Return what replaces torchvision's multi-scale RoIAlign while a model is captured (None when
    its module is not loaded): every box pooled at every level, and per box the level its size
    selects kept.

    torchvision's own version takes ``len(rois)`` (a Python int of a data-dependent count, which a
    capture can only settle from the example) and pools each level's boxes by data-dependent
    indexing. RoIAlign pools each box on its own, so pooling all boxes at every level and selecting
    by level gives the same values for every box, at a few times the RoIAlign work.
    """
    poolers = sys.modules.get("torchvision.ops.poolers")
    original = getattr(poolers, "_multiscale_roi_align", None)
    roi_align = getattr(poolers, "roi_align", None)
    if original is None or roi_align is None:
        return None
    import torch

    def multiscale_roi_align(x_filtered: list[torch.Tensor], boxes: list[torch.Tensor], output_size: list[int],
                             sampling_ratio: int, scales: list[float] | None, mapper: object) -> torch.Tensor:
        if scales is None or mapper is None:
            return original(x_filtered, boxes, output_size, sampling_ratio, scales, mapper)  # type: ignore[misc]
        first = x_filtered[0]
        image_of = torch.cat([torch.full_like(b[:, :1], i, dtype=first.dtype) for i, b in enumerate(boxes)])
        rois = torch.cat([image_of, torch.cat(boxes).to(first.dtype)], dim=1)
        height, width = (output_size, output_size) if isinstance(output_size, int) else output_size

        def pool(feature: torch.Tensor, scale: float) -> torch.Tensor:
            if feature.is_quantized:
                return roi_align(feature, rois, output_size=output_size, spatial_scale=scale,  # type: ignore[misc, no-any-return]
                                 sampling_ratio=sampling_ratio)
            # torchvision's operator itself: its Python wrapper first asserts rois.size(1) == 5 of the
            # [count, 5] rois made just above, which the trace's note would name as a test of a count
            return torch.ops.torchvision.roi_align(  # type: ignore[no-any-return]
                feature, rois, scale, height, width, sampling_ratio, False)

        pooled = [pool(feature, scale) for feature, scale in zip(x_filtered, scales, strict=True)]
        if len(pooled) == 1:
            return pooled[0]
        levels = mapper(boxes).reshape(-1, 1, 1, 1)  # type: ignore[operator]
        result = pooled[0]
        for level, values in enumerate(pooled[1:], start=1):
            result = torch.where(levels == level, values, result)
        return result

    return multiscale_roi_align


def _mask_paste_replacement() -> object | None:
    """Return what replaces torchvision's ``paste_masks_in_image`` (Mask R-CNN) while a model is
    captured (None when its module is not loaded): the padding torchvision's ``expand_masks`` does
    and its ``expand_boxes``, then all
    masks pasted at once (``tvpost.paste_expanded_masks``) instead of a Python loop over the
    detections (a data-dependent count) that resizes each mask to its box's size (data-dependent too).
    """
    roi_heads = sys.modules.get("torchvision.models.detection.roi_heads")
    expand_boxes = getattr(roi_heads, "expand_boxes", None)
    if expand_boxes is None:
        return None
    import torch

    def paste_masks_in_image(masks: torch.Tensor, boxes: torch.Tensor, img_shape: tuple[int, int],
                             padding: int = 1) -> torch.Tensor:
        # expand_masks' scale, (side + 2 * padding) / side, computed here: under a trace torchvision's
        # makes it with torch.tensor(side), a constant of a size of a tensor whose count depends on
        # data, which the trace refuses; here it stays arithmetic on a size the graph reads
        side = masks.shape[-1]
        scale = (side + 2 * padding) / side
        masks = torch.nn.functional.pad(masks, (padding,) * 4)
        boxes = expand_boxes(boxes, scale).to(dtype=torch.int64)  # type: ignore[misc]
        return paste_expanded_masks(masks, boxes, img_shape[0], img_shape[1])[:, None]

    return paste_masks_in_image


def _keypoint_decoding_replacement() -> object | None:
    """Return what replaces torchvision's ``heatmaps_to_keypoints`` (Keypoint R-CNN) while a model
    is captured (None when its module is not loaded): ``tvpost.decode_heatmaps``, a loop a capture
    can follow (torchvision's own loops in Python over the detections and resizes each one's
    heatmaps to its box's size: a data-dependent count of data-dependent sizes), which torch's
    tracer records as one operator (``tvpost.traced_decode_heatmaps``)."""
    roi_heads = sys.modules.get("torchvision.models.detection.roi_heads")
    if getattr(roi_heads, "heatmaps_to_keypoints", None) is None:
        return None
    return traced_decode_heatmaps


# torchvision's functions replaced while a model is captured: the modules that hold each (the first
# defines it, the others re-export it), its name, and the function that builds its replacement.
_CAPTURE_REPLACEMENTS = (
    (("torchvision.ops.boxes", "torchvision.ops"), "batched_nms", _batched_nms_replacement),
    (("torchvision.ops.poolers",), "_multiscale_roi_align", _multiscale_roi_align_replacement),
    (("torchvision.models.detection.roi_heads", "torchvision.models.detection.transform"), "paste_masks_in_image",
     _mask_paste_replacement),
    (("torchvision.models.detection.roi_heads",), "heatmaps_to_keypoints", _keypoint_decoding_replacement),
)


def _batch_images_replacement() -> object | None:
    """Return what replaces ``GeneralizedRCNNTransform.batch_images`` (every torchvision R-CNN,
    RetinaNet, SSD and FCOS) while a model is captured (None when its module is not loaded): the same
    zero padding to a multiple of ``size_divisible``, as ``F.pad`` of each image and one ``stack``.

    torchvision's own fills a ``new_full`` batch with ``batch[i, :c, :h, :w].copy_(img)``: a write
    through a view, which the lowering cannot rebind, so torch had to functionalize the whole
    program again (``run_decompositions``, a second capture: 14 s of Faster R-CNN's 25). The values
    are the same (zeros where an image is smaller than the batch).
    """
    transform = sys.modules.get("torchvision.models.detection.transform")
    owner = getattr(transform, "GeneralizedRCNNTransform", None)
    if owner is None or getattr(owner, "batch_images", None) is None:
        return None
    import math

    import torch

    def batch_images(self: object, images: list[torch.Tensor], size_divisible: int = 32) -> torch.Tensor:
        max_size = list(self.max_by_axis([list(img.shape) for img in images]))  # type: ignore[attr-defined]
        stride = float(size_divisible)
        max_size[1] = int(math.ceil(float(max_size[1]) / stride) * stride)
        max_size[2] = int(math.ceil(float(max_size[2]) / stride) * stride)
        padded = [torch.nn.functional.pad(img, (0, max_size[2] - img.shape[2], 0, max_size[1] - img.shape[1],
                                                0, max_size[0] - img.shape[0])) for img in images]
        return torch.stack(padded)

    return batch_images


def _box_decode_replacement() -> object | None:
    """Return what replaces ``BoxCoder.decode`` (the R-CNNs' RPN and box head) while a model is
    captured (None when its module is not loaded): the same boxes, with no branch on their count.

    torchvision's reshapes its codes to ``[count, -1]`` and its boxes to ``[count, -1, 4]`` only
    ``if box_sum > 0`` (``count`` is the proposals', after an NMS: the data's), since a reshape of
    nothing to ``[0, -1]`` is ambiguous. A capture takes that branch as the example did: the file then
    holds for inputs with at least one proposal. Here the codes, ``[count, 4 * classes]`` in both of
    torchvision's calls, are already of that shape, and the boxes are reshaped to
    ``[-1, classes, 4]``, which is defined for any count. With no proposal torchvision's keeps
    ``[0, 4 * classes]`` where this gives ``[0, classes, 4]``: both are empty, and so are the
    detections made of them (the post-processing reshapes them to ``[-1, 4]``).
    """
    utils = sys.modules.get("torchvision.models.detection._utils")
    owner = getattr(utils, "BoxCoder", None)
    original = getattr(owner, "decode", None)
    if original is None:
        return None
    import torch

    def decode(self: object, rel_codes: torch.Tensor, boxes: list[torch.Tensor]) -> torch.Tensor:
        # (no test of a size here: under a trace each is a tensor, and a test of one would be a branch)
        if not isinstance(boxes, (list, tuple)) or not isinstance(rel_codes, torch.Tensor) or rel_codes.dim() != 2:
            return original(self, rel_codes, boxes)  # type: ignore[no-any-return]  # not as torchvision calls it
        pred_boxes = self.decode_single(rel_codes, torch.cat(boxes, dim=0))  # type: ignore[attr-defined]
        return pred_boxes.reshape(-1, rel_codes.shape[1] // 4, 4)  # type: ignore[no-any-return]

    return decode


# torchvision's methods replaced while a model is captured: the module, the class, the method's
# name, and the function that builds its replacement.
_CAPTURE_METHOD_REPLACEMENTS = (
    ("torchvision.models.detection.transform", "GeneralizedRCNNTransform", "batch_images",
     _batch_images_replacement),
    ("torchvision.models.detection._utils", "BoxCoder", "decode", _box_decode_replacement),
)


@contextlib.contextmanager
def _method_replaced(owner: type, name: str, replacement: object) -> Iterator[None]:
    """Put ``replacement`` in place of method ``name`` of class ``owner``, and restore it afterwards."""
    original = owner.__dict__[name]
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, original)


@contextlib.contextmanager
def _torchvision_replaced_for_capture() -> Iterator[None]:
    """Put each replacement of ``_CAPTURE_REPLACEMENTS`` (and ``_CAPTURE_METHOD_REPLACEMENTS``) whose
    torchvision module is loaded in place while a model is captured, and put torchvision's own
    functions back afterwards."""
    with contextlib.ExitStack() as stack:
        for modules, name, build in _CAPTURE_REPLACEMENTS:
            replacement = build()
            if replacement is not None:
                stack.enter_context(_replaced(modules, name, replacement))
        for module, cls, method, build in _CAPTURE_METHOD_REPLACEMENTS:
            owner = getattr(sys.modules.get(module), cls, None)
            replacement = build()
            if isinstance(owner, type) and method in owner.__dict__ and replacement is not None:
                stack.enter_context(_method_replaced(owner, method, replacement))
        yield


def _draft_export(module: torch.nn.Module, example: Sequence[torch.Tensor], options: Options, source: str,
                  reason: str) -> object | None:
    """Capture with ``torch.export.draft_export``, which settles data-dependent decisions from the example.

    Accepted only when every problem it reports is such a decision (not a missing or wrong fake
    kernel), and then only where the user asked for decisions to be frozen (``frozen.frozen``:
    refused otherwise, each decision named with its file:line and source line).
    """
    import torch

    from .frozen import decisions_of_draft, frozen, keep_example

    draft = getattr(torch.export, "draft_export", None)
    if draft is None:
        return None
    try:
        with torch.no_grad(), quiet_torch():
            program = draft(module, tuple(example), strict=False)
    except Exception as exc:
        logger.debug("draft_export failed on %s: %s", source, _first_line(exc))
        return None
    report = getattr(program, "_report", None)
    failures = list(getattr(report, "failures", []))
    decided = [f for f in failures if getattr(f.failure_type, "name", "") == "DATA_DEPENDENT_ERROR"]
    if len(decided) != len(failures):
        kinds = sorted({getattr(f.failure_type, "name", "?") for f in failures} - {"DATA_DEPENDENT_ERROR"})
        logger.debug("draft_export of %s reported %s; not used", source, ", ".join(kinds))
        return None
    frozen(options, source, decisions_of_draft(decided, _file_names(report), torch_folder(), PACKAGE + os.sep),
           "torch.export.draft_export")
    keep_example(options, example)
    logger.debug("torch.export could not capture %s soundly (%s); draft_export used", source, reason)
    return program


def _file_names(report: object) -> dict[int, str]:
    """The file names of a draft report's frames, by the number torch interned each under: the
    report's own table (the files first logged during that export), then torch's process-wide one
    (a file an earlier export logged is not in the report's)."""
    names: dict[int, str] = {}
    try:
        from torch._logging import structured

        names.update({v: k for k, v in getattr(structured, "INTERN_TABLE", {}).items()})
    except ImportError:  # pragma: no cover - torch without structured logging
        pass
    names.update(getattr(report, "str_to_filename", {}) or {})
    return names


def export_module(module: torch.nn.Module, example: Sequence[torch.Tensor], options: Options,
                  source: str, *, fast: bool = True) -> object:
    """Capture ``module``: its traced graph where that is as sound as torch.export (``traced.py``,
    unless ``fast`` is False), otherwise torch.export, falling back to tracing on data-dependent
    guards.

    The module is left in eval mode with its attributes as they were (``attributes_kept``).
    """
    from .traced import trace_module

    module.eval()
    with attributes_kept(module), _torchvision_replaced_for_capture():
        if fast and not options.dynamic_batch:
            program = trace_module(module, example, options, source,
                                   fallback=lambda: export_module(module, example, options, source, fast=False))
            if program is not None:
                return program
        return _export_module(module, example, options, source)


def _export_module(module: torch.nn.Module, example: Sequence[torch.Tensor], options: Options,
                   source: str) -> object:
    import torch

    if options.dynamic_batch:
        program = _export_dynamic_batch(module, example, options, source)
        if program is not None:
            return program
    try:
        with torch.no_grad(), quiet_torch():
            return torch.export.export(module, tuple(example), strict=False)
    except Exception as exc:
        if not _is_data_dependent(exc):
            raise ConversionError(f"module {source}", f"torch.export failed: {_first_line(exc)}") from exc
        reason = _first_line(exc)
    program = _draft_export(module, example, options, source, reason)
    if program is not None:
        return program
    from .frozen import decisions_of_warnings, frozen, keep_example

    try:
        with torch.no_grad(), quiet_torch(), warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            traced = torch.jit.trace(  # type: ignore[no-untyped-call]
                module, tuple(example), check_trace=False, strict=False)
    except Exception as exc:
        raise ConversionError(f"module {source}", f"torch.export failed ({reason}) and tracing failed too: "
                              f"{_first_line(exc)}") from exc
    frozen(options, source, decisions_of_warnings(said), "torch.jit.trace")
    keep_example(options, example)
    options.diagnostics.note(
        f"torch.export could not capture {source} (data-dependent: {reason}); "
        "fell back to a traced TorchScript graph, valid for inputs like the example"
    )
    return script_to_program(traced, example, source, traced_from=reason)
