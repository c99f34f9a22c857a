"""Real torchvision and timm models (models/pytorch/vision_zoo.py) convert to ONNX and match eager.

torchvision's and timm's own classes with seeded random weights and recalibrated BatchNorm, nothing
downloaded: classification families, segmentation (FCN, DeepLabV3, LRASPP), video (R3D, R(2+1)D),
16 timm families, and ultralytics YOLOv8n/YOLO11n detect and segment built from their yaml with
no eager inference before the conversion (every output compared: decoded predictions, raw head
tensors, mask prototypes). Each is converted once from its seed-1 input and compared with PyTorch eager
on the seed-1 and seed-2 inputs, error relative to the output's scale, bound 1e-4. Where float32
rounding alone exceeds that (deep ResNet-50 heads: torch's own float32 run is 8e-5 to 1.3e-4 from the
same net in float64), the net is run in float64 and ours must be no farther from it than torch's
float32 run (+25 %) and within 5e-4 of eager. CNNs also go to Caffe (real Caffe when built).
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import sample_models
from _torch_helpers import REL_TO_SCALE, rel_to_scale, run_onnx, to_onnx

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision", reason="torchvision is not importable")
pytest.importorskip("timm", reason="timm is not importable")

pytestmark = [pytest.mark.torch]

FLOAT64_MARGIN = 1.25
FLOOR = 5e-4
# Caffe can express these (conv, BN, pooling, ReLU/ReLU6/hardswish, residual adds, concat, channel shuffle).
TO_CAFFE = ["tv:resnet18", "tv:mobilenet_v2", "tv:squeezenet1_1", "tv:googlenet", "tv:densenet121",
            "tv:mobilenet_v3_large", "tv:shufflenet_v2_x1_0", "tv:efficientnet_b0", "tv:regnet_y_400mf",
            "timm:repvgg_a0"]


def _zoo() -> object:
    return sample_models.vision_zoo()


def _flat(out: object) -> list[torch.Tensor]:
    """Every tensor of a (nested) model output, in the order torch.export lists them."""
    if isinstance(out, torch.Tensor):
        return [out]
    items = out.values() if isinstance(out, dict) else out
    return [t for item in items for t in _flat(item)]  # type: ignore[union-attr]


def _params() -> list[object]:
    zoo = _zoo()
    have_yolo = zoo.ultralytics_available()  # type: ignore[attr-defined]
    return [pytest.param(n, marks=pytest.mark.skipif(n.startswith("yolo:") and not have_yolo,
                                                     reason="ultralytics is not importable"))
            for n in zoo.NAMES]  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", _params())
def test_vision_model_matches_eager(name: str, tmp_path: Path) -> None:
    from convert.frontends.pytorch import load_module
    from convert.ir import Options

    model, inputs = _zoo().build(name)  # type: ignore[attr-defined]
    ir_model = load_module(model, inputs(1), Options())
    path = to_onnx(ir_model, tmp_path / "m.onnx")
    feed_name = ir_model.graph.inputs[0].name
    for seed in (1, 2):
        (x,) = inputs(seed)
        with torch.no_grad():  # after the conversion: it must leave the model as it was
            refs = [t.numpy() for t in _flat(model(x))]
        outs = run_onnx(path, {feed_name: x.numpy()})
        assert len(outs) == len(refs), (name, len(outs), len(refs))
        for k, (ours, ref) in enumerate(zip(outs, refs, strict=True)):
            err = rel_to_scale(ours, ref)
            print(f"ZOO {name} seed {seed} output {k} {err:.1e}")
            if err > REL_TO_SCALE:  # float32 rounding? compare with the same net in float64
                with torch.no_grad():
                    r64 = _flat(copy.deepcopy(model).double()(x.double()))[k].numpy()
                scale = float(np.abs(r64).max())
                torch_err = float(np.abs(ref - r64).max()) / scale
                our_err = float(np.abs(ours.astype(np.float64) - r64).max()) / scale
                print(f"ZOO-F64 {name} seed {seed} torch32 {torch_err:.1e} ours {our_err:.1e}")
                # ours within tol of the float64 run is right whatever eager's float32 run did (Inception v3
                # in two test processes: ours 6.6e-5 from float64, eager's 4.1e-5)
                assert err <= FLOOR and (our_err <= REL_TO_SCALE or our_err <= FLOAT64_MARGIN * torch_err), (
                    name, seed, k, err, our_err, torch_err)


@pytest.mark.parametrize("name", TO_CAFFE)
def test_vision_cnn_to_caffe_matches_eager(name: str, tmp_path: Path) -> None:
    import convert.exporters.caffe as caffe
    from convert.frontends.pytorch import load_module
    from convert.ir import Options, passes
    from convert.parity.runtimes.caffe_runtime import open_runtime

    model, inputs = _zoo().build(name)  # type: ignore[attr-defined]
    ir_model = load_module(model, inputs(1), Options())
    passes.standard_pipeline(validate=True)(ir_model)
    options = Options()
    paths = caffe.EXPORTER.save(ir_model, tmp_path / "m.prototxt", options)
    runtime = open_runtime(paths, options)
    (x,) = inputs(2)
    with torch.no_grad():
        ref = model(x).numpy()
    (ours,) = runtime.run({runtime.inputs()[0].name: x.numpy()}).values()
    err = rel_to_scale(ours, ref)
    print(f"ZOO-CAFFE {name} {runtime.name} {err:.1e}")
    assert err <= REL_TO_SCALE, (name, err)


DET_FLOOR = 1e-3
DIM_FLOOR = 1e-2  # the dim image (see the caller): float32 rounding alone reaches 4e-3 in torch
# px: how far apart two runs' expanded box edges may be where they truncate to different integers
# (float32 puts ours and torch's own float64 run 1e-3 to 1.4e-2 px from eager's boxes)
EDGE_TOL = 0.05


def _expanded_boxes(boxes: np.ndarray) -> np.ndarray:
    """The boxes Mask R-CNN pastes its 28x28 masks into (torchvision's own expansion), before it
    truncates them to integers (``.to(torch.int64)``, toward zero as ``np.trunc``)."""
    from torchvision.models.detection.roi_heads import expand_boxes

    return expand_boxes(torch.from_numpy(boxes), 30 / 28).numpy()


def _row_max_mean(err: np.ndarray) -> float:
    """The mean over detections of each one's largest mask error. The largest alone follows the one
    box that float32 rounding moved most (mask features are sampled at the box): on seeds 7 and 11
    ours is 2.1x and 1.3x torch's float32 run from float64 there, on seed 3 0.45x, while the means
    agree within 15 %."""
    return float(err.reshape(len(err), -1).max(axis=1).mean())


def _pair(boxes: np.ndarray, labels: np.ndarray, ref_boxes: np.ndarray, ref_labels: np.ndarray) -> np.ndarray:
    """Pair two runs' detections as sets: for each reference row, the index of its partner, the
    closest box (L-inf, same label) taken greedily, closest pairs first. Sorting both by box
    instead misaligns rows whose first coordinates are within rounding of each other."""
    cost = np.abs(boxes[:, None, :].astype(np.float64) - ref_boxes[None, :, :]).max(axis=-1)
    cost[labels[:, None] != ref_labels[None, :]] = np.inf
    partner = np.full(len(ref_boxes), -1)
    taken = np.zeros(len(boxes), bool)
    for flat in np.argsort(cost, axis=None):
        i, j = divmod(int(flat), len(ref_boxes))
        if not np.isfinite(cost[i, j]):
            break
        if not taken[i] and partner[j] < 0:
            partner[j], taken[i] = i, True
    assert (partner >= 0).all(), "a detection has no partner with its label in the other run"
    return partner


def _detections_agree(name: str, model: torch.nn.Module, path: Path, feed: str, x: torch.Tensor,
                      dim: bool) -> int:
    """Ours against eager as sets (``_pair``): same count, equal labels, boxes, scores, masks,
    keypoints and keypoint scores within REL_TO_SCALE (DET_FLOOR on the dim image), or, where
    float32 rounding alone exceeds that (ResNet-50 backbones, the dim image), no farther from the
    net run in float64 than torch's float32 run (+25 %; for masks in the mean of each row's
    largest error) and within DET_FLOOR (DIM_FLOOR).
    A mask is compared where both sides paste it into the same integer box: a box edge within
    float rounding of an integer truncates either way, which moves (or resamples) the whole mask
    by a pixel, up to 0.86 of the mask scale (measured: torch's own float64 run flips the same
    rows). Each such edge must be within EDGE_TOL of the other side's, and at most a tenth of the
    rows may flip. Returns the detection count."""
    with torch.no_grad():
        refs = [t.numpy() for t in model(x)]
    boxes, scores = refs[0], refs[1]
    assert len(boxes) >= 10 and (dim or np.diff(np.sort(scores)).max() > 1e-3), "degenerate detections"
    ours = run_onnx(path, {feed: x.numpy()})
    assert len(ours) == len(refs) and ours[0].shape == boxes.shape, (name, ours[0].shape, boxes.shape)
    ours = [o[_pair(ours[0], ours[2], boxes, refs[2])] for o in ours]
    masks = len(refs) > 3 and refs[3].ndim == 4  # Mask R-CNN (Keypoint R-CNN's are keypoints, scores)
    if masks:  # pasted into the same integer box on both sides, or an edge within rounding of an integer
        ours_at, refs_at = _expanded_boxes(ours[0]), _expanded_boxes(refs[0])
        refs_int = np.trunc(refs_at)
        flipped = np.trunc(ours_at) != refs_int
        gaps = np.abs(ours_at - refs_at)[flipped]
        assert (gaps <= EDGE_TOL).all(), (name, "a pasted box differs by more than rounding", gaps.tolist())
        same = ~flipped.any(axis=1)
        assert same.mean() >= 0.9, (name, int((~same).sum()))
        ours[3], refs[3] = ours[3][same], refs[3][same]
        assert float(((refs[3] > 0.05) & (refs[3] < 0.95)).sum() / (refs[3] > 0).sum()) > 0.02, "saturated masks"
    errs = {k: rel_to_scale(ours[k], refs[k]) for k in range(len(refs)) if k != 2}
    print(f"DET {name} {'dim' if dim else ''} {len(boxes)} boxes"
          + (f" ({len(boxes) - len(refs[3])} pasted a pixel apart)" if masks else "") + ": "
          + " ".join(f"out{k} {e:.1e}" for k, e in errs.items()))
    over = [k for k, e in errs.items() if e > (DET_FLOOR if dim else REL_TO_SCALE)]
    if not over:
        return len(boxes)
    with torch.no_grad():  # float32 rounding? compare with the same net in float64
        r64 = [t.numpy() for t in copy.deepcopy(model).double()(x.double())]
    assert r64[0].shape == boxes.shape, (name, "float64 run found another count")
    r64 = [r[_pair(r64[0], r64[2], boxes, refs[2])] for r in r64]
    if masks:  # less the rows float64 pastes into another integer box than eager does
        kept = ~(np.trunc(_expanded_boxes(r64[0])) != refs_int).any(axis=1)[same]
        ours[3], refs[3], r64[3] = ours[3][kept], refs[3][kept], r64[3][same][kept]
    for k in over:
        scale = float(np.abs(r64[k]).max())
        spread = _row_max_mean if masks and k == 3 else np.max
        torch_err = float(spread(np.abs(refs[k] - r64[k]))) / scale
        our_err = float(spread(np.abs(ours[k].astype(np.float64) - r64[k]))) / scale
        print(f"DET-F64 {name} out{k} torch32 {torch_err:.1e} ours {our_err:.1e}")
        floor = DIM_FLOOR if dim else DET_FLOOR
        # ours within the floor of the float64 run is right whatever eager's float32 run did (Keypoint
        # R-CNN on the dim image: a keypoint jumps in eager, 0.57 of scale from float64, ours 3.5e-5);
        # else no farther from float64 than eager's run (Faster R-CNN's dim image on this CPU: scores
        # 3.7e-3 from float64, eager 2.7e-3: within DIM_FLOOR)
        assert our_err <= floor or (errs[k] <= floor and our_err <= FLOAT64_MARGIN * torch_err), (
            name, k, errs[k], our_err, torch_err)
    return len(boxes)


# Mask R-CNN is compared on four inputs by test_mask_rcnn_detection_counts_vary (the same capture, with
# the same checks of its decisions, on a model whose count is the data's): its float64 runs made this
# test 3.6 minutes of CI
@pytest.mark.parametrize("name", [d for d in _zoo().DETECTORS if d != "det:maskrcnn_resnet50_fpn"])  # type: ignore[attr-defined]
def test_detector_matches_eager_as_sets(name: str, tmp_path: Path) -> None:
    """torchvision's own detectors, compared with eager on two inputs as sets (``_detections_agree``).
    Each is captured valid for every input (traced with symbolic counts, or by torch.export): a dim
    image, which gives other proposal and detection counts, is compared too."""
    from convert.frontends.pytorch import load_module
    from convert.ir import EXAMPLE_FEEDS, FROZEN_DECISIONS, Options

    model, inputs = _zoo().build(name)  # type: ignore[attr-defined]
    options = Options()
    ir_model = load_module(model, inputs(1), options)
    assert EXAMPLE_FEEDS not in options.extra and FROZEN_DECISIONS not in options.extra, options.diagnostics.notes
    path = to_onnx(ir_model, tmp_path / "m.onnx")
    feed = ir_model.graph.inputs[0].name
    for seed in (1, 2):  # the example and another image (a third cost CI a minute on the R-CNNs' float64 runs)
        _detections_agree(name, model, path, feed, inputs(seed)[0], dim=False)
    # A dim image: other proposal and detection counts than the example's (a graph that took its
    # sizes from the example fails here; the draft-exported Faster R-CNN did, in ONNX Runtime).
    # Low contrast packs the random heads' scores together, which amplifies float differences:
    # measured on Faster R-CNN, boxes 3.0e-4 and scores 3.2e-3 of their scale (0.1 px at most), where
    # torch's own float32 run is 2.4e-4 and 4.2e-3 from float64 and ours 1.2e-4 and 1.1e-3 (on
    # another CPU: 1.2e-4, 9.3e-4 from eager); SSDlite and RetinaNet <= 6e-6, Mask R-CNN's masks
    # 6.8e-4. Hence DET_FLOOR, and past it the float64 rule within DIM_FLOOR.
    _detections_agree(name, model, path, feed, inputs(4)[0] * 0.3, dim=True)


# the fast capture (frontends/pytorch/traced.py) takes every detector, with its counts symbolic
# (Keypoint R-CNN's keypoint decoding recorded as one operator and lowered as a Loop)
TRACED_DETECTORS = ("det:fasterrcnn_mobilenet_v3_large_320_fpn", "det:ssdlite320_mobilenet_v3_large",
                    "det:retinanet_resnet50_fpn", "det:maskrcnn_resnet50_fpn", "det:keypointrcnn_resnet50_fpn")


@pytest.mark.parametrize("name", _zoo().DETECTORS)  # type: ignore[attr-defined]
def test_detectors_take_the_fast_capture_where_it_is_sound(name: str) -> None:
    """The conversions above match eager whichever capture ran; this keeps the fast one in use, with
    no decision taken from the example: the R-CNNs' box coder tested 'box_sum > 0' (torchvision's
    detection/_utils.py), which the capture's ``BoxCoder.decode`` does without."""
    from convert.frontends.pytorch.capture import export_module
    from convert.frontends.pytorch.traced import TracedProgram
    from convert.ir import EXAMPLE_FEEDS, FROZEN_DECISIONS, Options

    model, inputs = _zoo().build(name)  # type: ignore[attr-defined]
    options = Options()
    program = export_module(model, inputs(1), options, name)
    assert isinstance(program, TracedProgram) == (name in TRACED_DETECTORS)
    notes = " ".join([*getattr(program, "notes", []), *(str(n) for n in options.diagnostics.notes)])
    assert "_utils.py" not in notes and "example" not in notes, notes
    assert EXAMPLE_FEEDS not in options.extra and FROZEN_DECISIONS not in options.extra
    # torchvision 0.29's roi_align asserts rois.size(1) == 5 (ops/_utils.py:35), a fixed size of a
    # tensor of data-dependent length: the capture's RoIAlign calls the operator itself, unnamed
    assert "_utils.py:35" not in notes, notes


