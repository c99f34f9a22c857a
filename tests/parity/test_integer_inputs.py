"""Integer inputs that index a table are drawn from its rows (#48, the small-vocabulary trap).

The check drew every integer input it was not given from [0, 10): an embedding of fewer than 10
rows made the source itself fail ('index out of range'), and the conversion ended with parity NOT
CHECKED and a hint offering only --no-check. The converted graph now says which integer inputs
index a table (a ``Gather`` on it, through casts, reshapes and Keras' negative-index wrap) and how
many rows the smallest has; those inputs are drawn from ``[0, rows)`` and the report says so. Each
source's own way to an embedding: PyTorch ``nn.Embedding`` (a traced file), Keras ``Embedding``,
Paddle ``gather`` on a parameter, ONNX ``Gather`` on an initializer. Every correct file is checked
against one whose table is scaled by 1.01: that one FAILs.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convert", *args], capture_output=True, text=True, timeout=600,
                          cwd=ROOT)


def _scale_table(src: Path, dst: Path, rows: int, factor: float = 1.01) -> None:
    """Write ``src`` with its table (the initializer of ``rows`` rows that a Gather reads) scaled."""
    proto = onnx.load(src)
    tables = {n.input[0] for n in proto.graph.node if n.op_type == "Gather"}
    init = next(i for i in proto.graph.initializer if i.name in tables and i.dims and i.dims[0] == rows)
    init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(factor), init.name))
    onnx.save(proto, dst)


def _drawn_line(text: str, rows: int) -> str:
    lines = [line for line in text.splitlines() if f"drawn from the integers in [0, {rows})" in line]
    assert len(lines) == 1, text
    return lines[0]


def test_index_bounds_follow_the_indices_to_the_smallest_table() -> None:
    """The bound of an input is the smallest table it indexes, through value-moving ops (Cast,
    Reshape, Keras' Where wrap); arithmetic stops the walk, and an input indexing nothing has none."""
    from convert.ir import serde
    from convert.parity import index_bounds

    model = onnx.parser.parse_model('''
        <ir_version: 8, opset_import: ["" : 17]>
        g (int64[1, 6] ids, int32[1, 6] pos, int64[1, 6] other) => (float[1, 6, 4] a, float[1, 6, 4] b,
                                                                  float[1, 6, 4] c, int64[1, 6] d)
        <float[50, 4] vocab, float[7, 4] small, float[9, 4] positions, int64 zero, int64 nine> {
            shape = Constant <value = int64[2] {1, 6}> ()
            zero32 = Constant <value = int32 {0}> ()
            nine32 = Constant <value = int32 {9}> ()
            wide = Cast <to = 7> (ids)
            flat = Reshape (wide, shape)
            a = Gather <axis = 0> (vocab, ids)
            b = Gather <axis = 0> (small, flat)
            neg = Less (pos, zero32)
            up = Add (pos, nine32)
            wrapped = Where (neg, up, pos)
            c = Gather <axis = 0> (positions, wrapped)
            d = Add (other, zero)
        }''')
    bounds = index_bounds(serde.deserialize_model(model).graph)
    assert {n: b.rows for n, b in bounds.items()} == {"ids": 7, "pos": 9}, bounds
    assert bounds["ids"].table == "small" and bounds["ids"].node.startswith("Gather")


def test_onnx_source_with_a_small_table(tmp_path: Path) -> None:
    """An ONNX model gathering from a 4-row initializer: onnx:onnx PASSes (ONNX Runtime refused the
    source on indices past 4 before); the converted file with its table scaled FAILs."""
    table = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0),
         helper.make_node("Relu", ["rows"], ["y"])], "g",
        [helper.make_tensor_value_info("ids", onnx.TensorProto.INT64, [2, 5])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 5, 3])],
        [numpy_helper.from_array(table, "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, tmp_path / "src.onnx")
    run = _cli("onnx:onnx", str(tmp_path / "src.onnx"), "-o", str(tmp_path / "out.onnx"))
    print(run.stdout, run.stderr)
    assert run.returncode == 0 and "parity PASS" in run.stdout, run.stdout + run.stderr
    assert "'table'" in _drawn_line(run.stdout, 4)
    _scale_table(tmp_path / "out.onnx", tmp_path / "wrong.onnx", 4)
    wrong = _cli("check", "onnx:onnx", str(tmp_path / "src.onnx"), "--against", str(tmp_path / "wrong.onnx"),
                 "--no-locate")
    assert wrong.returncode == 1 and "parity FAIL" in wrong.stdout, wrong.stdout + wrong.stderr


def test_pytorch_embedding_of_five_rows(tmp_path: Path) -> None:
    """A traced ``nn.Embedding(5, 8)``: the conversion's check PASSes where it was NOT CHECKED (the
    source failed on index 5..9), ``convert check`` too; its table scaled by 1.01 FAILs."""
    torch = pytest.importorskip("torch")

    class Embed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb, self.lin = torch.nn.Embedding(5, 8), torch.nn.Linear(8, 3)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.lin(self.emb(ids))

    torch.manual_seed(0)
    torch.jit.save(torch.jit.trace(Embed().eval(), (torch.tensor([[1, 2, 3, 4, 0, 1]]),)), tmp_path / "emb.pt")
    run = _cli("pytorch:onnx", str(tmp_path / "emb.pt"), "-o", str(tmp_path / "emb.onnx"))
    print(run.stdout, run.stderr)
    assert run.returncode == 0 and "parity PASS" in run.stdout, run.stdout + run.stderr
    assert "emb.weight" in _drawn_line(run.stdout, 5)
    check = _cli("check", "pytorch:onnx", str(tmp_path / "emb.pt"), "--against", str(tmp_path / "emb.onnx"))
    assert check.returncode == 0 and "parity PASS" in check.stdout, check.stdout + check.stderr
    _scale_table(tmp_path / "emb.onnx", tmp_path / "wrong.onnx", 5)
    wrong = _cli("check", "pytorch:onnx", str(tmp_path / "emb.pt"), "--against", str(tmp_path / "wrong.onnx"),
                 "--no-locate")
    assert wrong.returncode == 1 and "parity FAIL" in wrong.stdout, wrong.stdout + wrong.stderr


def test_keras_embedding_of_seven_rows(tmp_path: Path) -> None:
    """A Keras ``Embedding(7, 4)`` (Keras 3 wraps negative indices: ``where(ids < 0, ids + 7, ids)``
    before the gather): PASS where TensorFlow refused indices past 7 before; the table scaled FAILs."""
    tf = pytest.importorskip("tensorflow")
    import convert

    tf.keras.utils.set_random_seed(0)
    ids = tf.keras.Input((6,), dtype="int32", name="ids")
    model = tf.keras.Model(ids, tf.keras.layers.Dense(3)(tf.keras.layers.Embedding(7, 4)(ids)))
    model.save(tmp_path / "emb.keras")
    result = convert.convert(tmp_path / "emb.keras", to="onnx", out=tmp_path / "emb.onnx")
    assert result.report is not None, result.parity_error
    table = result.report.table()
    print(table)
    assert result.report.verdict == "PASS", table
    _drawn_line(table, 7)
    _scale_table(tmp_path / "emb.onnx", tmp_path / "wrong.onnx", 7)
    wrong = convert.verify(tmp_path / "emb.keras", tmp_path / "wrong.onnx", locate=False)
    assert wrong.verdict == "FAIL", wrong.table()


PADDLE_MODEL = '''
import sys, paddle
class Gathered(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.table = self.create_parameter([6, 4])
        self.fc = paddle.nn.Linear(4, 3)
    def forward(self, ids):
        return self.fc(paddle.gather(self.table, ids))
paddle.seed(0)
spec = [paddle.static.InputSpec([5], "int64", "ids")]
paddle.jit.save(paddle.jit.to_static(Gathered(), input_spec=spec, full_graph=True), sys.argv[1] + "/inference")
'''


@pytest.mark.paddle
def test_paddle_gather_of_six_rows(tmp_path: Path) -> None:
    """Paddle's ``gather`` on a 6-row parameter (written in a Paddle process of its own): PASS where
    Paddle Inference refused index 6..9 before; the table scaled FAILs. Paddle is not imported here
    (beside TensorFlow in one process it crashes): each step runs in a process of its own."""
    if importlib.util.find_spec("paddle") is None:
        pytest.skip("paddle is not installed")
    model = tmp_path / "model"
    model.mkdir()
    script = tmp_path / "build.py"  # to_static reads the layer's source: a file, not -c
    script.write_text(PADDLE_MODEL)
    built = subprocess.run([sys.executable, str(script), str(model)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    run = _cli("paddle:onnx", str(model), "-o", str(tmp_path / "g.onnx"))
    print(run.stdout, run.stderr)
    assert run.returncode == 0 and "parity PASS" in run.stdout, run.stdout + run.stderr
    _drawn_line(run.stdout, 6)
    _scale_table(tmp_path / "g.onnx", tmp_path / "wrong.onnx", 6)
    wrong = _cli("check", "paddle:onnx", str(model), "--against", str(tmp_path / "wrong.onnx"), "--no-locate")
    assert wrong.returncode == 1 and "parity FAIL" in wrong.stdout, wrong.stdout + wrong.stderr
