"""Write the fuzz seed corpus: one small valid model per input form, deterministic.

    python tests/fuzz/make_seeds.py            # rewrites tests/fuzz/seeds/

Each seed is a folder ``seeds/<name>/`` holding the model's files and ``case.json`` (the route
and the file names in command-line order). The seeds are committed so the fuzz tests need no
framework to build them; this script is how they were made (the Paddle JSON seed needs paddle,
the PyTorch seed torch; the others need only this repository and onnx).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SEEDS = HERE / "seeds"
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "models" / "caffe"),
                str(ROOT / "tests" / "frontends" / "paddle")]


def _case(folder: Path, route: str, files: list[str]) -> None:
    (folder / "case.json").write_text(json.dumps({"route": route, "files": files}, indent=1) + "\n")


def onnx_seeds() -> None:
    import onnx
    from onnx import numpy_helper, parser

    rng = np.random.default_rng(0)
    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    small (float[1, 3, 8, 8] x) => (float[1, 6] y) {
        c = Conv <kernel_shape = [3, 3], pads = [1, 1, 1, 1]> (x, w, b)
        n = BatchNormalization (c, g, beta, mean, var)
        r = Relu (n)
        p = MaxPool <kernel_shape = [2, 2], strides = [2, 2]> (r)
        s = Shape (p)
        shp = Constant <value = int64[2] {1, -1}> ()
        f = Reshape (p, shp)
        k = Slice (f, st, en)
        m = MatMul (k, fw)
        a = Add (m, fb)
        y = Softmax <axis = 1> (a)
    }
    """
    weights = {
        "w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32) / 5,
        "b": rng.standard_normal(4).astype(np.float32) / 10,
        "g": rng.uniform(0.5, 1.5, 4).astype(np.float32),
        "beta": rng.standard_normal(4).astype(np.float32) / 10,
        "mean": rng.standard_normal(4).astype(np.float32) / 10,
        "var": rng.uniform(0.5, 2.0, 4).astype(np.float32),
        "st": np.array([0], np.int64), "en": np.array([64], np.int64),
        "fw": rng.standard_normal((64, 6)).astype(np.float32) / 8,
        "fb": rng.standard_normal(6).astype(np.float32) / 10,
    }
    model = parser.parse_model(text)
    for name, arr in weights.items():
        model.graph.initializer.append(numpy_helper.from_array(arr, name))
    onnx.checker.check_model(model, full_check=True)
    for route in ("onnx", "onnx_caffe"):
        folder = SEEDS / route
        folder.mkdir(parents=True, exist_ok=True)
        onnx.save(model, str(folder / "m.onnx"))
        _case(folder, "onnx:caffe" if route == "onnx_caffe" else "onnx:onnx", ["m.onnx"])
    ext = SEEDS / "onnx_external"
    ext.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(ext / "m.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.onnx.data", size_threshold=0)
    _case(ext, "onnx:onnx", ["m.onnx"])


def caffe_seed() -> None:
    import build_nets

    b = build_nets.NetBuilder("net", seed=0)
    b.input("data", (1, 3, 8, 8))
    b.conv("conv1", "data", "conv1", 3, 4, 3, p=1)
    b.bn_scale("conv1", "conv1", 4)
    b.relu("relu1", "conv1")
    b.pool("pool1", "conv1", "pool1", 2, 2)
    b.conv("conv2", "pool1", "conv2", 4, 4, 1)
    b.layer("Eltwise", "sum", ["pool1", "conv2"], ["sum"])
    b.layer("Concat", "cat", ["sum", "pool1"], ["cat"])
    b.ip("fc", "cat", "fc", 8 * 4 * 4, 6)
    b.layer("Softmax", "prob", ["fc"], ["prob"])
    folder = SEEDS / "caffe"
    proto, model = b.save(folder)
    _case(folder, "caffe:onnx", [proto.name, model.name])


