"""The verdict on outputs after an NMS: rows compared as sets, padding dropped, empty never PASS.

The converted model is a real NonMaxSuppression graph run in ONNX Runtime. The reference is an
ONNX file whose outputs are constants computed here by a greedy NMS written in this test (the
textbook algorithm: highest score first, drop boxes whose IoU with a kept one exceeds the
threshold), then reordered, padded, cut or perturbed the way other runtimes and bugs do. Each case
runs `convert check` and asserts the verdict both ways.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

N = 60
IOU = 0.5
SCORE = 0.3


def _inputs(seed: int = 0, *, score_scale: float = 1.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 200, (N, 2))
    wh = rng.uniform(10, 60, (N, 2))
    boxes = np.concatenate([xy, xy + wh], axis=1).astype(np.float32)[None]
    scores = (rng.uniform(0, 1, N) * score_scale).astype(np.float32)[None, None]
    return {"boxes": boxes, "scores": scores}


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    area = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / area


def _reference_nms(feeds: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    boxes, scores = feeds["boxes"][0].astype(np.float64), feeds["scores"][0, 0].astype(np.float64)
    kept: list[int] = []
    for i in np.argsort(-scores, kind="stable"):
        if scores[i] > SCORE and all(_iou(boxes[i], boxes[k]) <= IOU for k in kept):
            kept.append(int(i))
    return boxes[kept].astype(np.float32), scores[kept].astype(np.float32)


def _nms_model(path: Path) -> None:
    nodes = [
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "thr"], ["sel"]),
        helper.make_node("Gather", ["sel", "two"], ["idx"], axis=1),
        helper.make_node("Squeeze", ["boxes", "ax0"], ["b2"]),
        helper.make_node("Squeeze", ["scores", "ax01"], ["s1"]),
        helper.make_node("Gather", ["b2", "idx"], ["det_boxes"], axis=0),
        helper.make_node("Gather", ["s1", "idx"], ["det_scores"], axis=0),
    ]
    inits = [numpy_helper.from_array(np.array([100], np.int64), "max_out"),
             numpy_helper.from_array(np.array([IOU], np.float32), "iou"),
             numpy_helper.from_array(np.array([SCORE], np.float32), "thr"),
             numpy_helper.from_array(np.array(2, np.int64), "two"),
             numpy_helper.from_array(np.array([0], np.int64), "ax0"),
             numpy_helper.from_array(np.array([0, 1], np.int64), "ax01")]
    graph = helper.make_graph(
        nodes, "nms",
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, N, 4]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, N])],
        [helper.make_tensor_value_info("det_boxes", TensorProto.FLOAT, ["K", 4]),
         helper.make_tensor_value_info("det_scores", TensorProto.FLOAT, ["K"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def _constant_model(path: Path, boxes: np.ndarray, scores: np.ndarray) -> None:
    """A reference that takes the same inputs and returns the given detections."""
    nodes = [helper.make_node("Constant", [], ["det_boxes"], value=numpy_helper.from_array(boxes)),
             helper.make_node("Constant", [], ["det_scores"], value=numpy_helper.from_array(scores))]
    graph = helper.make_graph(
        nodes, "ref",
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, N, 4]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, N])],
        [helper.make_tensor_value_info("det_boxes", TensorProto.FLOAT, list(boxes.shape)),
         helper.make_tensor_value_info("det_scores", TensorProto.FLOAT, list(scores.shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def _check(tmp: Path, feeds: dict[str, np.ndarray], boxes: np.ndarray, scores: np.ndarray) -> tuple[int, dict, str]:
    _nms_model(tmp / "nms.onnx")
    _constant_model(tmp / "ref.onnx", boxes, scores)
    np.savez(tmp / "x.npz", **feeds)
    report = tmp / "r.json"
    done = subprocess.run([sys.executable, "-m", "convert", "check", "onnx:onnx", str(tmp / "ref.onnx"),
                           "--against", str(tmp / "nms.onnx"), "--inputs", str(tmp / "x.npz"), "--report",
                           str(report)], capture_output=True, text=True, timeout=120)
    return done.returncode, json.loads(report.read_text()) if report.exists() else {}, done.stdout + done.stderr


def test_reordered_rows_pass_as_a_set(tmp_path: Path) -> None:
    feeds = _inputs()
    boxes, scores = _reference_nms(feeds)
    assert len(boxes) >= 8 and np.ptp(scores) > 0.1  # a meaningful set
    order = np.argsort(boxes[:, 0])  # another order than the NMS's (by score)
    assert (order != np.arange(len(order))).any()
    rc, data, out = _check(tmp_path, feeds, boxes[order], scores[order])
    assert rc == 0 and data["verdict"] == "PASS", out
    assert all("rows compared as a set after NonMaxSuppression" in o["note"] for o in data["outputs"]), out
    assert f"{len(boxes)} paired" in data["outputs"][0]["note"]


def test_a_moved_box_fails_as_a_set(tmp_path: Path) -> None:
    feeds = _inputs()
    boxes, scores = _reference_nms(feeds)
    order = np.argsort(boxes[:, 0])
    boxes, scores = boxes[order].copy(), scores[order]
    boxes[3, 2] += 0.5  # half a pixel: 2e-3 of the boxes' scale
    rc, data, out = _check(tmp_path, feeds, boxes, scores)
    assert rc == 1 and data["verdict"] == "FAIL", out
    verdicts = {o["name"]: o["verdict"] for o in data["outputs"]}
    assert verdicts == {"det_boxes": "FAIL", "det_scores": "PASS"}, out


def test_a_missing_row_fails_and_is_counted(tmp_path: Path) -> None:
    feeds = _inputs()
    boxes, scores = _reference_nms(feeds)
    rc, data, out = _check(tmp_path, feeds, boxes[1:], scores[1:])
    assert rc == 1 and data["verdict"] == "FAIL", out
    assert "0 reference row(s) and 1 of ours without a counterpart" in data["outputs"][0]["note"], out


def test_zero_padding_of_the_reference_is_dropped_and_said(tmp_path: Path) -> None:
    """OpenCV's DetectionOutput returns a fixed 100 rows, zeros past the detections."""
    feeds = _inputs()
    boxes, scores = _reference_nms(feeds)
    pad = 100 - len(boxes)
    padded_b = np.concatenate([boxes, np.zeros((pad, 4), np.float32)])
    padded_s = np.concatenate([scores, np.zeros(pad, np.float32)])
    rc, data, out = _check(tmp_path, feeds, padded_b, padded_s)
    assert rc == 0 and data["verdict"] == "PASS", out
    assert f"{pad} padding rows of the reference dropped" in data["outputs"][0]["note"], out


def test_nothing_detected_against_padding_is_not_verified(tmp_path: Path) -> None:
    """Every score below the threshold: ours has no row, the reference 100 rows of zeros. Nothing was
    compared: NOT VERIFIED, exit 1, with the hint to give real inputs."""
    feeds = _inputs(score_scale=0.25)
    boxes, _ = _reference_nms(feeds)
    assert len(boxes) == 0
    rc, data, out = _check(tmp_path, feeds, np.zeros((100, 4), np.float32), np.zeros(100, np.float32))
    assert rc == 1 and data["verdict"] == "NOT VERIFIED", out
    assert "--inputs" in out and "empty on these inputs" in data["outputs"][0]["note"], out


def test_same_rows_in_the_same_order_still_pass_in_order(tmp_path: Path) -> None:
    """The ordered comparison decides when it passes: no pairing is reported."""
    feeds = _inputs()
    boxes, scores = _reference_nms(feeds)
    rc, data, out = _check(tmp_path, feeds, boxes, scores)
    assert rc == 0 and data["verdict"] == "PASS", out
    assert not any("as a set" in o["note"] for o in data["outputs"]), out
