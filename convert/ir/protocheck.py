"""Checks on parsed protobuf messages that protobuf itself does not make (shared by frontends).

proto2 ``string`` fields holding bytes that are not UTF-8 parse without complaint and come back
as ``bytes``; code that then sorts, formats or looks the name up fails far from the file. Frontends
call ``non_text_field`` right after parsing and refuse such a file in one line.
"""

from __future__ import annotations

__all__ = ["non_text_field"]


def _repeated(fd: object) -> bool:
    flag = getattr(fd, "is_repeated", None)  # protobuf >= 5.28; older releases have only `label`
    return bool(flag) if flag is not None else fd.label == fd.LABEL_REPEATED  # type: ignore[attr-defined]


def non_text_field(message: object, path: str = "") -> str | None:
    """Return the path of the first string field whose value is not valid UTF-8 text, else None.

    The walk visits every set field of every sub-message once (no weight payloads: tensor data
    lives in bytes or numeric fields, which are skipped).
    """
    stack: list[tuple[object, str]] = [(message, path)]
    while stack:
        msg, where = stack.pop()
        for fd, value in msg.ListFields():  # type: ignore[attr-defined]
            here = f"{where}.{fd.name}" if where else fd.name
            if fd.type == fd.TYPE_STRING:
                items = value if _repeated(fd) else [value]
                for i, item in enumerate(items):
                    if not isinstance(item, str):
                        return f"{here}[{i}]" if _repeated(fd) else here
            elif fd.type == fd.TYPE_MESSAGE:
                if _repeated(fd):
                    if fd.message_type.GetOptions().map_entry:
                        continue
                    stack.extend((item, f"{here}[{i}]") for i, item in enumerate(value))
                else:
                    stack.append((value, here))
    return None
