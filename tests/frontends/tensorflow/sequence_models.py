"""Small Keras sequence models (LSTM, GRU, SimpleRNN, Bidirectional) with seeded, non-zero weights.

Shared by ``test_tf_recurrent.py`` and ``benchmarks/bench_tensorflow.py``. Every weight is drawn
at random (biases included: grappler would drop all-zero ones, hiding the bias path).
"""

from __future__ import annotations

import numpy as np

__all__ = ["CASES", "build", "randomise"]


def randomise(model: object, seed: int, scale: float = 0.4) -> object:
    """Give every weight of ``model`` a seeded N(0, scale^2) value (biases too); return the model."""
    rng = np.random.default_rng(seed)
    for layer in model.layers:  # type: ignore[attr-defined]
        weights = layer.get_weights()
        if weights:
            layer.set_weights([(rng.standard_normal(w.shape) * scale).astype(w.dtype) for w in weights])
    return model


def build(name: str, seed: int = 0, batch: int | None = None) -> object:
    """Return the Keras model ``name`` (one of ``CASES``); ``batch`` fixes the batch (TFLiteConverter
    then writes the recurrent layers as WHILE loops instead of refusing a free batch)."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(seed)
    if name == "text_bilstm":  # a BiLSTM text classifier: token ids -> embedding -> BiLSTM -> logits
        x = keras.Input((12,), dtype="int32", name="tokens", batch_size=batch)
        h = layers.Embedding(50, 8)(x)
        h = layers.Bidirectional(layers.LSTM(8))(h)
        return randomise(keras.Model(x, layers.Dense(3)(h)), seed)
    x = keras.Input((9, 5), name="x", batch_size=batch)
    if name == "mixed":  # every recogniser in one model (one load): each branch is one output
        outs = [layers.GRU(6)(layers.LSTM(8, return_sequences=True)(x)),  # stacked
                layers.SimpleRNN(5, activation="relu", return_sequences=True)(
                    layers.Bidirectional(layers.LSTM(6, return_sequences=True))(x)),
                layers.GRU(6, go_backwards=True, return_sequences=True, activation="relu")(x),
                layers.Bidirectional(layers.GRU(4), merge_mode="sum")(x)]
        return randomise(keras.Model(x, outs), seed)
    if name == "lstm_gru":  # stacked: every step of an LSTM into a GRU's last step
        h = layers.LSTM(8, return_sequences=True)(x)
        y = layers.GRU(6)(h)
    elif name == "bidir_rnn":  # Bidirectional LSTM (every step), then a ReLU SimpleRNN
        h = layers.Bidirectional(layers.LSTM(6, return_sequences=True))(x)
        y = layers.SimpleRNN(5, activation="relu", return_sequences=True)(h)
    elif name == "gru_backwards":  # go_backwards, every step, sigmoid/tanh swapped for relu
        y = layers.GRU(6, go_backwards=True, return_sequences=True, activation="relu")(x)
    elif name == "bidir_gru_last":
        y = layers.Bidirectional(layers.GRU(4), merge_mode="sum")(x)
    else:
        raise KeyError(name)
    return randomise(keras.Model(x, y), seed)


CASES = ("lstm_gru", "bidir_rnn", "gru_backwards", "bidir_gru_last", "text_bilstm", "mixed")
