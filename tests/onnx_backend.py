"""Run ONNX's backend test cases through ONNX -> IR -> ONNX and ONNX Runtime.

Sources: the node test cases (generated in memory from ``onnx.backend.test.case.node``, about
1,900 one-op models with inputs and expected outputs) and the model cases shipped as data
(``pytorch-converted``, ``pytorch-operator``, ``simple``, ``light``). Each model is converted at its
own opset through the full standard pass pipeline; the result must reproduce the stored outputs in
ONNX Runtime. Cases that ONNX Runtime cannot run (or gets wrong) in their original form are
counted apart, since they say nothing about the conversion.

Run as a script for the per-reason breakdown: ``python tests/onnx_backend.py``.
"""

from __future__ import annotations

import collections
import glob
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

DATA_KINDS = ("pytorch-converted", "pytorch-operator", "simple", "light")


@dataclass
class Case:
    kind: str
    name: str
    model: onnx.ModelProto
    data_sets: list[tuple[list[object], list[object]]]
    rtol: float = 1e-3
    atol: float = 1e-7


@dataclass
class Tally:
    attempted: int = 0
    passed: int = 0
    down_converted: int = 0
    runtime_cannot: collections.Counter[str] = field(default_factory=collections.Counter)
    failed: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        by_reason = collections.Counter(r.split(":")[0] for r in self.failed.values())
        lines = [f"ONNX backend round trip: {self.attempted} attempted, {self.passed} passed, "
                 f"{len(self.failed)} failed, {sum(self.runtime_cannot.values())} not runnable by ONNX Runtime "
                 f"in their original form; {self.down_converted} attempted after converting down to the "
                 f"newest opset ONNX Runtime loads"]
        for reason, n in by_reason.most_common():
            lines.append(f"  failed, {reason}: {n}")
        for reason, n in self.runtime_cannot.most_common():
            lines.append(f"  skipped, {reason}: {n}")
        return "\n".join(lines)


def _read_pb(path: str, value_info: onnx.ValueInfoProto | None) -> object:
    data = Path(path).read_bytes()
    t = value_info.type if value_info is not None else None
    if t is not None and t.HasField("sequence_type"):
        seq = onnx.SequenceProto()
        seq.ParseFromString(data)
        return numpy_helper.to_list(seq)
    if t is not None and t.HasField("optional_type"):
        opt = onnx.OptionalProto()
        opt.ParseFromString(data)
        return numpy_helper.to_optional(opt)
    if t is not None and t.HasField("map_type"):
        m = onnx.MapProto()
        m.ParseFromString(data)
        return numpy_helper.to_dict(m)
    tensor = onnx.TensorProto()
    tensor.ParseFromString(data)
    return numpy_helper.to_array(tensor)


def node_cases() -> Iterator[Case]:
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node.collect_testcases(None)
    for c in cases:
        yield Case("node", c.name, c.model, list(c.data_sets or []), c.rtol, c.atol)


def data_cases() -> Iterator[Case]:
    root = Path(onnx.__file__).parent / "backend" / "test" / "data"
    for kind in DATA_KINDS:
        for folder in sorted((root / kind).iterdir()):
            if folder.is_dir():
                model_path = folder / "model.onnx"
                if not model_path.exists():
                    continue
                model = onnx.load(str(model_path))
                inputs_info = [i for i in model.graph.input
                               if i.name not in {x.name for x in model.graph.initializer}]
                sets = []
                for ds in sorted(glob.glob(str(folder / "test_data_set_*"))):
                    ins = [_read_pb(p, inputs_info[i] if i < len(inputs_info) else None)
                           for i, p in enumerate(sorted(glob.glob(os.path.join(ds, "input_*.pb"))))]
                    outs = [_read_pb(p, model.graph.output[i] if i < len(model.graph.output) else None)
                            for i, p in enumerate(sorted(glob.glob(os.path.join(ds, "output_*.pb"))))]
                    sets.append((ins, outs))
                yield Case(kind, folder.name, model, sets)
            elif folder.suffix == ".onnx" and kind == "light":
                # light_<name>.onnx with light_<name>_output_0.pb; inputs are all ones... not shipped:
                # their single input is documented as ones of the input shape.
                model = onnx.load(str(folder))
                out_pb = folder.with_name(folder.stem + "_output_0.pb")
                if not out_pb.exists():
                    continue
                inp = model.graph.input[0]
                shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
                x = np.ones(shape, dtype=np.float32)
                yield Case(kind, folder.stem, model, [([x], [_read_pb(str(out_pb), None)])], 1e-3, 1e-5)


def _close(expected: object, got: object, rtol: float, atol: float) -> bool:
    if isinstance(expected, onnx.TensorProto):
        expected = numpy_helper.to_array(expected)
    if isinstance(expected, (list, tuple)):
        return isinstance(got, (list, tuple)) and len(expected) == len(got) and all(
            _close(e, g, rtol, atol) for e, g in zip(expected, got, strict=True))
    if expected is None:
        return got is None
    if isinstance(expected, dict):
        return isinstance(got, dict) and expected.keys() == got.keys() and all(
            _close(expected[k], got[k], rtol, atol) for k in expected)
    e = np.asarray(expected)
    g = np.asarray(got)
    if e.shape != g.shape:
        return False
    if e.dtype.kind in "OUS":
        return bool(np.array_equal(e.astype(str), g.astype(str)))
    if e.dtype.kind in "biu":
        return bool(np.array_equal(e, g))
    try:
        return bool(np.allclose(e.astype(np.float64), g.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True))
    except (TypeError, ValueError):
        return bool(np.array_equal(e, g))


