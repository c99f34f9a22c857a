"""torchvision's detection post-processing (NMS, Mask R-CNN's mask paste, Keypoint R-CNN's keypoint
decoding) in forms a capture can follow.

torchvision pastes each detection's mask into the image (and decodes each detection's keypoint
heatmaps) one detection at a time, at that detection's box size: a data-dependent count of
data-dependent sizes; its batched NMS branches on the data. The forms here compute the same:

- ``offset_batched_nms``: one NMS over class-offset boxes, for every input;
- ``paste_expanded_masks``: all masks at once, as separable bilinear weights (no loop);
- ``decode_heatmaps``: a ``while_loop`` (ONNX ``Loop``) over the detections, each step at the
  largest box's size with the positions past its own box masked.

They serve two routes. A module is captured with them in place of torchvision's functions
(``tvcapture.torchvision_replaced_for_capture``); under torch's tracer (the fast capture) the keypoint
decoding, a loop the tracer would run rather than record, is one operator of ours
(``traced_decode_heatmaps``). A traced TorchScript file (``.pt``) holds torchvision's tracing-only
versions as scripted functions (``_batched_nms_coordinate_trick``, ``_onnx_paste_masks_in_image_loop``,
``_onnx_heatmaps_to_keypoints_loop``), which neither reader can follow (a data-dependent branch,
loops whose trip count is data): ``replace_torchvision_scripted`` puts an operator of ours in place
of each call in the TorchScript graph. The fast capture expands each operator of ours into its form
here (``traced_forms``), but for the keypoint decoding, which it keeps as one operator
(``decode_operator``) that the lowering writes as a Loop of its own (``ops.detection``); torch's
converter turns each into a call of its form. A file's operator's own kernel runs torchvision's
function unchanged, so a rewritten module still computes what it did.

Part of the capture layer (``__init__``'s "the path a model takes"); it imports nothing else of
the frontend.
"""

from __future__ import annotations

import contextlib
import operator
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["converter_handlers", "decode_heatmaps", "decode_operator", "offset_batched_nms", "one_loop_decodes",
           "paste_expanded_masks", "replace_torchvision_scripted", "shape_as_tensor", "traced_decode_heatmaps",
           "traced_forms"]

_NAMESPACE = "convert_tv"
_CUBIC = -0.75  # torch's bicubic coefficient
_registered: list[object] = []  # the torch.library.Library, once defined (it must stay alive)


def paste_expanded_masks(masks: torch.Tensor, boxes: torch.Tensor, im_h: int, im_w: int) -> torch.Tensor:
    """Paste each of ``masks`` ([N, 1, S, S], already padded) into an ``im_h`` x ``im_w`` image at its
    integer box (``boxes``, [N, 4] int64, already expanded): [N, im_h, im_w].

    Bilinear resizing is separable: a box's resized mask, placed in the image, is ``rows @ mask @
    cols.T``, where ``rows`` holds, for each image row inside the box, the two source rows and
    weights that ``F.interpolate(mode="bilinear", align_corners=False)`` takes (source index ``(r +
    0.5) * side / extent - 0.5``, clamped at 0, as torch computes it), and zeros outside the box;
    ``cols`` likewise. The values are torchvision's up to float rounding of the source index (a few
    1e-6 on masks in [0, 1]: torch's own float32 kernel is as far from its float64 one).
    """
    import torch

    side = masks.shape[-1]
    grid = torch.arange(side, device=boxes.device)

    def weights(start: torch.Tensor, stop: torch.Tensor, size: int) -> torch.Tensor:
        # [boxes, size, side]: image position -> weights over the padded mask's rows (columns)
        extent = (stop - start + 1).clamp(min=1)
        pos = torch.arange(size, device=boxes.device)
        inside = (pos >= start.clamp(min=0)[:, None]) & (pos < (stop + 1).clamp(max=size)[:, None])
        ratio = side / extent.to(masks.dtype)
        src = (ratio[:, None] * ((pos - start[:, None]).to(masks.dtype) + 0.5) - 0.5).clamp(min=0)
        low = src.floor().clamp(max=side - 1)
        frac = (src - low).clamp(0, 1)
        low = low.to(torch.int64)
        high = (low + 1).clamp(max=side - 1)
        taken = (1 - frac)[..., None] * (low[..., None] == grid) + frac[..., None] * (high[..., None] == grid)
        return taken * inside[..., None]

    rows = weights(boxes[:, 1], boxes[:, 3], im_h)
    cols = weights(boxes[:, 0], boxes[:, 2], im_w)
    return rows @ masks[:, 0] @ cols.transpose(1, 2)


