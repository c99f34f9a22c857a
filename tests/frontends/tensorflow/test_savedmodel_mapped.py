"""A SavedModel's weights are read as views of its mapped variables file, never through TensorFlow.

The references here are TensorFlow's own: its checkpoint reader for every stored tensor, and the
SavedModel's signature run by TensorFlow for the converted model's outputs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.tensorflow
pytest.importorskip("tensorflow")

ROOT = Path(__file__).resolve().parents[3]
RTOL = 1e-5


def _cnn(folder: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """Conv with bias -> BatchNorm -> ReLU, a depthwise conv -> BatchNorm, Dense: seeded, recalibrated.

    Returns the SavedModel and the first Conv's kernel and its BatchNorm's gamma, variance, epsilon.
    """
    import keras
    import tf_models
    from keras import layers

    keras.utils.set_random_seed(3)
    inp = keras.Input((24, 24, 3), name="image")
    conv, bn = layers.Conv2D(8, 3, use_bias=True), layers.BatchNormalization()
    x = layers.ReLU()(bn(conv(inp)))
    x = layers.DepthwiseConv2D(3, use_bias=False)(x)
    x = layers.BatchNormalization()(x)
    x = layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inp, layers.Dense(4)(x))
    tf_models.recalibrate(model, seed=3)
    path = folder / "cnn"
    model.export(str(path), verbose=False)
    return path, {"kernel": np.asarray(conv.kernel), "gamma": np.asarray(bn.gamma),
                  "variance": np.asarray(bn.moving_variance), "eps": np.asarray(bn.epsilon)}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    return _cnn(tmp_path_factory.mktemp("mapped"))


@pytest.fixture(scope="module")
def cnn(built: tuple[Path, dict[str, np.ndarray]]) -> Path:
    return built[0]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convert", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


def test_savedmodel_variables_are_mapped_and_the_conversion_matches_tensorflow(cnn: Path, tmp_path: Path) -> None:
    import onnx

    from convert.frontends.tensorflow.graph import read_graph

    graph = read_graph(cnn)
    assert graph.weights.startswith("13 variables mapped"), graph.weights
    weights = [n.attrs["value"] for n in graph.nodes if n.op == "Const" and n.name.endswith("ReadVariableOp")]
    assert len(weights) == 13 and all(not w.flags.owndata for w in weights)
    r = _cli("tensorflow:onnx", str(cnn), "-o", str(tmp_path / "m.onnx"), "--tol", str(RTOL))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "13 variables mapped" in r.stderr and "PASS" in r.stdout, r.stdout + r.stderr
    # Both batch norms are folded into their convolutions (weight scale, bias).
    ops = [n.op_type for n in onnx.load(str(tmp_path / "m.onnx")).graph.node]
    assert ops.count("Conv") == 2 and "Mul" not in ops and ops.count("Add") == 1, ops  # Add: the Dense's bias


def test_folded_batch_norm_is_rounded_once(built: tuple[Path, dict[str, np.ndarray]], tmp_path: Path) -> None:
    """The Conv's folded weight is W * gamma / sqrt(var + eps) computed in float64, rounded once."""
    import onnx
    from onnx import numpy_helper

    path, layer = built
    r = _cli("tensorflow:onnx", str(path), "-o", str(tmp_path / "m.onnx"), "--no-check")
    assert r.returncode == 0, r.stderr[-2000:]
    proto = onnx.load(str(tmp_path / "m.onnx"))
    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    weight = inits[next(n for n in proto.graph.node if n.op_type == "Conv").input[1]]
    # The reference: Keras' own layer variables, the fold written here in float64.
    f64 = {k: v.astype(np.float64) for k, v in layer.items()}
    scale = f64["gamma"] / np.sqrt(f64["variance"] + f64["eps"])
    exact = f64["kernel"].transpose(3, 2, 0, 1) * scale.reshape(-1, 1, 1, 1)
    assert np.array_equal(weight, exact.astype(np.float32)), np.abs(weight - exact).max()


def test_a_variable_read_by_another_op_falls_back_to_freezing(tmp_path: Path) -> None:
    import tensorflow as tf

    class Lookup(tf.Module):
        def __init__(self) -> None:
            self.table = tf.Variable(np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32))
            self.scale = tf.Variable(np.float32(2.0))

        @tf.function(input_signature=[tf.TensorSpec([3], tf.int32, name="ids")])
        def __call__(self, ids: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"y": tf.nn.embedding_lookup(self.table, ids) * self.scale}

    module = Lookup()
    path = tmp_path / "lookup"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.__call__})

    from convert.frontends.tensorflow.graph import read_graph

    graph = read_graph(path)
    assert graph.weights.startswith("frozen by TensorFlow (ResourceGather node"), graph.weights
    r = _cli("tensorflow:onnx", str(path), "-o", str(tmp_path / "m.onnx"))
    assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr[-2000:]


