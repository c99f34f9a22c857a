"""Reading Paddle files without Paddle: locating files, params records, provenance, bad input."""

from __future__ import annotations

import json
import shlex
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from paddle_helpers import SynthOp, record, write_params, write_program

from convert.frontends.paddle import FRONTEND
from convert.frontends.paddle.loader import resolve
from convert.ir import (
    ConversionError,
    ConvertError,
    ModelFormatError,
    Options,
    UnsupportedOpsError,
    UsageError,
    get_provenance,
    is_file_slice,
)

R = np.random.default_rng(1)
W = R.standard_normal((4, 3, 3, 3)).astype(np.float32)
B = R.standard_normal(4).astype(np.float32)


def _conv_model(folder: Path, stem: str = "inference", extra_ops: list[SynthOp] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    ops = [SynthOp("conv2d", {"Input": ["x"], "Filter": ["conv.w_0"]}, {"Output": ["conv.tmp_0"]},
                   {"strides": [1, 1], "paddings": [1, 1]}),
           SynthOp("elementwise_add", {"X": ["conv.tmp_0"], "Y": ["conv.b_0"]}, {"Out": ["conv.tmp_1"]}, {"axis": 1}),
           SynthOp("relu", {"X": ["conv.tmp_1"]}, {"Out": ["relu.tmp_0"]}), *(extra_ops or [])]
    shapes = {n: ([-1, 4, 8, 8], "float32") for n in ("conv.tmp_0", "conv.tmp_1", "relu.tmp_0")}
    params = {"conv.w_0": W, "conv.b_0": B}
    path = write_program(folder / f"{stem}.pdmodel", feeds={"x": ([-1, 3, 8, 8], "float32")}, ops=ops,
                         fetches=[(extra_ops[-1].outputs["Out"][0] if extra_ops else "relu.tmp_0")],
                         params=params, shapes=shapes)
    write_params(folder / f"{stem}.pdiparams", params)
    return path


def test_folder_prefix_and_files_resolve_alike(tmp_path: Path) -> None:
    path = _conv_model(tmp_path / "m")
    want = resolve([path])
    assert resolve([tmp_path / "m"]) == want
    assert resolve([tmp_path / "m" / "inference"]) == want
    assert resolve([path, path.with_suffix(".pdiparams")]) == want
    with pytest.raises(UsageError, match="no such file, folder, or prefix"):
        resolve([tmp_path / "m" / "nothing"])


def test_weights_are_file_slices_with_provenance(tmp_path: Path) -> None:
    model = FRONTEND.load([_conv_model(tmp_path / "m")], Options())
    inits = model.graph.initializers
    w = inits["conv.w_0"].const_value
    assert is_file_slice(w) and w.shape == (4, 3, 3, 3)
    np.testing.assert_array_equal(w.numpy(), W)
    np.testing.assert_array_equal(inits["conv.b_0"].const_value.numpy(), B)
    conv = next(n for n in model.graph if n.op_type == "Conv")
    prov = get_provenance(conv)
    assert prov.kind == "conv2d" and prov.layer == "conv.tmp_0" and prov.file == "inference.pdmodel"
    assert [o.name for o in model.graph.outputs] == ["relu.tmp_0"]
    assert str(model.graph.inputs[0].shape[0]) == "N"


def test_separate_parameter_files(tmp_path: Path) -> None:
    path = _conv_model(tmp_path / "m")
    path.with_suffix(".pdiparams").unlink()
    for name, arr in {"conv.w_0": W, "conv.b_0": B}.items():
        (tmp_path / "m" / name).write_bytes(record(arr))
    model = FRONTEND.load([path], Options())
    np.testing.assert_array_equal(model.graph.initializers["conv.w_0"].const_value.numpy(), W)


def test_unsupported_ops_are_listed_at_once(tmp_path: Path) -> None:
    extra = [SynthOp("roi_align", {"X": ["relu.tmp_0"]}, {"Out": ["roi.tmp_0"]}),
             SynthOp("yolo_box", {"X": ["roi.tmp_0"]}, {"Out": ["yolo.tmp_0"]}),
             SynthOp("roi_align", {"X": ["yolo.tmp_0"]}, {"Out": ["roi.tmp_1"]})]
    path = _conv_model(tmp_path / "m", extra_ops=extra)
    gaps = FRONTEND.check_support([path], Options())
    assert [(g.op, g.count) for g in gaps] == [("roi_align", 2), ("yolo_box", 1)]
    with pytest.raises(UnsupportedOpsError) as err:
        FRONTEND.load([path], Options())
    text = str(err.value)
    assert "roi_align x2" in text and "yolo_box" in text and "'roi.tmp_0'" in text and "'yolo.tmp_0'" in text


def test_converter_failure_names_the_op(tmp_path: Path) -> None:
    extra = [SynthOp("pool2d", {"X": ["relu.tmp_0"]}, {"Out": ["pool.tmp_0"]},
                     {"pooling_type": "lp", "ksize": [2, 2]})]
    with pytest.raises(ConversionError, match=r"'pool2d' -> 'pool.tmp_0'.*pooling_type 'lp'"):
        FRONTEND.load([_conv_model(tmp_path / "m", extra_ops=extra)], Options())


@pytest.mark.parametrize(("content", "words"), [
    (b"\x08\x96\x01garbage that is not a program\xff\xff", ["inference.pdmodel", "not a Paddle program"]),
    (b"", ["inference.pdmodel", "not a Paddle program"]),
], ids=["garbage", "empty"])
def test_pdmodel_that_is_not_a_program(tmp_path: Path, content: bytes, words: list[str]) -> None:
    path = tmp_path / "inference.pdmodel"
    path.write_bytes(content)
    with pytest.raises(ModelFormatError) as err:
        FRONTEND.load([path], Options())
    for word in words:
        assert word in str(err.value)


@pytest.mark.parametrize(("content", "words"), [
    ("{not json", ["inference.json", "invalid JSON"]),
    (json.dumps({"name": "some other json"}), ["inference.json", "not a Paddle PIR program"]),
], ids=["not-json", "other-json"])
def test_json_that_is_not_a_program(tmp_path: Path, content: str, words: list[str]) -> None:
    path = tmp_path / "inference.json"
    path.write_text(content)
    with pytest.raises(ModelFormatError) as err:
        FRONTEND.load([path], Options())
    for word in words:
        assert word in str(err.value)


def test_params_from_another_model(tmp_path: Path) -> None:
    path = _conv_model(tmp_path / "m")
    other = {"a": np.zeros(4, np.float32), "b": np.zeros((8, 3, 3, 3), np.float32)}
    write_params(path.with_suffix(".pdiparams"), other)
    with pytest.raises(ModelFormatError) as err:
        FRONTEND.load([path], Options())
    text = str(err.value)
    assert "parameter 'conv.w_0'" in text and "[8, 3, 3, 3]" in text and "same model" in text


def test_truncated_params(tmp_path: Path) -> None:
    path = _conv_model(tmp_path / "m")
    params = path.with_suffix(".pdiparams")
    params.write_bytes(params.read_bytes()[:-10])
    with pytest.raises(ModelFormatError) as err:
        FRONTEND.load([path], Options())
    assert "truncated" in str(err.value) and "parameter 'conv.w_0'" in str(err.value)


def test_missing_and_extra_params(tmp_path: Path) -> None:
    path = _conv_model(tmp_path / "m")
    params = path.with_suffix(".pdiparams")
    params.write_bytes(record(B))
    with pytest.raises(ModelFormatError, match=r"ends after 1 of 2 parameters; missing 'conv.w_0'"):
        FRONTEND.load([path], Options())
    params.write_bytes(record(B) + record(W) + record(B))
    with pytest.raises(ModelFormatError, match=r"bytes left over .* after the last parameter 'conv.w_0'"):
        FRONTEND.load([path], Options())


def test_cli_bad_params_is_one_line_exit_2(tmp_path: Path) -> None:
    path = _conv_model(tmp_path / "m")
    params = path.with_suffix(".pdiparams")
    params.write_bytes(params.read_bytes()[:100])
    cmd = f"{shlex.quote(sys.executable)} -m convert paddle:onnx {shlex.quote(str(tmp_path / 'm'))} -o o.onnx"
    r = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "truncated" in lines[0] and "Traceback" not in r.stderr
    assert not (tmp_path / "o.onnx").exists()


def test_json_program_with_a_malformed_op(tmp_path: Path) -> None:
    doc = {"base_code": {"magic": "pir", "version": 4}, "program": {"regions": [{"blocks": [{"ops": [
        {"#": "1.data", "A": [{"N": "name", "AT": {"#": "0.a_str", "D": "x"}}], "I": [],
         "O": [{"%": 1, "TT": {"#": "0.t_dtensor", "D": [{"#": "0.t_f32"}, [1, 3], "NCHW", [], 0]}}]},
        {"#": "1.relu", "A": [], "I": [{"%": "one"}], "O": [{"%": 2}]},
    ]}]}]}}
    path = tmp_path / "inference.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ModelFormatError, match=r"inference.json: op #1 of the PIR program is malformed"):
        FRONTEND.load([path], Options())


def test_conversion_does_not_import_paddle(tmp_path: Path) -> None:
    path = _conv_model(tmp_path / "m")
    code = ("import sys; from convert.frontends.paddle import FRONTEND; from convert.ir import Options; "
            f"FRONTEND.load([{str(path)!r}], Options()); assert 'paddle' not in sys.modules, 'paddle imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_input_shape_for_an_unknown_input(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"'image', which is not an input of inference.pdmodel; its inputs: 'x'"):
        FRONTEND.load([_conv_model(tmp_path / "m")], Options(input_shapes={"image": (1, 3, 8, 8)}))


def test_params_beyond_4_gib_use_64_bit_offsets(tmp_path: Path) -> None:
    """A 4.5 GiB first parameter (a sparse hole, never read) puts the second past 2**32."""
    from convert.frontends.paddle.params import read_combined, slices
    from convert.frontends.paddle.program import Var

    big_shape = (9 * 2**27,)  # 1.2e9 float32 = 4.5 GiB
    from convert.frontends.paddle import framework_pb2 as fw

    desc = fw.VarType.TensorDesc()
    desc.data_type = 5
    desc.dims.extend(big_shape)
    blob = desc.SerializeToString()
    path = tmp_path / "big.pdiparams"
    with path.open("wb") as f:
        f.write(struct.pack("<IQIi", 0, 0, 0, len(blob)) + blob)
        f.seek(f.tell() + 4 * big_shape[0])
        f.write(record(B))
    try:
        names = ["a.big", "b.small"]
        recs = read_combined(path, names, {"a.big": Var("a.big", np.dtype("float32"), big_shape),
                                           "b.small": Var("b.small", np.dtype("float32"), (4,))})
    except OSError:
        pytest.skip("no sparse files here")
    assert recs["b.small"].offset > 2**32
    np.testing.assert_array_equal(slices(recs["b.small"]).numpy(), B)


def test_parameter_name_leaving_the_folder_is_refused(tmp_path: Path) -> None:
    """A per-parameter file named '../outside/secret_w' must not be read (its bytes would reach the output)."""
    folder = tmp_path / "m"
    folder.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret_w").write_bytes(record(W))
    name = "../outside/secret_w"
    ops = [SynthOp("conv2d", {"Input": ["x"], "Filter": [name]}, {"Output": ["conv.tmp_0"]},
                   {"strides": [1, 1], "paddings": [1, 1]})]
    path = write_program(folder / "inference.pdmodel", feeds={"x": ([-1, 3, 8, 8], "float32")}, ops=ops,
                         fetches=["conv.tmp_0"], params={name: W},
                         shapes={"conv.tmp_0": ([-1, 4, 8, 8], "float32")})
    with pytest.raises(ModelFormatError, match="outside the model's folder"):
        FRONTEND.load([path], Options())
    cmd = [sys.executable, "-m", "convert", "paddle:onnx", str(folder), "-o", str(tmp_path / "o.onnx")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "outside the model's folder" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o.onnx").exists()


def test_prefix_form_through_the_cli(tmp_path: Path) -> None:
    _conv_model(tmp_path / "m")
    cmd = [sys.executable, "-m", "convert", "paddle:onnx", str(tmp_path / "m" / "inference"), "-o",
           str(tmp_path / "o.onnx"), "--no-check"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "o.onnx").is_file()


def test_output_over_the_params_file_is_refused(tmp_path: Path) -> None:
    path = _conv_model(tmp_path / "m")
    params = path.with_suffix(".pdiparams")
    before = params.read_bytes()
    cmd = [sys.executable, "-m", "convert", "paddle:onnx", str(tmp_path / "m"), "-o", str(params)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "refusing to write" in r.stderr, r.stderr
    assert params.read_bytes() == before


def test_deeply_nested_json_is_one_line(tmp_path: Path) -> None:
    """JSON nested past Python's recursion limit was a RecursionError traceback (#11)."""
    path = tmp_path / "inference.json"
    path.write_text('{"base_code": {"magic": "pir", "version": 4}, "program": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ModelFormatError, match=r"inference.json: not a Paddle PIR program \(JSON nested too deeply"):
        FRONTEND.load([path], Options())


def test_non_utf8_name_in_a_pdmodel_is_one_line(tmp_path: Path) -> None:
    path = _conv_model(tmp_path / "m")
    path.write_bytes(path.read_bytes().replace(b"conv.tmp_1", b"conv.tmp\xff1", 1))
    with pytest.raises(ModelFormatError, match=r"inference.pdmodel: the name or text at .* is not valid UTF-8"):
        FRONTEND.load([path], Options())


@pytest.mark.parametrize(("axis", "said"), [("one", "'one' is not an integer"), ("", "'' is not an integer")])
def test_attribute_of_the_wrong_type_is_one_line(axis: object, said: str, tmp_path: Path) -> None:
    """An INT attribute stored as a STRING: one line naming the op and the attribute (was a
    ValueError from int(): an internal error)."""
    path = _conv_model(tmp_path / "m")
    bad = _conv_model(tmp_path / "bad", extra_ops=[
        SynthOp("elementwise_add", {"X": ["relu.tmp_0"], "Y": ["conv.b_0"]}, {"Out": ["add.tmp_0"]}, {"axis": axis})])
    assert path.exists()
    with pytest.raises(ModelFormatError) as info:
        FRONTEND.load([bad], Options())
    message = str(info.value)
    assert "elementwise_add" in message and "attribute 'axis'" in message and said in message, message
    assert "\n" not in message


_PIR_SEED = Path(__file__).resolve().parents[2] / "fuzz" / "seeds" / "paddle_json"


_POOL_SIZE = '"1.full_int_array","A":[{"AT":{"#":"0.a_array","D":[{"#":"0.a_i64","D":1},{"#":"0.a_i64","D":1}]}'


@pytest.mark.parametrize(("old", "new", "said"), [
    ('"1.a_dtype","D":"int64"}', '"1.a_dtype","D":"i/t64"}', "op #10 'full_int_array' -> 'full_int_array.tmp_11': "
     "dtype 'i/t64' is not a data type"),  # #29 campaign: TypeError
    ('{"#":"0.a_i64","D":-1}', '{"#":"0.a_i64"}', "op #10 of the PIR program is malformed"),  # #29: no value
    ('{"#":"0.a_i64","D":-1}', '{"#":"0.a_i64","D":9223372036854775808}', "is outside int64"),  # #29: >= 2^63
    (_POOL_SIZE, _POOL_SIZE.replace('"D":1}', '"D":2147483648}'), "adaptive output size [2147483648, 2147483648] "
     "for a 8x8 input is beyond any model's"),  # #29 campaign: a hang (a Slice per output row)
    (_POOL_SIZE, _POOL_SIZE.replace('{"#":"0.a_i64","D":1},{"#":"0.a_i64","D":1}', ""),
     "kernel size [] is not two sizes of at least 1"),  # #29 campaign: IndexError
    ("[1,3,8,8]", "[99999999999999999999999,3,8,8]", "dimension outside -1..2147483647"),  # #29 campaign: SerdeError
    ('"fetch_name_0"', '"fetch_name\\ud8000"', "holds an unpaired surrogate ('\\ud800')"),  # #29: UnicodeEncodeError
], ids=["dtype-not-a-type", "int-array-element-without-value", "int-past-int64", "adaptive-size-2^31",
        "pool-size-empty", "dim-past-int64", "unpaired-surrogate"])
def test_damaged_pir_program_is_one_line(tmp_path: Path, old: str, new: str, said: str) -> None:
    """A PIR JSON program damaged in place (the fuzz seed, edited): one line naming the op, exit 2."""
    text = (_PIR_SEED / "inference.json").read_text()
    assert old in text
    (tmp_path / "inference.json").write_text(text.replace(old, new))
    (tmp_path / "inference.pdiparams").write_bytes((_PIR_SEED / "inference.pdiparams").read_bytes())
    with pytest.raises(ConvertError) as info:
        FRONTEND.load([tmp_path / "inference.json", tmp_path / "inference.pdiparams"], Options())
    message = str(info.value)
    assert said in message and "\n" not in message, message
