"""Bring one ONNX file into ncnn with pnnx and run it, in a process of its own (``convert.targets.ncnn``).

Usage: ``python _ncnn_worker.py REQUEST.json`` (see ``convert.targets.base``). Imports only numpy,
ncnn and pnnx (whose executable does the import). pnnx writes ``model.ncnn.param``/``.bin``
(``fp16=0``: float32 weights); every layer type there that this ncnn has no layer for is listed
(``ncnn.layer_to_index`` is -1) before anything runs. The net then runs with fp16 storage and
arithmetic off (float32 throughout), on inputs ``in0, in1...`` and outputs ``out0, out1...`` in the
ONNX file's order (pnnx's naming), each reshaped to the file's declared output shape (ncnn keeps
no batch axis).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

_DTYPES = {"float32": "f32", "float64": "f64", "float16": "f16", "int64": "i64", "int32": "i32", "int8": "i8",
           "uint8": "u8", "bool": "u8"}
_BUILTIN = {"Input", "Split", "Noop"}


def main(argv: list[str]) -> int:
    """Convert with pnnx, list the layers ncnn lacks, run."""
    with open(argv[1]) as fh:
        req = json.load(fh)
    import ncnn
    import pnnx

    info: dict[str, object] = {"version": f"{ncnn.__version__}", "configs": {}}
    with np.load(req["inputs"], allow_pickle=False) as data:
        feeds = [(str(n), data[f"arr_{i}"]) for i, n in enumerate(data["names"])]
    work = str(req["workdir"])
    shapes = ",".join("[" + ",".join(str(d) for d in x.shape) + "]" + _DTYPES.get(str(x.dtype), "f32")
                      for _, x in feeds)
    # Every file pnnx writes goes into the work folder; the model is read where it is (external data).
    written = {key: os.path.join(work, f"model.{suffix}") for key, suffix in (
        ("pnnxparam", "pnnx.param"), ("pnnxbin", "pnnx.bin"), ("pnnxpy", "pnnx.py"), ("pnnxonnx", "pnnx.onnx"),
        ("ncnnparam", "ncnn.param"), ("ncnnbin", "ncnn.bin"), ("ncnnpy", "ncnn.py"))}
    proc = subprocess.run([pnnx.EXEC_PATH, os.path.abspath(str(req["model"])), f"inputshape={shapes}", "fp16=0",
                           *(f"{k}={v}" for k, v in written.items())], cwd=work, capture_output=True,
                          text=True, errors="replace", check=False, stdin=subprocess.DEVNULL)
    info["pnnx"] = _pnnx_version()
    param, binary = os.path.join(work, "model.ncnn.param"), os.path.join(work, "model.ncnn.bin")
    if proc.returncode != 0 or not os.path.isfile(param):
        lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        why = next((ln for ln in reversed(lines) if "error" in ln.lower() or "fatal" in ln.lower()), None)
        signal = f"died of signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
        info["refused"] = f"pnnx could not bring the file into ncnn ({signal}): {why or (lines[-1] if lines else '')}"
        return _done(req, info, {})
    layers = _layers(param)
    gaps = [[kind, name] for kind, name in layers if kind not in _BUILTIN and ncnn.layer_to_index(kind) < 0]
    if gaps:
        info["unsupported"] = gaps
        return _done(req, info, {})
    net = ncnn.Net()
    net.opt.use_fp16_packed = False
    net.opt.use_fp16_storage = False
    net.opt.use_fp16_arithmetic = False
    net.opt.use_bf16_storage = False
    net.opt.num_threads = int(os.environ.get("OMP_NUM_THREADS", "2"))
    if net.load_param(param) != 0 or net.load_model(binary) != 0:
        info["refused"] = "ncnn cannot load the param/bin pnnx wrote"
        return _done(req, info, {})
    arrays: dict[str, np.ndarray] = {}
    ex = net.create_extractor()
    for i, (_, x) in enumerate(feeds):
        value = np.ascontiguousarray(x.astype(np.float32) if x.dtype.kind == "f" else x)
        if value.ndim >= 4 and value.shape[0] == 1:  # ncnn has no batch axis
            value = value[0]
        ex.input(f"in{i}", ncnn.Mat(value).clone())
    for k, (name, shape) in enumerate(zip(req["output_names"], req["output_shapes"], strict=True)):
        ret, mat = ex.extract(f"out{k}")
        if ret != 0:
            info["refused"] = f"ncnn could not compute output '{name}' (out{k}): extract returned {ret}"
            return _done(req, info, {})
        value = np.array(mat)
        if shape is not None and all(isinstance(d, int) for d in shape) and int(np.prod(shape)) == value.size:
            value = value.reshape(shape)
        arrays[f"fp32|{name}"] = value
    info["configs"] = {"fp32": {"precision": "fp32"}}
    return _done(req, info, arrays)


def _layers(param: str) -> list[tuple[str, str]]:
    """Return (type, name) of each layer of an ncnn .param file."""
    with open(param) as fh:
        lines = fh.read().splitlines()[2:]
    return [(parts[0], parts[1]) for parts in (ln.split() for ln in lines) if len(parts) >= 2]


def _pnnx_version() -> str:
    try:
        from importlib.metadata import version

        return version("pnnx")
    except Exception:  # the version is said where known
        return ""


def _done(req: dict[str, object], info: dict[str, object], arrays: dict[str, np.ndarray]) -> int:
    names = list(arrays)
    np.savez(str(req["outputs"]), names=np.array(names, dtype=str),
             **{f"arr_{i}": arrays[n] for i, n in enumerate(names)})
    with open(str(req["info"]), "w") as fh:
        json.dump(info, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
