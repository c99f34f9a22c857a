"""Small Keras models with the ops of decoders, segmentation, super-resolution and audio nets.

Each builder returns a seeded ``keras.Model``: a convolution first (so the SavedModel has
variables), then the op under test. Used by ``test_tf_decoder_ops.py`` (SavedModel -> ONNX
against TensorFlow) and ``tests/frontends/tflite/test_tflite_decoder_ops.py`` (``.tflite`` ->
ONNX against TFLite's interpreter). Odd and even sizes throughout: SAME padding and the
dilated-convolution pattern pad and crop differently for each.
"""

from __future__ import annotations

import os
from collections.abc import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

__all__ = ["CASES", "INT8_CASES", "build", "deeplab_decoder", "espcn", "unet"]


def _image(c: int = 3, h: int = 5, w: int = 6) -> tuple[object, object]:
    import keras

    inp = keras.Input((h, w, c), name="image")
    return inp, keras.layers.Conv2D(4, 3, padding="same")(inp)


def _conv_transpose(kernel: int, strides: int, padding: str, output_padding: int | None = None,
                    size: tuple[int, int] = (5, 6)) -> Callable[[], object]:
    def make() -> object:
        import keras

        inp, x = _image(h=size[0], w=size[1])
        y = keras.layers.Conv2DTranspose(3, kernel, strides=strides, padding=padding,
                                         output_padding=output_padding)(x)
        return keras.Model(inp, y)

    return make


def _conv_transpose_bn() -> object:
    """Conv2DTranspose without bias, then BatchNormalization: the batch norm's scale folds into the
    ConvTranspose's weight along its output-channel axis (1 of [in, out, H, W])."""
    import keras

    inp, x = _image(h=6, w=5)
    y = keras.layers.Conv2DTranspose(5, 3, strides=2, padding="same", use_bias=False)(x)
    y = keras.layers.BatchNormalization()(y)
    return keras.Model(inp, keras.layers.ReLU()(y))


def _lambda(fn: Callable[[object], object], c: int = 3, h: int = 5, w: int = 6) -> Callable[[], object]:
    def make() -> object:
        import keras

        inp, x = _image(c, h, w)
        return keras.Model(inp, keras.layers.Lambda(fn)(x))

    return make


def _upsample_bilinear() -> object:
    import keras

    inp, x = _image()
    return keras.Model(inp, keras.layers.UpSampling2D(2, interpolation="bilinear")(x))


def _upsample_nearest() -> object:
    import keras

    inp, x = _image()
    return keras.Model(inp, keras.layers.UpSampling2D((2, 3), interpolation="nearest")(x))


def _resize(size: tuple[int, int], method: str) -> Callable[[object], object]:
    def fn(t: object) -> object:
        import tensorflow as tf

        return tf.image.resize(t, size, method)

    return fn


def _raw_resize(op: str, size: tuple[int, int], align: bool, half: bool) -> Callable[[object], object]:
    def fn(t: object) -> object:
        import tensorflow as tf

        return getattr(tf.raw_ops, op)(images=t, size=size, align_corners=align, half_pixel_centers=half)

    return fn


def _depth_to_space(block: int) -> Callable[[object], object]:
    def fn(t: object) -> object:
        import tensorflow as tf

        return tf.nn.depth_to_space(t, block)

    return fn


def _space_to_depth(block: int) -> Callable[[object], object]:
    def fn(t: object) -> object:
        import tensorflow as tf

        return tf.nn.space_to_depth(t, block)

    return fn


def _depth_to_space_model(block: int) -> Callable[[], object]:
    def make() -> object:
        import keras

        inp = keras.Input((5, 6, 3), name="image")
        x = keras.layers.Conv2D(4 * block * block, 3, padding="same")(inp)
        return keras.Model(inp, keras.layers.Lambda(_depth_to_space(block))(x))

    return make


def _conv1d(dilation: int, padding: str, length: int = 21) -> Callable[[], object]:
    def make() -> object:
        import keras

        inp = keras.Input((length, 3), name="audio")
        x = keras.layers.Conv1D(4, 3, dilation_rate=dilation, padding=padding)(inp)
        return keras.Model(inp, x)

    return make


