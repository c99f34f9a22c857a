"""Detectors: torchvision::nms -> NonMaxSuppression, torchvision::roi_align -> RoiAlign, and the
RetinaNet / Faster R-CNN look-alikes of models/pytorch/detectors.py end to end.

torchvision's operators are torchvision's own when it loads, else stand-ins with the same schemas and
reference kernels written from the definitions (models/pytorch/tvops.py). Detections have a
data-dependent count; they are compared with eager as sets: same count, rows sorted by box.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from _torch_helpers import REL_TO_SCALE, ROOT, rel_to_scale, run_onnx, to_onnx

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch


def _load(name: str) -> object:
    key = f"pytorch_test_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, ROOT / "models" / "pytorch" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


tvops = _load("tvops")


def _sorted_by_box(boxes: np.ndarray, *rest: np.ndarray) -> list[np.ndarray]:
    order = np.lexsort(boxes.T[::-1])
    return [boxes[order], *(r[order] for r in rest)]


class _Nms(torch.nn.Module):
    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return tvops.nms(boxes, scores, 0.4)  # type: ignore[attr-defined]


def _boxes(seed: int, n: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=gen) * 40
    wh = torch.rand(n, 2, generator=gen) * 20 + 2
    scores = torch.randperm(n, generator=gen).float() / n  # distinct scores: a unique order
    return torch.cat([xy, xy + wh], 1), scores


def test_nms_keeps_torchvisions_indices_in_score_order(tmp_path: Path) -> None:
    from convert.frontends.pytorch import load_module

    model = _Nms()
    ir_model = load_module(model, _boxes(0))
    assert "torchvision.nms" in ir_model.meta["convert:aten_ops"]
    path = to_onnx(ir_model, tmp_path / "nms.onnx")
    for seed in (1, 2):
        boxes, scores = _boxes(seed)
        ref = model(boxes, scores).numpy()
        (ours,) = run_onnx(path, {"boxes": boxes.numpy(), "scores": scores.numpy()})
        assert 0 < len(ref) < len(boxes)  # some boxes suppressed, not all
        np.testing.assert_array_equal(ours, ref)


class _RoiAlign(torch.nn.Module):
    def __init__(self, aligned: bool, ratio: int) -> None:
        super().__init__()
        self.aligned, self.ratio = aligned, ratio

    def forward(self, feat: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
        return tvops.roi_align(feat, rois, 5, 0.5, sampling_ratio=self.ratio, aligned=self.aligned)  # type: ignore[attr-defined]


def _rois(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    feat = torch.randn(2, 3, 12, 16, generator=gen)
    xy = torch.rand(6, 2, generator=gen) * torch.tensor([28.0, 20.0]) - 2  # some start outside the map
    wh = torch.rand(6, 2, generator=gen) * 12 + 0.5  # small RoIs too (under 1 pixel after scaling)
    batch = torch.tensor([0, 1, 1, 0, 1, 0], dtype=torch.float32)[:, None]
    return feat, torch.cat([batch, xy, xy + wh], 1)


@pytest.mark.parametrize(("aligned", "ratio"), [(False, 2), (True, 2), (False, -1), (True, 0)],
                         ids=["legacy-ratio2", "aligned-ratio2", "legacy-adaptive", "aligned-adaptive"])
def test_roi_align_matches_torchvision(aligned: bool, ratio: int, tmp_path: Path) -> None:
    from convert.frontends.pytorch import load_module

    model = _RoiAlign(aligned, ratio)
    ir_model = load_module(model, _rois(0))
    assert "torchvision.roi_align" in ir_model.meta["convert:aten_ops"]
    path = to_onnx(ir_model, tmp_path / "roi_align.onnx")
    for seed in (1, 2):
        feat, rois = _rois(seed)
        ref = model(feat, rois).numpy()
        (ours,) = run_onnx(path, {"feat": feat.numpy(), "rois": rois.numpy()})
        assert rel_to_scale(ours, ref) <= REL_TO_SCALE


@pytest.mark.parametrize("name", ["retinanet", "fasterrcnn"])
def test_detector_matches_eager_as_sets(name: str, tmp_path: Path) -> None:
    """Data-dependent detections (score threshold, class-batched NMS, RoIAlign on proposals) match eager."""
    from convert.frontends.pytorch import load_module

    zoo = _load("zoo")
    model, inputs = zoo.build(name)  # type: ignore[attr-defined]
    ir_model = load_module(model, inputs(1))
    ops = ir_model.meta["convert:aten_ops"]
    assert "torchvision.nms" in ops
    assert ("torchvision.roi_align" in ops) == (name == "fasterrcnn")
    path = to_onnx(ir_model, tmp_path / f"{name}.onnx")
    counts = []
    for seed in (1, 2, 3):
        (x,) = inputs(seed)
        with torch.no_grad():
            refs = [t.numpy() for t in model(x)]
        outs = run_onnx(path, {ir_model.graph.inputs[0].name: x.numpy()})
        assert [o.shape for o in outs] == [r.shape for r in refs]
        counts.append(len(refs[0]))
        (boxes, scores, labels), (ref_boxes, ref_scores, ref_labels) = _sorted_by_box(*outs), _sorted_by_box(*refs)
        assert rel_to_scale(boxes, ref_boxes) <= REL_TO_SCALE
        assert rel_to_scale(scores, ref_scores) <= REL_TO_SCALE
        np.testing.assert_array_equal(labels, ref_labels)
    assert len(set(counts)) > 1  # the count really depends on the input
    assert all(0 < c < model.max_det for c in counts)  # neither empty nor capped


@pytest.mark.parametrize("suffix", [".pt", ".pt2"], ids=["torchscript", "exported_program"])
def test_detector_file_matches_eager_as_sets(suffix: str, tmp_path: Path) -> None:
    """A traced (.pt) or exported (.pt2) Faster R-CNN look-alike: the detection count stays data-dependent
    (the traced graph's sizes downstream of nms and x[mask] are not fixed to the example's)."""
    from convert.frontends.pytorch import load
    from convert.ir import Options

    model, inputs = _load("zoo").build("fasterrcnn")  # type: ignore[attr-defined]
    path = tmp_path / f"fasterrcnn{suffix}"
    with torch.no_grad():
        if suffix == ".pt":
            torch.jit.save(torch.jit.trace(model, inputs(1), check_trace=False), path)
        else:
            torch.export.save(torch.export.export(model, inputs(1), strict=False), path)
    ir_model = load([path], Options())
    onnx_path = to_onnx(ir_model, tmp_path / "fasterrcnn.onnx")
    counts = []
    for seed in (1, 2, 3):
        (x,) = inputs(seed)
        with torch.no_grad():
            refs = [t.numpy() for t in model(x)]
        outs = run_onnx(onnx_path, {ir_model.graph.inputs[0].name: x.numpy()})
        assert [o.shape for o in outs] == [r.shape for r in refs]
        counts.append(len(refs[0]))
        (boxes, scores, labels), (ref_boxes, ref_scores, ref_labels) = _sorted_by_box(*outs), _sorted_by_box(*refs)
        assert rel_to_scale(boxes, ref_boxes) <= REL_TO_SCALE
        assert rel_to_scale(scores, ref_scores) <= REL_TO_SCALE
        np.testing.assert_array_equal(labels, ref_labels)
    assert len(set(counts)) > 1


def test_torchvision_ops_unavailable_is_one_line(tmp_path: Path) -> None:
    """A file using torchvision::nms, converted where torchvision's operators cannot be loaded: exit 2,
    one line naming torchvision and why (the fresh process has no torchvision stand-ins)."""
    path = tmp_path / "nms.pt"
    torch.jit.save(torch.jit.trace(_Nms(), _boxes(0), check_trace=False), path)
    line = _one_line_without_torchvision(path)
    assert "torchvision" in line
    assert "torchvision::nms" in line
    assert "did not import" in line


def _one_line_without_torchvision(path: Path) -> str:
    """Convert ``path`` in a fresh process where torchvision cannot be imported (blocked in
    ``sys.modules``, whether or not it is installed; no stand-ins); return its one error line (exit 2)."""
    import subprocess

    code = ("import runpy, sys; sys.modules['torchvision'] = None; sys.argv = ['convert'] + sys.argv[1:]; "
            "runpy.run_module('convert', run_name='__main__')")
    argv = [sys.executable, "-c", code, "pytorch:onnx", str(path), "-o", str(path.with_suffix(".onnx"))]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


class _Guarded(torch.nn.Module):
    """A detector behind a data-dependent Python branch: torch.export fails, the trace fallback is used."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if x.mean() > -1e9:
            x = x * 1.0
        return self.inner(x)  # type: ignore[no-any-return]


