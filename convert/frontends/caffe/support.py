"""Parameter-level support checks, run by ``check_support`` before anything is converted.

A layer type can be registered yet have settings no converter handles (STOCHASTIC pooling,
LRN within a channel...). Each check returns the reason, or "" when the layer is supported, so
every gap in a model is listed at once, not discovered one conversion at a time.
"""

from __future__ import annotations

from collections.abc import Callable

from .reader import LayerDef

__all__ = ["CHECKS"]


def _pooling(layer: LayerDef) -> str:
    return "STOCHASTIC pooling has no inference equivalent" if int(layer.param.pooling_param.pool) == 2 else ""


def _lrn(layer: LayerDef) -> str:
    return "norm_region WITHIN_CHANNEL is not supported" if int(layer.param.lrn_param.norm_region) == 1 else ""


def _conv(layer: LayerDef) -> str:
    cp = layer.param.convolution_param
    if len(cp.kernel_size) > 2 or len(cp.stride) > 2 or len(cp.pad) > 2:
        return "only 2-D convolution is supported"
    if layer.type == "Convolution" and int(cp.axis) != 1:
        return "convolution_param.axis other than 1 is not supported"
    return ""


def _upsample(layer: LayerDef) -> str:
    return "the two-bottom (max-unpooling) Upsample is not supported" if len(layer.bottoms) > 1 else ""


def _interp(layer: LayerDef) -> str:
    ip = layer.param.interp_param
    return "Interp pad_beg/pad_end are not supported" if ip.pad_beg or ip.pad_end else ""


CHECKS: dict[str, Callable[[LayerDef], str]] = {
    "Pooling": _pooling,
    "LRN": _lrn,
    "Convolution": _conv,
    "Deconvolution": _conv,
    "Upsample": _upsample,
    "Interp": _interp,
}