@pytest.fixture(scope="module")
def mask_rcnn(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, object, Path, str]:
    """torchvision's Mask R-CNN (the zoo's) with a 0.5 score threshold and a cap of 200, so that the
    detection count is the data's, converted once from the example (seed 1)."""
    from convert.frontends.pytorch import load_module
    from convert.ir import EXAMPLE_FEEDS, FROZEN_DECISIONS, Options

    model, inputs = _zoo().build("det:maskrcnn_resnet50_fpn")  # type: ignore[attr-defined]
    heads = model.model.roi_heads
    heads.score_thresh, heads.detections_per_img = 0.5, 200  # seed 5's 123rd score is 0.5000016: not used
    options = Options()
    ir_model = load_module(model, inputs(1), options)
    # captured valid for every input: no size or branch of the example's kept (as test_detector_matches_eager_as_sets)
    assert EXAMPLE_FEEDS not in options.extra and FROZEN_DECISIONS not in options.extra, options.diagnostics.notes
    path = to_onnx(ir_model, tmp_path_factory.mktemp("mask_rcnn") / "m.onnx")
    return model, inputs, path, ir_model.graph.inputs[0].name


def test_mask_rcnn_detection_counts_vary(mask_rcnn: tuple[object, object, Path, str]) -> None:
    """Mask R-CNN converted from one input keeps the detection count of each input, and pastes each
    mask where torchvision does. The zoo's keeps its 100 best of ~1000 boxes over 0.05 whatever the
    input; with a 0.5 score threshold and a cap of 200 the count is the data's: 156 on the example
    (seed 1), then 154, 124 and 169, 200 (the cap, on the dim image) and none at all (seeds 8 and
    0.6 x seed 4, 171 and 27, were measured too and are left out to keep the test short).

    Seeds 11 and 12 put pasted box edges within rounding of an integer (``_detections_agree``). On
    the zoo's model (cap 100) seed 12 has ours paste three masks a pixel from eager's (0.86 of the
    mask scale), torch's own float64 run two of those three (0.70), seed 11 one row, the same in
    both (0.19); and pasting eager's own 28x28 masks into our boxes with torchvision's
    ``paste_masks_in_image`` gives ours within 7e-4 on every input: the paste matches, the boxes
    differ by float32 rounding (2e-3 to 9e-3 px, as torch's float32 from its float64)."""
    model, inputs, path, feed = mask_rcnn
    name = "det:maskrcnn_resnet50_fpn score>0.5"
    counts = [_detections_agree(name, model, path, feed, x, dim=False)
              for x in (inputs(2)[0], inputs(11)[0], inputs(12)[0])]
    counts.append(_detections_agree(name, model, path, feed, inputs(4)[0] * 0.3, dim=True))
    blank = inputs(5)[0] * 0.8  # no score over 0.5
    with torch.no_grad():
        refs = [tuple(t.shape) for t in model(blank)]
    ours = [o.shape for o in run_onnx(path, {feed: blank.numpy()})]
    assert refs[0] == (0, 4) and ours == refs, (ours, refs)
    assert len(set(counts)) == len(counts) and 0 not in counts, counts


