"""Command-line arguments read as the user meant them (#11).

`convert check ROUTE SRC --against a.prototxt a.caffemodel` and an `--input-shape` that names
no input of the model (it used to be applied to the only input silently by Darknet, Caffe and
PyTorch).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from convert.cli import cli

SEEDS = Path(__file__).resolve().parent / "fuzz" / "seeds"


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def _seed(name: str, tmp: Path) -> tuple[str, list[str]]:
    folder = tmp / name
    shutil.copytree(SEEDS / name, folder)
    meta = json.loads((folder / "case.json").read_text())
    return meta["route"], [str(folder / f) for f in meta["files"]]


@pytest.mark.opencv
@pytest.mark.parametrize("with_route", [True, False], ids=["route", "no-route"])
def test_check_takes_both_caffe_files_after_one_against(tmp_path: Path, with_route: bool) -> None:
    pytest.importorskip("cv2")
    pytest.importorskip("onnxruntime")
    _, (src,) = _seed("onnx", tmp_path)
    proto, weights = tmp_path / "net.prototxt", tmp_path / "net.caffemodel"
    code, _, err = _run("onnx:caffe", src, "-o", str(proto), "--no-check")
    assert code == 0, err
    route = ["onnx:caffe"] if with_route else []
    code, out, err = _run("check", *route, src, "--against", str(proto), str(weights))
    assert code == 0, err
    assert "OK check onnx:caffe" in out and "parity PASS" in out


@pytest.mark.parametrize("seed", ["onnx", "caffe", "darknet", "paddle_pdmodel", "paddle_json", "pytorch"])
def test_input_shape_for_an_input_the_model_lacks_is_a_usage_error(tmp_path: Path, seed: str) -> None:
    if seed == "pytorch":
        pytest.importorskip("torch")
    route, files = _seed(seed, tmp_path)
    code, _, err = _run(route, *files, "-o", str(tmp_path / "out") + "/", "--no-check",
                        "--input-shape", "nosuch=1,3,8,8")
    lines = [ln for ln in err.splitlines() if ln.startswith("convert: error:")]
    assert code == 2 and len(lines) == 1, err
    assert "'nosuch'" in lines[0] and ("'x'" in lines[0] or "'data'" in lines[0] or "input" in lines[0]), lines[0]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("seed", ["onnx", "caffe", "darknet", "pytorch"])
def test_unnamed_input_shape_is_the_only_inputs(tmp_path: Path, seed: str) -> None:
    if seed == "pytorch":
        pytest.importorskip("torch")
    route, files = _seed(seed, tmp_path)
    # the Caffe seed's InnerProduct fixes its size, and the ONNX seed's input is a fixed 1x3x8x8 (a shape
    # that contradicts it is refused: test_cli_round_three)
    shape = "1,3,16,16" if seed not in ("caffe", "onnx") else "1,3,8,8"
    code, _, err = _run(route, *files, "-o", str(tmp_path / "out") + "/", "--no-check", "--input-shape", shape)
    assert code == 0, err
