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


def _app(name: str, size: int, **kwargs: object) -> Callable[[], object]:
    def make() -> object:
        import keras

        return getattr(keras.applications, name)(input_shape=(size, size, 3), weights=None,
                                                 classifier_activation=None, **kwargs)

    return make


NETS: dict[str, Callable[[], object]] = {
    "mobilenet_v2": _mobilenet_v2,
    "resnet50": _resnet50,
    "small_cnn": _small_cnn,
    # Keras wraps ConvNeXt's grouped (depthwise) convolutions in XLA-compiled nested functions.
    "convnext_tiny": _app("ConvNeXtTiny", 32, classes=10),
    "nasnet_mobile": _app("NASNetMobile", 32, classes=10),
}
# More keras.applications families at their smallest inputs.
ZOO: dict[str, Callable[[], object]] = {
    "mobilenet_v3_small": _app("MobileNetV3Small", 96),
    "efficientnet_b0": _app("EfficientNetB0", 64, classes=10),
    "densenet121": _app("DenseNet121", 64, classes=10),
    "xception": _app("Xception", 71, classes=10),
    "vgg16": _app("VGG16", 32, classes=10),
    "inception_v3": _app("InceptionV3", 75, classes=10),
}


def recalibrate(model: object, seed: int = 0) -> None:
    """Draw BatchNorm scale/offset at random and set the moving statistics from one batch.

    LayerNormalization scale/offset are drawn too, and ConvNeXt's LayerScale (1e-6 at
    initialisation) is drawn from [0.1, 0.5] so that its blocks contribute.
    """
    import keras

    rng = np.random.default_rng(seed)
    keras.utils.set_random_seed(seed)
    for layer in model.layers:  # type: ignore[attr-defined]
        if isinstance(layer, keras.layers.LayerNormalization) and layer.gamma is not None:
            layer.gamma.assign(rng.uniform(0.5, 1.5, layer.gamma.shape).astype(np.float32))
            if layer.beta is not None:
                layer.beta.assign(rng.uniform(-0.2, 0.2, layer.beta.shape).astype(np.float32))
        elif type(layer).__name__ == "LayerScale":  # ConvNeXt: initialised to 1e-6, which mutes every block
            layer.gamma.assign(rng.uniform(0.1, 0.5, layer.gamma.shape).astype(np.float32))
    bns = [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]  # type: ignore[attr-defined]
    for layer in bns:
        if layer.gamma is not None:
            layer.gamma.assign(rng.uniform(0.5, 1.5, layer.gamma.shape).astype(np.float32))
        if layer.beta is not None:
            layer.beta.assign(rng.uniform(-0.2, 0.2, layer.beta.shape).astype(np.float32))
        layer.momentum = 0.0
    shape = (8, *model.inputs[0].shape[1:])  # type: ignore[attr-defined]
    model(rng.standard_normal(shape).astype(np.float32), training=True)  # type: ignore[operator]


def build(net: str, folder: Path, *, savedmodel: bool = True) -> dict[str, Path]:
    """Build ``net`` and save it as a ``.keras`` file (and a SavedModel folder) under ``folder``."""
    import keras

    keras.utils.set_random_seed(0)
    model = {**NETS, **ZOO}[net]()
    recalibrate(model)
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    if savedmodel:
        out["savedmodel"] = folder / f"{net}_savedmodel"
        model.export(str(out["savedmodel"]), verbose=False)  # type: ignore[attr-defined]
    out["keras"] = folder / f"{net}.keras"
    model.save(str(out["keras"]))  # type: ignore[attr-defined]
    return out


def float64_run(net: str, keras_file: Path, x_nhwc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (TF float32 result, the same net's result in float64) on ``x_nhwc``.

    The float64 net is built with Keras' dtype policy ``float64`` and the saved weights; the
    policy is restored afterwards.
    """
    import keras

    m32 = keras.saving.load_model(str(keras_file), compile=False)
    r32 = np.asarray(m32(x_nhwc, training=False))  # type: ignore[operator]
    policy, floatx = keras.config.dtype_policy(), keras.config.floatx()
    try:
        keras.config.set_floatx("float64")
        keras.config.set_dtype_policy("float64")
        m64 = {**NETS, **ZOO}[net]()
        m64.set_weights([w.astype(np.float64) for w in m32.get_weights()])  # type: ignore[attr-defined]
        r64 = np.asarray(m64(x_nhwc.astype(np.float64), training=False))  # type: ignore[operator]
    finally:
        keras.config.set_floatx(floatx)
        keras.config.set_dtype_policy(policy)
    return r32, r64