@pytest.fixture
def two_threads(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """torch and ONNX Runtime (whose pool in convert follows OMP_NUM_THREADS) on two threads."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
@pytest.mark.usefixtures("two_threads")
def test_mask_rcnn_verdict_by_float64_rows(mask_rcnn: tuple[object, object, Path, str]) -> None:
    """Mask R-CNN's masks miss ``tol`` on every input by float32 rounding (a mask is pasted at a
    box edge a thousandth of a pixel from an integer, which truncates either way). The float64 rule
    judges the rows paired as a set: on seed 2 ours is no farther from torch's float64 run than
    torch's own float32 run (PASS); on seed 12 torch's own float32 run pastes two masks a pixel from
    its float64 run (0.7 of the mask scale), ours three, so no float32 conversion can be judged
    there (NOT VERIFIED, not FAIL); and with the reference's mask logits scaled by 1.5 (the
    conversion is then wrong for it) the masks FAIL.

    Measured with two threads in torch and ONNX Runtime, which this test sets: which rows flip
    depends on the summation order. With one thread each (a test process of scripts/test on two
    cores) torch's float32 run flips none on seed 12 and ours one, 0.85 of the mask scale, and the
    verdict is FAIL: a false FAIL the float64 rule cannot tell from a wrong paste (docs/verdict.md,
    limits)."""
    from convert.ir import Options
    from convert.parity import run_parity
    from convert.parity.runtimes.torch import module_runtime

    model, inputs, path, _ = mask_rcnn

    def check(seed: int):  # type: ignore[no-untyped-def]
        runtime = module_runtime(model, inputs(1), Options())
        return run_parity("pytorch", [], "onnx", [path], source_runtime=runtime,
                          inputs={"x": inputs(seed)[0].numpy()}, locate=False)

    def masks(report):  # type: ignore[no-untyped-def]
        out = report.outputs[3]
        assert out.as_set and len(out.shape) == 4 and out.shape[0] > 100, report.table()
        print(f"MASKS {out.verdict} {out.rel_to_scale:.2e}: {out.note[-160:]}")
        return out

    fine = check(2)
    assert fine.verdict == "PASS", fine.table()
    out = masks(fine)
    assert out.by_float64 and out.rel_to_scale > fine.tol, fine.table()

    flips = check(12)
    assert flips.verdict == "NOT VERIFIED", flips.table()
    out = masks(flips)
    assert out.amplified and out.rel_to_scale > 0.5, flips.table()

    logits = model.model.roi_heads.mask_predictor.mask_fcn_logits.weight  # type: ignore[attr-defined]
    kept = logits.detach().clone()
    with torch.no_grad():
        logits.mul_(1.5)
    try:
        wrong = check(2)
    finally:
        with torch.no_grad():
            logits.copy_(kept)
    assert wrong.verdict == "FAIL", wrong.table()
    out = masks(wrong)
    assert out.verdict == "FAIL" and not out.amplified, wrong.table()


@pytest.mark.parametrize("name", _zoo().DETECTORS)  # type: ignore[attr-defined]
def test_traced_detector_file_matches_eager_as_sets(name: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The same detectors traced to a TorchScript ``.pt`` and converted from the file, compared with
    eager (not with the traced graph) as sets, on an input other than the traced one and the dim image.

    Under tracing torchvision takes its ONNX-export code: image sizes as tensors (folded to the
    traced input size), NMS through its scripted coordinate trick, Mask/Keypoint R-CNN's
    post-processing as scripted loops (replaced by the module route's equivalents). The detection
    count stays data-dependent: the dim image gives other counts than the traced one. The file's
    graph is read by the fast capture (torch's TorchScript converter is not called), with those
    replacements expanded into their forms (the keypoint decoding lowered as one Loop)."""
    from convert.frontends.pytorch import capture, load
    from convert.ir import Options

    model, inputs = _zoo().build(name)  # type: ignore[attr-defined]
    with torch.no_grad():
        traced = torch.jit.trace(model, inputs(1), check_trace=False)
    torch.jit.save(traced, tmp_path / "m.pt")
    del traced
    converter = capture.script_to_program
    called: list[object] = []
    monkeypatch.setattr(capture, "script_to_program", lambda *a, **k: called.append(a) or converter(*a, **k))
    ir_model = load([tmp_path / "m.pt"], Options())
    assert not called, "torch's TorchScript converter read the file"
    path = to_onnx(ir_model, tmp_path / "m.onnx")
    feed = ir_model.graph.inputs[0].name
    # one image and the dim one (other counts than the traced example's): the module route above runs
    # the same lowering on three images; what is the file's own here is its graph (CI time: the
    # ResNet-50 R-CNNs' float64 runs made this 2-5 minutes a detector)
    _detections_agree(name, model, path, feed, inputs(2)[0], dim=False)
    _detections_agree(name, model, path, feed, inputs(4)[0] * 0.3, dim=True)


