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


# An axis outside the input's rank (#48): Slice and Concat raised IndexError (exit 3), Concat's -5 on
# a 4-D input wrapped round to axis 3 and converted; Reshape's axis the same. Real Caffe refuses each
# ('axis out of range'); so does convert, in one line.
AXIS_CASES = {
    "slice-axis-4": ("Slice", ["data"], ["a", "b"], {"slice_param": {"axis": 4}},
                     "layer 'l' (Slice) at axis.prototxt:15: axis 4 is outside the 4-D input's axes (-4..3)"),
    "concat-axis-minus-5": ("Concat", ["data", "data"], ["c"], {"concat_param": {"axis": -5}},
                            "layer 'l' (Concat) at axis.prototxt:15: axis -5 is outside the 4-D input's axes"),
    "concat-dim-9": ("Concat", ["data", "data"], ["c"], {"concat_param": {"concat_dim": 9}},
                     "axis 9 is outside the 4-D input's axes"),
    "reshape-axis-7": ("Reshape", ["data"], ["r"], {"reshape_param": {"shape": {"dim": [0, -1]}, "axis": 7}},
                       "reshape_param.axis 7 is outside the 4-D input (-5..4)"),
    "reshape-axis-minus-7": ("Reshape", ["data"], ["r"], {"reshape_param": {"shape": {"dim": [-1]}, "axis": -7}},
                             "reshape_param.axis -7 is outside the 4-D input"),
}


@pytest.mark.parametrize("case", list(AXIS_CASES))
def test_axis_outside_the_rank_is_refused_in_one_line_as_real_caffe_refuses_it(tmp_path: Path, case: str) -> None:
    import sys

    from click.testing import CliRunner

    from convert.cli import cli
    from convert.parity.runtimes.caffe_runtime import CaffeFailedError, RealCaffeRuntime, find_caffe

    sys.path.insert(0, str(SEED.parents[2].parent / "models" / "caffe"))
    from build_nets import NetBuilder

    kind, bottoms, tops, params, words = AXIS_CASES[case]
    b = NetBuilder("axis", 0)
    b.input("data", (1, 4, 6, 6))
    b.layer(kind, "l", bottoms, tops, **params)
    proto, model = b.save(tmp_path)
    caffe_dir = find_caffe()
    if caffe_dir is None:
        pytest.skip("real Caffe is not built here: run scripts/build_caffe")
    with pytest.raises(CaffeFailedError, match="out of range"):  # the reference refuses the net
        RealCaffeRuntime(proto, model, caffe_dir)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["caffe:onnx", str(proto), str(model), "-o", f"{out}/", "--no-check", "-q"])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, result.stderr
    assert len(lines) == 1 and words in lines[0], lines
    assert not out.exists() or not any(out.iterdir())
