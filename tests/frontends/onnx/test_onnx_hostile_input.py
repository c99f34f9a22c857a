"""Hostile or corrupt ONNX input: one line, exit 2, no hang, nothing overwritten."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def _model(tensor: onnx.TensorProto) -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], [tensor])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _weight() -> onnx.TensorProto:
    return numpy_helper.from_array(np.ones((2, 2), np.float32), "w")


def _external(location: str, **extra: str) -> onnx.TensorProto:
    t = _weight()
    t.data_location = TensorProto.EXTERNAL
    t.ClearField("raw_data")
    for key, value in {"location": location, **extra}.items():
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return t


def _convert(src: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convert", "onnx:onnx", str(src), "-o", str(out), *extra],
                          capture_output=True, text=True, timeout=60)


def _negative_dims(tmp: Path) -> onnx.TensorProto:
    t = _weight()
    t.dims[:] = [-2, -2]  # product 4, as the stored bytes: used to loop forever while framing
    return t


def _dims_past_bytes(tmp: Path) -> onnx.TensorProto:
    t = _weight()
    t.dims[:] = [4, 4]
    return t


def _fifo(tmp: Path) -> onnx.TensorProto:
    os.mkfifo(tmp / "pipe")
    return _external("pipe")


def _negative_offset(tmp: Path) -> onnx.TensorProto:
    (tmp / "d.bin").write_bytes(bytes(16))
    return _external("d.bin", offset="-5")


def _non_integer_offset(tmp: Path) -> onnx.TensorProto:
    (tmp / "d.bin").write_bytes(bytes(16))
    return _external("d.bin", offset="ten")


def _dims_past_the_data_file(tmp: Path) -> onnx.TensorProto:
    (tmp / "d.bin").write_bytes(bytes(16))
    t = _external("d.bin")
    t.dims[:] = [100, 100]
    return t


def _dims_disagree_with_length(tmp: Path) -> onnx.TensorProto:
    (tmp / "d.bin").write_bytes(bytes(64))
    return _external("d.bin", length="8")  # dims [2, 2] of float need 16 (fuzzing found this: an exit 3)


def _typed_data_short(tmp: Path) -> onnx.TensorProto:
    t = TensorProto(name="w", dims=[2, 2], data_type=TensorProto.FLOAT)
    t.float_data.extend([1.0, 2.0])  # 2 values for 4 elements (an empty one was an exit 3 in the writer)
    return t


CASES = {
    "typed-data-short": (_typed_data_short, "need 4 values but it stores 2"),
    "dims-vs-external-length": (_dims_disagree_with_length, "need 16 bytes but its external data length is 8"),
    "negative-dims": (_negative_dims, "negative dimension"),
    "dims-past-bytes": (_dims_past_bytes, "need 64 bytes"),
    "fifo-external-data": (_fifo, "not a regular file"),
    "negative-offset": (_negative_offset, "negative external data offset"),
    "non-integer-offset": (_non_integer_offset, "must be integers"),
    "dims-past-data-file": (_dims_past_the_data_file, "which has only 16 bytes"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_corrupt_tensor_is_one_line_exit_2(tmp_path: Path, case: str) -> None:
    make, words = CASES[case]
    src = tmp_path / "m.onnx"
    onnx.save(_model(make(tmp_path)), src)
    result = _convert(src, tmp_path / "out.onnx")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and words in result.stderr
    assert not (tmp_path / "out.onnx").exists()


def test_output_over_the_external_data_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(_model(_weight()), src, save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    data = tmp_path / "m.onnx.data"
    before = data.read_bytes()
    result = _convert(src, data)
    assert result.returncode == 2 and "refusing to write" in result.stderr, result.stderr
    assert data.read_bytes() == before


def test_caffe_companion_over_the_input_caffemodel_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(_model(_weight()), src)
    ok = subprocess.run([sys.executable, "-m", "convert", "onnx:caffe", str(src), "-o", str(tmp_path / "net.prototxt"),
                         "--no-check"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    (tmp_path / "a.prototxt").write_text((tmp_path / "net.prototxt").read_text())
    before = (tmp_path / "net.caffemodel").read_bytes()
    result = subprocess.run([sys.executable, "-m", "convert", "caffe:caffe", str(tmp_path / "a.prototxt"),
                             str(tmp_path / "net.caffemodel"), "-o", str(tmp_path / "net.prototxt")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "refusing to write" in result.stderr, result.stderr
    assert (tmp_path / "net.caffemodel").read_bytes() == before


def test_report_over_an_input_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(_model(_weight()), src)
    before = src.read_bytes()
    result = _convert(src, tmp_path / "o.onnx", "--report", str(src))
    assert result.returncode == 2 and "refusing to write the report" in result.stderr, result.stderr
    assert src.read_bytes() == before


# ---- model-level corruption (#11 crash classes): one line, exit 2, nothing written ------------------
def _cli(args: list[str]) -> tuple[int, str]:
    """Run the CLI in-process; return (exit code, stderr)."""
    from click.testing import CliRunner

    from convert.cli import cli

    result = CliRunner().invoke(cli, args)
    return result.exit_code, result.stderr


def _add_model(*nodes: onnx.NodeProto, opset: int = 17, weight: onnx.TensorProto | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes) or [helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
                              [weight if weight is not None else _weight()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _duplicate_output(tmp: Path) -> bytes:
    return _add_model(helper.make_node("Add", ["x", "w"], ["y"]), helper.make_node("Mul", ["x", "w"], ["y"]),
                      ).SerializeToString()


def _undefined_input(tmp: Path) -> bytes:
    return _add_model(helper.make_node("Add", ["x", "nowhere"], ["y"])).SerializeToString()


def _invalid_dtype(tmp: Path) -> bytes:
    w = _weight()
    w.data_type = 999
    return _add_model(weight=w).SerializeToString()


def _opset_past_c_int(tmp: Path) -> bytes:
    return _add_model(opset=2**40).SerializeToString()


def _non_utf8_attribute_name(tmp: Path) -> bytes:
    data = _add_model(helper.make_node("LeakyRelu", ["x"], ["t"], alpha=0.1),
                      helper.make_node("Add", ["t", "w"], ["y"])).SerializeToString()
    return data.replace(b"alpha", b"alph\xff", 1)


def _newline_in_a_name(tmp: Path) -> bytes:
    return _add_model(helper.make_node("Add", ["x", "w\n\nline"], ["y"])).SerializeToString()


def _location_with_nul(tmp: Path) -> bytes:
    (tmp / "d.bin").write_bytes(bytes(16))
    return _model(_external("d.bin\x00x")).SerializeToString()


def _location_too_long(tmp: Path) -> bytes:
    return _model(_external("x" * 300)).SerializeToString()


def _location_trailing_slash(tmp: Path) -> bytes:
    (tmp / "d.bin").write_bytes(bytes(16))
    return _model(_external("d.bin/")).SerializeToString()


def _missing_initializer(tmp: Path) -> bytes:
    """A Conv whose weight names an initializer the file does not hold (a clone_graph crash on the Caffe route)."""
    graph = helper.make_graph([helper.make_node("Conv", ["x", "conv_w"], ["y"], kernel_shape=[1, 1])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _conv_model(bias: onnx.TensorProto, weight: str = "cw", softmax_axis: object = 1) -> onnx.ModelProto:
    """Conv(x, weight, b) -> Softmax: the Caffe route's Convolution + Softmax."""
    softmax = helper.make_node("Softmax", ["c"], ["y"], axis=softmax_axis)
    graph = helper.make_graph([helper.make_node("Conv", ["x", weight, "b"], ["c"], kernel_shape=[1, 1]), softmax], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])],
                              [numpy_helper.from_array(np.ones((2, 2, 1, 1), np.float32), "cw"), bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _float_bias() -> onnx.TensorProto:
    return numpy_helper.from_array(np.zeros(2, np.float32), "b")


def _string_conv_bias(tmp: Path) -> bytes:
    """#29: a STRING Conv bias reached the Caffe weight writer (ValueError, exit 3)."""
    return _conv_model(helper.make_tensor("b", TensorProto.STRING, [2], [b"a", b"b"])).SerializeToString()


def _empty_required_input(tmp: Path) -> bytes:
    """#29: a node input with an empty name where the op requires one (IndexError on the Caffe route)."""
    return _conv_model(_float_bias(), weight="").SerializeToString()


def _retyped_attribute(tmp: Path) -> bytes:
    """Found by the #29 campaign: Softmax ``axis`` written as INTS (TypeError in the Caffe emitter)."""
    return _conv_model(_float_bias(), softmax_axis=[1]).SerializeToString()


def _tensor_attribute_without_tensor(tmp: Path) -> bytes:
    """#29 campaign: a Constant whose TENSOR attribute holds no tensor (UNDEFINED dtype in FoldConstants)."""
    const = helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.ones((2, 2), np.float32)))
    const.attribute[0].ClearField("t")
    return _add_model(const, helper.make_node("Add", ["x", "k"], ["y"])).SerializeToString()


