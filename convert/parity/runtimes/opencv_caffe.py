"""The Caffe parity runtime: OpenCV's DNN module (``cv2.dnn.readNetFromCaffe``).

OpenCV parses the SSD-fork dialect, whose pooling field 13 is the bool ``ceil_mode``; BVLC's
field 13 is the enum ``round_mode``. A BVLC-flavoured prototxt is therefore handed to OpenCV with
``round_mode: FLOOR|CEIL`` spelled ``ceil_mode: false|true`` (the same rounding, in OpenCV's
dialect), in a temporary copy; the report names this translation.

OpenCV names results by layer, not by blob: the output blob ``conv1`` of an in-place chain
``conv1 -> relu1`` is the output of layer ``relu1``. The runtime therefore reads the prototxt
(with the project's schema) to map each net output blob to the last layer that writes it.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from convert.ir import Options, UsageError, shown
from convert.parity.runtime import Runtime, TensorSpec

__all__ = ["DOMAIN_ARGUMENT", "OpenCVCaffeRuntime", "input_domains", "open_runtime"]

def translate_round_mode(text: str) -> str:
    """Spell BVLC's ``round_mode: FLOOR|CEIL`` as the fork's ``ceil_mode: false|true`` (same rounding).

    The prototxt is parsed, not searched: only a pooling layer's ``round_mode`` field is translated
    (never the words in a comment or a name), into a copy written from the parsed net. A file
    without one is returned as it is.
    """
    from google.protobuf import text_format

    from convert._proto import caffe_pb2

    net = caffe_pb2.NetParameter()
    try:
        text_format.Parse(text, net)
    except text_format.ParseError:
        return text  # the runtime's own parser says what is wrong with it
    pools = [layer.pooling_param for layer in [*net.layer, *net.layers] if layer.HasField("pooling_param")]
    if not any(pool.HasField("round_mode") for pool in pools):
        return text
    for pool in pools:
        if pool.HasField("round_mode"):
            ceil = int(pool.round_mode) == caffe_pb2.PoolingParameter.CEIL
            pool.ClearField("round_mode")
            if not pool.HasField("ceil_mode"):  # both given: ceil_mode decides, as the frontend reads it
                pool.ceil_mode = ceil
    return text_format.MessageToString(net)


def round_mode_note(name: str, runtime: str) -> str:
    """The report's note when a BVLC-flavoured file had to be translated for ``runtime``."""
    return (f"{name} AS WRITTEN DOES NOT LOAD in {runtime}: its pooling uses BVLC master's round_mode "
            "(field 13), which this runtime reads as the SSD fork's bool ceil_mode; the check ran a copy "
            "with round_mode spelled as ceil_mode (the same rounding). For OpenCV, the SSD-fork Caffes and "
            "most NPU toolchains, convert with --caffe-flavor ssd")


def net_io(netdef: object) -> tuple[list[TensorSpec], list[str], dict[str, tuple[str, int]]]:
    """Return a parsed prototxt's inputs, its output blobs (tops no later layer consumes) and, for
    each blob, the last layer writing it with the top's index."""
    inputs: list[TensorSpec] = []
    for name, shape in netdef.inputs:  # type: ignore[attr-defined]
        inputs.append(TensorSpec(name, np.dtype(np.float32), tuple(shape)))
    for layer in netdef.layers:  # type: ignore[attr-defined]
        if layer.type == "Input":
            shapes = [tuple(int(d) for d in s.dim) for s in layer.param.input_param.shape]
            for i, top in enumerate(layer.tops):
                shape = shapes[i] if i < len(shapes) else (shapes[0] if shapes else ())
                inputs.append(TensorSpec(top, np.dtype(np.float32), shape))
    consumed: dict[str, bool] = {}
    writer: dict[str, tuple[str, int]] = {}
    order: list[str] = []
    for layer in netdef.layers:  # type: ignore[attr-defined]
        if layer.type == "Input":
            continue
        for b in layer.bottoms:
            consumed[b] = True
        for i, t in enumerate(layer.tops):
            if t not in consumed:
                order.append(t)
            consumed[t] = False
            writer[t] = (layer.name, i)
    return inputs, [t for t in order if not consumed[t]], writer


def detection_rows(netdef: object, source: str) -> tuple[dict[str, str], dict[str, int]]:
    """Return the outputs of the net's ``DetectionOutput`` layers, whose rows (axis 2 of
    ``[1, 1, N, 7]``) come out of an NMS with a count the net computes, and that axis: where they
    come from (``set_outputs``) and ``row_axes``, as ONNX Runtime's runtime tells them for a file's
    TopK/NMS. Without them a Caffe net checked against Caffe compared such an output in order, and
    the one ``[0, -1, ...]`` row both sides give when nothing is detected was a PASS."""
    origins: dict[str, str] = {}
    for layer in netdef.layers:  # type: ignore[attr-defined]
        if layer.type == "DetectionOutput" and layer.tops:
            where = f"{source}:{layer.line}" if layer.line is not None else source
            origins[layer.tops[0]] = f"DetectionOutput {shown(layer.name)} at {where}"
    return origins, dict.fromkeys(origins, 2)


