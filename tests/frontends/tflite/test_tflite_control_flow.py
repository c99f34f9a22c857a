"""TFLite control flow and fused sequence ops against TFLite's own interpreter on the same file.

Keras 3's LSTM, GRU, SimpleRNN and Bidirectional LSTM, a ``tf.while_loop`` with a fixed and one
with a data-dependent trip count and a ``tf.cond`` are written by TFLiteConverter as ``WHILE``/``IF``
with their condition, body and branches in other subgraphs; they become ONNX ``Loop``/``If``.
``UNIDIRECTIONAL_SEQUENCE_LSTM``, ``BIDIRECTIONAL_SEQUENCE_LSTM`` and ``UNIDIRECTIONAL_SEQUENCE_RNN``
(which TFLiteConverter does not write for Keras 3 layers) are written here with ``flatbuffers`` and
TensorFlow's generated schema classes, and run by the interpreter too. Float bound: ``BOUND`` of the
output's scale (measured <= 4.2e-7). Damaged
subgraph references and refused variants end in one line (exit 2), naming the op and subgraph.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.tensorflow

ROOT = Path(__file__).resolve().parents[3]
BOUND = 1e-5
T, N, F, UNITS = 5, 2, 3, 4  # sequence length, batch, features, units: small, shapes all different


def _rel(ours: np.ndarray, ref: np.ndarray) -> float:
    assert ref.size > 1 and ref.std() > 1e-3 * np.abs(ref).max() > 0, "degenerate reference"
    return float(np.abs(ours - ref).max() / np.abs(ref).max())


# -- models -----------------------------------------------------------------------------------------

def _keras(path: Path, layer: object, seed: int) -> None:
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(seed)
    inp = keras.Input((T, F), batch_size=N)
    model = keras.Model(inp, layer()(inp))  # type: ignore[operator]
    path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())


def _function(path: Path, fn: object) -> None:
    import tensorflow as tf

    concrete = tf.function(fn, input_signature=[tf.TensorSpec([N, F], tf.float32)]).get_concrete_function()
    path.write_bytes(tf.lite.TFLiteConverter.from_concrete_functions([concrete]).convert())


def _fixed_loop(x: object) -> object:
    import tensorflow as tf

    _, y = tf.while_loop(lambda i, x: i < 4, lambda i, x: (i + 1, tf.tanh(x * 1.5 + 0.1)), (tf.constant(0), x))
    return y


def _data_dependent_loop(x: object) -> object:
    """Halve towards 0.5 until every |x| is at most 0.6: the trip count depends on x."""
    import tensorflow as tf

    return tf.while_loop(lambda x, n: tf.reduce_max(tf.abs(x)) > 0.6, lambda x, n: (x * 0.5 + 0.25, n + 1.0),
                         (x, tf.constant(0.0)))


def _cond(x: object) -> object:
    import tensorflow as tf

    return tf.cond(tf.reduce_sum(x) > 0, lambda: tf.exp(x) * 2.0, lambda: x - 3.0)


def _fused(path: Path, op: str, seed: int, *, time_major: bool = False, peepholes: bool = False,
           cell_clip: float = 0.0, merge: bool = True) -> None:
    """Write a one-operator .tflite: UNIDIRECTIONAL_SEQUENCE_LSTM (20 inputs), BIDIRECTIONAL_SEQUENCE_LSTM
    (48: two directions' 17 weights, four states, no auxiliary input) or UNIDIRECTIONAL_SEQUENCE_RNN (5)."""
    import flatbuffers
    from tensorflow.lite.python import schema_py_generated as fb

    rng = np.random.default_rng(seed)
    buffers = [fb.BufferT()]
    tensors: list[object] = []

    def tensor(name: str, shape: list[int], data: np.ndarray | None = None, variable: bool = False) -> int:
        t = fb.TensorT()
        t.name, t.shape, t.type, t.isVariable = name, shape, fb.TensorType.FLOAT32, variable
        if data is not None:
            buf = fb.BufferT()
            buf.data = np.frombuffer(np.asarray(data, np.float32).tobytes(), np.uint8)
            buffers.append(buf)
            t.buffer = len(buffers) - 1
        tensors.append(t)
        return len(tensors) - 1

    def w(name: str, *shape: int) -> int:
        return tensor(name, list(shape), rng.uniform(-0.6, 0.6, shape).astype(np.float32))

    seq = [T, N, F] if time_major else [N, T, F]
    x = tensor("x", seq)
    options: object
    out_shape = [T, N, UNITS] if time_major else [N, T, UNITS]
    outputs = [tensor("y", out_shape)]

    def direction(d: str) -> list[int]:
        gates = "ifco"
        weights = [w(f"{d}W_{g}", UNITS, F) for g in gates] + [w(f"{d}R_{g}", UNITS, UNITS) for g in gates]
        weights += [w(f"{d}P_{g}", UNITS) if peepholes else -1 for g in "ifo"]
        return weights + [w(f"{d}b_{g}", UNITS) for g in gates] + [-1, -1]

    def states(d: str) -> list[int]:
        return [tensor(f"{d}h", [N, UNITS], variable=True), tensor(f"{d}c", [N, UNITS], variable=True)]

    if op == "UNIDIRECTIONAL_SEQUENCE_LSTM":
        inputs = [x, *direction(""), *states("")]
        options = fb.UnidirectionalSequenceLSTMOptionsT()
        options.fusedActivationFunction, options.cellClip, options.timeMajor = (
            fb.ActivationFunctionType.TANH, cell_clip, time_major)
        options_type = fb.BuiltinOptions.UnidirectionalSequenceLSTMOptions
    elif op == "BIDIRECTIONAL_SEQUENCE_LSTM":
        inputs = [x, *direction("fw_"), *direction("bw_"), *states("fw_"), *states("bw_")] + [-1] * 9
        options = fb.BidirectionalSequenceLSTMOptionsT()
        options.fusedActivationFunction, options.mergeOutputs, options.timeMajor = (
            fb.ActivationFunctionType.TANH, merge, time_major)
        options_type = fb.BuiltinOptions.BidirectionalSequenceLSTMOptions
        if merge:
            tensors[outputs[0]].shape = [*out_shape[:2], 2 * UNITS]  # type: ignore[attr-defined]
        else:
            outputs.append(tensor("y_bw", out_shape))
    else:
        inputs = [x, w("W", UNITS, F), w("R", UNITS, UNITS), w("b", UNITS), tensor("h", [N, UNITS], variable=True)]
        options = fb.SequenceRNNOptionsT()
        options.fusedActivationFunction, options.timeMajor = fb.ActivationFunctionType.TANH, time_major
        options_type = fb.BuiltinOptions.SequenceRNNOptions
    code = fb.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = getattr(fb.BuiltinOperator, op)
    code.version = 1
    operator = fb.OperatorT()
    operator.opcodeIndex, operator.inputs, operator.outputs = 0, inputs, outputs
    operator.builtinOptionsType, operator.builtinOptions = options_type, options
    sg = fb.SubGraphT()
    sg.tensors, sg.inputs, sg.outputs, sg.operators, sg.name = tensors, [x], outputs, [operator], "main"
    model = fb.ModelT()
    model.version, model.operatorCodes, model.subgraphs, model.buffers = 3, [code], [sg], buffers
    builder = flatbuffers.Builder(4096)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    path.write_bytes(bytes(builder.Output()))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every model of the module, written once."""
    pytest.importorskip("tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras

    folder = tmp_path_factory.mktemp("tflite_cf")
    layers = keras.layers
    keras_models = {
        "lstm_sequences": lambda: layers.LSTM(UNITS, return_sequences=True),
        "lstm_last": lambda: layers.LSTM(UNITS),
        "gru": lambda: layers.GRU(UNITS),
        "simple_rnn": lambda: layers.SimpleRNN(UNITS, return_sequences=True),
        "bidirectional_lstm": lambda: layers.Bidirectional(layers.LSTM(UNITS, return_sequences=True)),
    }
    paths = {name: folder / f"{name}.tflite" for name in [*keras_models, *FUNCTIONS, *FUSED, "lstm_cell_clip"]}
    for seed, (name, layer) in enumerate(keras_models.items()):
        _keras(paths[name], layer, seed)
    for name, fn in FUNCTIONS.items():
        _function(paths[name], fn)
    for seed, (name, (op, kwargs)) in enumerate(FUSED.items()):
        _fused(paths[name], op, seed, **kwargs)
    _fused(paths["lstm_cell_clip"], "UNIDIRECTIONAL_SEQUENCE_LSTM", 0, cell_clip=3.0)
    return paths


FUNCTIONS = {"while_fixed": _fixed_loop, "while_data_dependent": _data_dependent_loop, "cond": _cond}
FUSED = {
    "fused_lstm": ("UNIDIRECTIONAL_SEQUENCE_LSTM", {}),
    "fused_lstm_time_major_peepholes": ("UNIDIRECTIONAL_SEQUENCE_LSTM", {"time_major": True, "peepholes": True}),
    "fused_bidirectional_lstm_time_major_merged": ("BIDIRECTIONAL_SEQUENCE_LSTM", {"time_major": True}),
    "fused_bidirectional_lstm_two_outputs_peepholes": ("BIDIRECTIONAL_SEQUENCE_LSTM",
                                                       {"merge": False, "peepholes": True}),
    "fused_rnn": ("UNIDIRECTIONAL_SEQUENCE_RNN", {}),
}


# -- running both --------------------------------------------------------------------------------------

def _convert(path: Path) -> Path:
    from convert.exporters.onnx import EXPORTER
    from convert.frontends.tflite import FRONTEND
    from convert.ir import Options

    options = Options()
    out = path.with_suffix(".onnx")
    EXPORTER.save(FRONTEND.load([path], options), out, options)
    return out


def _run_both(path: Path, onnx_path: Path, x: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """TFLite's outputs (a fresh interpreter: state tensors start at zero) and ONNX Runtime's, in order."""
    import onnxruntime as ort
    import tensorflow as tf

    interpreter = tf.lite.Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    (inp,) = interpreter.get_input_details()
    interpreter.set_tensor(inp["index"], x)
    interpreter.invoke()
    ref = [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x})
    return ref, got


def _input(path: Path, seed: int, scale: float = 1.0, shift: float = 0.0) -> np.ndarray:
    import tensorflow as tf

    shape = tf.lite.Interpreter(model_path=str(path)).get_input_details()[0]["shape"]
    return (np.random.default_rng(seed).standard_normal(shape) * scale + shift).astype(np.float32)


def _onnx_ops(onnx_path: Path) -> set[str]:
    import onnx

    return {n.op_type for n in onnx.load(str(onnx_path)).graph.node}


RECURRENT = ["lstm_sequences", "lstm_last", "gru", "simple_rnn", "bidirectional_lstm"]


@pytest.mark.parametrize("name", RECURRENT)
def test_keras_recurrent_layer_as_loop_matches_the_interpreter(built: dict[str, Path], name: str) -> None:
    out = _convert(built[name])
    assert "Loop" in _onnx_ops(out)
    for seed in (0, 1):
        (ref,), (got,) = _run_both(built[name], out, _input(built[name], seed))
        print(f"TFLITE {name} seed {seed} {_rel(got, ref):.1e}")
        assert got.shape == ref.shape and _rel(got, ref) <= BOUND, (name, seed, _rel(got, ref))


def test_while_loop_with_a_fixed_trip_count(built: dict[str, Path]) -> None:
    out = _convert(built["while_fixed"])
    (ref,), (got,) = _run_both(built["while_fixed"], out, _input(built["while_fixed"], 0))
    print(f"TFLITE while_fixed {_rel(got, ref):.1e}")
    assert _rel(got, ref) <= BOUND


def test_while_loop_with_a_data_dependent_trip_count(built: dict[str, Path]) -> None:
    path = built["while_data_dependent"]
    out = _convert(path)
    trips = set()
    for seed, scale in ((0, 1.0), (1, 20.0)):
        (ref_y, ref_n), (got_y, got_n) = _run_both(path, out, _input(path, seed, scale))
        print(f"TFLITE while_data_dependent x{scale} trips {ref_n} {_rel(got_y, ref_y):.1e}")
        assert float(got_n) == float(ref_n) and _rel(got_y, ref_y) <= BOUND
        trips.add(float(ref_n))
    assert len(trips) == 2, "the inputs should need different trip counts"


def test_cond_takes_either_branch(built: dict[str, Path]) -> None:
    path = built["cond"]
    out = _convert(path)
    assert "If" in _onnx_ops(out)
    for seed, shift in ((0, 2.0), (1, -2.0)):  # sum > 0: the then branch; < 0: the else branch
        x = _input(path, seed, shift=shift)
        (ref,), (got,) = _run_both(path, out, x)
        print(f"TFLITE cond sum {x.sum():+.1f} {_rel(got, ref):.1e}")
        assert _rel(got, ref) <= BOUND


@pytest.mark.parametrize("name", list(FUSED))
def test_fused_sequence_op_matches_the_interpreter(built: dict[str, Path], name: str) -> None:
    out = _convert(built[name])
    assert _onnx_ops(out) & {"LSTM", "RNN"} and "Loop" not in _onnx_ops(out)
    refs, gots = _run_both(built[name], out, _input(built[name], 0))
    assert len(refs) == len(gots)
    for ref, got in zip(refs, gots, strict=True):
        print(f"TFLITE {name} {list(ref.shape)} {_rel(got, ref):.1e}")
        assert got.shape == ref.shape and _rel(got, ref) <= BOUND


# -- refusals ------------------------------------------------------------------------------------------

def _damaged(source: Path, folder: Path, edit: object) -> Path:
    """A copy of ``source`` whose first WHILE operator's options (or operator code) ``edit`` changes in place."""
    from convert.frontends.tflite import model as tfl
    from convert.frontends.tflite.flatbuf import root

    data = bytearray(source.read_bytes())
    edit(data, root(memoryview(data), source.name, "Model"), tfl)  # type: ignore[operator]
    path = folder / source.name
    path.write_bytes(bytes(data))
    return path


def _while_options(model: object, tfl: object) -> object:
    main = model.tables(tfl._MODEL_SUBGRAPHS, "SubGraph")[0]  # type: ignore[attr-defined]
    (op,) = main.tables(tfl._SG_OPERATORS, "Operator")  # type: ignore[attr-defined]
    return op.table(tfl._OP_OPTIONS, "BuiltinOptions")  # type: ignore[attr-defined]


def test_a_cycle_of_subgraphs_exits_2_in_one_line(built: dict[str, Path], tmp_path: Path) -> None:
    """A WHILE whose body is the main subgraph again: refused before converting, through the CLI."""
    def edit(data: bytearray, model: object, tfl: object) -> None:
        struct.pack_into("<i", data, _while_options(model, tfl)._field(1), 0)  # type: ignore[attr-defined]

    path = _damaged(built["while_fixed"], tmp_path, edit)
    r = subprocess.run([sys.executable, "-m", "convert", "tflite:onnx", str(path), "-o", str(tmp_path / "m.onnx")],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "operator 0 WHILE: its body subgraph 0 runs subgraph 0 again (a cycle)" in lines[0], lines


def test_a_subgraph_index_out_of_range_is_a_model_format_error(built: dict[str, Path], tmp_path: Path) -> None:
    from convert.frontends.tflite import FRONTEND
    from convert.ir import ModelFormatError, Options

    def edit(data: bytearray, model: object, tfl: object) -> None:
        struct.pack_into("<i", data, _while_options(model, tfl)._field(0), 99)  # type: ignore[attr-defined]

    path = _damaged(built["while_fixed"], tmp_path, edit)
    with pytest.raises(ModelFormatError, match=r"WHILE: its cond subgraph 99 is not in the file \(3 subgraphs\)"):
        FRONTEND.load([path], Options())


def test_an_unsupported_op_inside_a_body_is_named_with_its_subgraph(built: dict[str, Path], tmp_path: Path) -> None:
    """TANH in the loop body made an op without a converter: listed before converting, subgraph and all."""
    from convert.frontends.tflite import FRONTEND
    from convert.ir import Options, UnsupportedOpsError

    def edit(data: bytearray, model: object, tfl: object) -> None:
        for code in model.tables(tfl._MODEL_CODES, "OperatorCode"):  # type: ignore[attr-defined]
            if int(code.scalar(tfl._CODE_BUILTIN, "<i")) == 28:  # TANH -> FLOOR_DIV (90)
                struct.pack_into("<b", data, code._field(tfl._CODE_DEPRECATED), 90)
                struct.pack_into("<i", data, code._field(tfl._CODE_BUILTIN), 90)

    path = _damaged(built["while_fixed"], tmp_path, edit)
    with pytest.raises(UnsupportedOpsError, match="FLOOR_DIV") as info:
        FRONTEND.load([path], Options())
    assert "subgraph 2 operator 3" in str(info.value), str(info.value)


def test_a_clipped_lstm_cell_is_refused_naming_the_op(built: dict[str, Path]) -> None:
    from convert.frontends.tflite import FRONTEND
    from convert.ir import ConversionError, Options

    with pytest.raises(ConversionError, match=r"UNIDIRECTIONAL_SEQUENCE_LSTM.*clipping is not supported") as info:
        FRONTEND.load([built["lstm_cell_clip"]], Options())
    assert "\n" not in str(info.value)


def test_embedding_bilstm_text_classifier_with_select(tmp_path: Path) -> None:
    """Keras' Embedding clamps token ids with a select that TFLiteConverter writes as SELECT (the first
    select op, same shapes): a BiLSTM text classifier of token ids, as tf2onnx converts it too."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(7)
    tokens = keras.Input((12,), dtype="int32", batch_size=1)
    h = keras.layers.Bidirectional(keras.layers.LSTM(8))(keras.layers.Embedding(50, 8)(tokens))
    path = tmp_path / "text.tflite"
    path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(keras.Model(tokens, keras.layers.Dense(3)(h))).convert())
    from convert.frontends.tflite.model import read_model

    assert "SELECT" in {op.name for op in read_model(path).ops}
    out = _convert(path)
    x = np.random.default_rng(0).integers(0, 50, (1, 12)).astype(np.int32)
    (ref,), (got,) = _run_both(path, out, x)
    print(f"TFLITE embedding_bilstm {_rel(got, ref):.1e}")
    assert _rel(got, ref) <= BOUND
