"""Signals of the ``convert`` command: SIGTERM raised as ``Terminated``, and the signal test hook.

``Terminated`` subclasses ``KeyboardInterrupt``, so that Ctrl-C and SIGTERM run the same clean-up
and are told apart only in the message and the exit status (130 and 143). The handler is installed
by ``convert/__init__.py`` as soon as the package starts when this process is the ``convert``
command, so that SIGTERM during start-up is one line and 143 rather than a silent death.

Test hook (for tests/test_signal_phases.py, documented in docs/startup.md):
``CONVERT_TEST_SIGNAL=PHASE:SIGNAL`` makes the command send itself SIGNAL (``SIGINT`` or ``SIGTERM``)
when it reaches PHASE (``start-up``, ``read``, ``write``, ``summary``, ``exit``). Unset, it costs
one dictionary lookup per phase.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

__all__ = ["EXIT_INTERRUPTED", "EXIT_TERMINATED", "SCRIPTS", "Terminated", "exit_status", "ignore", "in_chain",
           "install", "is_command", "is_terminated", "phase", "started_interrupted", "what"]

EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
EXIT_TERMINATED = 143  # SIGTERM (128 + SIGTERM)
# The console scripts (pyproject.toml [project.scripts]): `convert`, and `convert-model`, which no
# other tool uses (ImageMagick installs a `convert` too).
SCRIPTS = ("convert", "convert-model")


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is so that the same clean-up as for Ctrl-C runs."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated()


def install() -> None:
    """Raise ``Terminated`` on SIGTERM (in the main thread; elsewhere, leave the handler alone)."""
    with contextlib.suppress(ValueError):  # not the main thread (an embedding program)
        signal.signal(signal.SIGTERM, _on_sigterm)


def ignore() -> None:
    """Ignore Ctrl-C and SIGTERM from now on: the command has said how it went, and only exits."""
    with contextlib.suppress(ValueError):  # not the main thread
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def is_command() -> bool:
    """True when this process is the ``convert`` command: a console script or ``python -m convert``."""
    argv = getattr(sys, "orig_argv", sys.argv)
    as_module = any(a == "-m" and argv[i + 1: i + 2] == ["convert"] for i, a in enumerate(argv))
    return as_module or (bool(sys.argv) and sys.argv[0].rsplit("/", 1)[-1] in SCRIPTS)


def in_chain(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first exception of ``kind`` among ``exc`` and those it was raised from or while handling."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def is_terminated(exc: BaseException) -> bool:
    """True when ``exc`` is SIGTERM's ``Terminated``, or was raised from or while handling one."""
    return in_chain(exc, Terminated) is not None


def what(exc: BaseException) -> str:
    """'terminated' (SIGTERM) or 'interrupted' (Ctrl-C), for messages."""
    return "terminated" if is_terminated(exc) else "interrupted"


def exit_status(exc: BaseException) -> int:
    """130 for Ctrl-C, 143 for SIGTERM."""
    return EXIT_TERMINATED if is_terminated(exc) else EXIT_INTERRUPTED


def started_interrupted(exc: BaseException) -> None:
    """Ctrl-C or SIGTERM while the command imports its modules: one line and 130/143, not a traceback.

    Only when this process is the command; a program importing the package gets its
    KeyboardInterrupt as usual (the caller re-raises it).
    """
    if is_command():
        print(f"convert: error: {what(exc)} while starting; nothing was written", file=sys.stderr)
        raise SystemExit(exit_status(exc)) from None


def phase(name: str) -> None:
    """Test hook: send this process the signal that ``CONVERT_TEST_SIGNAL`` names for phase ``name``."""
    wanted = os.environ.get("CONVERT_TEST_SIGNAL")
    if not wanted or wanted.partition(":")[0] != name:
        return
    sig = getattr(signal, wanted.partition(":")[2] or "SIGINT")
    os.kill(os.getpid(), sig)
    if signal.getsignal(sig) is not signal.SIG_IGN:
        time.sleep(5)  # the handler raises here, at once; the sleep only bounds a signal that never comes
