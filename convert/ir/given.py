"""A given input shape (``--input-shape``) checked against the dimensions the model fixes.

A shape the model contradicts writes a file that does not load (a TFLite model's NHWC shape given
to its NCHW conversion: 1x32x32x3 where the convolutions take 3 channels first), so it is refused
before anything is read further, in one line that gives the shape in the order expected.
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import UsageError, shown

__all__ = ["refuse_contradicting_shape"]

# The two layouts an image tensor is given in: NHWC (TensorFlow's, TFLite's) and NCHW (the converted model's).
_TO_NCHW = (0, 3, 1, 2)
_TO_NHWC = (0, 2, 3, 1)


def _text(dims: Sequence[object]) -> str:
    return "x".join(str(d) if isinstance(d, int) else "?" if d is None else str(d) for d in dims)


def _fits(given: Sequence[int], declared: Sequence[int | str | None]) -> bool:
    return len(given) == len(declared) and all(not isinstance(d, int) or g == d for g, d in zip(given, declared,
                                                                                                 strict=True))


def refuse_contradicting_shape(name: str, given: Sequence[int], declared: Sequence[int | str | None], *,
                               source: str, order: str = "") -> None:
    """Refuse ``--input-shape NAME=given`` where ``declared`` (the input's dimensions in the order the
    option takes, an int where the model fixes one) holds another size.

    ``order`` says how that order relates to the source's own (``"NCHW: TFLite's NHWC transposed;
    --keep-nhwc keeps NHWC"``). Where the given sizes fit in another image layout, that order is
    the suggestion; else the fixed sizes with the given free ones.

    Raises:
        UsageError: naming the input, its fixed dimensions and the shape to give.
    """
    given = [int(d) for d in given]
    if len(given) != len(declared):
        raise UsageError(f"--input-shape {name}={','.join(map(str, given))}: rank {len(given)}, but input "
                         f"{shown(name)} of {source} has rank {len(declared)} ({_text(declared)})")
    if _fits(given, declared):
        return
    wrong = [i for i, (g, d) in enumerate(zip(given, declared, strict=True)) if isinstance(d, int) and g != d]
    suggestion: list[int] | None = None
    if len(given) == 4:
        for perm in (_TO_NCHW, _TO_NHWC):
            moved = [given[p] for p in perm]
            if _fits(moved, declared):
                suggestion = moved
                break
    if suggestion is None:
        suggestion = [d if isinstance(d, int) else g for g, d in zip(given, declared, strict=True)]
    fixed = " and ".join(f"dimension {i} is {declared[i]}" for i in wrong)
    layout = f" ({order})" if order else ""
    raise UsageError(f"--input-shape {name}={','.join(map(str, given))} contradicts {source}: its input "
                     f"{shown(name)} is {_text(declared)}{layout}, whose {fixed} (counted from 0). In the order "
                     f"expected: --input-shape {name}={','.join(map(str, suggestion))}")
