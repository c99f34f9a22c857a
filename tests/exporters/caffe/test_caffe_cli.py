"""The Caffe routes through the command line: convert, check, exit codes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "models" / "caffe"))

import build_nets  # noqa: E402


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    from convert.cli import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    out = capsys.readouterr()
    return int(info.value.code or 0), out.out + out.err


@pytest.mark.opencv
def test_caffe_both_ways_and_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("cv2")
    proto, weights = build_nets.build("resnet", tmp_path)
    onnx_path = tmp_path / "resnet.onnx"
    code, text = _run(["caffe:onnx", str(proto), str(weights), "-o", str(onnx_path)], capsys)
    assert code == 0 and "OK caffe:onnx" in text and "PASS" in text, text
    code, text = _run(["onnx:caffe", str(onnx_path), "-o", str(tmp_path / "back")], capsys)
    assert code == 0 and "OK onnx:caffe" in text and "PASS" in text, text
    assert (tmp_path / "back.prototxt").is_file() and (tmp_path / "back.caffemodel").is_file()
    code, text = _run(["check", "caffe:onnx", str(proto), str(weights), "--against", str(onnx_path)], capsys)
    assert code == 0 and "PASS" in text, text


def test_bad_input_exits_2_nothing_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, weights = build_nets.build("lenet", tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    code, text = _run(["caffe:onnx", str(weights), str(weights), "-o", str(out / "x.onnx")], capsys)
    assert code == 2 and "not a text prototxt" in text
    code, text = _run(["caffe:caffe", *map(str, build_nets.build("ssd", tmp_path)), "-o", str(out / "s"),
                       "--caffe-flavor", "bvlc"], capsys)
    assert code == 2 and "Transpose" in text and "--caffe-flavor ssd" in text
    assert list(out.iterdir()) == []
