"""fold_numpy: each op numpy folds gives exactly what onnx's reference evaluator gives (a reference we
did not write), on the cases ONNX's semantics make tricky; and it computes nothing past its bound."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from convert.ir.passes.fold_constants import run_reference
from convert.ir.passes.fold_numpy import FAST_FOLD, fold_fast

RNG = np.random.default_rng(0)
BIG = np.iinfo(np.int64).max
F = RNG.standard_normal((4, 5, 6)).astype(np.float32)
I = RNG.integers(-50, 50, (3, 4)).astype(np.int64)


def _i(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def _node(op: str, n_inputs: int, **attrs: object) -> ir.Node:
    inputs = [ir.Value(name=f"i{k}") for k in range(n_inputs)]
    return ir.Node("", op, inputs, [ir.convenience.convert_attribute(k, v) for k, v in attrs.items()])


CASES = [
    ("Transpose", [F], {"perm": [2, 0, 1]}),
    ("Transpose", [F], {}),
    ("Slice", [F, _i(1), _i(3)], {}),
    ("Slice", [F, _i(-1, 0), _i(-BIG, BIG), _i(2, -2), _i(-1, 2)], {}),
    ("Slice", [F, _i(BIG), _i(-BIG), _i(0), _i(-2)], {}),
    ("Slice", [F, _i(-3, 10), _i(-1, 2), _i(1, 0), _i(1, -1)], {}),
    ("Slice", [F, _i(2), _i(2), _i(1)], {}),
    ("Slice", [I, _i(0, 0), _i(-1, 100)], {}),
    ("Add", [F, F[:1, :, :1]], {}),
    ("Sub", [I, I[:1]], {}),
    ("Mul", [I, _i(3)], {}),
    ("Mul", [_i(2**62), _i(4)], {}),  # wraps around, in both
    ("Div", [F, F[0] + 3.0], {}),
    ("Unsqueeze", [I, _i(0)], {}),
    ("Unsqueeze", [I, _i(-1, 1)], {}),
    ("Unsqueeze", [np.array(5, dtype=np.int64), _i(0)], {}),
    ("Squeeze", [F[:1, :, :1], _i(0, -1)], {}),
    ("Squeeze", [F[:1, :, :1]], {}),
    ("Concat", [_i(1, 2), _i(3), _i(4, 5)], {"axis": 0}),
    ("Concat", [F, F], {"axis": -1}),
    ("Expand", [F[0, :, :1], _i(2, 1, 6)], {}),
    ("Expand", [I, _i(1, 1)], {}),
    ("Gather", [F, _i(0, -1, 2)], {"axis": 1}),
    ("Gather", [I, np.array(-1, dtype=np.int64)], {"axis": 0}),
    ("Gather", [I, np.array([[0, 1], [2, -3]], dtype=np.int64)], {"axis": -1}),
    ("Reshape", [F, _i(0, -1)], {}),
    ("Reshape", [F, _i(-1)], {}),
    ("Reshape", [np.zeros((0, 3), np.float32), _i(3, 0)], {"allowzero": 1}),
    ("Cast", [F * 10], {"to": int(ir.DataType.INT64)}),
    ("Cast", [I], {"to": int(ir.DataType.FLOAT)}),
    ("Cast", [F], {"to": int(ir.DataType.BOOL)}),
    ("Cast", [F], {"to": int(ir.DataType.FLOAT16)}),
    ("Cast", [np.array([True, False])], {"to": int(ir.DataType.FLOAT)}),
    ("Identity", [I], {}),
    ("ReduceMax", [F], {"axes": [1, -1], "keepdims": 0}),
    ("ReduceMax", [I.astype(np.int32)], {}),  # every axis, kept as ones
    ("ReduceMin", [F], {"axes": [0]}),
    ("ReduceMin", [I], {"axes": [-1], "keepdims": 0}),
    ("Where", [F > 0, F, F[:1] * 2], {}),
    ("Where", [np.array([True, False]), np.float32(1.5), np.float32(-2.0)], {}),
    ("Where", [I[:, :1] > 0, _i(7), I], {}),
]


@pytest.mark.parametrize(("op", "arrays", "attrs"), CASES, ids=[f"{c[0]}{k}" for k, c in enumerate(CASES)])
def test_numpy_fold_equals_onnx_reference(op, arrays, attrs):
    node = _node(op, len(arrays), **attrs)
    ours = fold_fast(node, arrays, 1 << 20)
    assert ours is not None, f"{op} was left to the reference"
    theirs = run_reference(ir.serde.serialize_node(node), 1, arrays, 17)
    assert len(ours) == len(theirs) == 1
    assert ours[0].dtype == theirs[0].dtype and ours[0].shape == theirs[0].shape
    np.testing.assert_array_equal(ours[0], theirs[0])


def test_every_op_of_the_table_is_checked_here():
    assert {c[0] for c in CASES} == set(FAST_FOLD)


@pytest.mark.parametrize(("op", "arrays", "attrs"), [
    ("Div", [I, _i(7)], {}),  # integer Div truncates in ONNX
    ("Slice", [F, _i(0), _i(2), _i(0), _i(0)], {}),  # step 0: invalid
    ("Cast", [np.array([np.nan], np.float32)], {"to": int(ir.DataType.INT32)}),  # undefined
    ("Cast", [np.array([1e10], np.float32)], {"to": int(ir.DataType.INT32)}),  # out of range
    ("Cast", [F], {"to": int(ir.DataType.BFLOAT16)}),  # not a numpy type
    ("Add", [F, I], {}),  # mixed types
])
def test_what_numpy_does_not_decide_goes_to_the_reference(op, arrays, attrs):
    assert fold_fast(_node(op, len(arrays), **attrs), arrays, 1 << 20) is None


@pytest.mark.parametrize(("op", "arrays"), [
    ("Expand", [np.ones(1, np.float32), _i(1 << 40)]),  # 4 TiB from 12 bytes
    ("Add", [np.ones((8192, 1), np.float32), np.ones((1, 8192), np.float32)]),  # 256 MiB from 64 KiB
    ("Gather", [np.ones((1, 4096), np.float32), np.zeros(4096, np.int64)]),  # 64 MiB
])
def test_an_output_past_the_bound_is_not_computed(op, arrays):
    assert fold_fast(_node(op, len(arrays)), arrays, 64 * 1024) is None