def _feed(value: object) -> object:
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [_feed(v) for v in value]
    return value


def _run(path: str, model: onnx.ModelProto, inputs: list[object]) -> list[object]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4
    sess = ort.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    feeds = {n: _feed(v) for n, v in zip(names, inputs, strict=False)}
    return sess.run(None, feeds)


_ORT_MAX_OPSET: list[int] = []


def ort_max_opset() -> int:
    """The newest default-domain opset this ONNX Runtime loads (probed once)."""
    if not _ORT_MAX_OPSET:
        import onnxruntime as ort
        from onnx import TensorProto, helper

        best = 17
        for opset in range(17, onnx.defs.onnx_opset_version() + 1):
            g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
            try:
                ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
                best = opset
            except Exception:
                break
        _ORT_MAX_OPSET.append(best)
    return _ORT_MAX_OPSET[0]


def run_case(case: Case, tmp: Path, tally: Tally) -> None:
    from convert import api, ir

    folder = tmp / f"{case.kind}_{case.name}"
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / "model.onnx"
    onnx.save(case.model, str(src))
    opset = next((o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx")), 17)
    target = opset
    # 1. Can ONNX Runtime run the original and reproduce the expected outputs?
    try:
        for ins, outs in case.data_sets:
            got = _run(str(src), case.model, ins)
            if not _close(outs, got[: len(outs)], case.rtol, case.atol):
                tally.runtime_cannot["ONNX Runtime's own outputs differ from the expected ones"] += 1
                return
    except Exception as exc:  # ORT rejects the original: nothing to learn
        msg = str(exc)
        if "IR version" in msg or "opset" in msg.lower():
            # Too new for this runtime as stored: convert down to the newest opset it loads,
            # which exercises the version adapters; the expected outputs still decide.
            target = min(opset, ort_max_opset())
        else:
            tally.runtime_cannot["ONNX Runtime cannot load or run the original"] += 1
            return
    key = f"{case.kind}/{case.name}"
    out = folder / "roundtrip.onnx"
    try:
        api.convert(src, to="onnx", out=out, check=False, opset=target, validate=True)
    except ir.UnsupportedOpsError as exc:
        if target == opset:
            tally.attempted += 1
            tally.failed[key] = f"conversion raised UnsupportedOpsError: {exc}"
        else:
            tally.runtime_cannot[f"op newer than opset {target}, the newest ONNX Runtime loads"] += 1
        return
    except Exception as exc:
        tally.attempted += 1
        tally.failed[key] = f"conversion raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return
    tally.attempted += 1
    if target != opset:
        tally.down_converted += 1
    try:
        for ins, outs in case.data_sets:
            got = _run(str(out), case.model, ins)
            if not _close(outs, got[: len(outs)], case.rtol, case.atol):
                if target != opset and not _patched_original_runs(case, folder, target):
                    tally.attempted -= 1
                    tally.down_converted -= 1
                    tally.runtime_cannot[f"ONNX Runtime computes the op differently at opset {target} "
                                         "(not our conversion)"] += 1
                    return
                tally.failed[key] = "outputs differ from the expected ones"
                return
    except Exception as exc:
        if target != opset and not _patched_original_runs(case, folder, target):
            # ONNX Runtime cannot run this op even as stored, relabelled to the opset it loads.
            tally.attempted -= 1
            tally.down_converted -= 1
            tally.runtime_cannot[f"ONNX Runtime cannot run the op at opset {target} (not our conversion)"] += 1
            return
        tally.failed[key] = f"ONNX Runtime rejects the converted model: {str(exc).splitlines()[0] if str(exc) else ''}"
        return
    tally.passed += 1


def _patched_original_runs(case: Case, folder: Path, target: int) -> bool:
    """Does the original run once merely relabelled to ``target`` (no adapters)?"""
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = target
    model.ir_version = min(model.ir_version, 10)
    path = folder / "relabelled.onnx"
    onnx.save(model, str(path))
    try:
        for ins, outs in case.data_sets:
            got = _run(str(path), model, ins)
            if not _close(outs, got[: len(outs)], case.rtol, case.atol):
                return False
    except Exception:
        return False
    return True


def run_all(kinds: tuple[str, ...] = ("node", *DATA_KINDS)) -> Tally:
    tally = Tally()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cases = []
        if "node" in kinds:
            cases += list(node_cases())
        cases += [c for c in data_cases() if c.kind in kinds]
        for case in cases:
            run_case(case, tmp, tally)
    return tally


if __name__ == "__main__":
    import logging

    logging.disable(logging.WARNING)
    t = run_all(tuple(sys.argv[1:]) or ("node", *DATA_KINDS))
    print(t.summary())
    for k, v in sorted(t.failed.items()):
        print(f"  {k}: {v}")