def _complex_in_int64_data(tmp: Path) -> bytes:
    """#29 campaign: a COMPLEX128 tensor whose values sit in int64_data (AssertionError in onnx_ir)."""
    t = helper.make_tensor("k_v", TensorProto.INT64, [2], [3, -1])
    t.data_type = TensorProto.COMPLEX128
    shape = helper.make_node("Constant", [], ["k"], value=t)
    return _add_model(shape, helper.make_node("Add", ["x", "w"], ["y"])).SerializeToString()


def _conv_bias_of_another_length(tmp: Path) -> bytes:
    """#29 campaign: a Conv bias of 3 values for 2 output channels, folded with a BatchNormalization."""
    bn = [numpy_helper.from_array(np.ones(2, np.float32), n) for n in ("g", "beta", "mean", "var")]
    graph = helper.make_graph([helper.make_node("Conv", ["x", "cw", "b"], ["c"], kernel_shape=[1, 1]),
                               helper.make_node("BatchNormalization", ["c", "g", "beta", "mean", "var"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])],
                              [numpy_helper.from_array(np.ones((2, 2, 1, 1), np.float32), "cw"),
                               numpy_helper.from_array(np.zeros(3, np.float32), "b"), *bn])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _huge_pool_stride(tmp: Path) -> bytes:
    """#29 campaign: MaxPool strides of 2^62 (the Caffe emitter's "Value out of range")."""
    pool = helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[2, 2], strides=[2**62, 2**62])
    model = _conv_model(_float_bias())
    del model.graph.node[1:]
    model.graph.node.append(pool)
    model.graph.output[0].type.tensor_type.shape.Clear()
    return model.SerializeToString()


