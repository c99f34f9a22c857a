"""Check the converted file on each deployment target, after the usual check.

For each target: its toolchain's worker first lists every op of the file its importer lacks (each
with the source layer it came from) and runs nothing when there is one; else it runs the file on
the inputs of the main check. Its outputs then go through ``convert.parity.run_parity`` as the
converted model's runtime, against the same source run, so every rule of the verdict applies
(scale, sets, the float64 arbiter, NOT VERIFIED for outputs without spread, and the half-precision
rule for a target that computes in half). A FAIL on a target whose toolchain can expose
intermediate values (OpenVINO, the RKNN simulator) is localised by running the file again with
every layer's value made an output, compared layer by layer with the source's. A file the
toolchain refuses, or on which its worker dies, is a FAIL of that target with the toolchain's own
message, never a PASS from another runtime.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from convert.ir import Options

from . import target_module
from .base import OnnxFile, TargetFailedError, TargetResult, WorkerRun, describe_unsupported, one_line

__all__ = ["check_targets"]

logger = logging.getLogger(__name__)

#: A target computing in half precision: layers are compared at this error relative to scale when
#: localising (half rounding alone is ~1e-3 of a layer's scale; a wrong layer jumps far past it).
HALF_LAYER_TOL = 1e-2


class _Remembered:
    """The source runtime, run once on the check's inputs: every target compares with that run."""

    def __init__(self, runtime: object) -> None:
        self._runtime = runtime
        self._runs: list[tuple[Mapping[str, np.ndarray], dict[str, np.ndarray]]] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self._runtime, name)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the source (once per set of inputs)."""
        for seen, out in self._runs:
            if seen.keys() == feeds.keys() and all(seen[k] is feeds[k] or np.array_equal(seen[k], feeds[k])
                                                   for k in feeds):
                return out
        out = self._runtime.run(feeds)  # type: ignore[attr-defined]
        self._runs.append((dict(feeds), out))
        return out  # type: ignore[no-any-return]


class TargetRuntime:
    """The outputs one toolchain computed, presented as the converted model's runtime."""

    def __init__(self, name: str, device: str, precision: str, specs: Sequence[object], outputs: Sequence[str],
                 computed: dict[str, np.ndarray], feeds: Mapping[str, np.ndarray], onnx_file: OnnxFile | None,
                 again: Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]) -> None:
        """Wrap ``computed`` (the toolchain's outputs on ``feeds``); ``again`` runs other inputs."""
        self.name = name
        self.device = device
        self.precision = precision
        self._specs = list(specs)
        self._outputs = list(outputs)
        self._computed = computed
        self._feeds = feeds
        self._again = again
        self.metadata = {} if onnx_file is None else dict(onnx_file.metadata)
        self.set_outputs = {} if onnx_file is None else dict(onnx_file.set_outputs)
        self.row_axes = {} if onnx_file is None else dict(onnx_file.row_axes)
        self.random_outputs = {} if onnx_file is None else dict(onnx_file.random_outputs)
        self.notes: list[str] = []

    def inputs(self) -> Sequence[object]:
        """Return the converted file's inputs."""
        return list(self._specs)

    def outputs(self) -> Sequence[str]:
        """Return the converted file's outputs, in order."""
        return list(self._outputs)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Return the toolchain's outputs on ``feeds``."""
        if feeds.keys() == self._feeds.keys() and all(np.array_equal(feeds[k], self._feeds[k]) for k in feeds):
            return dict(self._computed)
        return self._again(feeds)


def check_targets(names: Sequence[str], *, source_format: str, source_paths: Sequence[Path], dest_format: str,
                  dest_paths: Sequence[Path], source_runtime: object, feeds: Mapping[str, np.ndarray],
                  options: Options, tol: float, atol: float, rtol: float,
                  locate: bool | None = None) -> list[TargetResult]:
    """Check ``dest_paths`` on each target of ``names``; return one result per target and precision."""
    src = source_runtime if isinstance(source_runtime, _Remembered) else _Remembered(source_runtime)
    onnx_file = OnnxFile(_onnx_path(dest_paths)) if dest_format == "onnx" else None
    results: list[TargetResult] = []
    for name in names:
        results += _check_one(name, src, onnx_file, source_format=source_format, source_paths=source_paths,
                              dest_format=dest_format, dest_paths=dest_paths, feeds=feeds, options=options,
                              tol=tol, atol=atol, rtol=rtol, locate=locate)
    return results


def _onnx_path(paths: Sequence[Path]) -> Path:
    return next((Path(p) for p in paths if str(p).endswith(".onnx")), Path(paths[0]))


