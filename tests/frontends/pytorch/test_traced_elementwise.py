"""The fast capture's elementwise results on sizes that depend on data (traced.py's _elementwise_val),
checked against torch's own fake kernels, which it stands in for: wherever it answers, the shape,
strides and dtype are torch's, symbol for symbol; where the layout is not one it knows, it leaves the
op to torch."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from convert.frontends.pytorch.tracevals import elementwise_val as _elementwise_val  # noqa: E402

pytestmark = pytest.mark.torch


class _Recorded:
    """What the live trace records of an op's result that _elementwise_val reads: its dtype (the
    tracer's TensorType of the eager result)."""

    def __init__(self, dtype: torch.dtype) -> None:
        self._type = torch._C.TensorType.create_from_tensor(torch.empty(0, dtype=dtype))

    def type(self) -> object:
        return self._type


def _exprs(values: object) -> list[object]:
    return [v.node.expr if isinstance(v, torch.SymInt) else v for v in values]


@pytest.fixture()
def operands() -> dict[str, object]:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
    with mode:
        u = mode.shape_env.create_unbacked_symint()
        v = mode.shape_env.create_unbacked_symint()
        torch._check(u >= 0)
        torch._check(v >= 0)
        boxes = torch.empty(u, 4)
        grid = torch.empty(2, u, 3)
        made = {
            "boxes": boxes, "boxes2": torch.empty(u, 4), "column": boxes[:, 0], "column2": boxes[:, 2],
            "column_1": boxes[:, 0:1], "column_unsqueezed": boxes[:, 0][:, None], "pairs": boxes[:, 0::2],
            "pairs2": boxes[:, 1::2], "transposed": boxes.t(), "grid": grid, "grid2": torch.empty(2, u, 3),
            "grid_permuted": torch.empty(2, 3, u).permute(0, 2, 1), "row": torch.empty(4),
            "zero_d": torch.empty(()), "mask": torch.empty(u, 4, dtype=torch.bool), "ints": torch.empty(u, 4,
                                                                                                    dtype=torch.int64),
            "other_count": torch.empty(v, 4), "scores": torch.empty(u),
        }
    return {"mode": mode, **made}


_PAIRS = [
    ("boxes", "boxes2"), ("boxes", 2.0), ("boxes", "zero_d"), ("column", "column2"), ("column", 0.5),
    ("column_1", 3), ("column_unsqueezed", 3.0), ("column_unsqueezed", "column_1"), ("pairs", "pairs2"),
    ("pairs", 1.0), ("transposed", 1.0), ("grid", "grid2"), ("grid_permuted", 2.0), ("grid", "grid_permuted"),
    ("boxes", "row"), ("ints", 2), ("ints", "boxes"), ("column", "scores"),
]  # not two counts (u and v): torch's broadcast of them would assume them equal, for the rest of the test


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "maximum", "lt", "eq"])
def test_binary_results_are_torch_s_where_answered(operands: dict[str, object], name: str) -> None:
    answered = set()
    for a, b in _PAIRS:
        x = operands[a]
        y = operands[b] if isinstance(b, str) else b
        op = getattr(torch.ops.aten, name)
        if name == "maximum" and not isinstance(y, torch.Tensor):
            continue
        with operands["mode"]:  # type: ignore[attr-defined]
            try:
                ref = op(x, y)
            except Exception:  # a broadcast torch refuses is not an elementwise result at all
                continue
            ours = _elementwise_val(name, [x, y], [_Recorded(ref.dtype)])
        if ours is None:
            continue
        answered.add((a, b))
        assert isinstance(ours, torch.Tensor) and ours.dtype == ref.dtype, (name, a, b)
        assert _exprs(ours.shape) == _exprs(ref.shape), (name, a, b, ours.shape, ref.shape)
        assert _exprs(ours.stride()) == _exprs(ref.stride()), (name, a, b, ours.stride(), ref.stride())
    # the layouts of post-processing are answered here; others (a transposed or permuted operand, a
    # broadcast against another shape) are left to torch
    expected = {("boxes", "boxes2"), ("column", "column2"), ("column_1", 3), ("column_unsqueezed", 3.0),
                ("column_unsqueezed", "column_1"), ("pairs", "pairs2"), ("grid", "grid2")}
    assert {p for p in expected if name != "maximum" or isinstance(p[1], str)} <= answered
    assert not answered & {("transposed", 1.0), ("grid_permuted", 2.0), ("grid", "grid_permuted"),
                           ("boxes", "row")}


@pytest.mark.parametrize("name", ["where", "clamp", "exp", "masked_fill"])
def test_other_elementwise_results_are_torch_s(operands: dict[str, object], name: str) -> None:
    mask, boxes, column = operands["mask"], operands["boxes"], operands["column"]
    cases = {
        "where": [(mask, boxes, 0.0), (mask, boxes, operands["boxes2"])],
        "clamp": [(boxes, 0.0, 1.0), (column, None, 2.0)],
        "exp": [(boxes,), (column,), (operands["pairs"],)],
        "masked_fill": [(boxes, mask, 0.0)],
    }[name]
    for args in cases:
        with operands["mode"]:  # type: ignore[attr-defined]
            ref = getattr(torch.ops.aten, name)(*args)
            ours = _elementwise_val(name, list(args), [_Recorded(ref.dtype)])
        assert ours is not None, (name, args)
        assert ours.dtype == ref.dtype and _exprs(ours.shape) == _exprs(ref.shape)
        assert _exprs(ours.stride()) == _exprs(ref.stride())


def test_what_is_not_an_elementwise_result_is_left_to_torch(operands: dict[str, object]) -> None:
    boxes, mask = operands["boxes"], operands["mask"]
    with operands["mode"]:  # type: ignore[attr-defined]
        assert _elementwise_val("where", [mask], [_Recorded(torch.int64)]) is None  # where(condition): indices
        assert _elementwise_val("add_", [boxes, 1.0], [_Recorded(torch.float32)]) is None  # in place
        assert _elementwise_val("matmul", [boxes, boxes], [_Recorded(torch.float32)]) is None
        assert _elementwise_val("add", [boxes, 1.0], None) is None  # a file's op: no recorded dtype
        for a, b in itertools.product([boxes], [operands["row"], operands["other_count"]]):
            assert _elementwise_val("add", [a, b], [_Recorded(torch.float32)]) is None
