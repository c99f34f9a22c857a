"""Malformed ``.tflite`` files end as one ``ModelFormatError`` naming the operator or tensor (exit 2).

Each case damages the fuzz seed (``tests/fuzz/seeds/tflite/m.tflite``: CONV_2D -> MAX_POOL_2D ->
MEAN -> FULLY_CONNECTED) in one place, as a failure class of #29's campaign did; before the reader
checked operators against their signatures each ended as an internal error (exit 3) at the site
named in the case's comment. Reading needs no TensorFlow.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from convert.frontends.tflite import model as tfl
from convert.frontends.tflite.flatbuf import Table, root
from convert.ir import ModelFormatError, Options

SEED = Path(__file__).resolve().parents[2] / "fuzz" / "seeds" / "tflite" / "m.tflite"
CONV, POOL, MEAN, FC = range(4)  # the seed's operators
FC_WEIGHT, MEAN_AXES = 1, 3  # tensors: the FC's [5, 4] float weight, MEAN's [2] int32 axes


def _op(data: bytearray, index: int) -> Table:
    sg = root(memoryview(data), "m.tflite", "Model").tables(tfl._MODEL_SUBGRAPHS, "SubGraph")[0]
    return sg.tables(tfl._SG_OPERATORS, "Operator")[index]


def _inputs(index: int, *tensors: int) -> Callable[[bytearray], None]:
    """Rewrite operator ``index``'s inputs to ``tensors`` (no more than it has)."""
    def edit(data: bytearray) -> None:
        pos, n = _op(data, index).vector_span(tfl._OP_INPUTS, 4)
        assert len(tensors) <= n
        struct.pack_into("<I", data, pos - 4, len(tensors))
        struct.pack_into(f"<{len(tensors)}i", data, pos, *tensors)
    return edit


def _no_outputs(index: int) -> Callable[[bytearray], None]:
    def edit(data: bytearray) -> None:
        pos, _ = _op(data, index).vector_span(tfl._OP_OUTPUTS, 4)
        struct.pack_into("<I", data, pos - 4, 0)
    return edit


def _option(index: int, field: int, value: int) -> Callable[[bytearray], None]:
    """Set an int32 field of operator ``index``'s options table."""
    def edit(data: bytearray) -> None:
        options = _op(data, index).table(tfl._OP_OPTIONS, "BuiltinOptions")
        assert options is not None and options.has(field)
        struct.pack_into("<i", data, options._field(field), value)
    return edit


def _builtin(code: int, value: int) -> Callable[[bytearray], None]:
    """Make operator code ``code`` another builtin (every operator using it changes)."""
    def edit(data: bytearray) -> None:
        table = root(memoryview(data), "m.tflite", "Model").tables(tfl._MODEL_CODES, "OperatorCode")[code]
        struct.pack_into("<b", data, table._field(tfl._CODE_DEPRECATED), value)
        struct.pack_into("<i", data, table._field(tfl._CODE_BUILTIN), value)
    return edit


def _output_named(name: str) -> Callable[[bytearray], None]:
    """Rename the signature's output (to a name no longer than 'output_0')."""
    def edit(data: bytearray) -> None:
        sig = root(memoryview(data), "m.tflite", "Model").tables(tfl._MODEL_SIGNATURES, "SignatureDef")[0]
        pos, n = sig.tables(tfl._SIG_OUTPUTS, "TensorMap")[0].vector_span(tfl._MAP_NAME, 1)
        assert len(name) <= n
        struct.pack_into("<I", data, pos - 4, len(name))
        data[pos:pos + len(name) + 1] = name.encode() + b"\0"
    return edit


# (id, edit, what the message says); the comment names where the class failed before
CASES = [
    ("output-computed-by-no-operator", _no_outputs(FC), "is computed by no operator"),  # lower.py:key KeyError
    ("binary-op-with-one-input", _builtin(POOL, 0), "ADD .* has 1 inputs; it takes 2"),  # _conv_channel_const
    ("conv-without-inputs", _inputs(CONV), "CONV_2D .* has 0 inputs; it takes 2 to 3"),  # conv_2d IndexError
    ("conv-filter-of-rank-1", _inputs(CONV, 0, MEAN_AXES, 2), "input 1 .* must be of rank 4"),  # conv_2d unpacking
    ("conv-stride-0", _option(CONV, 2, 0), "option stride_h is 0; it must be at least 1"),  # conv_pads division
    ("pool-without-input", _inputs(POOL), "MAX_POOL_2D .* has 0 inputs; it takes 1"),  # tensorflow/ops/nn.py:_pool
    ("mean-without-inputs", _inputs(MEAN), "MEAN .* has 0 inputs"),  # tensorflow/ops/math.py:convert IndexError
    ("mean-axes-of-float", _inputs(MEAN, 5, FC_WEIGHT), "input 1 .* float32 \\[5, 4\\]; it must be an integer"),
    ("dense-without-inputs", _inputs(FC), "FULLY_CONNECTED .* has 0 inputs"),  # fully_connected IndexError
    ("dense-weight-of-rank-1", _inputs(FC, 7, MEAN_AXES), "input 1 .* must be of rank 2"),  # fully_connected unpacking
    ("output-named-as-the-input", _output_named("x"), "'x' names both an input and an output"),  # builder.output
]


@pytest.mark.parametrize(("edit", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_tflite_is_a_model_format_error(edit: Callable[[bytearray], None], message: str,
                                                 tmp_path: Path) -> None:
    from convert.frontends.tflite import FRONTEND

    data = bytearray(SEED.read_bytes())
    edit(data)
    path = tmp_path / "m.tflite"
    path.write_bytes(bytes(data))
    with pytest.raises(ModelFormatError, match=message) as info:
        FRONTEND.load([path], Options())
    assert str(info.value).startswith("m.tflite") and "\n" not in str(info.value)


def test_the_seed_itself_converts() -> None:
    """The damage, not the seed, is refused."""
    from convert.frontends.tflite import FRONTEND

    assert FRONTEND.load([SEED], Options()) is not None


def test_every_converted_op_has_a_signature() -> None:
    """An op without a signature would reach its converter unchecked."""
    from convert.frontends.tflite.ops import OPS, SIGNATURES

    assert {row.op for row in OPS.support()} <= set(SIGNATURES)
