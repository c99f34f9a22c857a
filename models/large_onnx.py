"""Build a >2 GiB ONNX model cheaply: a chain of large MatMul weights in a sparse external-data file.

Each weight is an N x N float32 matrix that is zero except for a scaled diagonal (plus a small
ramp on the first row), so the file is sparse on disk (a few MiB really written) while its size
is ``layers * N * N * 4`` bytes, and the model computes something non-trivial to compare.

    python models/large_onnx.py OUT_DIR [--n 16384] [--layers 3]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper


def build(folder: Path, *, n: int = 16384, layers: int = 3, seed: int = 0) -> Path:
    """Write ``folder/large.onnx`` and ``folder/large.data``; return the model's path."""
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "large.data"
    nbytes = n * n * 4
    with open(data, "wb") as f:
        f.truncate(nbytes * layers)
    rng = np.random.default_rng(seed)
    mm = np.memmap(data, dtype=np.float32, mode="r+", shape=(layers, n, n))
    idx = np.arange(n)
    for i in range(layers):
        mm[i, idx, idx] = rng.uniform(0.5, 1.5, n).astype(np.float32)
        mm[i, 0, :] += np.linspace(-0.01, 0.01, n, dtype=np.float32)
    mm.flush()
    del mm
    inits = []
    nodes = []
    prev = "x"
    for i in range(layers):
        t = TensorProto()
        t.name = f"w{i}"
        t.data_type = TensorProto.FLOAT
        t.dims.extend([n, n])
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", data.name), ("offset", str(i * nbytes)), ("length", str(nbytes))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        inits.append(t)
        out = "y" if i == layers - 1 else f"h{i}"
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [out], name=f"matmul{i}"))
        prev = out
    graph = helper.make_graph(nodes, "large", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = folder / "large.onnx"
    onnx.save(model, str(path))
    return path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--n", type=int, default=16384)
    parser.add_argument("--layers", type=int, default=3)
    args = parser.parse_args()
    print(build(args.out, n=args.n, layers=args.layers))