def _tcn() -> object:
    """WaveNet/TCN-style stack: causal Conv1Ds with dilations 1, 2, 4, gated, with residual adds."""
    import keras
    from keras import layers

    inp = keras.Input((23, 4), name="audio")
    x = layers.Conv1D(8, 1)(inp)
    for d in (1, 2, 4):
        f = layers.Conv1D(8, 3, dilation_rate=d, padding="causal", activation="tanh")(x)
        g = layers.Conv1D(8, 3, dilation_rate=d, padding="causal", activation="sigmoid")(x)
        x = layers.Add()([x, layers.Conv1D(8, 1)(layers.Multiply()([f, g]))])
    x = layers.Conv1D(6, 2, dilation_rate=2, padding="same")(x)
    return keras.Model(inp, x)


def unet() -> object:
    """A tiny U-Net: conv blocks with batch norm, max pooling down, Conv2DTranspose up with skip
    concatenations, a bilinear upsampling branch, a pixel shuffle (DepthToSpace) head."""
    import keras
    import tensorflow as tf
    from keras import layers

    def block(x: object, c: int) -> object:
        x = layers.Conv2D(c, 3, padding="same", use_bias=False)(x)
        x = layers.BatchNormalization()(x)
        return layers.ReLU()(x)

    inp = keras.Input((20, 24, 3), name="image")
    e1 = block(inp, 8)
    e2 = block(layers.MaxPooling2D(2)(e1), 12)
    b = block(layers.MaxPooling2D(2)(e2), 16)
    d2 = layers.Conv2DTranspose(12, 3, strides=2, padding="same")(b)
    d2 = block(layers.Concatenate()([d2, e2]), 12)
    d1 = layers.Conv2DTranspose(8, 2, strides=2, padding="valid")(d2)
    up = layers.UpSampling2D(4, interpolation="bilinear")(b)
    d1 = block(layers.Concatenate()([d1, e1, up]), 8)
    y = layers.Conv2D(8, 3, padding="same")(d1)
    y = layers.Lambda(lambda t: tf.nn.depth_to_space(t, 2))(y)
    return keras.Model(inp, y, name="tiny_unet")


def deeplab_decoder() -> object:
    """A DeepLab-style net (32x32): strided conv + BN stem, an ASPP of a 1x1 and two dilated 3x3
    convolutions and an image-pooling branch, bilinear upsampling and a low-level skip."""
    import keras
    import tensorflow as tf
    from keras import layers

    def block(x: object, filters: int, kernel: int = 3, stride: int = 1, dilation: int = 1) -> object:
        x = layers.Conv2D(filters, kernel, stride, padding="same", dilation_rate=dilation, use_bias=False)(x)
        return layers.ReLU()(layers.BatchNormalization()(x))

    inp = keras.Input((32, 32, 3), name="image")
    low = block(inp, 8, stride=2)  # 16x16
    deep = block(block(low, 16, stride=2), 16)  # 8x8
    pooled = layers.GlobalAveragePooling2D(keepdims=True)(deep)
    pooled = layers.UpSampling2D(8, interpolation="bilinear")(block(pooled, 8, kernel=1))
    aspp = layers.Concatenate()([block(deep, 8, kernel=1), block(deep, 8, dilation=2), block(deep, 8, dilation=3),
                                 pooled])
    x = layers.Lambda(lambda t: tf.image.resize(t, (16, 16), "bilinear"))(block(aspp, 16, kernel=1))
    x = block(layers.Concatenate()([x, block(low, 4, kernel=1)]), 16)
    x = layers.Conv2D(5, 1)(x)
    return keras.Model(inp, layers.UpSampling2D(2, interpolation="bilinear")(x))


