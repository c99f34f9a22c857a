"""What the lowering makes of an FX program's values: IR dtypes, metas, weights and places.

A layer of the lowering (see ``__init__``'s "the path a model takes"), shared by the lowering
(``lowering.py``), its control flow (``controlflow.py``) and its entry (``lower.py``):

- ``ir_dtype``, ``meta_of``: a torch dtype or an FX node's meta value (a fake tensor) as the IR's
  data type or ``TensorMeta`` (symbolic dims become names);
- ``wrap``: a parameter or buffer as an IR tensor sharing its memory (a copy only when torch's
  layout forces it), or the values ``META_WEIGHTS`` supplies for a weight captured without them;
- ``annotate``: a converter's result given the type and shape torch recorded;
- ``place_of``, ``layer_key``: a node's place in the model (module path, file:line) for messages and
  provenance.
"""

from __future__ import annotations

import functools
import os
import re
from typing import TYPE_CHECKING

from convert.ir import (
    ConversionError,
    ConvertError,
    DataType,
    ModelFormatError,
    Options,
    Provenance,
    Value,
    from_array,
    shown,
)

from .facts import valueless
from .ops import TensorMeta
from .ops.spectral import real_dtype

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["META_WEIGHTS", "annotate", "ir_dtype", "layer_key", "meta_of", "place_of", "wrap"]

#: ``options.extra`` key: for a program captured with weights that have no values (meta or fake
#: tensors, as the ``hf`` frontend captures a language model), a callable ``(name, tensor) -> ir
#: tensor`` that supplies each weight's values (a slice of the weights file). Such weights are never folded.
META_WEIGHTS = "convert:meta_weights"


_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


@functools.lru_cache(maxsize=1)
def _torch_dir() -> str:
    import torch

    return os.path.dirname(os.path.dirname(torch.__file__))


def _module_path(node: object) -> str:
    stack = getattr(node, "meta", {}).get("nn_module_stack") or {}
    if not stack:
        return ""
    path = str(list(stack.values())[-1][0])
    if path.startswith("_empty"):  # placeholder stack of torch's TorchScript converter
        return ""
    path = re.sub(r"^L\['self'\]\.?", "", path)
    path = re.sub(r"\._modules\['([^']+)'\]", r".\1", path)
    path = re.sub(r"getattr\((.*?), '([^']+)'\)", r"\1.\2", path)
    return path.strip(".")


def _source_line(node: object) -> tuple[str, int | None]:
    trace = getattr(node, "meta", {}).get("stack_trace") or ""
    frames = _FRAME.findall(trace)
    if not frames:
        return "", None
    torch_dir = os.path.join(_torch_dir(), "torch")
    ours = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the convert package
    user = [f for f in frames if not f[0].startswith((torch_dir, ours + os.sep))]
    if not user:  # only torch's and convert's own frames (a TorchScript module run by our converter): no source
        return "", None
    file, line = user[-1]
    return os.path.basename(file), int(line)


def layer_key(node: object) -> str:
    """Return the source layer a node belongs to: its module path, or its own FX name outside any module.

    The parity check's localisation groups both sides' values by this key.
    """
    return _module_path(node) or str(getattr(node, "name", ""))


def place_of(key: str, node: object, source: str) -> tuple[str, Provenance]:
    module = _module_path(node)
    file, line = _source_line(node)
    prov = Provenance(file=file or source, layer=layer_key(node), kind=key, line=line)
    place = f"'{module}'" if module else "the top-level module"
    loc = f" ({file}:{line})" if file and line is not None else ""
    return f"{key} in {place}{loc}", prov


_DTYPES: dict[str, DataType] = {
    "torch.float32": DataType.FLOAT, "torch.float16": DataType.FLOAT16, "torch.bfloat16": DataType.BFLOAT16,
    "torch.float64": DataType.DOUBLE, "torch.int64": DataType.INT64, "torch.int32": DataType.INT32,
    "torch.int16": DataType.INT16, "torch.int8": DataType.INT8, "torch.uint8": DataType.UINT8,
    "torch.bool": DataType.BOOL,
    "torch.complex64": DataType.COMPLEX64, "torch.complex128": DataType.COMPLEX128,  # carried as [..., 2]
}


def ir_dtype(dtype: object) -> DataType:
    """Return the IR data type of a torch dtype."""
    try:
        return _DTYPES[str(dtype)]
    except KeyError:
        raise ConvertError(f"tensors of dtype {dtype} are not supported") from None


def _dim(d: object, names: dict[str, str] | None) -> int | str:
    if isinstance(d, int):
        return d
    text = str(d)
    if text.isdigit():  # a SymInt torch specialised to a constant (a traced .pt's channels): a static size
        return int(text)
    return (names or {}).get(text, text)


def meta_of(val: object, names: dict[str, str] | None = None) -> object:
    """Return the TensorMeta (or list of them) of a fake value; symbolic dims become strings."""
    import torch

    if isinstance(val, torch.Tensor):
        return TensorMeta(tuple(_dim(d, names) for d in val.shape), ir_dtype(val.dtype))
    if isinstance(val, (list, tuple)):
        return [meta_of(v, names) for v in val]
    return val


def wrap(tensor: torch.Tensor, name: str, options: Options, source: str = "") -> Value | None:
    """Return an IR tensor sharing ``tensor``'s memory (a copy only when torch's layout forces it)."""
    import torch

    t = tensor.detach()
    if valueless(t):  # captured without values: the frontend that captured it supplies them
        supply = options.extra.get(META_WEIGHTS)
        if not callable(supply):
            raise ConversionError(f"weight {shown(name)}", "it has no values (a meta or fake tensor)")
        return supply(name, t)  # type: ignore[no-any-return]
    if any(d > 2**40 for d in t.shape):  # no array holds such dims, even with no element (numpy refuses them)
        dims = " x ".join(f"{d:,}" for d in t.shape)
        where = f"{source}: " if source else ""
        raise ModelFormatError(f"{where}weight {shown(name)} has dims {dims}; no array can have such dims (the "
                               "file is damaged or forged)")
    if t.device.type != "cpu":
        t = t.cpu()
    if not t.is_contiguous():
        options.diagnostics.note(f"weight '{name}' is not contiguous in memory: copied")
        t = t.contiguous()
    if t.is_complex():  # carried as [..., 2] (see ops/spectral.py)
        t = torch.view_as_real(t.resolve_conj())
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        array = t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    else:
        array = t.numpy()
    return from_array(array, name=name)  # type: ignore[return-value]


def annotate(result: object, meta: object) -> None:
    """Give converter outputs the static type and shape torch.export recorded."""
    from convert.ir import Shape, SymbolicDim, TensorType

    if isinstance(result, Value) and isinstance(meta, TensorMeta):
        if result.type is None and result.const_value is None:
            dims = [d if isinstance(d, int) else SymbolicDim(d) for d in meta.shape]
            if meta.dtype != real_dtype(meta.dtype):  # a complex tensor, carried as [..., 2]
                dims.append(2)
            result.type = TensorType(real_dtype(meta.dtype))
            result.shape = Shape(dims)
    elif isinstance(result, (list, tuple)) and isinstance(meta, (list, tuple)):
        for r, m in zip(result, meta, strict=False):
            annotate(r, m)
