"""Caffe's arithmetic that both the Caffe frontend and exporter must agree on."""

from __future__ import annotations

__all__ = ["caffe_pool_size"]


def caffe_pool_size(size: int, k: int, s: int, p: int, ceil: bool, any_pad: bool) -> int:
    """Return Caffe's pooled size: ceil (or floor) rounding, then the last-window clip.

    Caffe drops the last window when it would start inside the bottom/right padding
    (``(out - 1) * s >= size + p``), which only happens when there is padding.
    """
    span = size + 2 * p - k
    out = (-(-span // s) if ceil else span // s) + 1
    if any_pad and (out - 1) * s >= size + p:
        out -= 1
    return out
