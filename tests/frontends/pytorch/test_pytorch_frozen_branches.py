"""Python decisions on tensor values (an ``if``, a ``while``, a number) are refused, or frozen on request.

No capture torch has records ``if y.mean() > 0:`` as a graph operation: ``torch.export.draft_export``
and ``torch.jit.trace`` take the example's outcome, and the file computes the example's path for
every input. The oracle is PyTorch eager on an input that decides otherwise: the frozen file is
wrong there (measured below), so the default refuses, naming each decision's ``file:line``; with
``freeze_data_branches`` (``--freeze-data-branches``) the file is written and its verdict says for
which inputs it holds ("PASS on the example's branch"), never a plain PASS.

The torchvision R-CNNs had one such decision, ``if box_sum > 0`` in ``BoxCoder.decode`` (the note
"the file holds for inputs that take the same branch", and a check on the example only): they are
captured now with none, and their file matches eager on inputs other than the example, an image
whose RPN keeps no proposal included.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _torch_helpers import ROOT, rel_to_scale, run_onnx, to_onnx

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from convert.frontends.pytorch import load_module  # noqa: E402
from convert.ir import EXAMPLE_FEEDS, FROZEN_DECISIONS, ConversionError, Options  # noqa: E402

pytestmark = [pytest.mark.torch]

# How far the frozen file is from eager on an input that decides otherwise: far beyond any rounding.
WRONG = 0.1


class IfOnMean(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2.0
        if y.mean() > 0:
            return y + 1.0
        return y * -3.0


class WhileOnMax(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 1.0
        while y.abs().max() > 1:
            y = y / 2.0
        return y


class IntOfArgmax(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = int(x.argmax())
        return x * float(k + 1)


def _line(cls: type) -> str:
    """'file.py:N' of the line of ``cls.forward`` that decides on data (the one with an ``if``,
    ``while`` or ``int(``)."""
    lines, start = inspect.getsourcelines(cls)
    offset = next(i for i, text in enumerate(lines) if text.strip().startswith(("if ", "while ", "k = int(")))
    return f"{os.path.basename(__file__)}:{start + offset}"


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# (module, the example, an input that decides otherwise, what the example decides)
CASES = {
    "if": (IfOnMean, torch.rand(2, 8, generator=_gen(0)) + 0.1, -torch.rand(2, 8, generator=_gen(1)) - 0.1,
           "`if y.mean() > 0:` (the example: True)"),
    "while": (WhileOnMax, torch.rand(2, 8, generator=_gen(2)) * 3, torch.rand(2, 8, generator=_gen(3)) * 300,
              "`while y.abs().max() > 1:` (the example: True, decided 3 times)"),
    "int": (IntOfArgmax, torch.arange(16.0).reshape(2, 8), torch.arange(16.0).flip(0).reshape(2, 8),
            "`k = int(x.argmax())` (the example: 15)"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_decision_on_data_is_refused_naming_its_line(case: str) -> None:
    """By default the module is refused, one message naming the decision's file:line, its source
    line and the example's outcome, with the two ways out (torch.cond / while_loop, or the option)."""
    cls, example, _, decided = CASES[case]
    options = Options()
    with pytest.raises(ConversionError) as info:
        load_module(cls(), (example,), options)
    text = str(info.value)
    assert f"{_line(cls)} {decided}" in text, text
    assert "torch.cond" in text and "while_loop" in text and "--freeze-data-branches" in text, text
    assert "Eq(u0" not in text and "\n" not in text, text  # torch's sympy terms are not what a user acts on
    assert FROZEN_DECISIONS not in options.extra


@pytest.mark.parametrize("case", list(CASES))
def test_frozen_on_request_is_wrong_elsewhere_and_says_for_which_inputs_it_holds(case: str, tmp_path: Path) -> None:
    """With ``freeze_data_branches`` the file is written; it matches eager on the example and is
    wrong on an input that decides otherwise (the oracle: eager). Its check runs on the example and
    says "PASS on the example's branch", naming the decision; given the other input it is NOT
    VERIFIED (the file was not built for it), neither PASS nor FAIL."""
    import convert

    cls, example, other, decided = CASES[case]
    result = convert.convert(cls(), (example,), to="onnx", out=tmp_path / "m.onnx", freeze_data_branches=True)
    report = result.report
    assert report is not None and report.passed and report.verdict == "PASS on the example's branch", report.table()
    table = report.table()
    assert "PASS on the example's branch: 1/1 outputs" in table, table
    assert "NOT VERIFIED beyond the example's branch" in table and f"{_line(cls)} {decided}" in table, table
    assert any("--freeze-data-branches" in n and _line(cls) in n for n in result.notes), result.notes
    assert any("parity check ran on the example inputs" in n for n in result.notes), result.notes

    (path,) = result.outputs
    with torch.no_grad():
        ref_example, ref_other = cls()(example).numpy(), cls()(other).numpy()
    (ours,) = run_onnx(path, {"x": example.numpy()})
    assert rel_to_scale(ours, ref_example) <= 1e-6
    (ours,) = run_onnx(path, {"x": other.numpy()})
    wrong = float(np.abs(ours - ref_other).max() / np.abs(ref_other).max())
    print(f"FROZEN {case}: {wrong:.3g} of scale off on the input that decides otherwise")
    assert wrong > WRONG

    given = convert.convert(cls(), (example,), to="onnx", out=tmp_path / "g.onnx", freeze_data_branches=True,
                            inputs={"x": other.numpy()})
    assert given.report is not None and given.report.verdict == "NOT VERIFIED" and not given.report.passed
    assert "these inputs are not the example the file was built on" in given.report.table()
    assert given.report.location is None  # --locate runs on FAIL, and a frozen decision is no layer gone wrong


def _pickled_module(tmp_path: Path) -> Path:
    """A module with an ``if`` on data in a file of its own, importable by a subprocess, saved whole."""
    (tmp_path / "branchy_model.py").write_text(
        "import torch\n\n\n"
        "class Branchy(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        y = x * 2.0\n"
        "        if y.mean() > 0:\n"
        "            return y + 1.0\n"
        "        return y * -3.0\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import branchy_model  # type: ignore[import-not-found]

        path = tmp_path / "branchy.pth"
        torch.save(branchy_model.Branchy(), path)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("branchy_model", None)
    return path


def test_cli_refuses_by_default_and_freezes_with_the_option(tmp_path: Path) -> None:
    """The CLI: exit 2 and one line naming branchy_model.py:7, nothing written; with
    --freeze-data-branches exit 0 and 'PASS on the example's branch'. ``--help`` lists the option."""
    path = _pickled_module(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    out = tmp_path / "m.onnx"
    base = [sys.executable, "-m", "convert", "pytorch:onnx", str(path), "-o", str(out), "--trust-pickle",
            "--input-shape", "x=2,8"]
    done = subprocess.run(base, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "branchy_model.py:7 `if y.mean() > 0:`" in lines[0], done.stderr
    assert "--freeze-data-branches" in lines[0] and not out.exists()

    done = subprocess.run([*base, "--freeze-data-branches"], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    assert "PASS on the example's branch" in said and "branchy_model.py:7" in said, said
    assert out.is_file()

    done = subprocess.run([sys.executable, "-m", "convert", "help", "pytorch"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env=env)
    assert done.returncode == 0 and "--freeze-data-branches" in done.stdout, done.stdout


# ---- torchvision's R-CNNs: no decision taken from the example

def _tiny_mask_rcnn() -> nn.Module:
    """torchvision's Mask R-CNN on a two-conv backbone (64x64 images, at most 12 detections), its
    RPN's objectness made to grow with the image (bias-free convolutions, positive weights into the
    objectness, bias -0.5, score threshold 0.5): a black image keeps no proposal, a random one ~15."""
    import sample_models
    from torchvision.models.detection import MaskRCNN
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.ops import MultiScaleRoIAlign

    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), nn.Conv2d(8, 16, 3, 2, 1), nn.ReLU())
    backbone.out_channels = 16
    model = MaskRCNN(backbone, num_classes=3, min_size=64, max_size=64, image_mean=[0.0] * 3, image_std=[1.0] * 3,
                     rpn_anchor_generator=AnchorGenerator(((16, 32),), ((0.5, 1.0, 2.0),)),
                     box_roi_pool=MultiScaleRoIAlign(["0"], 7, 2), mask_roi_pool=MultiScaleRoIAlign(["0"], 14, 2),
                     rpn_pre_nms_top_n_test=60, rpn_post_nms_top_n_test=30, rpn_score_thresh=0.5,
                     box_score_thresh=0.0, box_detections_per_img=12, representation_size=32)
    with torch.no_grad():
        for module in [*backbone.modules(), *model.rpn.head.modules()]:
            if isinstance(module, nn.Conv2d):
                module.weight.normal_(0.0, 0.3)
                assert module.bias is not None
                module.bias.zero_()
        model.rpn.head.cls_logits.weight.abs_()
        model.rpn.head.cls_logits.bias.fill_(-0.5)
    return sample_models.vision_zoo().Detections(model).eval()  # type: ignore[attr-defined, no-any-return]


def test_rcnn_capture_freezes_no_decision_and_holds_for_other_images(tmp_path: Path) -> None:
    """The R-CNNs' capture takes no decision from the example (torchvision's ``if box_sum > 0`` in
    ``BoxCoder.decode`` was one: noted, and the check ran on the example only): no note, no example
    kept for the check, and the file matches eager as sets on the example, on a second image with
    another detection set, and on a black image whose RPN keeps no proposal (empty outputs)."""
    pytest.importorskip("torchvision")
    from test_vision_zoo import _pair

    model = _tiny_mask_rcnn()
    gen = _gen(1)
    example, second = torch.rand(1, 3, 64, 64, generator=gen), torch.rand(1, 3, 64, 64, generator=gen)
    options = Options()
    ir_model = load_module(model, (example,), options)
    notes = " ".join(options.diagnostics.notes)
    assert "_utils.py" not in notes and "example" not in notes, notes
    assert EXAMPLE_FEEDS not in options.extra and FROZEN_DECISIONS not in options.extra
    path = to_onnx(ir_model, tmp_path / "m.onnx")
    feed = ir_model.graph.inputs[0].name
    counts = []
    for x in (example, second, example * 0):
        with torch.no_grad():
            refs = [t.numpy() for t in model(x)]
        ours = run_onnx(path, {feed: x.numpy()})
        assert [o.shape for o in ours] == [r.shape for r in refs]
        counts.append(len(refs[0]))
        if not len(refs[0]):
            continue
        ours = [o[_pair(ours[0], ours[2], refs[0], refs[2])] for o in ours]
        np.testing.assert_array_equal(ours[2], refs[2])
        for k in (0, 1, 3):
            assert rel_to_scale(ours[k], refs[k]) <= 1e-4, (k, counts)
    assert counts[0] > 0 and counts[1] > 0 and counts[2] == 0, counts