def decode_heatmaps(maps: torch.Tensor, rois: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """torchvision's ``heatmaps_to_keypoints``: ([N, K, 3] keypoints, [N, K] scores).

    torchvision resizes each box's heatmaps (bicubic, ``align_corners=False``) to the box's size in
    whole pixels, then takes each keypoint's first maximum. Bicubic resizing is separable, so a
    box's resized heatmaps are ``rows @ maps @ cols.T``, with torch's source index (``(r + 0.5) *
    side / extent - 0.5``), its a = -0.75 taps and its clamping at the borders in ``rows`` and
    ``cols``; those are computed for every box at once, at the tallest and widest box's size, and
    zero past each box's own. A ``while_loop`` (ONNX ``Loop``) then resizes one box's heatmaps per
    step, the positions outside its size set to -inf, and takes each keypoint's maximum and its
    row-major position (the first on ties, as torch's) over the same pixels as torchvision's. One
    step holds K x tallest x widest floats, as torchvision's loop holds one box's.

    The loop is torch's ``while_loop`` operator called with every tensor it reads as an input:
    ``while_loop()`` itself compiles its functions with dynamo first (0.6 s, and 1.3 s to import
    it), which a capture of these functions of their arguments does not need.
    """
    import torch
    from torch._higher_order_ops.while_loop import while_loop_op

    widths = (rois[:, 2] - rois[:, 0]).clamp(min=1)
    heights = (rois[:, 3] - rois[:, 1]).clamp(min=1)
    widths_ceil, heights_ceil = widths.ceil(), heights.ceil()
    one = widths.new_ones(1)  # no detections: a 1 x 1 canvas
    tallest = torch.cat([heights_ceil, one]).max().to(torch.int64).item()
    widest = torch.cat([widths_ceil, one]).max().to(torch.int64).item()

    def weights(extent: torch.Tensor, side: int, size: object) -> tuple[torch.Tensor, torch.Tensor]:
        # [boxes, size, side]: resized position -> weights over the heatmap's rows (columns)
        pos = torch.arange(size, device=maps.device)  # type: ignore[call-overload]
        src = (side / extent)[:, None] * (pos.to(maps.dtype) + 0.5) - 0.5
        low = src.floor()
        t = src - low
        a = _CUBIC
        taps = (((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
                ((a + 2) * t - (a + 3)) * t * t + 1,
                ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
                ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a)
        grid = torch.arange(side, device=maps.device)
        first = low.to(torch.int64) - 1
        taken = sum(c[..., None] * ((first + k).clamp(0, side - 1)[..., None] == grid) for k, c in enumerate(taps))
        return taken, pos < extent[:, None]  # type: ignore[return-value]

    rows, rows_in = weights(heights_ceil, maps.shape[-2], tallest)
    cols, cols_in = weights(widths_ceil, maps.shape[-1], widest)
    index = torch.arange(maps.shape[0], device=maps.device)
    count = (index >= 0).sum()  # a tensor: while_loop takes no data-dependent int from outside

    def cond(i: torch.Tensor, scores: torch.Tensor, pos: torch.Tensor, *read: torch.Tensor) -> torch.Tensor:
        return i < read[-1]

    def body(i: torch.Tensor, scores: torch.Tensor, pos: torch.Tensor, rows: torch.Tensor, rows_in: torch.Tensor,
             cols: torch.Tensor, cols_in: torch.Tensor, maps: torch.Tensor, index: torch.Tensor,
             count: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        at = i.reshape(1)
        resized = rows.index_select(0, at) @ maps.index_select(0, at)[0] @ cols.index_select(0, at).transpose(1, 2)
        inside = rows_in.index_select(0, at)[0][:, None] & cols_in.index_select(0, at)[0][None, :]
        best, where = resized.masked_fill(~inside, float("-inf")).flatten(1).max(dim=1)
        here = (index == i)[:, None]
        return i + 1, torch.where(here, best, scores), torch.where(here, where, pos)

    start = (torch.zeros((), dtype=torch.int64, device=maps.device),
             maps.new_zeros(maps.shape[:2]), torch.zeros(maps.shape[:2], dtype=torch.int64, device=maps.device))
    _, scores, pos = while_loop_op(cond, body, start, (rows, rows_in, cols, cols_in, maps, index, count))
    x_int = pos % widest
    y_int = torch.div(pos - x_int, widest, rounding_mode="floor")
    x = (x_int.float() + 0.5) * (widths / widths_ceil)[:, None] + rois[:, :1]
    y = (y_int.float() + 0.5) * (heights / heights_ceil)[:, None] + rois[:, 1:2]
    # float32 whatever the heatmaps' dtype, as torchvision's (its results are float32 tensors it fills)
    return torch.stack([x, y, torch.ones_like(x)], dim=2).to(torch.float32), scores.to(torch.float32)


def traced_decode_heatmaps(maps: torch.Tensor, rois: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``decode_heatmaps`` where the capture can take it: under torch's tracer as one operator of
    ours (``convert_tv::decode_heatmaps``, which the fast capture keeps and the lowering writes as a
    Loop: the tracer cannot record a ``while_loop``, it runs it); under torch.export as that operator
    too where its Loop takes the heatmaps (``one_loop_decodes``: ONNX Runtime runs that Loop 2-4x
    faster than the form's), otherwise as it is."""
    import torch

    if torch._C._get_tracing_state() is None and not (_exporting() and one_loop_decodes(maps, rois)):
        return decode_heatmaps(maps, rois)
    keypoints, scores = decode_operator()(maps, rois)  # type: ignore[operator]
    return keypoints, scores


def _exporting() -> bool:
    """Whether torch.export (or draft_export) is capturing: its fake kernel gives the operator's sizes."""
    import torch

    is_exporting = getattr(torch.compiler, "is_exporting", None)  # torch 2.5 and later
    return bool(is_exporting is not None and is_exporting())


def one_loop_decodes(maps: torch.Tensor, rois: torch.Tensor) -> bool:
    """Whether the lowering's Loop (``ops.detection.decode_heatmaps``) takes these inputs: float32
    heatmaps [N, K, H, W] of fixed H and W, float32 boxes [N, 4]; others are decoded by the form.
    Asked by the fast capture (``tracegraph.TraceBuilder._decoding``, on fake values) and under torch.export."""
    import torch

    return (maps.dim() == 4 and rois.dim() == 2 and maps.dtype == torch.float32 and rois.dtype == torch.float32
            and all(isinstance(d, int) for d in maps.shape[2:]))  # a SymInt is not an int


def _decode_kernel(maps: torch.Tensor, rois: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``convert_tv::decode_heatmaps``'s own kernel: ``decode_heatmaps``, run with the trace that
    recorded the operator switched off (its numbers read from data are the loop's bounds, not the
    model's: the capture computes them at run time)."""
    import torch

    state = torch._C._get_tracing_state()
    torch._C._set_tracing_state(None)
    try:
        return decode_heatmaps(maps, rois)
    finally:
        torch._C._set_tracing_state(state)


def traced_forms() -> dict[str, object]:
    """Our operators -> the forms that compute them: the live trace's keypoint decoding, and those
    ``replace_torchvision_scripted`` puts in a traced file in place of torchvision's scripted
    functions. The fast capture (``traced.py``) expands the NMS and the mask paste into theirs; the
    keypoint decoding it keeps as one operator (``decode_operator``)."""
    return {"decode_heatmaps": decode_heatmaps, **{op: form for op, _, _, _, form in _SCRIPTED.values()}}


# --- traced TorchScript files -------------------------------------------------------------------

def _keypoints_loop(maps: torch.Tensor, rois: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``_onnx_heatmaps_to_keypoints_loop``'s results: keypoints as [N, 3, K] (its caller permutes)."""
    keypoints, scores = decode_heatmaps(maps, rois)
    return keypoints.permute(0, 2, 1), scores


def shape_as_tensor(x: torch.Tensor) -> torch.Tensor:
    """``aten::_shape_as_tensor``, in ops a capture can follow (torch's own has no fake kernel)."""
    import torch

    return torch.stack([torch.scalar_tensor(n, dtype=torch.int64) for n in x.shape])


def offset_batched_nms(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, iou_threshold: float,
                       nms: object = None) -> torch.Tensor:
    """torchvision's ``batched_nms`` on its offset path for every input: one NMS over the boxes, each
    class's shifted by ``class * (largest - smallest coordinate + 1)``, both taken with 0 included,
    so that no two classes overlap.

    torchvision's own branches on data twice: above 4000 box coordinates on the CPU it loops in
    Python over ``torch.unique(labels)`` (a capture would unroll that loop for the example's classes
    only), and it returns early on empty input (its traced form, ``_batched_nms_coordinate_trick``,
    keeps that branch). For boxes with non-negative coordinates (a detector's, clipped to the
    image) the shift is torchvision's to the bit; an empty input stays empty; with negative
    coordinates, where torchvision's own offset path can let classes overlap, the classes stay apart
    as in its per-class path. ``nms``: the NMS to call (default: the ``torchvision::nms`` operator).
    """
    import torch

    coords = torch.cat([boxes.reshape(-1), boxes.new_zeros(1)])
    offsets = idxs.to(boxes) * (coords.max() - coords.min() + 1)
    run = nms if nms is not None else torch.ops.torchvision.nms
    return run(boxes + offsets[:, None], scores, iou_threshold)  # type: ignore[operator, no-any-return]


def _nms_kernel(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    boxes_module = sys.modules["torchvision.ops.boxes"]
    return boxes_module._batched_nms_coordinate_trick(boxes, scores, idxs, iou_threshold)  # type: ignore[attr-defined]


def _roi_heads() -> object:
    return sys.modules["torchvision.models.detection.roi_heads"]


def _paste_kernel(masks: torch.Tensor, boxes: torch.Tensor, im_h: int, im_w: int) -> torch.Tensor:
    """The operator's own kernel: torchvision's loop itself."""
    import torch

    loop = _roi_heads()._onnx_paste_masks_in_image_loop  # type: ignore[attr-defined]
    return loop(masks, boxes, torch.scalar_tensor(im_h, dtype=torch.int64),  # type: ignore[no-any-return]
                torch.scalar_tensor(im_w, dtype=torch.int64))


def _keypoints_kernel(maps: torch.Tensor, rois: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The operator's own kernel: torchvision's loop itself, on the values its caller computes."""
    import torch

    widths = (rois[:, 2] - rois[:, 0]).clamp(min=1)
    heights = (rois[:, 3] - rois[:, 1]).clamp(min=1)
    loop = _roi_heads()._onnx_heatmaps_to_keypoints_loop  # type: ignore[attr-defined]
    return loop(maps, rois, widths.ceil(), heights.ceil(), widths, heights,  # type: ignore[no-any-return]
                rois[:, 0], rois[:, 1], torch.scalar_tensor(maps.shape[1], dtype=torch.int64))


def _int_behind(value: torch._C.Value) -> torch._C.Value | None:
    """The int a traced ``torch.scalar_tensor(n)`` was made from (through ``ScalarImplicit`` and
    ``NumToTensor``, as tracing records an image size), or None when it is not one."""
    node = value.node()
    if node.kind() != "aten::scalar_tensor":
        return None
    value = node.inputsAt(0)
    while value.node().kind() in ("aten::ScalarImplicit", "prim::NumToTensor", "aten::Int"):
        value = value.node().inputsAt(0)
    return value if value.type().kind() == "IntType" else None


def _paste_args(call: torch._C.Node) -> list[torch._C.Value] | None:
    masks, boxes, im_h, im_w = list(call.inputs())[1:]
    sizes = [_int_behind(im_h), _int_behind(im_w)]
    return None if None in sizes else [masks, boxes, *sizes]  # type: ignore[list-item]


def _keypoints_args(call: torch._C.Node) -> list[torch._C.Value] | None:
    inputs = list(call.inputs())[1:]
    return inputs[:2] if len(inputs) == 9 else None


# torchvision's scripted function -> (our operator, its schema, the call's inputs it takes, its
# kernel, the function torch's converter calls in its place)
_SCRIPTED = {
    "_batched_nms_coordinate_trick": (
        "batched_nms", "(Tensor boxes, Tensor scores, Tensor idxs, float iou_threshold) -> Tensor",
        lambda call: list(call.inputs())[1:], _nms_kernel, offset_batched_nms),
    "_onnx_paste_masks_in_image_loop": (
        "paste_masks_loop", "(Tensor masks, Tensor boxes, SymInt im_h, SymInt im_w) -> Tensor",
        _paste_args, _paste_kernel, paste_expanded_masks),
    "_onnx_heatmaps_to_keypoints_loop": (
        "heatmaps_to_keypoints_loop", "(Tensor maps, Tensor rois) -> (Tensor, Tensor)",
        _keypoints_args, _keypoints_kernel, _keypoints_loop),
}


def _fx_handler(target: object) -> object:
    """A TS2FXGraphConverter handler that turns our operator's node into a call of ``target``."""

    def handler(self: object, node: torch._C.Node) -> None:
        args = tuple(self.get_fx_value_by_ir_value(v) for v in node.inputs())  # type: ignore[attr-defined]
        call = self.fx_graph.call_function(target, args)  # type: ignore[attr-defined]
        outputs = list(node.outputs())
        for i, out in enumerate(outputs):
            fx = call if len(outputs) == 1 else self.fx_graph.call_function(  # type: ignore[attr-defined]
                operator.getitem, (call, i))
            self.name_to_node[out.debugName()] = fx  # type: ignore[attr-defined]

    return handler


def _register() -> None:
    """Define our operators (once per process: a library namespace of ours, ``convert_tv``)."""
    if _registered:
        return
    import torch

    library = torch.library.Library(_NAMESPACE, "DEF")
    for op, schema, _, kernel, _ in _SCRIPTED.values():
        library.define(op + schema)
        library.impl(op, kernel, "CompositeExplicitAutograd")
    library.define("decode_heatmaps(Tensor maps, Tensor rois) -> (Tensor, Tensor)")
    library.impl("decode_heatmaps", _decode_kernel, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{_NAMESPACE}::decode_heatmaps", _decode_fake, lib=library)
    _registered.append(library)


def _decode_fake(maps: torch.Tensor, rois: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``convert_tv::decode_heatmaps``'s results on fake tensors: one keypoint triple and one score
    per detection and keypoint (the sizes depend on the heatmaps' shape only, not on their data),
    float32 as torchvision's."""
    import torch

    count, kinds = maps.shape[:2]
    return (maps.new_empty((count, kinds, 3), dtype=torch.float32),
            maps.new_empty((count, kinds), dtype=torch.float32))


def decode_operator() -> object:
    """``convert_tv::decode_heatmaps`` (defined on first use): the keypoint decoding as one operator
    of a graph, which the lowering writes as an ONNX ``Loop`` of its own (``ops.detection``)."""
    import torch

    _register()
    return torch.ops.convert_tv.decode_heatmaps.default  # type: ignore[attr-defined]


@contextlib.contextmanager
def converter_handlers() -> Iterator[None]:
    """Teach torch's TorchScript converter our operators and ``aten::_shape_as_tensor`` (whose own
    kernel cannot run on the fake tensors of its capture) while it runs; put its class back after.

    The converter looks its handlers up by node kind, as ``convert_<namespace>_<op>`` methods.
    """
    from torch._export import converter

    cls = converter.TS2FXGraphConverter
    handlers = {f"convert_{_NAMESPACE}_{op}": _fx_handler(target) for op, _, _, _, target in _SCRIPTED.values()}
    handlers["convert_aten__shape_as_tensor"] = _fx_handler(shape_as_tensor)
    saved = {name: cls.__dict__[name] for name in handlers if name in cls.__dict__}
    for name, handler in handlers.items():
        setattr(cls, name, handler)
    try:
        yield
    finally:
        for name in handlers:
            if name in saved:
                setattr(cls, name, saved[name])
            else:
                delattr(cls, name)


def replace_torchvision_scripted(script: torch.jit.ScriptModule) -> int:
    """Put our operators in place of torchvision's scripted post-processing (``_SCRIPTED``: its
    batched NMS, Mask/Keypoint R-CNN's loops) in every graph of ``script`` (edited in place); return
    how many calls were replaced.

    A call whose image size is not one tracing recorded as an int is left as it is (torch's
    converter then refuses its loop, which names the place).
    """
    if "torchvision.models.detection.roi_heads" not in sys.modules:
        return 0
    import torch

    replaced = 0
    for module in script.modules():
        try:
            graph = module.forward.graph  # type: ignore[union-attr]
        except (AttributeError, RuntimeError):  # a module with no (scripted) forward
            continue
        for call in graph.findAllNodes("prim::CallFunction"):
            function = call.inputsAt(0).node()
            name = function.s("name") if function.hasAttribute("name") else None
            if name not in _SCRIPTED:
                continue
            op, _, take, _, _ = _SCRIPTED[name]
            args = take(call)
            if args is None:
                continue
            _register()
            outputs = 2 if call.output().type().kind() == "TupleType" else 1
            ours = graph.create(f"{_NAMESPACE}::{op}", args, outputs)
            ours.insertBefore(call)
            for out in ours.outputs():
                out.setType(torch._C.TensorType.get())
            if outputs == 1:
                result = ours.output()
            else:  # the call returned a tuple: build it from our outputs
                pack = graph.create("prim::TupleConstruct", list(ours.outputs()), 1)
                pack.insertBefore(call)
                result = pack.output()
                result.setType(call.output().type())
            call.output().replaceAllUsesWith(result)
            call.destroy()
            if not function.output().uses():
                function.destroy()
            replaced += 1
    return replaced
