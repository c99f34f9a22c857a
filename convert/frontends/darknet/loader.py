"""Darknet cfg (+ weights) -> IR model: support check, lineage, layer loop, outputs."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from convert.ir import (
    DataType,
    GapCollector,
    GraphBuilder,
    Model,
    ModelFormatError,
    Options,
    Unsupported,
    UsageError,
    convert_all,
)
from convert.ir.given import refuse_contradicting_shape

from . import heads
from .activations import ACTIVATIONS
from .cfg import Section, parse_cfg
from .context import DarknetContext, LayerOut
from .layers import LAYERS, LayerFn
from .weights import FileWeights, WeightSource

__all__ = ["TRAINING_OPTIONS", "build_model", "check_support", "detect_lineage", "input_shape", "load", "output_layers",
           "split_paths"]

logger = logging.getLogger(__name__)

# Options Darknet reads only for training or for post-processing; silently ignored here.
TRAINING_OPTIONS = frozenset([
    "jitter", "ignore_thresh", "truth_thresh", "random", "iou_normalizer", "iou_loss", "cls_normalizer",
    "obj_normalizer", "nms_kind", "beta_nms", "max_delta", "resize", "iou_thresh", "objectness_smooth",
    "counters_per_class", "label_smooth_eps", "focal_loss", "track_history_size", "sim_thresh",
    "dets_for_track", "dets_for_show", "track_ciou_norm", "embedding_layer", "uc_normalizer",
    "delta_normalizer", "bias_match", "class_scale", "coord_scale", "noobject_scale", "object_scale",
    "rescore", "thresh", "absolute", "map", "probability", "dropblock", "dropblock_size_rel",
    "dropblock_size_abs", "type", "scale", "ratio", "angle", "saturation", "exposure", "hue", "shift",
    "flip", "stopbackward", "train_only_bn", "learning_rate_scale", "smooth",
    "noloss", "log", "rand_noise",
])

# Options whose presence (with a non-default value) makes a layer unconvertible.
_UNSUPPORTED_OPTIONS: dict[str, dict[str, str]] = {
    "convolutional": {"binary": "0", "xnor": "0", "antialiasing": "0", "deform": "0", "share_index": "",
                      "assisted_excitation": "0", "sway": "0", "rotate": "0", "stretch": "0",
                      "dontload": "0", "dontloadscales": "0",
                      "stretch_sway": "0"},
    "maxpool": {"maxpool_depth": "0", "antialiasing": "0", "out_channels": ""},
    "reorg": {"reverse": "0", "flatten": "0", "extra": "0"},
    "region": {"tree": "", "background": "0"},
    "softmax": {"tree": ""},
    "shortcut": {"weights_type": "none"},
    "scale_channels": {"scale_wh": "0"},
    "upsample": {},
}
_ALIASES = {"conv": "convolutional", "conn": "connected", "max": "maxpool", "avg": "avgpool", "soft": "softmax",
            "network": "net"}

# Features only the AlexeyAB fork has; their presence selects its lineage under 'auto'.
_ALEXEYAB_ACTIVATIONS = {"mish", "swish", "hard_mish", "relu6", "gelu", "hardswish"}
_ALEXEYAB_SECTIONS = {"scale_channels", "sam", "local_avgpool"}
_ALEXEYAB_OPTIONS = {("route", "groups"), ("yolo", "scale_x_y"), ("yolo", "new_coords"),
                     ("convolutional", "stride_x"), ("convolutional", "stride_y"),
                     ("convolutional", "dilation"), ("maxpool", "stride_x"), ("maxpool", "stride_y")}


def split_paths(paths: Sequence[Path]) -> tuple[Path, Path | None]:
    """Return (cfg, weights or None) from the input paths.

    Raises:
        UsageError: no cfg, or more than two files.
    """
    paths = [Path(p) for p in paths]
    if not paths or len(paths) > 2:
        raise UsageError(f"darknet takes a .cfg and a .weights file, got {len(paths)} files")
    cfgs = [p for p in paths if p.suffix.lower() == ".cfg"]
    weights = [p for p in paths if p.suffix.lower() == ".weights"]
    if len(cfgs) == 1 and len(weights) <= 1 and len(paths) == len(cfgs) + len(weights):
        return cfgs[0], weights[0] if weights else None
    cfg = paths[0]
    return cfg, paths[1] if len(paths) > 1 else None


def _kind(sec: Section) -> str:
    return _ALIASES.get(sec.type, sec.type)


def detect_lineage(sections: Sequence[Section]) -> str:
    """Return 'alexeyab' when the cfg uses a feature only the AlexeyAB fork has, else 'ambiguous'.

    An ambiguous cfg runs in both forks; ``--darknet-lineage auto`` then converts it with
    AlexeyAB's formulas (the fork most .weights in use come from) and says it assumed so.
    """
    return "alexeyab" if _alexeyab_feature(sections) else "ambiguous"


def _alexeyab_feature(sections: Sequence[Section]) -> str:
    """Describe the first AlexeyAB-only feature of the cfg ('' when there is none)."""
    for sec in sections:
        kind = _kind(sec)
        if kind in _ALEXEYAB_SECTIONS:
            return f"[{sec.type}] at {sec.where}"
        if sec.options.get("activation") in _ALEXEYAB_ACTIVATIONS:
            return f"activation={sec.options['activation']} at {sec.where}"
        for key in sec.options:
            if (kind, key) in _ALEXEYAB_OPTIONS:
                return f"[{sec.type}] {key}= at {sec.file}:{sec.option_lines[key]}"
    return ""


def _gaps(sections: Sequence[Section]) -> GapCollector:
    """Every unsupported section type, activation and option value, with counts and first line."""
    gaps = GapCollector()
    add = gaps.add
    for sec in sections[1:]:
        kind = _kind(sec)
        if kind not in LAYERS:
            add(f"[{sec.type}]", sec.where, "section type not supported")
            continue
        act = sec.options.get("activation")
        if act is not None and act not in ACTIVATIONS:
            add(f"activation={act}", sec.where, "activation not supported")
        for key, default in _UNSUPPORTED_OPTIONS.get(kind, {}).items():
            value = sec.options.get(key)
            if value is not None and value != default:
                add(f"[{sec.type}] {key}={value}", f"{sec.file}:{sec.option_lines.get(key, sec.line)}",
                    "option value not supported")
    return gaps


def check_support(paths: Sequence[Path], options: Options) -> list[Unsupported]:
    """Return every gap in the cfg (no weights are read)."""
    cfg, _ = split_paths(paths)
    return _gaps(parse_cfg(cfg)).items()


# Sanity limits on the input: a corrupt cfg (width=1000000000) must be one line, not a MemoryError.
MAX_SIDE = 16384
MAX_CHANNELS = 65536


def input_shape(net: Section, options: Options) -> tuple[int, int, int]:
    c = net.int("channels", 3)
    h = net.int("height", 0)
    w = net.int("width", 0)
    if options.input_shapes:
        names = set(options.input_shapes)
        if len(names) > 1 or not names <= {"", "data", "input0"}:
            listed = ", ".join(f"'{n}'" for n in sorted(names))
            raise UsageError(f"--input-shape names {listed}, but a Darknet net has one input, 'data': "
                             "pass --input-shape data=N,C,H,W")
        shape = next(iter(options.input_shapes.values()))
        if len(shape) != 4:
            raise UsageError(f"darknet input shape must be N,C,H,W, got {','.join(map(str, shape))}")
        if c > 0:  # the weights are sized by the cfg's channels; width and height are the net's to resize
            refuse_contradicting_shape("data", shape, [None, c, None, None], source=f"{net.where} (channels={c})")
        c, h, w = (int(d) for d in shape[1:])
    if h <= 0 or w <= 0 or c <= 0:
        if h == 0 and w == 0 and net.int("inputs", 0) > 0:
            return net.int("inputs", 0), 1, 1
        raise ModelFormatError(f"{net.where}: [net] needs positive width, height and channels "
                               f"(found {w}x{h}x{c}). Set them in the cfg or pass --input-shape.")
    if max(h, w) > MAX_SIDE or c > MAX_CHANNELS:
        raise ModelFormatError(f"{net.where}: [net] input {w}x{h}x{c} is beyond any network's size (width and "
                               f"height at most {MAX_SIDE}, channels at most {MAX_CHANNELS}). Is the cfg corrupt?")
    return c, h, w


def build_model(cfg: Path, source: WeightSource, options: Options, *, weights_name: str = "") -> Model:
    """Convert ``cfg`` with parameters from ``source``.

    Raises:
        UnsupportedOpsError: the cfg uses sections, activations or options we cannot convert.
        ModelFormatError: the cfg or weights are malformed or do not match.
        ConversionError: a layer failed for another reason (the cause is chained).
    """
    sections = parse_cfg(cfg)
    gaps = _gaps(sections)
    section_types = all(g.op.startswith("[") and g.op.endswith("]") for g in gaps.items())
    gaps.raise_if_any(cfg.name, what="section type" if section_types else "feature",
                      hint="Run `convert ops darknet` for the supported list.")
    net = sections[0]
    lineage = str(options.get("darknet_lineage", "auto") or "auto")
    assumed = False
    if lineage == "auto":
        feature = _alexeyab_feature(sections)
        lineage, assumed = "alexeyab", not feature
        options.diagnostics.note(
            f"{cfg.name}: AlexeyAB lineage ({feature}): batch norm divides by sqrt(var + 1e-5)" if feature else
            f"{cfg.name}: lineage ASSUMED AlexeyAB: the cfg uses no feature of either fork alone, and most "
            ".weights in use were trained with AlexeyAB's darknet (batch norm divides by sqrt(var + 1e-5)); "
            "for weights trained with pjreddie's original darknet pass --darknet-lineage original"
        )
    if lineage not in ("original", "alexeyab"):
        raise UsageError(f"--darknet-lineage must be original, alexeyab or auto, got '{lineage}'")
    feature = _alexeyab_feature(sections) if lineage == "original" else ""
    if feature:  # pjreddie's darknet cannot run this cfg: no weights were trained with it
        raise UsageError(f"{cfg.name}: --darknet-lineage original, but the cfg uses {feature}, which only "
                         "AlexeyAB's darknet has: pjreddie's cannot run this cfg, so no weights for it were trained "
                         "with its batch norm. Pass --darknet-lineage alexeyab (or auto).")
    c, h, w = input_shape(net, options)
    b = GraphBuilder(cfg.stem, source=cfg.name)
    batch: int | str = "N" if options.dynamic_batch else 1
    x = b.input("data", DataType.FLOAT, (batch, c, h, w))
    ctx = DarknetContext(b=b, cfg_name=cfg.name, weights=source, options=options, lineage=lineage,
                         net_w=w, net_h=h)
    ctx.input = LayerOut(x, c, h, w, 1.0, "input")
    body = sections[1:]
    indexed = list(enumerate(body))

    def run(handler: LayerFn, item: tuple[int, Section]) -> None:
        i, sec = item
        ctx.index = i
        ctx.item = sec
        ctx.next_kind = _kind(body[i + 1]) if i + 1 < len(body) else ""
        ctx.layers.append(handler(sec, ctx))

    convert_all(indexed, LAYERS, key=lambda item: _kind(item[1]), call=run, options=options,
                stage="darknet layers", where=lambda item: f"layer {item[0]} [{item[1].type}] ({item[1].where})")
    if not body:
        raise ModelFormatError(f"{cfg.name}: the cfg has no layers after [net].")
    source.finish()
    _warn_unknown_options(body, options)
    skipped = Counter(_kind(sec) for sec in body if _kind(sec) in ("dropout", "cost"))
    for kind, count in skipped.items():
        options.diagnostics.note(f"dropped {count} [{kind}] layer{'s' if count > 1 else ''} (no effect at inference)")
    _mark_outputs(ctx, body, bool(options.get("decode", False)))
    doc = f"Converted from {cfg.name}" + (f" + {weights_name}" if weights_name else "") + f" ({lineage} lineage)"
    model = b.build(doc=doc)
    model.metadata_props["convert:darknet_lineage"] = lineage + (" (assumed)" if assumed else "")
    return model


def _warn_unknown_options(body: Sequence[Section], options: Options) -> None:
    unknown: Counter[str] = Counter()
    first: dict[str, str] = {}
    for sec in body:
        for key in sec.options:
            if key in sec.used or key in TRAINING_OPTIONS:
                continue
            label = f"[{sec.type}] {key}"
            unknown[label] += 1
            first.setdefault(label, f"{sec.file}:{sec.option_lines[key]}")
    for label, count in unknown.items():
        times = f" x{count}" if count > 1 else ""
        options.diagnostics.warn(f"ignored unknown cfg option {label}{times} (first at {first[label]})")


def _mark_outputs(ctx: DarknetContext, body: Sequence[Section], decode: bool) -> None:
    b = ctx.b
    if decode and ctx.heads:
        b.output(heads.decode_heads(ctx), "detections")
        return
    if decode:
        ctx.diagnostics.warn("--decode: the cfg has no [yolo] or [region] layer; outputs are left as they are")
    named: set[int] = set()
    for index, sec, out in ctx.heads:
        b.output(out.value, f"{sec.type}_{index}")
        named.add(index)
    _, (last, name) = output_layers(body)
    if last not in named:
        b.output(ctx.layers[last].value, name)


def output_layers(body: Sequence[Section]) -> tuple[list[tuple[int, str]], tuple[int, str]]:
    """Return the layers a converted net outputs, as ``(index, output name)``: its [yolo]/[region]
    heads, and its last layer before any [cost] (the parity runtimes read the same layers)."""
    head_layers = [(i, f"{s.type}_{i}") for i, s in enumerate(body) if _kind(s) in ("yolo", "region")]
    last = len(body) - 1
    while last > 0 and _kind(body[last]) == "cost":
        last -= 1
    return head_layers, (last, f"{_kind(body[last])}_{last}")


def load(paths: Sequence[Path], options: Options) -> Model:
    """Load a Darknet model: ``[cfg, weights]``, or ``[cfg]`` with ``--random-weights``.

    Raises:
        UsageError: no weights and no --random-weights.
    """
    cfg, weights = split_paths(paths)
    if weights is None:
        if not options.get("random_weights", False):
            raise UsageError(f"{cfg.name}: no .weights file given. Pass one, or --random-weights to inspect the cfg.")
        from .random_file import random_weights_file  # streamed from a file, shared with the check

        generated = random_weights_file(cfg, options)
        model = build_model(cfg, FileWeights(generated, cfg_name=cfg.name), options)
    else:
        if not weights.is_file():
            raise UsageError(f"{weights}: no such file")
        source = FileWeights(weights, allow_trailing=bool(options.get("allow_trailing_bytes", False)),
                             cfg_name=cfg.name)
        model = build_model(cfg, source, options, weights_name=weights.name)
    # The lineage this conversion used, for its parity check (the reference then knows it, assumed or not).
    options.memo["darknet_lineage"] = model.metadata_props["convert:darknet_lineage"].split(" ")[0]
    return model