def test_detector_through_the_trace_fallback_keeps_its_count_dynamic(tmp_path: Path) -> None:
    from convert.frontends.pytorch import load_module
    from convert.ir import Options

    model, inputs = _load("zoo").build("retinanet")  # type: ignore[attr-defined]
    guarded = _Guarded(model).eval()
    options = Options(extra={"freeze_data_branches": True})  # the `if x.mean() > -1e9` above: frozen on request
    ir_model = load_module(guarded, inputs(1), options)
    assert any("fell back to a traced TorchScript graph" in n for n in options.diagnostics.notes)
    path = to_onnx(ir_model, tmp_path / "guarded.onnx")
    counts = []
    for seed in (1, 2):
        (x,) = inputs(seed)
        with torch.no_grad():
            refs = [t.numpy() for t in guarded(x)]
        outs = run_onnx(path, {ir_model.graph.inputs[0].name: x.numpy()})
        assert [o.shape for o in outs] == [r.shape for r in refs]
        counts.append(len(refs[0]))
        (boxes, scores, labels), (ref_boxes, ref_scores, ref_labels) = _sorted_by_box(*outs), _sorted_by_box(*refs)
        assert rel_to_scale(boxes, ref_boxes) <= REL_TO_SCALE
        assert rel_to_scale(scores, ref_scores) <= REL_TO_SCALE
        np.testing.assert_array_equal(labels, ref_labels)
    assert counts[0] != counts[1]