DARKNET_CFG = """\
[net]
batch=1
width=16
height=16
channels=3

[convolutional]
batch_normalize=1
filters=4
size=3
stride=1
pad=1
activation=leaky

[maxpool]
size=2
stride=2

[convolutional]
filters=4
size=1
stride=1
pad=1
activation=mish

[shortcut]
from=-2
activation=linear

[route]
layers=-1,-3

[upsample]
stride=2

[convolutional]
filters=18
size=1
stride=1
pad=1
activation=linear

[yolo]
mask=0,1,2
anchors=2,3, 4,5, 6,7
classes=1
num=3
"""


def darknet_seed() -> None:
    from convert.frontends.darknet.random_weights import write_random_weights

    folder = SEEDS / "darknet"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "net.cfg").write_text(DARKNET_CFG)
    write_random_weights(folder / "net.cfg", folder / "net.weights", seed=0)
    _case(folder, "darknet:onnx", ["net.cfg", "net.weights"])


def paddle_pdmodel_seed() -> None:
    from paddle_helpers import SynthOp, write_params, write_program

    rng = np.random.default_rng(1)
    params = {"conv.w_0": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
              "conv.b_0": rng.standard_normal(4).astype(np.float32)}
    ops = [SynthOp("conv2d", {"Input": ["x"], "Filter": ["conv.w_0"]}, {"Output": ["conv.tmp_0"]},
                   {"strides": [1, 1], "paddings": [1, 1]}),
           SynthOp("elementwise_add", {"X": ["conv.tmp_0"], "Y": ["conv.b_0"]}, {"Out": ["conv.tmp_1"]}, {"axis": 1}),
           SynthOp("relu", {"X": ["conv.tmp_1"]}, {"Out": ["relu.tmp_0"]}),
           SynthOp("pool2d", {"X": ["relu.tmp_0"]}, {"Out": ["pool.tmp_0"]},
                   {"ksize": [2, 2], "strides": [2, 2], "paddings": [0, 0], "pooling_type": "max"})]
    shapes = {n: ([-1, 4, 8, 8], "float32") for n in ("conv.tmp_0", "conv.tmp_1", "relu.tmp_0")}
    shapes["pool.tmp_0"] = ([-1, 4, 4, 4], "float32")
    folder = SEEDS / "paddle_pdmodel"
    folder.mkdir(parents=True, exist_ok=True)
    write_program(folder / "inference.pdmodel", feeds={"x": ([1, 3, 8, 8], "float32")}, ops=ops,
                  fetches=["pool.tmp_0"], params=params, shapes=shapes)
    write_params(folder / "inference.pdiparams", params)
    _case(folder, "paddle:onnx", ["inference.pdmodel", "inference.pdiparams"])


def paddle_json_seed() -> None:
    import paddle

    paddle.seed(0)

    class Net(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.conv = paddle.nn.Conv2D(3, 4, 3, padding=1)
            self.bn = paddle.nn.BatchNorm2D(4)
            self.fc = paddle.nn.Linear(4, 5)

        def forward(self, x):  # type: ignore[no-untyped-def]
            y = paddle.nn.functional.relu(self.bn(self.conv(x)))
            y = paddle.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1)
            return paddle.nn.functional.softmax(self.fc(y))

    net = Net()
    net.eval()
    folder = SEEDS / "paddle_json"
    folder.mkdir(parents=True, exist_ok=True)
    spec = [paddle.static.InputSpec([1, 3, 8, 8], "float32", "x")]
    paddle.jit.save(paddle.jit.to_static(net, input_spec=spec, full_graph=True), str(folder / "inference"))
    for extra in folder.glob("inference.pdiparams.info"):
        extra.unlink()
    _case(folder, "paddle:onnx", ["inference.json", "inference.pdiparams"])


def pytorch_seed() -> None:
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 5)).eval()
    folder = SEEDS / "pytorch"
    folder.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        traced = torch.jit.trace(net, (torch.rand(1, 3, 8, 8),))
    torch.jit.save(traced, str(folder / "m.pt"))
    _case(folder, "pytorch:onnx", ["m.pt"])