def _check_one(name: str, src: _Remembered, onnx_file: OnnxFile | None, *, source_format: str,
               source_paths: Sequence[Path], dest_format: str, dest_paths: Sequence[Path],
               feeds: Mapping[str, np.ndarray], options: Options, tol: float, atol: float, rtol: float,
               locate: bool | None) -> list[TargetResult]:
    from convert.parity import _rename_feeds, run_parity
    from convert.parity.locate import locate as locate_layers

    start = time.perf_counter()
    tc = target_module(name).toolchain(options)  # type: ignore[attr-defined]
    blank = TargetResult(target=name, toolchain=tc.toolchain, precision=tc.precision, device=tc.device)
    specs = tc.inputs(dest_format, dest_paths, onnx_file)
    order = tc.outputs(dest_format, dest_paths, onnx_file)
    dst_feeds = _rename_feeds(feeds, list(src.inputs()), specs)
    try:
        run: WorkerRun = tc.run(dest_format, dest_paths, dst_feeds)
    except TargetFailedError as exc:
        blank.refused = str(exc)
        blank.seconds = time.perf_counter() - start
        return [blank]
    blank.version = str(run.info.get("version", ""))
    gaps = run.info.get("unsupported") or []
    if gaps:
        blank.unsupported = describe_unsupported([(str(t), str(n)) for t, n in gaps], onnx_file)  # type: ignore[union-attr]
        blank.seconds = time.perf_counter() - start
        return [blank]
    if run.info.get("refused"):
        blank.refused = one_line(str(run.info["refused"]))
        blank.seconds = time.perf_counter() - start
        return [blank]
    results = []
    for config, precision, device, computed, notes in tc.results(run, order):
        result = TargetResult(target=name, toolchain=tc.toolchain, version=blank.version, precision=precision,
                              device=device, notes=list(notes))

        def again(other: Mapping[str, np.ndarray], config: str = config) -> dict[str, np.ndarray]:
            rerun = tc.run(dest_format, dest_paths, other, configs=[config])
            return next(c for cfg, _, _, c, _ in tc.results(rerun, order) if cfg == config)

        runtime = TargetRuntime(f"{tc.toolchain} {blank.version}".strip(), device, tc.parity_precision(precision),
                                specs, order, computed, dst_feeds, onnx_file, again)
        try:
            result.report = run_parity(source_format, source_paths, dest_format, dest_paths, options=options,
                                       atol=atol, rtol=rtol, inputs=feeds, source_runtime=src, tol=tol, locate=False,
                                       dest_runtime=runtime)  # type: ignore[arg-type]
        except Exception as exc:  # the comparison itself could not be made (shapes the source does not have)
            result.refused = f"{tc.toolchain}'s outputs could not be compared with the source: {one_line(str(exc))}"
            results.append(result)
            continue
        failed = result.report.verdict == "FAIL"
        if (locate or (locate is None and failed)) and tc.exposes_layers and dest_format == "onnx":
            layer_tol = tol if runtime.precision == "fp32" else max(tol, HALF_LAYER_TOL)
            try:
                result.location = locate_layers(source_format, source_paths, dest_format, dest_paths, src,  # type: ignore[arg-type]
                                                feeds, dst_feeds, options, layer_tol,
                                                dest_layers=_layers_on(tc, config, onnx_file))
            except Exception as exc:  # the verdict stands without the localisation
                logger.debug("localisation on %s failed", name, exc_info=True)
                from convert.parity.locate import Location

                result.location = Location(tol=layer_tol, unavailable=f"the layer-by-layer run on {tc.toolchain} "
                                           f"failed ({type(exc).__name__}: {one_line(str(exc), 200)})")
            if runtime.precision != "fp32" and result.location is not None:
                result.notes.append(f"layers compared at {layer_tol:g} of their scale ({precision}: half rounding "
                                    "alone is about 1e-3)")
        result.seconds = time.perf_counter() - start
        results.append(result)
    return results


def _layers_on(tc: object, config: str, onnx_file: OnnxFile | None
               ) -> Callable[[Sequence[Path], Sequence[str], Mapping[str, np.ndarray], Options],
                             dict[str, tuple[str, list[np.ndarray]]]]:
    """The converted side of the localisation, computed by the toolchain: the file with every
    layer's last value made a graph output, run by the target as the file itself was."""

    def dest(paths: Sequence[Path], keys: Sequence[str], feeds: Mapping[str, np.ndarray],
             options: Options) -> dict[str, tuple[str, list[np.ndarray]]]:
        from convert import ir
        from convert.parity.locate import _onnx_layers

        model = ir.load_file(_onnx_path(paths))
        layers = _onnx_layers(model, ir.output_key)
        wanted = [k for k in keys if k in layers]
        values = list({id(v): v for k in wanted for v in layers[k][1]}.values())
        for value in values:
            if not value.is_graph_output():
                model.graph.outputs.append(value)
        names = [v.name for v in values]
        with tempfile.TemporaryDirectory(prefix="convert-target-layers-") as tmp:
            copy = Path(tmp) / "layers.onnx"
            ir.save_model(model, copy, external_data="layers.onnx.data")
            layered = OnnxFile(copy)
            order = tc.outputs("onnx", [copy], layered)  # type: ignore[attr-defined]
            run = tc.run("onnx", [copy], feeds, configs=[config])  # type: ignore[attr-defined]
            if run.info.get("refused") or run.info.get("unsupported"):
                raise TargetFailedError(one_line(str(run.info.get("refused") or run.info.get("unsupported"))))
            got = next(c for cfg, _, _, c, _ in tc.results(run, order) if cfg == config)  # type: ignore[attr-defined]
        found = {n: got[n] for n in names if n in got}
        return {k: (layers[k][0], [found[v.name] for v in layers[k][1]]) for k in wanted
                if all(v.name in found for v in layers[k][1])}

    return dest
