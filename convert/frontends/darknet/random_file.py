"""``--random-weights``: one generated ``.weights`` file per process, shared by the conversion and its check.

The conversion reads the generated file lazily, like any ``.weights``, so memory does not grow with
the model (random arrays held in memory did: 256 MiB for yolov4, gigabytes for a large cfg), and the
reference runtime (libdarknet or OpenCV) loads the very same file instead of generating the weights a
second time (5.5 s of yolov4's 45 s). The file lives in a temporary folder removed at exit; it is
keyed by the cfg (path, size, modification time), the seed and the options that shape the
parameters (input shapes, batch, the frontend's own options).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from pathlib import Path

from convert.ir import ExportError, Options

from .random_weights import write_random_weights

__all__ = ["random_weights_file"]

_FILES: dict[tuple[object, ...], Path] = {}
_FOLDER: list[Path] = []
_LOCK = threading.Lock()


_HINT = "--random-weights writes them to the temporary folder: point TMPDIR at a folder with room"


def _folder() -> Path:
    if not _FOLDER:
        try:
            made = Path(tempfile.mkdtemp(prefix="convert-darknet-random-"))
        except OSError as exc:  # a missing, read-only or full TMPDIR: the machine's, not a bug
            raise ExportError(f"cannot make a folder for the random weights in '{tempfile.gettempdir()}': "
                              f"{exc.strerror or exc}. Nothing was written; {_HINT}.") from exc
        atexit.register(shutil.rmtree, made, True)
        _FOLDER.append(made)
    return _FOLDER[0]


def random_weights_file(cfg: Path, options: Options) -> Path:
    """Return the seeded random ``.weights`` of ``cfg`` under ``options``, written on first use."""
    st = cfg.stat()
    seed = int(str(options.get("seed", 0) or 0))
    shapes = tuple(sorted((k, tuple(v)) for k, v in options.input_shapes.items()))
    extra = tuple(sorted((k, repr(v)) for k, v in options.extra.items()))
    key = (str(cfg.resolve()), st.st_size, st.st_mtime_ns, seed, shapes, options.dynamic_batch, extra)
    with _LOCK:
        found = _FILES.get(key)
        if found is not None and found.is_file():
            return found
        out = _folder() / f"{len(_FILES)}-{cfg.stem}.weights"
        write_random_weights(cfg, out, seed=seed, options=options, hint=_HINT)
        _FILES[key] = out
        return out
