"""Darknet frontend: ``.cfg`` + ``.weights`` (both lineages) -> IR.

Exposes ``FRONTEND`` (the plugin contract of ``convert.ir.plugins``). Layer converters are in
``layers.py`` and ``heads.py``, activations in ``activations.py``, the cfg reader in ``cfg.py``,
the weights cursor in ``weights.py`` and the random-weights writer in ``random_weights.py``.
"""

from __future__ import annotations

from pathlib import Path

from convert.ir import FrontendSpec, OpSupport, OptionSpec

from .activations import ACTIVATIONS, ONNX_FORMS
from .layers import LAYERS
from .loader import check_support, load

__all__ = ["FRONTEND", "supported_ops"]

_MAPS = {
    "convolutional": "Conv (+ BatchNormalization) (+ activation)",
    "connected": "Flatten + Gemm (+ BatchNormalization) (+ activation)",
    "maxpool": "MaxPool (Darknet padding)",
    "local_avgpool": "AveragePool (count_include_pad=0)",
    "avgpool": "GlobalAveragePool",
    "route": "Concat / Slice (groups)",
    "shortcut": "Add (+ Slice/Concat/MaxPool 1x1 for other shapes) (+ activation)",
    "upsample": "Resize nearest (x scale)",
    "reorg": "Reshape + Transpose (Darknet's reorg)",
    "crop": "Slice + Mul/Sub (inference centre crop)",
    "dropout": "nothing (identity)",
    "cost": "nothing (training only)",
    "softmax": "Softmax per group",
    "scale_channels": "Mul",
    "sam": "Mul",
    "activation": "activation ops",
    "yolo": "Sigmoid on x, y, objectness, classes; scale_x_y as Mul/Add",
    "region": "Sigmoid on x, y, objectness; Softmax over classes",
    "local": "one-hot grouped Conv (im2col) + batched MatMul + Add",
    "detection": "Softmax over each cell's classes (YOLOv1); output left flat as Darknet's",
}
_NOTES = {
    "convolutional": "not binary/xnor/deform/antialiasing",
    "maxpool": "not maxpool_depth/antialiasing",
    "reorg": "not reverse/flatten/extra",
    "shortcut": "weights_type=none, alpha=beta=1 only",
    "softmax": "no tree",
    "region": "no tree, no background",
    "scale_channels": "not scale_wh",
}


def supported_ops() -> list[OpSupport]:
    """Return the support table: one row per section type (aliases listed) and per activation."""
    rows = []
    seen = set()
    for key, fn in LAYERS.items():
        if fn in seen:
            continue
        seen.add(fn)
        aliases = [str(k) for k, f in LAYERS.items() if f is fn and k != key]
        label = f"[{key}]" + (f" (also {', '.join(f'[{a}]' for a in aliases)})" if aliases else "")
        rows.append(OpSupport(label, _MAPS.get(str(key), ""), _NOTES.get(str(key), "")))
    for key, _ in ACTIVATIONS.items():
        rows.append(OpSupport(f"activation={key}", ONNX_FORMS.get(str(key), "")))
    return rows


def _sniff(path: Path) -> bool:
    if path.suffix.lower() == ".weights":
        return False
    try:
        head = path.read_bytes()[:4096]
    except OSError:
        return False
    if b"\0" in head:
        return False
    text = head.decode("latin-1")
    lines = ["".join(line.split()) for line in text.splitlines()]
    first = next((line for line in lines if line and line[0] not in "#;"), "")
    return first in ("[net]", "[network]")


FRONTEND = FrontendSpec(
    name="darknet",
    description="Darknet .cfg + .weights (original and AlexeyAB lineages)",
    suffixes=(".cfg", ".weights"),
    load=load,
    sniff=_sniff,
    ops=supported_ops,
    check_support=check_support,
    options=(
        OptionSpec("--random-weights", "random_weights", "convert a cfg without .weights, with seeded random "
                   "parameters (for inspection and tests)", is_flag=True, default=False),
        OptionSpec("--decode", "decode", "append box decoding: one 'detections' output of N x boxes x "
                   "(x, y, w, h in input pixels, objectness, class scores)", is_flag=True, default=False),
        OptionSpec("--allow-trailing-bytes", "allow_trailing_bytes", "accept a .weights file with bytes "
                   "left over after the last layer", is_flag=True, default=False),
        OptionSpec("--darknet-lineage", "darknet_lineage", "batch-norm epsilon and semantics: 'original' "
                   "(pjreddie), 'alexeyab', or 'auto' (AlexeyAB when the cfg uses its features)",
                   default="auto", choices=("auto", "original", "alexeyab")),
    ),
    runtime="convert.parity.runtimes.darknet",
)