def espcn() -> object:
    """ESPCN super-resolution (x3): conv 5x5 -> conv 3x3 (tanh) -> conv to 9 channels -> DepthToSpace."""
    import keras
    import tensorflow as tf
    from keras import layers

    inp = keras.Input((24, 24, 1), name="lowres")
    x = layers.Conv2D(32, 5, padding="same", activation="tanh")(inp)
    x = layers.Conv2D(16, 3, padding="same", activation="tanh")(x)
    x = layers.Conv2D(9, 3, padding="same")(x)
    return keras.Model(inp, layers.Lambda(lambda t: tf.nn.depth_to_space(t, 3))(x))


# name -> builder. Ids say the variant: kernel, stride, padding; resize mode; block size; dilation.
CASES: dict[str, Callable[[], object]] = {
    "convT_k3_s2_same": _conv_transpose(3, 2, "same"),
    "convT_k4_s2_same": _conv_transpose(4, 2, "same"),
    "convT_k1_s2_same": _conv_transpose(1, 2, "same"),  # kernel < stride: output_padding 1
    "convT_k3_s1_same": _conv_transpose(3, 1, "same"),
    "convT_k3_s2_valid": _conv_transpose(3, 2, "valid"),
    "convT_k2_s2_valid": _conv_transpose(2, 2, "valid", size=(4, 7)),
    "convT_k3_s2_valid_outpad1": _conv_transpose(3, 2, "valid", output_padding=1),
    "convT_k3_s2_same_outpad0": _conv_transpose(3, 2, "same", output_padding=0, size=(6, 5)),  # 2n - 1
    "convT_no_bias_batchnorm": _conv_transpose_bn,
    "upsample_bilinear_x2": _upsample_bilinear,  # half_pixel_centers
    "tile_upsampling2d_nearest_2x3": _upsample_nearest,  # ExpandDims -> Tile -> Reshape, twice
    "resize_bilinear_9x13": _lambda(_resize((9, 13), "bilinear")),
    "resize_bilinear_down_3x4": _lambda(_resize((3, 4), "bilinear"), h=7, w=9),
    "resize_bilinear_align_corners": _lambda(_raw_resize("ResizeBilinear", (9, 13), True, False)),
    "resize_bilinear_asymmetric": _lambda(_raw_resize("ResizeBilinear", (9, 13), False, False)),
    "resize_nearest_half_pixel_x2": _lambda(_resize((10, 12), "nearest")),
    "resize_nearest_half_pixel_9x13": _lambda(_resize((9, 13), "nearest")),
    "resize_nearest_align_corners": _lambda(_raw_resize("ResizeNearestNeighbor", (9, 13), True, False)),
    "resize_nearest_asymmetric": _lambda(_raw_resize("ResizeNearestNeighbor", (10, 11), False, False)),
    "depth_to_space_2": _depth_to_space_model(2),
    "depth_to_space_3": _depth_to_space_model(3),
    "space_to_depth_2": _lambda(_space_to_depth(2), h=6, w=8),
    "space_to_depth_3": _lambda(_space_to_depth(3), h=6, w=9),
    "conv1d_dilation2_causal": _conv1d(2, "causal"),
    "conv1d_dilation4_causal": _conv1d(4, "causal", length=22),
    "conv1d_dilation2_same": _conv1d(2, "same"),
    "conv1d_dilation4_same": _conv1d(4, "same", length=22),
    "conv1d_dilation2_valid": _conv1d(2, "valid"),
    "tcn_dilations_1_2_4": _tcn,
}
# Cases also checked as int8 .tflite files (full-integer post-training quantization). Not
# DEPTH_TO_SPACE: TFLite's reference-kernel interpreter (the int8 oracle) has no int8 version 2 of it.
INT8_CASES = ["convT_k3_s2_same", "convT_k3_s2_valid", "upsample_bilinear_x2", "resize_bilinear_align_corners",
              "conv1d_dilation2_causal",
              "space_to_depth_2"]


def build(name: str) -> object:
    """Build case ``name`` (or ``"unet"``) with seed 0 and recalibrated batch-norm statistics."""
    import keras
    import tf_models

    keras.utils.set_random_seed(0)
    nets = {"unet": unet, "deeplab_decoder": deeplab_decoder, "espcn": espcn}
    model = nets[name]() if name in nets else CASES[name]()
    tf_models.recalibrate(model)
    return model
