"""Malformed Caffe input (#29): one line naming the layer and its line, exit 2, nothing written.

Each case edits one line of the fuzz seed's prototxt (``tests/fuzz/seeds/caffe``: conv, BN,
pooling, 1x1 conv, eltwise, concat, fc); the caffemodel is the seed's own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("google.protobuf")

SEED = Path(__file__).resolve().parents[2] / "fuzz" / "seeds" / "caffe"


def _edit(text: str, line: int, new: str, last: int | None = None) -> str:
    """Replace lines ``line``..``last`` (1-based, inclusive; default just ``line``) by ``new``."""
    lines = text.split("\n")
    lines[line - 1:last or line] = [new]
    return "\n".join(lines)


CASES = {
    # (1-based line of net.prototxt, its new text, words of the message[, last line replaced])
    "conv-stride-0": (25, "    stride: 0",
                      "layer 'conv1' (Convolution) at net.prototxt:15: stride [0, 0] must be at least 1"),
    "conv-dilation-0": (25, "    dilation: 0", "dilation [0, 0] must be at least 1"),
    "conv-group-0": (25, "    group: 0", "group [0] must be at least 1"),
    "conv-dilation-past-input": (25, "    dilation: 9", "the window leaves no output for its 8x8 input"),
    "pool-stride-0": (60, "    stride: 0", "layer 'pool1' (Pooling)"),
    "pool-kernel-past-input": (59, "    kernel_size: 99", "the window leaves no output"),
    # found by the #29 campaign: a Concat without bottoms (IndexError), a net that is only its input
    "concat-without-bottoms": (86, "", "layer 'cat' (Concat) at net.prototxt:83: has no bottom blob", 88),
    "only-the-input-layer": (15, "", "net.prototxt: the net has no outputs", 104),
}


@pytest.mark.parametrize("case", list(CASES))
def test_malformed_layer_is_one_line_exit_2(tmp_path: Path, case: str) -> None:
    from click.testing import CliRunner

    from convert.cli import cli

    line, new, words, *last = CASES[case]
    proto = tmp_path / "net.prototxt"
    proto.write_text(_edit((SEED / "net.prototxt").read_text(), line, new, *last))
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["caffe:onnx", str(proto), str(SEED / "net.caffemodel"), "-o", f"{out}/",
                                      "--no-check", "-q"])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, result.stderr
    assert len(lines) == 1 and words in lines[0], lines
    assert not out.exists() or not any(out.iterdir())


def test_v1_flatten_layer_takes_the_defaults(tmp_path: Path) -> None:
    """A V1 ``layers { type: FLATTEN }`` has no flatten_param: it was an AttributeError (exit 3)."""
    import numpy as np
    import onnx
    from google.protobuf import text_format

    from convert import convert
    from convert._proto import caffe_pb2

    text = ('name: "v1"\ninput: "data"\ninput_dim: 1\ninput_dim: 3\ninput_dim: 4\ninput_dim: 4\n'
            'layers {\n  name: "flat"\n  type: FLATTEN\n  bottom: "data"\n  top: "flat"\n}\n')
    (tmp_path / "v1.prototxt").write_text(text)
    net = caffe_pb2.NetParameter()
    text_format.Merge(text, net)
    (tmp_path / "v1.caffemodel").write_bytes(net.SerializeToString())
    convert([tmp_path / "v1.prototxt", tmp_path / "v1.caffemodel"], to="onnx", out=tmp_path / "v1.onnx", check=False)
    from onnx.reference import ReferenceEvaluator

    x = np.arange(48, dtype=np.float32).reshape(1, 3, 4, 4)
    (y,) = ReferenceEvaluator(onnx.load(str(tmp_path / "v1.onnx"))).run(None, {"data": x})
    np.testing.assert_array_equal(y, x.reshape(1, 48))
