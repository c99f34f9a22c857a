"""The built-in verdict on torchvision's detectors, against PyTorch eager (the real reference).

The check's own default inputs for a detector are images in [0, 1) (said in the report), its
detections are compared as sets where an NMS or top-k orders them (``compare_sets``), and the
verdict is right both ways: PASS on the conversion, FAIL when the reference's box head is scaled
by 1.5, NOT VERIFIED on a saturated input whose scores are all equal (ties decide the kept rows).
"""

from __future__ import annotations

import numpy as np
import pytest
import sample_models
from _torch_helpers import to_onnx

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision", reason="torchvision is not importable")

pytestmark = [pytest.mark.torch]

# (zoo name, the box-regression layer to change for the wrong-conversion case)
DETECTORS = [("det:ssdlite320_mobilenet_v3_large", "regression_head.module_list.0.1"),
             ("det:retinanet_resnet50_fpn", "regression_head.bbox_reg")]


def _zoo() -> object:
    return sample_models.vision_zoo()


@pytest.mark.slow
@pytest.mark.parametrize(("name", "box_layer"), DETECTORS, ids=[d[0] for d in DETECTORS])
def test_detector_verdict_both_ways(name: str, box_layer: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from convert.frontends.pytorch import load_module
    from convert.ir import Options
    from convert.parity import run_parity
    from convert.parity.runtimes.torch import module_runtime

    model, inputs = _zoo().build(name)  # type: ignore[attr-defined]
    path = to_onnx(load_module(model, inputs(1), Options()), tmp_path / "m.onnx")

    def check(feeds: dict[str, np.ndarray] | None):  # type: ignore[no-untyped-def]
        runtime = module_runtime(model, inputs(1), Options())
        return run_parity("pytorch", [], "onnx", [path], source_runtime=runtime, inputs=feeds, locate=False)

    report = check(None)  # the check's own inputs
    assert report.verdict == "PASS", report.table()
    assert any("drawn uniform in [0, 1): images in [0, 1], as torchvision's detectors take them" in m
               for m in report.method), report.method
    boxes = report.outputs[0]
    assert boxes.shape[0] >= 10 and boxes.ref_std > 0.05 * boxes.ref_scale, report.table()  # real detections
    print(f"VERDICT {name}: " + ", ".join(f"{o.name} {o.rel_to_scale:.1e}{' (as a set)' if o.as_set else ''}"
                                          for o in report.outputs))

    x = {"x": inputs(4)[0].numpy() * 2}  # saturated: every score 1.0, ties decide the kept rows
    saturated = check(x)
    assert saturated.verdict == "NOT VERIFIED", saturated.table()
    assert any(o.tied for o in saturated.outputs), saturated.table()

    head = dict(model.model.head.named_modules())[box_layer]
    with torch.no_grad():
        head.weight.mul_(1.5)  # the reference now computes other boxes: the conversion is wrong for it
    wrong = check(None)
    assert wrong.verdict == "FAIL", wrong.table()
    assert wrong.outputs[0].verdict == "FAIL" and wrong.outputs[0].rel_to_scale > 1e-3, wrong.table()
