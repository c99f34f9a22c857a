"""Small TensorFlow models with control flow: custom ``tf.while_loop``s, ``tf.cond``, masked Keras RNNs.

Shared by ``test_tf_control_flow.py``. Weights are seeded and non-zero (biases included); inputs
with holes (whole time steps that the mask skips, in the middle of a sequence, not only at the end)
come from ``masked_inputs``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sequence_models import randomise  # beside this file

__all__ = ["export", "masked_inputs"]

T, C = 7, 3  # time steps, features of the sequence models


def _loops() -> object:
    """Two while loops: a data-dependent trip count, and a scan over time through TensorArrays."""
    import tensorflow as tf

    w = tf.constant(np.random.default_rng(3).standard_normal((C, C)).astype(np.float32) * 0.5)

    class Loops(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, T, C], tf.float32, name="x")])
        def __call__(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            # data-dependent trip count: 2..6 halvings plus i * sin(x)
            n = tf.cast(tf.reduce_sum(tf.abs(x)), tf.int32) % 5 + 2

            def halve(i: tf.Tensor, acc: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
                return i + 1, acc * 0.5 + tf.sin(x) * tf.cast(i, tf.float32)

            _, acc = tf.while_loop(lambda i, a: i < n, halve, [tf.constant(0), tf.zeros_like(x)])
            # a scan over time: h_t = tanh(x_t W + 0.5 h_{t-1}), every h_t stacked, and the running maximum
            steps = tf.TensorArray(tf.float32, size=T).unstack(tf.transpose(x, [1, 0, 2]))
            out = tf.TensorArray(tf.float32, size=T)

            def scan(t: tf.Tensor, h: tf.Tensor, top: tf.Tensor, out: tf.TensorArray) -> tuple[object, ...]:
                h = tf.tanh(tf.matmul(steps.read(t), w) + 0.5 * h)
                return t + 1, h, tf.maximum(top, h), out.write(t, h)

            h0 = tf.zeros_like(x[:, 0])
            _, _, top, out = tf.while_loop(lambda t, *_: t < T, scan, [tf.constant(0), h0, h0 - 9.0, out])
            return {"acc": acc, "seq": tf.transpose(out.stack(), [1, 0, 2]), "top": top}

    return Loops()


def _cond() -> object:
    """``tf.cond`` on the data: the branches differ in ops and in output shape ([N, 2] or [N, 4])."""
    import tensorflow as tf

    class Cond(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def __call__(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            y = tf.cond(tf.reduce_sum(x) > 0.0, lambda: tf.nn.relu(x[:, :2]) * 2.0 + 1.0,
                        lambda: tf.sin(x) - tf.reduce_mean(x, axis=1, keepdims=True))
            return {"y": y}

    return Cond()


def _reversed_write() -> object:
    """A loop writing its TensorArray back to front: not a scan output, refused."""
    import tensorflow as tf

    class Reversed(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, C], tf.float32, name="x")])
        def __call__(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            out = tf.TensorArray(tf.float32, size=4)

            def body(i: tf.Tensor, out: tf.TensorArray) -> tuple[object, ...]:
                return i + 1, out.write(3 - i, x * tf.cast(i, tf.float32))

            _, out = tf.while_loop(lambda i, _: i < 4, body, [tf.constant(0), out])
            return {"y": out.stack()}

    return Reversed()


def _masked() -> object:
    """``Masking`` before LSTM / GRU / SimpleRNN, Bidirectional, return_sequences both ways (one output each)."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(0)
    x = keras.Input((T, C), name="x")
    m = layers.Masking(0.0)(x)
    outs = [layers.LSTM(4, return_sequences=True)(m),
            layers.GRU(4)(m),
            layers.Bidirectional(layers.LSTM(3))(m),
            layers.Bidirectional(layers.GRU(3, return_sequences=True))(m),
            layers.SimpleRNN(3, return_sequences=True)(m)]
    return randomise(keras.Model(x, outs), 0, scale=0.5)


def _masked_text() -> object:
    """``Embedding(mask_zero=True)`` -> Bidirectional LSTM (every step) -> GRU (last step) -> Dense."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(1)
    x = keras.Input((T,), dtype="int32", name="tokens")
    h = layers.Embedding(20, 4, mask_zero=True)(x)
    h = layers.Bidirectional(layers.LSTM(3, return_sequences=True))(h)
    h = layers.GRU(4)(h)
    return randomise(keras.Model(x, layers.Dense(2)(h)), 1, scale=0.5)


_BUILDERS = {"loops": _loops, "cond": _cond, "reversed_write": _reversed_write, "masked": _masked,
             "masked_text": _masked_text}


def export(name: str, path: Path) -> Path:
    """Build model ``name`` and save it as a SavedModel at ``path``; return ``path``."""
    import tensorflow as tf

    model = _BUILDERS[name]()
    if hasattr(model, "export"):  # a Keras model
        model.export(str(path), verbose=False)
    else:
        tf.saved_model.save(model, str(path))
    return path


def masked_inputs(batch: int, seed: int, *, tokens: bool = False) -> np.ndarray:
    """A batch whose rows have masked time steps in the middle (and one at the end), not only padding."""
    rng = np.random.default_rng(seed)
    if tokens:
        x = rng.integers(1, 20, (batch, T)).astype(np.int32)
    else:
        x = rng.standard_normal((batch, T, C)).astype(np.float32)
    holes = [[2, 3], [1, 4, 6], [0, 5], [3]]
    for row in range(batch):
        for t in holes[row % len(holes)]:
            x[row, t] = 0
    return x
