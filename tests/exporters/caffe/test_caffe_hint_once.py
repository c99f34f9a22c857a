"""A model whose input has free height and width cannot become Caffe (fixed blob shapes): the
refusal names every layer it stops, and gives the fix (``--input-shape``) once, not once per
layer (#33: a Paddle model's line repeated it seven times in 1,700 characters)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from convert import api
from convert.ir import UnsupportedOpsError


def _free_size_model(path: Path, convs: int = 7) -> Path:
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(convs):
        inits.append(numpy_helper.from_array(rng.standard_normal((3, 3, 3, 3)).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        x = f"r{i}"
    nodes.append(helper.make_node("MaxPool", [x], ["y"], kernel_shape=[2, 2], strides=[2, 2]))
    graph = helper.make_graph(nodes, "free", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def test_input_shape_hint_is_given_once(tmp_path: Path) -> None:
    src = _free_size_model(tmp_path / "free.onnx")
    with pytest.raises(UnsupportedOpsError) as caught:
        api.convert([src], to="caffe", out=tmp_path / "out", check=False)
    message = str(caught.value)
    assert message.count("input_shapes=") == 1, message  # the API's words (#52 item 13), the CLI's --input-shape
    assert message.count("{'x': (1, 3, ?, ?)}") == 1 and "Conv x7" in message, message
    assert len(message) < 600, (len(message), message)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_the_hint_works(tmp_path: Path) -> None:
    """The command the hint suggests, with the sizes filled in, converts."""
    src = _free_size_model(tmp_path / "free.onnx")
    result = api.convert([src], to="caffe", out=tmp_path / "out", check=False, input_shapes={"x": (1, 3, 16, 12)})
    assert all(p.exists() for p in result.outputs)
