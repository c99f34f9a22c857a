"""Where ``scripts/build_caffe`` puts real Caffe: found without importing anything heavy.

``convert formats`` asks whether the Caffe parity check can run (real Caffe or OpenCV) without
importing numpy or the parity package; the Caffe runtime asks the same function where to run.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CAFFE_DIALECTS", "find_caffe"]

#: The two real Caffes: their folder under ~/.cache/convert-caffe, the variable naming another, the report's name.
CAFFE_DIALECTS = {
    "ssd": ("python", "CONVERT_CAFFE_PYTHON", "Caffe (brocolli-caffe 9.0.2, SSD fork)"),
    "bvlc": ("bvlc/python", "CONVERT_CAFFE_BVLC_PYTHON", "Caffe (BVLC master 99bd997)"),
}


def find_caffe(dialect: str = "ssd") -> Path | None:
    """Return the folder holding real Caffe's ``_caffe.so`` for ``dialect`` (``ssd``: the SSD fork,
    ``bvlc``: BVLC master), or None when it is not built here."""
    sub, var, _ = CAFFE_DIALECTS[dialect]
    env = os.environ.get(var)
    home = Path(os.environ.get("CONVERT_CAFFE_HOME", Path.home() / ".cache" / "convert-caffe"))
    for base in ([Path(env)] if env else []) + [home / sub]:
        for folder in (base / "caffe", base):
            if (folder / "_caffe.so").is_file():
                return folder
    return None