@pytest.mark.parametrize("damage", ["truncated data", "garbage index"])
def test_damaged_variables_are_one_line_exit_2(cnn: Path, tmp_path: Path, damage: str) -> None:
    import shutil

    path = tmp_path / "damaged"
    shutil.copytree(cnn, path)
    if damage == "truncated data":
        data = next((path / "variables").glob("variables.data-*"))
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
        expect = "past the file's end"
    else:
        index = path / "variables" / "variables.index"
        index.write_bytes(b"\x00" * 100)
        expect = "not a readable variables index"
    r = _cli("tensorflow:onnx", str(path), "-o", str(tmp_path / "m.onnx"))
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and expect in lines[0], r.stderr[-2000:]
    assert not (tmp_path / "m.onnx").exists()


def _wide(folder: Path, fmt: str) -> tuple[Path, int]:
    """One 8192 x 8192 Dense layer (256 MiB of weights) as a SavedModel (tf.Module) or a .keras file."""
    import tensorflow as tf

    size = 8192
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((size, size), dtype=np.float32) / np.float32(np.sqrt(size))).astype(np.float32)
    b = rng.standard_normal(size, dtype=np.float32)
    if fmt == "keras":
        import keras

        inp = keras.Input((size,), name="x")
        dense = keras.layers.Dense(size)
        model = keras.Model(inp, dense(inp))
        dense.set_weights([w, b])
        path = folder / "wide.keras"
        model.save(str(path))
        return path, w.nbytes

    class Wide(tf.Module):
        def __init__(self) -> None:
            self.w = tf.Variable(w)
            self.b = tf.Variable(b)

        @tf.function(input_signature=[tf.TensorSpec([1, size], tf.float32, name="x")])
        def __call__(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"y": tf.matmul(x, self.w) + self.b}

    module = Wide()
    path = folder / "wide"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.__call__})
    return path, w.nbytes


# Peak anonymous memory of the conversion (TensorFlow's import excluded), as a share of the weights.
# A SavedModel's weights stay in its mapped file: measured 8 MiB for 256 MiB (TensorFlow's freezing
# took 4.1 GiB). Keras holds a .keras model's weights in memory (its loader itself peaks at 7x
# their size and keeps 4x: measured before this region); converting its graph adds no copy.
MEMORY_SHARE = {"savedmodel": 0.25, "keras": 0.25}


@pytest.mark.parametrize("fmt", list(MEMORY_SHARE))
def test_converting_holds_no_copy_of_the_weights(tmp_path: Path, fmt: str) -> None:
    import tensorflow as tf

    path, weights = _wide(tmp_path, fmt)
    out = tmp_path / "wide.onnx"
    code = "\n".join([
        "import sys",
        "from pathlib import Path",
        f"sys.path.insert(0, {str(ROOT / 'tests')!r})",
        "import convert, rss",
        "from convert.frontends.tensorflow import graph, loader",
        "from convert.exporters.onnx import EXPORTER",
        "from convert.ir import Options, passes",
        "graph.tf_module()  # TensorFlow's import is not the conversion's",
        # Loading a .keras file is Keras' work, outside the region; a SavedModel's load is ours.
        f"parts = list(graph._concrete_function(Path({str(path)!r}), 'serving_default')) if {fmt == 'keras'} else None",
        "with rss.PeakRssAnon() as peak:",
        f"    tg = graph.graph_from_function(parts, source='wide') if parts else graph.read_graph(Path({str(path)!r}))",
        "    model = loader.convert_graph(tg, Options())",
        "    passes.standard_pipeline()(model)",
        f"    EXPORTER.save(model, Path({str(out)!r}), Options())",
        "print('PEAK', peak.peak)",
        "print('WEIGHTS', tg.weights)",
    ])
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    peak = int(r.stdout.split("PEAK")[1].split()[0])
    print(f"peak RssAnon converting {weights / 2**20:.0f} MiB of weights ({fmt}): {peak / 2**20:.1f} MiB")
    assert ("2 variables mapped" if fmt == "savedmodel" else "2 variables shared") in r.stdout, r.stdout
    assert peak < weights * MEMORY_SHARE[fmt]
    import onnxruntime as ort

    x = np.random.default_rng(1).standard_normal((1, 8192)).astype(np.float32)
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    if fmt == "keras":
        import keras

        want = np.asarray(keras.saving.load_model(str(path))(x))
    else:
        want = tf.saved_model.load(str(path)).signatures["serving_default"](x=tf.constant(x))["y"].numpy()
    assert np.abs(got - want).max() / np.abs(want).max() <= RTOL
