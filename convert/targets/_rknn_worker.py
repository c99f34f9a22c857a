"""Run one ONNX or Caffe file in the simulator of Rockchip's rknn-toolkit2, in its own environment.

Usage: ``PYTHON -P _rknn_worker.py REQUEST.json`` (see ``convert.targets.base``), where PYTHON is
the interpreter of the virtual environment ``convert.targets.rknn`` creates or finds: rknn-toolkit2
pins numpy <= 1.26.4, onnx <= 1.18, protobuf <= 4.25.4 and torch <= 2.4, none of which convert's
own environment can hold. Imports only numpy and rknn. The file is loaded (``load_onnx`` with the
inputs' shapes, or ``load_caffe``), built for ``platform`` without quantization (the NPU computes
in float16), and run in the x86 simulator (``init_runtime()`` with no target). Every message the
toolkit prints goes to a log in the work folder; a refusal is said with the toolkit's own error
line.
"""

from __future__ import annotations

import json
import os
import re
import sys

import numpy as np

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def main(argv: list[str]) -> int:
    """Load, build and run as the request says."""
    with open(argv[1]) as fh:
        req = json.load(fh)
    log_path = os.path.join(str(req["workdir"]), "rknn.log")
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)  # the toolkit prints progress bars and warnings: kept out of convert's output
    os.dup2(log, 2)
    from importlib.metadata import version

    from rknn.api import RKNN

    info: dict[str, object] = {"version": version("rknn-toolkit2"), "configs": {}}
    with np.load(req["inputs"], allow_pickle=False) as data:
        feeds = [(str(n), data[f"arr_{i}"]) for i, n in enumerate(data["names"])]
    rknn = RKNN(verbose=False)
    platform = str(req.get("platform", "rk3588"))
    inputs = [np.ascontiguousarray(x.astype(np.float32) if x.dtype.kind == "f" else x) for _, x in feeds]
    steps = [(f"config(target_platform={platform!r})", lambda: rknn.config(target_platform=platform))]
    if req["format"] == "caffe":
        steps.append(("load_caffe", lambda: rknn.load_caffe(model=req["model"], blobs=req["weights"])))
    else:
        steps.append(("load_onnx", lambda: rknn.load_onnx(model=req["model"], inputs=[n for n, _ in feeds],
                                                          input_size_list=[list(x.shape) for _, x in feeds])))
    steps += [("build", lambda: rknn.build(do_quantization=False)),
              ("init_runtime (simulator)", lambda: rknn.init_runtime())]
    for step, call in steps:
        # The toolkit logs its error and returns -1, or exits the process (SystemExit) on some errors.
        try:
            ret = call()
        except (SystemExit, Exception):
            ret = -1
        if ret != 0:
            return _refused(req, info, log_path, step)
    try:
        outs = rknn.inference(inputs=inputs, data_format=["nchw"] * len(inputs))
    except (SystemExit, Exception):
        outs = None
    if outs is None:
        return _refused(req, info, log_path, "inference")
    names = list(req["output_names"])
    if len(outs) != len(names):
        info["refused"] = (f"rknn-toolkit2's simulator returned {len(outs)} outputs where the file has {len(names)} "
                           f"({', '.join(names)})")
        return _done(req, info, {})
    arrays = {f"fp16|{n}": np.asarray(o) for n, o in zip(names, outs, strict=True)}
    info["configs"] = {"fp16": {"precision": "fp16", "platform": platform}}
    rknn.release()
    return _done(req, info, arrays)


def _refused(req: dict[str, object], info: dict[str, object], log_path: str, step: str) -> int:
    """Say why the toolkit refused, with its own first error line (``E ...``), else its last error."""
    with open(log_path, errors="replace") as fh:
        lines = [_ANSI.sub("", ln).strip() for ln in fh.read().splitlines()]
    lines = [ln for ln in lines if ln and "it/s]" not in ln]
    errors = [ln[2:].strip() for ln in lines if ln.startswith("E ") and "Traceback" not in ln]
    raised = [ln for ln in lines if re.match(r"^[A-Za-z_.]*(Error|Exception): ", ln)]
    why = (errors[:1] or raised[-1:] or lines[-1:] or ["no message"])[0]
    head = step.split("(")[0].split()[0] + ":"
    why = why[len(head):].strip() if why.startswith(head) else why  # the toolkit names the step too
    info["refused"] = f"rknn-toolkit2 {info.get('version', '')} refused the file at {step}: {why}"
    return _done(req, info, {})


def _done(req: dict[str, object], info: dict[str, object], arrays: dict[str, np.ndarray]) -> int:
    names = list(arrays)
    np.savez(str(req["outputs"]), names=np.array(names, dtype=str),
             **{f"arr_{i}": arrays[n] for i, n in enumerate(names)})
    with open(str(req["info"]), "w") as fh:
        json.dump(info, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
