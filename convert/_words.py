"""Messages in the words of whoever called: command-line flags for the CLI, keywords for the Python API.

Errors are raised once, in the CLI's words (``--input-shape data=1,3,416,416``, ``-o``, ``--opset``),
since most come from code the two share. The Python API says them in its own words on the way out:
``input_shapes={'data': (1, 3, 416, 416)}``, ``out=``, ``opset=``. The CLI marks the calls it makes
(:func:`cli_words`), which keep the flags.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import functools
import re
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from . import formats
from ._errors import ConvertError

__all__ = ["cli_words", "did_you_mean", "python_words", "speaks_python"]

_CLI = contextvars.ContextVar("convert_cli_words", default=False)

# The common options (their keyword is not the flag's spelling, or the value is written differently).
_KEYWORDS = {
    "-o": "out", "--output": "out", "--from": "format", "--to": "to", "--inputs": "inputs", "--seed": "seed",
    "--tol": "tol", "--atol": "atol", "--rtol": "rtol", "--opset": "opset", "--device": "device",
    "--on": "on",
}
_SWITCHES = {  # flags of the common options: --X -> keyword=True, --no-X -> keyword=False
    "check": "check", "locate": "locate", "fold-bn": "fold_batchnorm", "dynamic-batch": "dynamic_batch",
    "strict": "strict", "external-data": "external_data",
}
_FLAG = re.compile(r"(?<![\w-])(-o|--[a-z][a-z0-9-]*)(?:( )([^\s,;:)]+(?:,(?:[0-9?]+|[A-Z]))*))?")
_OPS = re.compile(r"`convert ops ([a-z0-9_-]+)`")
_NUMBER = re.compile(r"-?[0-9][0-9.e-]*")
_NAME = re.compile(r"[A-Za-z_][\w./-]*")
_DIM = r"(?:[0-9?]+|[A-Z])"  # a size, or ? or a letter (N,C,H,W) for one to fill in
_SHAPE = re.compile(rf"(?:([\w./:-]+)=)?({_DIM}(?:[,x]{_DIM})*)")

T = TypeVar("T")


def _format_options() -> dict[str, tuple[str, bool, tuple[str, ...]]]:
    """Every format option by flag: (keyword, is a flag, choices)."""
    found: dict[str, tuple[str, bool, tuple[str, ...]]] = {}
    infos = [formats.frontend_info(n) for n in formats.frontend_names()]
    infos += [formats.exporter_info(n) for n in formats.exporter_names()]
    for info in infos:
        for opt in info.options:
            found.setdefault(opt.flag, (opt.dest, opt.is_flag, tuple(opt.choices)))
    return found


def _keyword(flag: str, value: str | None, options: dict[str, tuple[str, bool, tuple[str, ...]]]) -> tuple[str, bool]:
    """Return the Python spelling of ``flag`` (and whether it took ``value``)."""
    if flag == "--input-shape":
        shape = _SHAPE.fullmatch(value or "")
        if shape is None:
            return (f"input_shapes[{value!r}]", True) if value and _NAME.fullmatch(value) else ("input_shapes=", False)
        dims = re.split("[,x]", shape.group(2))
        tup = f"({', '.join(dims)}{',' if len(dims) == 1 else ''})"
        return f"input_shapes={{{(shape.group(1) or '')!r}: {tup}}}", True
    name = flag[2:] if flag.startswith("--") else flag
    switch = name[3:] if name.startswith("no-") else name
    if switch in _SWITCHES:
        return f"{_SWITCHES[switch]}={not name.startswith('no-')}", False
    if flag in options:
        keyword, is_flag, choices = options[flag]
        if is_flag:
            return f"{keyword}=True", False
        if value is not None and (value in choices or _NUMBER.fullmatch(value)):
            return f"{keyword}={value if _NUMBER.fullmatch(value) else repr(value)}", True
        return f"{keyword}=", False
    if flag in _KEYWORDS:
        keyword = _KEYWORDS[flag]
        if value is not None and flag in ("-o", "--output", "--inputs") and re.search(r"[./]", value):
            return f"{keyword}={value.rstrip('.')!r}", True
        if value is not None and _NUMBER.fullmatch(value) and flag not in ("-o", "--output", "--inputs"):
            return f"{keyword}={value}", True
        return f"{keyword}=", False
    return flag, False  # a flag of another command (convert check --against): said as it is


def python_words(message: str) -> str:
    """Return ``message`` with the CLI's flags said as the Python API's keywords."""
    try:
        options = _format_options()
    except Exception:  # the catalog cannot be read: the message stays as raised
        return message

    def one(m: re.Match[str]) -> str:
        said, took = _keyword(m.group(1), m.group(3), options)
        if m.group(3) is None and said.endswith("=") and m.string[m.end():m.end() + 1] == ".":
            return said[:-1]  # "Choose another --opset." -> "Choose another opset."
        return said if took or m.group(3) is None else f"{said}{m.group(2)}{m.group(3)}"

    text = _OPS.sub(lambda m: f"`convert.supported_ops({m.group(1)!r})`", message)
    return _FLAG.sub(one, text)


@contextlib.contextmanager
def cli_words() -> Iterator[None]:
    """Within this block, errors keep the command line's words (the CLI's own calls)."""
    token = _CLI.set(True)
    try:
        yield
    finally:
        _CLI.reset(token)


def speaks_python(func: Callable[..., T]) -> Callable[..., T]:
    """Decorate a public API function: its ``ConvertError`` messages say keywords, not flags."""

    @functools.wraps(func)
    def wrapper(*args: object, **kwargs: object) -> T:
        try:
            return func(*args, **kwargs)
        except ConvertError as exc:
            if not _CLI.get() and exc.args and isinstance(exc.args[0], str):
                exc.args = (python_words(exc.args[0]), *exc.args[1:])
            raise

    return wrapper


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """Return `` (did you mean 'X'?)`` for the closest of ``choices`` or of any format's options
    (``random_weights``, a Darknet option, for ``random_weight``), or ''."""
    try:
        every = {keyword for keyword, _, _ in _format_options().values()}
    except Exception:  # the catalog cannot be read: only the choices given
        every = set()
    close = difflib.get_close_matches(word, sorted({*choices, *every}), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""