# Where the seeded inputs of a net whose input goes straight into a layer with a restricted domain
# are drawn: that layer's argument (shift + scale * x) uniform in this range, positive, so that
# both runtimes compute numbers to compare, not NaN. N(0, 1) otherwise.
DOMAIN_ARGUMENT = (0.1, 3.0)


def _domain(layer: object) -> tuple[float, float, str] | None:
    """Return ``(scale, shift, formula)`` when ``layer`` computes a function of ``shift + scale * x``
    that is real only for positive (Log, a negative power) or non-negative (a fractional power: a
    square root) arguments; None otherwise."""
    kind = getattr(layer, "type", "")
    if kind == "Log":
        lp = layer.param.log_param  # type: ignore[attr-defined]
        scale, shift = float(lp.scale), float(lp.shift)
        return scale, shift, f"log({shift:g} + {scale:g} x), real only where {shift:g} + {scale:g} x > 0"
    if kind == "Power":
        pp = layer.param.power_param  # type: ignore[attr-defined]
        power, scale, shift = float(pp.power), float(pp.scale), float(pp.shift)
        if power == int(power) and power >= 0:
            return None
        sign = ">" if power < 0 else ">="
        return scale, shift, f"({shift:g} + {scale:g} x)^{power:g}, real only where {shift:g} + {scale:g} x {sign} 0"
    return None


def input_domains(netdef: object) -> dict[str, tuple[float, float, str]]:
    """Return, for each net input read first by a layer with a restricted domain (Log, a fractional
    or negative Power: ``_domain``), the range ``[lo, hi)`` to draw it from and why: the layer's
    argument then lies in ``DOMAIN_ARGUMENT``. Inputs read by several such layers get the range all
    of them allow (none when they allow none)."""
    inputs, _, _ = net_io(netdef)
    layers = list(netdef.layers)  # type: ignore[attr-defined]
    ranges: dict[str, tuple[float, float, str]] = {}
    for spec in inputs:
        lo, hi, why = -np.inf, np.inf, []
        for layer in layers:
            if layer.type == "Input":
                continue
            if spec.name in layer.bottoms:
                domain = _domain(layer)
                if domain is not None:
                    scale, shift, formula = domain
                    if scale == 0:
                        continue  # a constant argument: no input changes it
                    a, b = ((DOMAIN_ARGUMENT[0] - shift) / scale, (DOMAIN_ARGUMENT[1] - shift) / scale)
                    lo, hi = max(lo, min(a, b)), min(hi, max(a, b))
                    why.append(f"its first layer '{layer.name}' ({layer.type}) computes {formula}")
            if spec.name in layer.tops:
                break  # rewritten in place: later layers read another value
        if why and lo < hi:
            ranges[spec.name] = (float(lo), float(hi), f"{'; '.join(why)} (N(0, 1) would give NaN there)")
    return ranges


_SILENCE = re.compile(r"(?m)^\s*layers?\s*\{[^{}]*\btype:\s*(?:\"Silence\"|SILENCE)[^{}]*\}\s*$\n?")
# Layers of the SSD fork that OpenCV DNN 4.x has no implementation of.
_NOT_IN_OPENCV = frozenset({"Upsample"})


