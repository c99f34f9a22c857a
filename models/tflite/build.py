"""Write Keras nets as ``.tflite`` files with TensorFlow's own converter (float and int8).

Usage: ``python models/tflite/build.py OUT_DIR [NET ...]`` (nets: ``small_cnn``, ``mobilenet_v2``,
``resnet50`` and the keras.applications families of ``tests/frontends/tensorflow/tf_models.py``).
Each net gets seeded weights and recalibrated BatchNorm statistics (``tf_models.recalibrate``),
then ``tf.lite.TFLiteConverter.from_keras_model`` writes ``NET.tflite`` (float32) and
``NET_int8.tflite``: full-integer post-training quantization (int8 weights per channel, int8
activations calibrated on 16 seeded batches; float input and output, as TFLite's default).

The committed ``small_cnn.tflite`` and ``small_cnn_int8.tflite`` (the tests' no-TensorFlow and
bad-input cases) are ``python models/tflite/build.py models/tflite small_cnn``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "frontends" / "tensorflow"))

import tf_models

__all__ = ["NETS", "build"]

NETS = sorted({**tf_models.NETS, **tf_models.ZOO})


def _representative(model: object, batches: int = 16) -> Iterator[list[np.ndarray]]:
    rng = np.random.default_rng(1)
    shape = (1, *model.inputs[0].shape[1:])  # type: ignore[attr-defined]
    for _ in range(batches):
        yield [rng.standard_normal(shape).astype(np.float32)]


def build(net: str, folder: Path, *, int8: bool = True) -> dict[str, Path]:
    """Build ``net`` and write ``NET.tflite`` (and ``NET_int8.tflite``) under ``folder``."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = {**tf_models.NETS, **tf_models.ZOO}[net]()
    tf_models.recalibrate(model)
    folder.mkdir(parents=True, exist_ok=True)
    out = {"float": folder / f"{net}.tflite"}
    out["float"].write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    if int8:
        conv = tf.lite.TFLiteConverter.from_keras_model(model)
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        conv.representative_dataset = lambda: _representative(model)
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        out["int8"] = folder / f"{net}_int8.tflite"
        out["int8"].write_bytes(conv.convert())
    return out


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for name in sys.argv[2:] or NETS:
        for kind, path in build(name, Path(sys.argv[1])).items():
            print(f"{kind:5s} {path} ({path.stat().st_size} bytes)")