def test_keypoint_scores_torchvision_stores_in_float32_are_judged_by_the_float64_run(tmp_path: Path) -> None:
    """torchvision's keypoint decoding fills float32 tensors even when Keypoint R-CNN runs in float64, so
    the parity check had no float64 run of it ("casts an output back to a narrower float"): keypoint
    scores 1.5e-4 of scale from eager by float32 rounding alone (torch's own float32 run 9.5e-5 from the
    float64 run, ours 5.8e-5) were a FAIL at the default tol. A float64 run's float32-stored output now
    arbitrates at tol >= 1e-5. The relation is recomputed here with numpy from the three runs (rows
    paired by nearest box); the labels, constant on this random-weight model, are judged exactly on
    the paired rows beside boxes that vary (PASS; they were NOT VERIFIED for want of spread)."""
    import convert

    model, inputs = _zoo().build("det:keypointrcnn_resnet50_fpn")  # type: ignore[attr-defined]
    (x,) = inputs(1)
    result = convert.convert(model, (x,), to="onnx", out=tmp_path / "k.onnx", locate=False)
    verdicts = [o.verdict for o in result.report.outputs]
    assert verdicts == ["PASS"] * 5, result.report.table()
    assert "judged exactly" in result.report.outputs[2].note
    with torch.no_grad():
        r32 = [t.numpy().astype(np.float64) for t in model(x)]
        r64 = [t.numpy().astype(np.float64) for t in copy.deepcopy(model).double()(x.double())]
    ours = [o.astype(np.float64) for o in run_onnx(tmp_path / "k.onnx", {"x": x.numpy()})]

    def paired(side: list[np.ndarray]) -> np.ndarray:  # side's keypoint scores, row by row with r64's boxes
        nearest = np.abs(r64[0][:, None, :] - side[0][None, :, :]).sum(2).argmin(1)
        assert len(set(nearest.tolist())) == len(nearest)  # one to one
        return side[4][nearest]

    scale = np.abs(r64[4]).max()
    theirs, ours_err = (float(np.abs(paired(s) - r64[4]).max() / scale) for s in (r32, ours))
    off_eager = float(np.abs(paired(ours) - paired(r32)).max() / scale)
    scores = result.report.outputs[4]
    print(f"KEYPOINT SCORES: ours {ours_err:.2g} from float64, torch float32 {theirs:.2g}, ours {off_eager:.2g} "
          "from eager")
    assert ours_err <= 2.0 * theirs  # the float64 rule, in numpy
    # the arbiter decided only what tol alone did not: the report's own error (rows paired as a set, over
    # eager's scale) decides whether it was asked; off_eager pairs by float64's boxes and can sit on either
    # side of tol (1.7e-4 here where the report measured within 1e-4)
    assert scores.by_float64 == (scores.rel_to_scale > result.report.tol), scores