def test_pt2_needing_torchvision_ops_is_one_line(tmp_path: Path) -> None:
    """A .pt2 whose graph calls torchvision::nms, read where torchvision cannot load: exit 2, one line
    (torch.export.load's own logged traceback is silenced)."""
    path = tmp_path / "nms.pt2"
    torch.export.save(torch.export.export(_Nms(), _boxes(0), strict=False), path)
    line = _one_line_without_torchvision(path)
    assert "torch.ops.torchvision" in line
    assert "did not import" in line


class _ComputedSizes(torch.nn.Module):
    """Size arithmetic on a data-dependent count, as torchvision's detectors do it."""

    def forward(self, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        keep = torch.nonzero(s > 0.75)[:, 0]
        n = keep.numel()
        torch._check(n >= 0)
        top, _ = torch.topk(s[keep], torch.sym_min(4, n))  # k computed: fewer than 4 on some inputs
        head, tail = torch.split(s, [n, s.shape[0] - n])  # split sizes computed
        return top, head * 2, tail + 1


def test_sizes_computed_from_a_data_dependent_count(tmp_path: Path) -> None:
    """topk(k=min(4, n)) and split([n, N - n]) keep their computed sizes (TopK's K and Split's
    sizes are graph values): right on inputs whose count is below and above 4."""
    from convert.frontends.pytorch import load_module

    model = _ComputedSizes()
    example = torch.rand(16, generator=torch.Generator().manual_seed(0))
    ir_model = load_module(model, (example,))
    path = to_onnx(ir_model, tmp_path / "m.onnx")
    counts = set()
    for seed in range(6):
        x = torch.rand(16, generator=torch.Generator().manual_seed(seed))
        refs = [t.numpy() for t in model(x)]
        counts.add(len(refs[0]))
        ours = run_onnx(path, {ir_model.graph.inputs[0].name: x.numpy()})
        for o, r in zip(ours, refs, strict=True):
            assert o.shape == r.shape and np.array_equal(o, r), (seed, o, r)
    assert len(counts) > 1, counts  # the inputs exercised more than one k


class _WhereCount(torch.nn.Module):
    """``torch.where(mask)`` (nonzero as a tuple, as torchvision's score threshold is traced), then sizes
    computed from its count."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        (idx,) = torch.where(x > 0.5)
        return x[idx].reshape(-1, 1).expand(-1, 2).reshape(-1) * 2


def test_traced_where_keeps_its_count(tmp_path: Path) -> None:
    """A traced file whose count comes from one-argument ``torch.where``: the converted graph keeps it
    dynamic (it was fixed to the traced example's count before), checked on inputs with other counts."""
    from convert.frontends.pytorch import load
    from convert.ir import Options

    example = torch.rand(16, generator=torch.Generator().manual_seed(0))
    torch.jit.save(torch.jit.trace(_WhereCount(), (example,)), tmp_path / "where.pt")
    ir_model = load([tmp_path / "where.pt"], Options())
    path = to_onnx(ir_model, tmp_path / "m.onnx")
    counts = set()
    for seed in range(1, 5):
        x = torch.rand(16, generator=torch.Generator().manual_seed(seed))
        ref = _WhereCount()(x).numpy()
        counts.add(len(ref))
        (ours,) = run_onnx(path, {ir_model.graph.inputs[0].name: x.numpy()})
        assert ours.shape == ref.shape and np.array_equal(ours, ref), (seed, ours.shape, ref.shape)
    assert len(counts) > 1, counts


@torch.jit.script_if_tracing
def _resized(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    size = int(n)  # a tensor turned into an int, as torchvision's traced resize does
    return torch.nn.functional.interpolate(x, size=[size, size], mode="bilinear", align_corners=False)


@torch.jit.script_if_tracing
def _times(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    return x * int(n)


class _TracedCounts(torch.nn.Module):
    """Sizes turned into tensors and back: one from the input's shape (a constant once the shape is
    fixed; a batch norm of an image resized to a data-dependent size cannot be captured), two from
    the data (a sum, and the length of a nonzero)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.BatchNorm2d(3).eval()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        static = (torch._shape_as_tensor(x)[2].float() * 0.75).floor()
        counted = (x > 0.5).sum()
        found = torch._shape_as_tensor(torch.nonzero(x > 0.25))[0]
        return self.norm(_resized(x, static)), _times(x, counted), _times(x, found)


def test_traced_sizes_fold_only_what_the_data_does_not_change(tmp_path: Path) -> None:
    """tsfold: the size computed from the input's shape becomes a constant; the two computed from the
    data stay computed. Checked on inputs with other counts than the traced example's."""
    from convert.frontends.pytorch import load
    from convert.ir import Options

    example = torch.rand(1, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.jit.save(torch.jit.trace(_TracedCounts(), (example,), check_trace=False), tmp_path / "c.pt")
    ir_model = load([tmp_path / "c.pt"], Options())
    path = to_onnx(ir_model, tmp_path / "m.onnx")
    counts = set()
    for seed in range(1, 6):
        x = torch.rand(1, 3, 8, 8, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            refs = [t.numpy() for t in _TracedCounts()(x)]
        counts.add((int((x > 0.5).sum()), int((x > 0.25).sum())))
        ours = run_onnx(path, {ir_model.graph.inputs[0].name: x.numpy()})
        assert ours[0].shape == refs[0].shape == (1, 3, 6, 6), ours[0].shape
        assert rel_to_scale(ours[0], refs[0]) <= 1e-6, rel_to_scale(ours[0], refs[0])
        for o, r in zip(ours[1:], refs[1:], strict=True):
            assert o.shape == r.shape and np.array_equal(o, r), (seed, o.shape, r.shape)
    assert len(counts) > 2, counts


def test_batched_nms_used_during_capture_is_torchvisions() -> None:
    """The batched_nms put in place while a model is captured keeps the boxes torchvision's keeps,
    below and above torchvision's 4000-coordinate switch and on none; with negative coordinates,
    those of NMS run class by class (torchvision's offset path can suppress across classes there)."""
    torchvision = pytest.importorskip("torchvision")
    from convert.frontends.pytorch.tvcapture import (
        torchvision_replaced_for_capture as _torchvision_replaced_for_capture,
    )

    original = torchvision.ops.boxes.batched_nms
    gen = torch.Generator().manual_seed(0)
    cases = []
    for count, shift in ((50, 0.0), (3000, 0.0), (800, -300.0), (0, 0.0)):
        xy = torch.rand(count, 2, generator=gen) * 200 + shift
        wh = torch.rand(count, 2, generator=gen) * 60 + 1
        scores = torch.rand(count, generator=gen)
        labels = torch.randint(0, 7, (count,), generator=gen)
        cases.append((torch.cat([xy, xy + wh], 1), scores, labels))
    with _torchvision_replaced_for_capture():
        patched = torchvision.ops.boxes.batched_nms
        assert patched is not original and torchvision.ops.batched_nms is patched
        ours = [patched(b, s, c, 0.5) for b, s, c in cases]
    assert torchvision.ops.boxes.batched_nms is original and torchvision.ops.batched_nms is original
    for (b, s, c), kept in zip(cases, ours, strict=True):
        per_class = torchvision.ops.boxes._batched_nms_vanilla(b, s, c, 0.5)
        assert kept.tolist() == per_class.tolist(), len(b)
        if len(b) == 0 or b.min() >= 0:
            assert kept.tolist() == original(b, s, c, 0.5).tolist(), len(b)
    assert sum(len(k) for k in ours) > 100


def test_roi_pooling_used_during_capture_is_torchvisions() -> None:
    """The multi-scale RoIAlign put in place while a model is captured (every box pooled at every
    level, the box's own level kept) gives torchvision's values, box by box."""
    torchvision = pytest.importorskip("torchvision")
    from convert.frontends.pytorch.tvcapture import (
        torchvision_replaced_for_capture as _torchvision_replaced_for_capture,
    )

    gen = torch.Generator().manual_seed(0)
    pooler = torchvision.ops.MultiScaleRoIAlign(["0", "1", "2", "3"], 7, 2)
    features = {str(i): torch.randn(2, 8, 64 // 2**i, 64 // 2**i, generator=gen) for i in range(4)}
    boxes = []
    for n in (37, 0):  # an image without boxes too
        xy = torch.rand(n, 2, generator=gen) * 200
        boxes.append(torch.cat([xy, xy + 4 + torch.rand(n, 2, generator=gen) * 250], 1))
    sizes = [(256, 256), (256, 256)]
    theirs = pooler(features, boxes, sizes)
    with _torchvision_replaced_for_capture():
        ours = pooler(features, boxes, sizes)
    levels = pooler.map_levels(boxes)
    assert len(set(levels.tolist())) >= 3, "boxes of several levels"
    assert ours.shape == theirs.shape and torch.equal(ours, theirs)


def test_mask_paste_used_during_capture_is_torchvisions() -> None:
    """The batched mask paste put in place while a model is captured gives torchvision's pasted
    masks: boxes inside the image, across its edges, smaller than the 28x28 mask (downsampling) and
    far larger, a one-pixel box, a box covering the image, and no boxes at all; padded as torchvision
pads and unpadded. torch's own float32
    bilinear kernel is 2e-6 from its float64 one on such masks (rounding of the source index), so
    the bound is 1e-5 of values in [0, 1]; a sub-pixel shift of the source index gives 0.4."""
    torchvision = pytest.importorskip("torchvision")
    from convert.frontends.pytorch.tvcapture import (
        torchvision_replaced_for_capture as _torchvision_replaced_for_capture,
    )

    roi_heads = torchvision.models.detection.roi_heads
    transform = torchvision.models.detection.transform
    original = roi_heads.paste_masks_in_image
    gen = torch.Generator().manual_seed(0)
    for count, (height, width) in ((0, (50, 60)), (1, (50, 60)), (40, (97, 130)), (60, (256, 200))):
        masks = torch.rand(count, 1, 28, 28, generator=gen)
        xy = torch.rand(count, 2, generator=gen) * torch.tensor([width, height])
        wh = torch.rand(count, 2, generator=gen) * torch.tensor([width, height]) * 0.8
        boxes = torch.cat([xy, xy + wh], 1)
        if count > 3:
            boxes[:4] = torch.tensor([[0, 0, width, height], [5.0, 5.0, 5.0, 5.0], [width - 1.0, height - 2.0, width,
                                      height], [3.0, 4.0, 12.5, 9.0]])
        boxes[:, 0::2] = boxes[:, 0::2].clamp(0, width)
        boxes[:, 1::2] = boxes[:, 1::2].clamp(0, height)
        for padding in (1, 0):  # torchvision pads by 1; unpadded, the mask's edge rows are not zero
            theirs = original(masks, boxes, (height, width), padding)
            with _torchvision_replaced_for_capture():
                assert transform.paste_masks_in_image is not original
                ours = transform.paste_masks_in_image(masks, boxes, (height, width), padding)
            assert transform.paste_masks_in_image is original and roi_heads.paste_masks_in_image is original
            assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
            if count:
                assert float((ours - theirs).abs().max()) <= 1e-5, (count, padding)
                assert float((theirs > 0).float().mean()) > (0.05 if count > 3 else 0.0)


def test_keypoint_decoding_used_during_capture_is_torchvisions() -> None:
    """The keypoint decoding put in place while a model is captured (a while_loop over detections, run
    eagerly here) finds torchvision's
    keypoints and scores: boxes smaller and larger than the 56x56 heatmaps, of fractional and
    sub-pixel sizes (clamped to 1), and no boxes at all. Scores within 1e-5 of their scale (the
    resize's sums run in another order); keypoints equal, but for a near-tie between two resized
    pixels that float rounding may settle the other way (then one resized pixel apart)."""
    torchvision = pytest.importorskip("torchvision")
    from convert.frontends.pytorch.tvcapture import (
        torchvision_replaced_for_capture as _torchvision_replaced_for_capture,
    )

    roi_heads = torchvision.models.detection.roi_heads
    original = roi_heads.heatmaps_to_keypoints
    gen = torch.Generator().manual_seed(0)
    equal = total = 0
    for count, extent in ((0, 50.0), (1, 50.0), (25, 220.0), (40, 40.0)):
        maps = torch.randn(count, 17, 56, 56, generator=gen)
        xy = torch.rand(count, 2, generator=gen) * 200
        rois = torch.cat([xy, xy + torch.rand(count, 2, generator=gen) * extent + 0.2], 1)
        if count > 3:
            rois[0, 2:] = rois[0, :2] + 0.4  # under one pixel: clamped to 1
        theirs = original(maps, rois)
        with _torchvision_replaced_for_capture():
            assert roi_heads.heatmaps_to_keypoints is not original
            ours = roi_heads.heatmaps_to_keypoints(maps, rois)
        assert roi_heads.heatmaps_to_keypoints is original
        assert [o.shape for o in ours] == [t.shape for t in theirs], count
        if not count:
            continue
        assert float((ours[1] - theirs[1]).abs().max() / theirs[1].abs().max()) <= 1e-5, count
        same = (ours[0] == theirs[0]).all(dim=2)
        equal, total = equal + int(same.sum()), total + same.numel()
        pixel = torch.stack([(rois[:, 2] - rois[:, 0]).clamp(min=1) / (rois[:, 2] - rois[:, 0]).clamp(min=1).ceil(),
                             (rois[:, 3] - rois[:, 1]).clamp(min=1) / (rois[:, 3] - rois[:, 1]).clamp(min=1).ceil()], 1)
        assert bool(((ours[0][..., :2] - theirs[0][..., :2]).abs() <= pixel[:, None] * 1.001 + 1e-4).all()), count
    assert equal >= 0.99 * total, (equal, total)


class _KeypointsOfKept(torch.nn.Module):
    """Keypoint R-CNN's decoding on the boxes a score keeps: a count of the data's."""

    def forward(self, maps: torch.Tensor, rois: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, ...]:
        from torchvision.models.detection import roi_heads

        keep = scores > 0.5
        return roi_heads.heatmaps_to_keypoints(maps[keep], rois[keep])  # type: ignore[no-any-return]


@pytest.mark.parametrize("route", ["module", "file", "export"])
def test_keypoint_decoding_is_one_loop_over_each_input_s_count(route: str, tmp_path: Path) -> None:
    """Under the fast capture the decoding is one operator of ours in the graph (recorded by the live
    trace; in a traced file, in place of torchvision's scripted loop), and under torch.export (taken
    with --dynamic-batch; ``export``: the batch of 64 boxes dynamic), lowered as an ONNX Loop that
    resizes one box's heatmaps a step (bicubic weights as matrices): the file decodes as many boxes as each input
    keeps (12 on the example, then 1, 40, 64 and none), of sub-pixel to 400-pixel boxes (48 x 56
    heatmaps: Keypoint R-CNN's are 56 x 56, but a height taken for a width would pass there), as
    torchvision's own ``heatmaps_to_keypoints`` does in eager: scores within 1e-5 of their scale,
    keypoints equal but for near-ties of two resized pixels (then one resized pixel apart)."""
    pytest.importorskip("torchvision")
    from torchvision.models.detection import roi_heads  # noqa: F401 - loaded: the capture replaces what it holds

    from convert.frontends.pytorch import load, load_module
    from convert.frontends.pytorch.capture import export_module
    from convert.frontends.pytorch.traced import TracedProgram
    from convert.ir import Options

    gen = torch.Generator().manual_seed(3)

    def inputs(kept: int, extent: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        maps = torch.randn(64, 17, 48, 56, generator=gen)  # not square: rows and columns kept apart
        xy = torch.rand(64, 2, generator=gen) * 150
        rois = torch.cat([xy, xy + torch.rand(64, 2, generator=gen) * extent + 0.2], 1)
        rois[0, 2:] = rois[0, :2] + 0.4  # under one pixel: clamped to 1
        scores = torch.where(torch.arange(64) < kept, 0.9, 0.1)
        scores[1:] = scores[1:][torch.randperm(63, generator=gen)]
        return maps, rois, scores

    net = _KeypointsOfKept().eval()
    example = inputs(12, 120.0)
    if route == "module":
        assert isinstance(export_module(net, example, Options(), "KeypointsOfKept"), TracedProgram)
        model = load_module(net, example, Options())
    elif route == "export":
        program = export_module(net, example, Options(dynamic_batch=True), "KeypointsOfKept")
        assert isinstance(program, torch.export.ExportedProgram)
        decoding = [n for n in program.graph.nodes if "convert_tv" in str(n.target)]
        assert [str(n.target) for n in decoding] == ["convert_tv.decode_heatmaps.default"]  # one node, no while_loop
        model = load_module(net, example, Options(dynamic_batch=True))
    else:
        with torch.no_grad():
            traced = torch.jit.trace(net, example, check_trace=False)  # torchvision's scripted loop
        torch.jit.save(traced, tmp_path / "k.pt")
        model = load([tmp_path / "k.pt"], Options())
    (loop,) = [n for n in model.graph if n.op_type == "Loop"]
    assert loop.attributes["body"].as_graph().name.endswith("decode_step")  # lowered, not expanded
    path = to_onnx(model, tmp_path / "k.onnx")
    equal = total = 0
    for kept, extent in ((1, 50.0), (40, 400.0), (64, 30.0), (0, 50.0)):
        feed = inputs(kept, extent)
        with torch.no_grad():
            theirs = [t.numpy() for t in net(*feed)]  # torchvision's own decoding (no capture running)
        ours = run_onnx(path, {n: t.numpy() for n, t in zip(("maps", "rois", "scores"), feed, strict=True)})
        assert [o.shape for o in ours] == [t.shape for t in theirs] and len(theirs[1]) == kept
        if not kept:
            continue
        assert np.ptp(theirs[1]) > 1.0 and rel_to_scale(ours[1], theirs[1]) <= 1e-5, kept
        rois = feed[1][feed[2] > 0.5].numpy()
        size = np.maximum(rois[:, 2:] - rois[:, :2], 1)
        pixel = size / np.ceil(size)  # a near-tie between two resized pixels may settle the other way
        assert (np.abs(ours[0][..., :2] - theirs[0][..., :2]) <= pixel[:, None] * 1.001 + 1e-4).all(), kept
        same = (ours[0] == theirs[0]).all(axis=2)
        equal, total = equal + int(same.sum()), total + same.size
    print(f"KEYPOINTS {route}: {equal} of {total} equal to torchvision's")
    assert equal >= 0.99 * total, (equal, total)


def test_keypoint_decoding_of_float64_heatmaps_is_its_loop_of_matrix_products(tmp_path: Path) -> None:
    """The Loop of our own is float32: float64 heatmaps are decoded by the form's while_loop (all
    boxes' bicubic weights as matrices at the largest box's size), which matches torchvision's decoding of
    them: computed in float64, returned in float32 as torchvision's (scores within 1e-6 of their
    scale, keypoints within float32 rounding on all but near-ties)."""
    pytest.importorskip("torchvision")
    from torchvision.models.detection import roi_heads  # noqa: F401 - loaded: the capture replaces what it holds

    from convert.frontends.pytorch import load_module
    from convert.ir import Options

    gen = torch.Generator().manual_seed(5)

    def inputs(kept: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        maps = torch.randn(16, 17, 56, 56, generator=gen, dtype=torch.float64)
        xy = torch.rand(16, 2, generator=gen, dtype=torch.float64) * 150
        rois = torch.cat([xy, xy + torch.rand(16, 2, generator=gen, dtype=torch.float64) * 120 + 0.2], 1)
        return maps, rois, torch.where(torch.arange(16) < kept, 0.9, 0.1).double()

    net = _KeypointsOfKept().eval()
    model = load_module(net, inputs(5), Options())
    (loop,) = [n for n in model.graph if n.op_type == "Loop"]
    assert not loop.attributes["body"].as_graph().name.endswith("decode_step")  # the form's while_loop
    path = to_onnx(model, tmp_path / "k64.onnx")
    for kept in (5, 16):
        feed = inputs(kept)
        with torch.no_grad():
            theirs = [t.numpy() for t in net(*feed)]
        ours = run_onnx(path, {n: t.numpy() for n, t in zip(("maps", "rois", "scores"), feed, strict=True)})
        assert [o.dtype for o in ours] == [t.dtype for t in theirs] == [np.float32] * 2, kept
        assert [o.shape for o in ours] == [t.shape for t in theirs], kept
        assert np.ptp(theirs[1]) > 1.0 and rel_to_scale(ours[1], theirs[1]) <= 1e-6, kept
        # torchvision's coordinates are float32 arithmetic on float64 heatmaps (a 0-d float64 factor
        # does not promote), ours float64 rounded to float32: a float32 rounding apart
        assert np.isclose(ours[0], theirs[0], rtol=1e-6, atol=0).all(axis=2).mean() >= 0.95, kept


class _TracedPaste(torch.nn.Module):
    """torchvision's mask paste, as a traced Mask R-CNN holds it (a scripted loop over detections)."""

    def forward(self, masks: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        from torchvision.models.detection.roi_heads import paste_masks_in_image

        return paste_masks_in_image(masks, boxes, (40, 50))


def test_traced_torchvision_mask_paste_matches_torchvision(tmp_path: Path) -> None:
    """torchvision's mask paste as a traced Mask R-CNN holds it (a scripted loop over detections,
    each mask resized to its box): converted from the ``.pt`` (the loop replaced by the batched
    paste), it matches torchvision's own eager paste on boxes other than the traced ones, inside,
    across and past the image's edges."""
    from convert.frontends.pytorch import load
    from convert.ir import Options

    torchvision = pytest.importorskip("torchvision")
    paste = torchvision.models.detection.roi_heads.paste_masks_in_image
    gen = torch.Generator().manual_seed(0)
    masks, boxes = torch.rand(6, 1, 28, 28, generator=gen), torch.tensor([[2.0, 3.0, 20.0, 30.0]] * 6)
    with torch.no_grad():
        traced = torch.jit.trace(_TracedPaste(), (masks, boxes), check_trace=False)
    torch.jit.save(traced, tmp_path / "paste.pt")
    model = load([tmp_path / "paste.pt"], Options())
    path = to_onnx(model, tmp_path / "paste.onnx")
    feeds = [i.name for i in model.graph.inputs]
    for seed in (1, 2, 3):
        gen.manual_seed(seed)
        masks = torch.rand(6, 1, 28, 28, generator=gen)
        corner = torch.rand(6, 2, generator=gen) * torch.tensor([60.0, 50.0]) - 10  # some past the edges
        boxes = torch.cat([corner, corner + 1 + torch.rand(6, 2, generator=gen) * 40], dim=1)
        ref = paste(masks, boxes, (40, 50)).numpy()
        (ours,) = run_onnx(path, dict(zip(feeds, (masks.numpy(), boxes.numpy()), strict=True)))
        assert ours.shape == ref.shape == (6, 1, 40, 50) and np.ptp(ref) > 0.5, ours.shape
        assert rel_to_scale(ours, ref) <= 1e-5, (seed, rel_to_scale(ours, ref))


def test_traced_torchvision_code_is_recognised(tmp_path: Path) -> None:
    """What a refusal of a traced torchvision detector rests on: the file's source ranges point into
    torchvision/models/detection (the paste above), or not (a plain traced net)."""
    from convert.frontends.pytorch.capture import _traced_torchvision_detection

    pytest.importorskip("torchvision")
    masks, boxes = torch.rand(3, 1, 28, 28), torch.tensor([[2.0, 3.0, 20.0, 30.0]] * 3)
    with torch.no_grad():
        pasted = torch.jit.trace(_TracedPaste(), (masks, boxes), check_trace=False)
        plain = torch.jit.trace(torch.nn.Conv2d(3, 4, 3), (torch.rand(1, 3, 8, 8),))
    for name, traced in (("paste.pt", pasted), ("plain.pt", plain)):
        torch.jit.save(traced, tmp_path / name)
    from convert.frontends.pytorch.files import load_torchscript

    assert _traced_torchvision_detection(load_torchscript(tmp_path / "paste.pt"))
    assert not _traced_torchvision_detection(load_torchscript(tmp_path / "plain.pt"))


def test_batch_images_used_during_capture_is_torchvisions() -> None:
    """The batch_images put in place while a detector is captured (a pad and a stack, no write through
    a view) batches exactly as torchvision's, for images of different sizes, and is put back after."""
    pytest.importorskip("torchvision")
    from torchvision.models.detection.transform import GeneralizedRCNNTransform

    from convert.frontends.pytorch.tvcapture import (
        torchvision_replaced_for_capture as _torchvision_replaced_for_capture,
    )

    transform = GeneralizedRCNNTransform(64, 64, [0.0, 0.0, 0.0], [1.0, 1.0, 1.0])
    original = GeneralizedRCNNTransform.__dict__["batch_images"]
    gen = torch.Generator().manual_seed(0)
    for shapes in ([(3, 50, 61)], [(3, 64, 64), (3, 33, 70), (3, 70, 20)]):
        images = [torch.randn(s, generator=gen) for s in shapes]
        want = transform.batch_images(images, size_divisible=32)
        with _torchvision_replaced_for_capture():
            assert GeneralizedRCNNTransform.__dict__["batch_images"] is not original
            got = transform.batch_images(images, size_divisible=32)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert GeneralizedRCNNTransform.__dict__["batch_images"] is original
