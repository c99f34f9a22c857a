"""Run one ONNX file in OpenVINO's CPU plugin, in a process of its own (``convert.targets.openvino``).

Usage: ``python _openvino_worker.py REQUEST.json`` (see ``convert.targets.base``). Imports only
numpy and openvino. First asks OpenVINO's ONNX frontend which nodes it cannot convert
(``convert_partially``: every such node is a framework node), and stops there, listing them all,
when any is found. Otherwise compiles the model for each requested configuration (``default``:
the plugin's own inference precision; ``f32``: ``INFERENCE_PRECISION_HINT=f32``), runs it on the
inputs and writes each output as ``CONFIG|NAME``.
"""

from __future__ import annotations

import json
import sys

import numpy as np


def main(argv: list[str]) -> int:
    """Query, compile and run as the request says."""
    with open(argv[1]) as fh:
        req = json.load(fh)
    import openvino as ov

    info: dict[str, object] = {"version": ov.__version__.split("-")[0], "configs": {}}
    core = ov.Core()
    fe = ov.frontend.FrontEndManager().load_by_framework("onnx")
    try:
        partial = fe.convert_partially(fe.load(req["model"]))
    except Exception as exc:  # the frontend refused the file as a whole
        info["refused"] = f"OpenVINO's ONNX frontend cannot read the file: {_first(exc)}"
        return _done(req, info, {})
    # Nodes without a conversion rule stay framework nodes; a node whose conversion failed (often only
    # because its input is such a node) is a NotSupportedONNXNode: said only when no rule is missing.
    # Their op type is read from the file by the parent (Node.get_attributes() on a framework node
    # crashes OpenVINO 2026.4.1 with SIGSEGV).
    ops = list(partial.get_ops())
    gaps = [["", op.get_friendly_name()] for op in ops if op.get_type_name() == "ONNXFrameworkNode"]
    gaps = gaps or [["", op.get_friendly_name()] for op in ops if "NotSupported" in op.get_type_name()]
    if gaps:
        info["unsupported"] = gaps
        return _done(req, info, {})
    try:
        model = core.read_model(req["model"])
    except Exception as exc:
        info["refused"] = f"OpenVINO cannot read the file: {_first(exc)}"
        return _done(req, info, {})
    with np.load(req["inputs"], allow_pickle=False) as data:
        feeds = {str(n): data[f"arr_{i}"] for i, n in enumerate(data["names"])}
    arrays: dict[str, np.ndarray] = {}
    for config in req.get("configs", ["default"]):
        props = {} if config == "default" else {"INFERENCE_PRECISION_HINT": config}
        try:
            compiled = core.compile_model(model, "CPU", props)
        except Exception as exc:
            info["refused"] = f"OpenVINO's CPU plugin cannot compile the model: {_first(exc)}"
            return _done(req, info, {})
        precision = str(compiled.get_property("INFERENCE_PRECISION_HINT"))
        info["configs"][config] = {"precision": _precision(precision)}  # type: ignore[index]
        request = compiled.create_infer_request()
        by_name = {}
        for port in compiled.inputs:
            names = port.get_names()
            by_name.update({n: port for n in names})
        inputs = {}
        for name, value in feeds.items():
            if name not in by_name:
                info["refused"] = f"the model compiled by OpenVINO has no input '{name}'"
                return _done(req, info, {})
            inputs[by_name[name]] = value
        try:
            result = request.infer(inputs)
        except Exception as exc:
            info["refused"] = f"OpenVINO's CPU plugin failed running the model: {_first(exc)}"
            return _done(req, info, {})
        for port in compiled.outputs:
            for name in port.get_names():
                arrays[f"{config}|{name}"] = np.array(result[port])
    return _done(req, info, arrays)


def _precision(hint: str) -> str:
    text = hint.lower().replace("<type: '", "").replace("'>", "")
    return {"float32": "f32", "f32": "f32", "bf16": "bf16", "f16": "f16", "float16": "f16",
            "bfloat16": "bf16"}.get(text, text)


def _first(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    # OpenVINO's messages open with where in its sources the check failed: keep what it says after that
    said = [ln for ln in lines if not ln.startswith(("Exception from src", "Check '"))]
    return " ".join((said or lines or [type(exc).__name__])[:3])


def _done(req: dict[str, object], info: dict[str, object], arrays: dict[str, np.ndarray]) -> int:
    names = list(arrays)
    np.savez(str(req["outputs"]), names=np.array(names, dtype=str),
             **{f"arr_{i}": arrays[n] for i, n in enumerate(names)})
    with open(str(req["info"]), "w") as fh:
        json.dump(info, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
