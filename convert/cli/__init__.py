"""The ``convert`` command line: one module per command.

    convert 'darknet->onnx' yolov4.cfg yolov4.weights -o yolov4.onnx
    convert pytorch:caffe model.pt --input-shape x=1,3,224,224
    convert check 'onnx->caffe' model.onnx --against model.prototxt --against model.caffemodel
    convert inspect model.onnx        convert formats        convert ops darknet

Layout: ``_group.py`` (the group, the help), ``_base.py`` (what the commands share: exit statuses,
output-path checks, the error guard), then one module per command: ``cmd_convert.py`` (the
default command), ``cmd_check.py``, ``cmd_batch.py``, ``cmd_inspect.py``, ``cmd_info.py``
(``formats``, ``ops``, ``help``) and ``cmd_random_weights.py``.

Exit status: 0 converted (and parity passed), 1 converted but parity failed or could not run,
2 could not convert (usage, malformed or unsupported model; a missing optional framework),
3 internal error (a bug in convert), 130 interrupted, 141 stdout closed early (`convert ... | head -1`),
143 terminated. Only the CLI modules print.

Importing this package imports click and the standard library, no onnx-ir, numpy or framework:
each command imports what it needs when it runs (docs/startup.md).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from .. import _signals

try:
    from . import cmd_batch, cmd_check, cmd_convert, cmd_info, cmd_inspect, cmd_random_weights  # register commands
    from ._base import EXIT_PIPE, silence_stdout
    from ._group import cli
    from .cmd_batch import _BatchProgress  # noqa: F401  (tests drive the batch progress directly)
    from .cmd_info import ops_table

    _signals.phase("start-up")  # test hook (convert/_signals.py)
except KeyboardInterrupt as _exc:  # Ctrl-C or SIGTERM while the command starts: one line, not a traceback
    _signals.started_interrupted(_exc)
    raise

__all__ = ["cli", "main", "ops_table"]

_COMMANDS = (cmd_batch, cmd_check, cmd_convert, cmd_info, cmd_inspect, cmd_random_weights)  # registered on `cli`


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``convert`` console script and ``python -m convert``."""
    _signals.install()
    name = os.path.basename(sys.argv[0]) if sys.argv else ""
    prog = name if name in _signals.SCRIPTS else "convert"  # messages name the command as it was called
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name=prog)
    except SystemExit as exc:
        try:
            sys.stdout.flush()  # what is still buffered, while we can still say how it went
        except BrokenPipeError:
            silence_stdout()
            if not exc.code:
                raise SystemExit(EXIT_PIPE) from None
        if argv is None:  # the process is the command (not a test calling main): it only exits now
            _signals.ignore()  # after the last line is out, a Ctrl-C or SIGTERM changes nothing
            _signals.phase("exit")  # test hook (convert/_signals.py)
            # Python's last garbage collection at exit walks every object the imports made (onnx's
            # descriptors, numpy, torch): 0.05-0.09 s of a 0.4 s command, for memory the process gives
            # back anyway. Frozen objects are out of its reach. Every output is closed and renamed by
            # now, and atexit handlers (logging's flush, temporary folders) run as before.
            import gc

            gc.freeze()
        raise
