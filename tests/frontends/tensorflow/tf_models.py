"""Build the Keras test nets with seeded weights and recalibrated BatchNorm statistics.

Keras' random initialisation leaves every BatchNormalization at mean 0, variance 1, scale 1,
offset 0, which hides layout and folding mistakes. Here scale and offset are drawn at random,
then one pass in training mode with momentum 0 sets the moving statistics to the batch's own,
so every layer sees activations with real spread. Classifier heads output logits (no softmax).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _mobilenet_v2() -> object:
    import keras

    return keras.applications.MobileNetV2(input_shape=(96, 96, 3), alpha=0.35, weights=None,
                                          classifier_activation=None)


def _resnet50() -> object:
    import keras

    return keras.applications.ResNet50(input_shape=(64, 64, 3), weights=None, classes=10,
                                       classifier_activation=None)


def _small_cnn() -> object:
    import keras
    from keras import layers

    inp = keras.Input((32, 32, 3), name="image")
    x = layers.Conv2D(8, 3, padding="same", activation="relu")(inp)
    x = layers.BatchNormalization()(x)
    y = layers.DepthwiseConv2D(3, strides=2, padding="same")(x)
    y = layers.Activation("swish")(y)
    z = layers.Conv2D(8, 1, strides=2, padding="valid")(x)
    x = layers.Concatenate()([y, z])
    x = layers.AveragePooling2D(3, strides=2, padding="same")(x)
    x = layers.MaxPooling2D(3, strides=1, padding="same")(x)
    # Not a zero Pad before MaxPool: ONNX Runtime's PadFusion folds it into MaxPool's pads, which
    # pad with -inf, so ORT (optimisations on) then disagrees with the ONNX semantics.
    x = layers.ZeroPadding2D(((1, 0), (0, 1)))(x)
    x = layers.Conv2D(12, 3, activation="tanh")(x)
    x = layers.Flatten()(x)
    x = layers.Dense(16, activation="sigmoid")(x)
    out = layers.Dense(5)(x)
    return keras.Model(inp, out, name="small_cnn")


NETS: dict[str, Callable[[], object]] = {
    "mobilenet_v2": _mobilenet_v2,
    "resnet50": _resnet50,
    "small_cnn": _small_cnn,
}


def recalibrate(model: object, seed: int = 0) -> None:
    """Draw BatchNorm scale/offset at random and set the moving statistics from one batch."""
    import keras

    rng = np.random.default_rng(seed)
    keras.utils.set_random_seed(seed)
    bns = [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]  # type: ignore[attr-defined]
    for layer in bns:
        gamma, beta, mean, var = layer.get_weights()
        layer.set_weights([rng.uniform(0.5, 1.5, gamma.shape).astype(np.float32),
                           rng.uniform(-0.2, 0.2, beta.shape).astype(np.float32), mean, var])
        layer.momentum = 0.0
    shape = (8, *model.inputs[0].shape[1:])  # type: ignore[attr-defined]
    model(rng.standard_normal(shape).astype(np.float32), training=True)  # type: ignore[operator]


def build(net: str, folder: Path) -> dict[str, Path]:
    """Build ``net`` and save it as a SavedModel folder and a ``.keras`` file under ``folder``."""
    import keras

    keras.utils.set_random_seed(0)
    model = NETS[net]()
    recalibrate(model)
    folder.mkdir(parents=True, exist_ok=True)
    saved = folder / f"{net}_savedmodel"
    model.export(str(saved), verbose=False)  # type: ignore[attr-defined]
    keras_file = folder / f"{net}.keras"
    model.save(str(keras_file))  # type: ignore[attr-defined]
    return {"savedmodel": saved, "keras": keras_file}