class OpenCVCaffeRuntime:
    """A Caffe net loaded in OpenCV DNN (CPU)."""

    def __init__(self, prototxt: Path, caffemodel: Path) -> None:
        try:
            import cv2
        except ImportError as exc:
            from convert.formats import install_hint

            raise UsageError(f"the Caffe runtime needs {install_hint('cv2')} (or real Caffe: scripts/build_caffe)"
                             ) from exc
        if not hasattr(cv2, "dnn") or not hasattr(cv2.dnn, "readNetFromCaffe"):
            raise UsageError("this OpenCV has no readNetFromCaffe (OpenCV 5 removed it): install opencv<5")
        from convert.frontends.caffe.reader import read_prototxt

        netdef = read_prototxt(Path(prototxt))
        absent = [layer for layer in netdef.layers if layer.type in _NOT_IN_OPENCV]
        if absent:  # OpenCV would fail only when the net first runs, with "Can't create layer"
            raise UsageError(f"OpenCV DNN cannot create the SSD fork's {absent[0].type} layer ('{absent[0].name}' "
                             f"in {Path(prototxt).name}): checking this file needs real Caffe, which "
                             "scripts/build_caffe builds (CPU, about 14 minutes on an idle 2-core machine); --no-check "
                             "skips the check")
        text = Path(prototxt).read_text()
        translated = translate_round_mode(text)
        # A Silence layer (it reads tops nothing else does) makes OpenCV 4.14 reuse those buffers for a
        # Slice's other outputs, which breaks reading layers one by one (locate): OpenCV runs the net
        # without it; the outputs are still the net's (net_io reads the Silence layer in the prototxt).
        loaded = _SILENCE.sub("", translated)
        try:
            if loaded != text:
                with tempfile.TemporaryDirectory() as tmp:
                    copy = Path(tmp) / Path(prototxt).name
                    copy.write_text(loaded)
                    self._net = cv2.dnn.readNetFromCaffe(str(copy), str(caffemodel))
            else:
                self._net = cv2.dnn.readNetFromCaffe(str(prototxt), str(caffemodel))
        except cv2.error as exc:
            raise UsageError(f"OpenCV could not load {Path(prototxt).name}: {str(exc).strip()}") from exc
        # Layer fusion is an optimisation with known wrong results on some chains (OpenCV 4.14
        # fuses an Eltwise PROD fed by Power/Exp chains incorrectly); the reference runs unfused.
        self._net.enableFusion(False)
        if hasattr(self._net, "enableWinograd"):
            self._net.enableWinograd(False)  # Winograd 3x3 convolutions cost ~1e-5 of accuracy
        self._net.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
        self._net.setPreferableTarget(cv2.dnn.DNN_TARGET_CPU)
        suffix = " (round_mode read as ceil_mode)" if translated != text else ""
        self.name = f"OpenCV DNN {cv2.__version__}{suffix}"
        self.notes = [round_mode_note(Path(prototxt).name, "OpenCV DNN")] if translated != text else []
        self.device = "cpu"
        self._inputs, self._outputs, writer = net_io(netdef)
        self.input_ranges = input_domains(netdef)  # seeded inputs in the first layer's domain
        self.set_outputs, self.row_axes = detection_rows(netdef, Path(prototxt).name)  # rows compared as sets
        self._tops = {layer.name: list(layer.tops) for layer in netdef.layers}
        # OpenCV 4.x sometimes names a layer after its top instead of its own name (a one-layer net
        # does): ask for the layer by the name OpenCV actually gave it.
        self._pins = [
            (layer, i) if self._net.getLayerId(layer) >= 0 or self._net.getLayerId(top) < 0 else (top, 0)
            for top, (layer, i) in ((t, writer[t]) for t in self._outputs)
        ]

    def inputs(self) -> Sequence[TensorSpec]:
        """Return the net's inputs."""
        return list(self._inputs)

    def outputs(self) -> Sequence[str]:
        """Return the net's output blob names (tops no later layer consumes)."""
        return list(self._outputs)

    def _set_inputs(self, feeds: Mapping[str, np.ndarray]) -> None:
        for spec in self._inputs:
            if spec.name not in feeds:
                raise UsageError(f"missing input '{spec.name}'")
            self._net.setInput(np.ascontiguousarray(feeds[spec.name], dtype=np.float32), spec.name)

    def layer_outputs(self, feeds: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, list[np.ndarray]]:
        """Run once; return every output of each layer in ``names`` that OpenCV knows by that name."""
        self._set_inputs(feeds)
        known: dict[str, str] = {}  # our name -> the name OpenCV gave the layer (sometimes its top's)
        for n in dict.fromkeys(names):
            tops = self._tops.get(n, [])
            if self._net.getLayerId(n) >= 0:
                known[n] = n
            elif tops and self._net.getLayerId(tops[0]) >= 0:
                known[n] = tops[0]
        # OpenCV 4.14 keeps only the first output of a requested layer out of its buffer reuse: a
        # Slice's second top comes back overwritten by a later layer. Layers with several tops are
        # therefore read in a run of their own.
        single = [n for n in known if len(self._tops.get(n, [])) <= 1]
        batches = [single] if single else []
        batches += [[n] for n in known if n not in single]
        found: dict[str, list[np.ndarray]] = {}
        for batch in batches:
            self._set_inputs(feeds)
            results = self._net.forwardAndRetrieve([known[n] for n in batch])
            found.update({n: [np.asarray(a) for a in r] for n, r in zip(batch, results, strict=True)})
        return {n: found[n] for n in known}

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once; return every output blob by name."""
        self._set_inputs(feeds)
        layers = list(dict.fromkeys(layer for layer, _ in self._pins))
        results = self._net.forwardAndRetrieve(layers)  # every output of each named layer
        by_layer = dict(zip(layers, results, strict=True))
        return {
            name: np.asarray(by_layer[layer][i]) for name, (layer, i) in zip(self._outputs, self._pins, strict=True)
        }


def open_runtime(paths: Sequence[Path], options: Options) -> Runtime:
    """Open ``[prototxt, caffemodel]`` (either order) in OpenCV DNN."""
    from convert.frontends.caffe.frontend import split_paths

    proto, weights = split_paths(paths)
    if weights is None:
        raise UsageError("the Caffe runtime needs the .prototxt and the .caffemodel")
    return OpenCVCaffeRuntime(proto, weights)
