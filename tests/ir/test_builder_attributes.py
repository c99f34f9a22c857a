"""GraphBuilder's attributes: typed exactly as onnx_ir's own inference types them (convert_attribute)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnx_ir import convenience

from convert.ir import GraphBuilder

VALUES = [3, 2.5, "same_upper", True, [1, 2, 3], (0, 0, 1, 1), [0.5, 2.0], ("a", "b"), [True, False],
          [np.float64(4), np.float64(5)], ir.tensor(np.arange(4, dtype=np.float32)), np.float64(1.5), []]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: f"{type(v).__name__}:{v!r}"[:40])
def test_attributes_are_typed_as_onnx_ir_types_them(value):
    b = GraphBuilder("attrs")
    x = b.input("x", ir.DataType.FLOAT, [2])
    (y,) = b.op_multi("Custom", [x], {"a": value}, domain="test")
    ours = y.producer().attributes["a"]
    theirs = convenience.convert_attribute("a", value)
    assert ours.type == theirs.type
    if ours.type == ir.AttributeType.TENSOR:
        np.testing.assert_array_equal(ours.value.numpy(), theirs.value.numpy())
    else:
        assert ours.value == theirs.value