def pytorch_file_seeds() -> None:
    """A legacy (non-zip) pickled state_dict and a ``torch.export`` ``.pt2``: the other PyTorch readers."""
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                              torch.nn.Flatten(), torch.nn.Linear(4, 5)).eval()
    legacy = SEEDS / "pytorch_legacy"
    legacy.mkdir(parents=True, exist_ok=True)
    torch.save(net.state_dict(), legacy / "m.pt", _use_new_zipfile_serialization=False)
    (legacy / "case.json").write_text(json.dumps({"route": "pytorch:onnx", "files": ["m.pt"],
                                                  "campaign_only": True}, indent=1) + "\n")
    pt2 = SEEDS / "pytorch_pt2"
    pt2.mkdir(parents=True, exist_ok=True)
    torch.export.save(torch.export.export(net, (torch.rand(1, 3, 8, 8),)), str(pt2 / "m.pt2"))
    (pt2 / "case.json").write_text(json.dumps({"route": "pytorch:onnx", "files": ["m.pt2"],
                                               "campaign_only": True}, indent=1) + "\n")


def _keras_net() -> object:
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((8, 8, 3), name="x")
    y = keras.layers.Conv2D(4, 3, padding="same")(inp)
    y = keras.layers.BatchNormalization()(y)
    y = keras.layers.ReLU()(y)
    y = keras.layers.MaxPooling2D(2)(y)
    y = keras.layers.GlobalAveragePooling2D()(y)
    return keras.Model(inp, keras.layers.Dense(5)(y), name="small")


def tensorflow_seed() -> None:
    """A SavedModel folder (``saved_model.pb``, ``variables/``); campaign only (TF's import is slow)."""
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    folder = SEEDS / "tensorflow"
    model = _keras_net()
    if folder.exists():
        import shutil

        shutil.rmtree(folder)
    model.export(str(folder), verbose=False)  # type: ignore[attr-defined]
    for extra in ("fingerprint.pb", "assets"):
        path = folder / extra
        if path.is_dir():
            path.rmdir()
        elif path.exists():
            path.unlink()
    (folder / "case.json").write_text(json.dumps({"route": "tensorflow:onnx", "files": ["."],
                                                  "campaign_only": True}, indent=1) + "\n")


def tflite_seed() -> None:
    """A float ``.tflite`` flatbuffer of the same net (written by TensorFlow; read without it)."""
    import tensorflow as tf

    folder = SEEDS / "tflite"
    folder.mkdir(parents=True, exist_ok=True)
    data = tf.lite.TFLiteConverter.from_keras_model(_keras_net()).convert()
    (folder / "m.tflite").write_bytes(data)
    (folder / "case.json").write_text(json.dumps({"route": "tflite:onnx", "files": ["m.tflite"],
                                                  "campaign_only": True}, indent=1) + "\n")


def tflite_loop_seed() -> None:
    """A ``.tflite`` with control flow: Keras LSTM and GRU, which TFLiteConverter writes as WHILE ops
    whose cond and body are further subgraphs (the reader's subgraph walk and the Loop lowering)."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(3)
    inp = keras.Input((6, 4), batch_size=1)
    x = keras.layers.LSTM(5, return_sequences=True)(inp)
    x = keras.layers.GRU(3)(x)
    model = keras.Model(inp, keras.layers.Dense(2)(x))
    folder = SEEDS / "tflite_loop"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "m.tflite").write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    (folder / "case.json").write_text(json.dumps({"route": "tflite:onnx", "files": ["m.tflite"],
                                                  "campaign_only": True}, indent=1) + "\n")


def main() -> None:
    """Write every seed (skipping those whose framework is missing)."""
    onnx_seeds()
    caffe_seed()
    darknet_seed()
    paddle_pdmodel_seed()
    for build in (paddle_json_seed, pytorch_seed, pytorch_file_seeds, tensorflow_seed, tflite_seed,
                  tflite_loop_seed):
        try:
            build()
        except ImportError as exc:
            print(f"skipped {build.__name__}: {exc}")
    for folder in sorted(SEEDS.iterdir()):
        size = sum(p.stat().st_size for p in folder.iterdir())
        print(f"{folder.name}: {size:,} bytes")


if __name__ == "__main__":
    main()