def _softmax_axis_past_any_rank(tmp: Path) -> bytes:
    """#29 campaign: a Softmax axis of 2^63 - 1."""
    return _conv_model(_float_bias(), softmax_axis=2**63 - 1).SerializeToString()


def _slice_starts_of_rank_0(tmp: Path) -> bytes:
    """#29 campaign: Slice starts held as a 0-D tensor (the Caffe emitter's "iteration over a 0-d array")."""
    graph = helper.make_graph([helper.make_node("Slice", ["x", "st", "en"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array(0, np.int64), "st"),
                               numpy_helper.from_array(np.array([1], np.int64), "en")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _conv_input_of_another_rank(tmp: Path) -> bytes:
    """#29 campaign: a rank-4 Conv weight on an input declared with rank 3 (IndexError in the Caffe emitter)."""
    model = _conv_model(_float_bias())
    dims = model.graph.input[0].type.tensor_type.shape.dim
    del dims[3]
    return model.SerializeToString()


def _conv_on_a_rank_1_weight(tmp: Path) -> bytes:
    """#29 verification campaign: a Conv whose input is the rank-1 bias initializer."""
    model = _conv_model(_float_bias())
    model.graph.node[0].input[0] = "b"
    return model.SerializeToString()


def _node_without_its_output(tmp: Path) -> bytes:
    """#29 verification campaign: a Shape node with no output (FoldConstants' zip(strict) ValueError)."""
    return _add_model(helper.make_node("Shape", ["x"], []), helper.make_node("Add", ["x", "w"], ["y"]),
                      ).SerializeToString()


MODEL_CASES = {
    "conv-on-a-rank-1-input": (_conv_on_a_rank_1_weight, "weight 'cw' has dims [2, 2, 1, 1] for an input of rank 1"),
    "node-without-its-output": (_node_without_its_output, "(Shape) has 0 output(s); Shape produces at least 1"),
    "huge-pool-stride": (_huge_pool_stride, "(MaxPool) attribute 'strides' holds 4611686018427387904, outside 1.."),
    "softmax-axis-past-any-rank": (_softmax_axis_past_any_rank, "attribute 'axis' holds 9223372036854775807, beyond"),
    "slice-starts-of-rank-0": (_slice_starts_of_rank_0, "(Slice) input 1 'st' has dims []; Slice takes a 1-D tensor"),
    "conv-input-of-another-rank": (_conv_input_of_another_rank,
                                   "weight 'cw' has dims [2, 2, 1, 1] for an input of rank 3"),
    "tensor-attribute-without-tensor": (_tensor_attribute_without_tensor,
                                        "node 'k' (Constant) attribute 'value' is of type TENSOR but holds none"),
    "complex-in-int64-data": (_complex_in_int64_data, "need 2 complex values (4 in double_data) but it stores 0"),
    "conv-bias-of-another-length": (_conv_bias_of_another_length,
                                    "its bias 'b' has shape [3], but the Conv has 2 output channels"),
    "string-conv-bias": (_string_conv_bias, "input 2 ('B') is the initializer 'b' of type STRING; Conv takes"),
    "empty-required-input": (_empty_required_input, "node 'c' (Conv) input 1 ('W') is empty, but Conv requires it"),
    "retyped-attribute": (_retyped_attribute, "attribute 'axis' is of type INTS; Softmax takes INT"),
    "missing-initializer": (_missing_initializer, "node 'y' (Conv) input 1 'conv_w' is not a graph input"),
    "duplicate-output-name": (_duplicate_output, "writes the value 'y', which node"),
    "undefined-input": (_undefined_input, "input 1 'nowhere' is not a graph input"),
    "invalid-dtype": (_invalid_dtype, "data type 999, which is not an ONNX tensor type"),
    "opset-past-c-int": (_opset_past_c_int, "has version 1099511627776, outside 1..2147483647"),
    "non-utf8-attribute-name": (_non_utf8_attribute_name, "graph.node[0].attribute[0].name is not valid UTF-8"),
    "newline-in-name": (_newline_in_a_name, "'w\\n\\nline' is not a graph input"),
    "location-nul": (_location_with_nul, "is not a file name (a NUL byte"),
    "location-too-long": (_location_too_long, "is not a file name"),
    "location-trailing-slash": (_location_trailing_slash, "'d.bin/' is not a file name"),
}


@pytest.mark.parametrize("case", list(MODEL_CASES))
def test_corrupt_model_is_one_line_exit_2(tmp_path: Path, case: str) -> None:
    make, words = MODEL_CASES[case]
    src = tmp_path / "m.onnx"
    src.write_bytes(make(tmp_path))
    for route in ("onnx:onnx", "onnx:caffe"):
        out = tmp_path / "out"
        code, err = _cli([route, str(src), "-o", f"{out}/", "--no-check", "-q"])
        lines = err.strip().splitlines()
        assert code == 2, err
        assert len(lines) == 1 and words in lines[0] and "m.onnx" in lines[0], err
        assert not out.exists() or not any(out.iterdir())


def _range_model(limit: int, consumer: str) -> onnx.ModelProto:
    """A constant Range(0, limit) of int64 feeding ``consumer`` (Add with the input, or Shape)."""
    def scalar(name: str, v: int) -> onnx.NodeProto:
        value = helper.make_tensor(name + "_v", TensorProto.INT64, [], [v])
        return helper.make_node("Constant", [], [name], value=value)

    tail = ([helper.make_node("Add", ["r", "x"], ["y"])] if consumer == "Add" else
            [helper.make_node("Shape", ["r"], ["s"]), helper.make_node("Add", ["s", "x"], ["y"])])
    graph = helper.make_graph([scalar("a", 0), scalar("b", limit), scalar("c", 1),
                               helper.make_node("Range", ["a", "b", "c"], ["r"]), *tail], "g",
                              [helper.make_tensor_value_info("x", TensorProto.INT64, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize(("limit", "consumer"), [(2**40, "Add"), (2**27, "Add"), (2**27, "Shape")],
                         ids=["2^40-add", "2^27-add", "2^27-shape"])
def test_constant_range_is_not_materialised(tmp_path: Path, limit: int, consumer: str) -> None:
    """Folding and data propagation are bounded by output size: Range(0, 2**27) used 20 GiB and a minute."""
    import time

    src = tmp_path / "range.onnx"
    onnx.save(_range_model(limit, consumer), src)
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)); "
            "from convert.cli import main; main(sys.argv[1:])")
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", code, "onnx:onnx", str(src), "-o", str(tmp_path / "o.onnx"),
                             "--no-check"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert time.perf_counter() - start < 30
    out = onnx.load(str(tmp_path / "o.onnx"))
    assert sum(numpy_helper.to_array(t).nbytes for t in out.graph.initializer) < 1024  # Range was not folded


def test_caffe_blob_of_strings_is_an_export_error() -> None:
    """The Caffe weight writer refuses values that are not numbers (its last line of defence, #29)."""
    from convert.exporters.caffe.writer import _array
    from convert.ir import ExportError

    with pytest.raises(ExportError, match=r"layer 'conv1': its weight '.*' holds .* values, not numbers"):
        _array(np.array([b"a", b"b"]), "conv1")
    assert _array(np.arange(3, dtype=np.int64), "conv1").dtype == np.float32
