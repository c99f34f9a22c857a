"""Zip archives read as the frameworks that load them read them (PyTorch, Keras).

A zip's central directory can name two members alike, and readers disagree on which one a name
means: Python's ``zipfile`` takes the **last** member of a name, PyTorch's reader (miniz, behind
``torch.load``, ``torch.jit.load`` and ``torch.export.load``) looks names up by binary search,
**ignoring ASCII case**, and found the **first** in our tests. Python cuts a name at its first NUL
byte; miniz does not. Python shifts every offset by the bytes found before the archive (a
prepended stub); miniz does not. Any of these lets a check made with ``zipfile`` read other bytes
than the framework later loads (a code-running pickle behind a harmless one).

No framework writes such archives, so :func:`read_members` refuses them all: two names equal up
to ASCII case, a control character in a name, bytes before the archive or central directory
entries that do not point at their own local headers. Standard library only.
"""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

from ._errors import ModelFormatError, shown

__all__ = ["read_members"]

_EOCD = b"PK\x05\x06"
_EOCD64_LOCATOR = b"PK\x06\x07"
_EOCD64 = b"PK\x06\x06"
_LOCAL = b"PK\x03\x04"
_FOLD = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz")


def _fold(name: str) -> str:
    """Fold ASCII letters only, as miniz's name comparison does (``MZ_TOLOWER``)."""
    return name.translate(_FOLD)


def _directory_offset(fh: object, size: int) -> int | None:
    """Return the central directory's offset as the end record states it (zip64 too), or None."""
    tail_len = min(size, 22 + 65535)
    fh.seek(size - tail_len)  # type: ignore[attr-defined]
    tail = fh.read(tail_len)  # type: ignore[attr-defined]
    at = tail.rfind(_EOCD)
    if at < 0 or at + 22 > len(tail):
        return None
    offset = struct.unpack_from("<L", tail, at + 16)[0]
    if offset != 0xFFFFFFFF:
        return int(offset)
    loc = at - 20
    if loc < 0 or tail[loc:loc + 4] != _EOCD64_LOCATOR:
        return None
    record = struct.unpack_from("<Q", tail, loc + 8)[0]
    if record + 56 > size:
        return None
    fh.seek(record)  # type: ignore[attr-defined]
    head = fh.read(56)  # type: ignore[attr-defined]
    if head[:4] != _EOCD64:
        return None
    return int(struct.unpack_from("<Q", head, 48)[0])


def read_members(path: Path, *, what: str) -> list[zipfile.ZipInfo]:
    """Return an archive's members after refusing what two zip readers would read differently.

    Args:
        path: the archive.
        what: what the archive is, for messages ("PyTorch archive", ".keras archive").

    Raises:
        ModelFormatError: not a readable zip, or one whose members two readers would tell apart
            differently (named, with the member).
    """
    name = path.name
    try:
        with open(path, "rb") as fh, zipfile.ZipFile(fh) as zf:
            infos = zf.infolist()
            start = zf.start_dir
            size = fh.seek(0, 2)
            stated = _directory_offset(fh, size)
            heads = []
            for info in infos:
                fh.seek(info.header_offset)
                heads.append(fh.read(4))
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError, UnicodeDecodeError) as exc:
        raise ModelFormatError(f"{name}: a damaged zip archive ({type(exc).__name__}: {exc}). "
                               "Is the file truncated or corrupt?") from exc
    if stated is not None and stated != start:
        raise ModelFormatError(
            f"{name}: {start - stated:,} bytes stand before the {what}'s first member (its central directory "
            f"is at byte {start:,}, its end record says {stated:,}); zip readers disagree on such a file, "
            "so it is refused. Save the model again")
    seen: dict[str, str] = {}
    for info, head in zip(infos, heads, strict=True):
        raw = info.orig_filename
        if any(ord(c) < 32 or ord(c) == 127 for c in raw):
            raise ModelFormatError(f"{name}: member {shown(raw)} has a control character in its name; zip "
                                   "readers disagree on such names, so the archive is refused")
        if head != _LOCAL:
            raise ModelFormatError(f"{name}: a member of the archive is damaged (BadZipFile: no local header "
                                   f"at byte {info.header_offset:,}, where member {shown(raw)} should start). Is the "
                                   "file truncated or corrupt?")
        key = _fold(raw)
        if key in seen:
            other = seen[key]
            which = (f"member {shown(raw)} twice" if other == raw else
                     f"members {shown(other)} and {shown(raw)}, one name to PyTorch's reader (it ignores case)")
            raise ModelFormatError(
                f"{name}: the {what} holds {which}; zip readers disagree on which member such a name means "
                "(Python's zipfile takes the last, PyTorch's reader the first), so what is checked could differ "
                "from what is loaded. Refused: save the model again")
        seen[key] = raw
    return infos
