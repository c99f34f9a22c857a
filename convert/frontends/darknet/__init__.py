"""Darknet frontend: ``.cfg`` + ``.weights`` (both lineages) -> IR.

Exposes ``FRONTEND`` (the plugin contract of ``convert.ir.plugins``). Layer converters are in
``layers.py`` and ``heads.py``, activations in ``activations.py``, the cfg reader in ``cfg.py``,
the weights cursor in ``weights.py`` and the random-weights writer in ``random_weights.py``.
"""

from __future__ import annotations

from pathlib import Path

from convert.ir import FrontendSpec, OpSupport, OptionSpec

from .activations import ACTIVATIONS
from .layers import LAYERS
from .loader import check_support, load

__all__ = ["FRONTEND", "supported_ops"]

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
        row = next(r for r in LAYERS.support() if r.op == str(key))
        rows.append(OpSupport(label, row.maps_to, row.notes))
    rows += [OpSupport(f"activation={r.op}", r.maps_to, r.notes) for r in ACTIVATIONS.support()]
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
