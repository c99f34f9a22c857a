"""Our reader of TensorFlow's tensor bundle (a SavedModel's variables) against TensorFlow's own reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from convert.ir import ModelFormatError

pytestmark = pytest.mark.tensorflow
pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SavedModel whose variables have several dtypes and ranks (one large enough for many blocks)."""
    import tensorflow as tf

    rng = np.random.default_rng(0)

    class Mixed(tf.Module):
        def __init__(self) -> None:
            self.scalar = tf.Variable(np.float32(1.5))
            self.kernel = tf.Variable(rng.standard_normal((3, 3, 8, 16), dtype=np.float32))
            self.half = tf.Variable(rng.standard_normal(40).astype(np.float16))
            self.steps = tf.Variable(np.arange(7, dtype=np.int64))
            self.table = [tf.Variable(rng.standard_normal((i + 1, 5)).astype(np.float64)) for i in range(300)]

        @tf.function(input_signature=[tf.TensorSpec([2], tf.float32)])
        def __call__(self, x: tf.Tensor) -> tf.Tensor:
            return x * self.scalar

    module = Mixed()
    path = tmp_path_factory.mktemp("bundle") / "mixed"
    tf.saved_model.save(module, str(path))
    return path / "variables" / "variables"


def test_every_tensor_reads_as_tensorflow_reads_it(saved: Path) -> None:
    import tensorflow as tf

    from convert.frontends.tensorflow.bundle import Bundle

    bundle = Bundle(saved)
    reader = tf.train.load_checkpoint(str(saved))
    keys = reader.get_variable_to_shape_map()
    assert set(bundle.entries) == set(keys) and len(keys) > 300  # several data blocks in the index
    for key in keys:
        if key == "_CHECKPOINTABLE_OBJECT_GRAPH":
            assert bundle.string(key) == reader.get_tensor(key)
            continue
        got, want = bundle.array(key), reader.get_tensor(key)
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want), key
        assert not got.flags.owndata and not got.flags.writeable, key  # a view of the mapped file
    dtypes = {e.dtype for e in bundle.entries.values()}
    assert {np.dtype(t) for t in (np.float32, np.float16, np.int64, np.float64)} <= dtypes


def test_a_damaged_index_names_what_is_wrong(tmp_path: Path) -> None:
    from convert.frontends.tensorflow.bundle import Bundle, read_table

    with pytest.raises(ValueError, match="shorter than a table footer"):
        read_table(b"\x00" * 10)
    with pytest.raises(ValueError, match="no table magic"):
        read_table(b"\x00" * 100)
    prefix = tmp_path / "variables"
    (tmp_path / "variables.index").write_bytes(b"\x01" * 60)
    with pytest.raises(ModelFormatError, match=r"variables\.index: not a readable variables index"):
        Bundle(prefix)


def test_a_truncated_shard_names_the_variable_and_its_bytes(saved: Path, tmp_path: Path) -> None:
    import shutil

    from convert.frontends.tensorflow.bundle import Bundle

    for f in saved.parent.iterdir():
        shutil.copy(f, tmp_path / f.name)
    bundle = Bundle(tmp_path / "variables")
    tensors = [(k, e) for k, e in bundle.entries.items() if e.dtype != np.dtype(object)]
    key, entry = max(tensors, key=lambda kv: kv[1].offset)
    data = bundle.shard_path(entry.shard)
    data.write_bytes(data.read_bytes()[: entry.offset + 1])
    with pytest.raises(ModelFormatError, match=r"past the file's end") as info:
        Bundle(tmp_path / "variables").array(key)
    assert key in str(info.value) and data.name in str(info.value)
