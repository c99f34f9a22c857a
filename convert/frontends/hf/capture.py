"""Capture a decoder as it is deployed: one graph with a key/value cache, weights never loaded.

The transformers model is built from its config on the meta device (no memory for weights); only
the buffers its constructor computes (rotary frequencies, Gemma's embedding scale) are made real,
recomputed by transformers' own ``_init_weights``. ``KVCacheLM`` wraps it with the inputs
deployments feed (``input_ids``, ``attention_mask``, ``position_ids``, ``past_key_values.N.key``
and ``.value``, each ``[batch, kv_heads, past, head_dim]``) and the outputs they read (``logits``,
``present.N.key``/``.value``, the past with this call's keys appended). ``torch.export`` captures it
with free batch, sequence and past lengths (past 0 is the prefill), and the PyTorch frontend's
``lower_program`` lowers it, asking ``weights.py`` for each weight (``META_WEIGHTS``): a slice of a
shard, cast to float32 when written. The float32 graph is lowered to fp16/bf16 by the exporter's
``--precision`` rule (docs/precision.md), which takes the weights straight from the shards.
"""

from __future__ import annotations

import logging
import math
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from convert import ir
from convert.ir import ConversionError, ModelFormatError, Options, shown

from .architectures import Architecture, architecture_of
from .folder import ModelFolder
from .weights import SourceWeight, array_weight, file_weight, untranspose

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["DeployedInfo", "capture_folder", "capture_module", "deployed_names", "hf_config", "meta_model"]

logger = logging.getLogger(__name__)

_ROTARY = re.compile(r"(^|\.)rotary(_emb)?(_\w+)?(\.|$)")

#: ``model.meta`` key of a graph whose layers were replicated: (captured layers, layers, period).
REPLICATED = "convert:hf_replicated"

#: Example sizes of the capture: batch, new tokens, past tokens (none is 0 or 1, which torch would
#: specialise; each stays a free dimension of the graph).
_EXAMPLE = (2, 3, 5)


@dataclass(slots=True)
class DeployedInfo:
    """What onnxruntime-genai and the generation check need to know of the converted graph."""

    model_type: str
    genai_type: str
    layers: int
    kv_heads: int
    head_dim: int
    heads: int
    hidden: int
    vocab: int
    context_length: int
    bos_token_id: int | None
    eos_token_id: int | list[int] | None
    pad_token_id: int | None
    logits: str = "all"
    notes: list[str] = field(default_factory=list)


def deployed_names(layers: int) -> tuple[list[str], list[str]]:
    """Return the graph's input and output names for a model of ``layers`` cache layers."""
    past = [f"past_key_values.{i}.{kind}" for i in range(layers) for kind in ("key", "value")]
    present = [f"present.{i}.{kind}" for i in range(layers) for kind in ("key", "value")]
    return ["input_ids", "attention_mask", "position_ids", *past], ["logits", *present]


def hf_config(folder: ModelFolder) -> object:
    """Return the transformers config of ``folder`` (read by transformers; no code runs: the folder
    was checked to name none)."""
    from transformers import AutoConfig

    from convert.frontends.pytorch.capture import quiet_torch

    try:
        with quiet_torch():
            return AutoConfig.from_pretrained(str(folder.path), trust_remote_code=False, local_files_only=True)
    except ValueError as exc:  # an unknown model_type
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise ConversionError(f"{folder.path.name}/config.json", f"transformers cannot build it: {first}") from exc


def meta_model(config: object, arch: Architecture) -> tuple[torch.nn.Module, object]:
    """Build the model of ``config`` in float32 with no memory for its weights; return it and its fake mode.

    The model is built on the meta device; its parameters then become fake CPU tensors of one
    ``FakeTensorMode`` (shapes and dtypes, no storage: what torch.export captures with), so that what
    ``forward`` creates on the parameters' device (a 0.0 for a mask) is real. The buffers a
    constructor computes (rotary frequencies, Gemma's embedding scale; not in checkpoints) are
    recomputed on the CPU by transformers' ``_init_weights`` for their modules; one it leaves unset is
    refused.
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import AutoModelForCausalLM

    from convert.frontends.pytorch.capture import quiet_torch

    with quiet_torch(), torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation=arch.attention,
                                                 trust_remote_code=False)
    model.eval()
    init = getattr(model, "_init_weights", None)
    for module in model.modules():
        own = [(n, b) for n, b in module.named_buffers(recurse=False) if b.is_meta]
        if not own:
            continue
        for name, buf in own:
            persistent = name not in module._non_persistent_buffers_set
            module.register_buffer(name, torch.full(buf.shape, float("nan"), dtype=buf.dtype)
                                   if buf.dtype.is_floating_point else torch.zeros(buf.shape, dtype=buf.dtype),
                                   persistent=persistent)
        if callable(init):
            with torch.no_grad():
                init(module)
    for name, buf in model.named_buffers():
        if buf.dtype.is_floating_point and bool(torch.isnan(buf).any()):
            raise ConversionError(f"buffer '{name}'", f"{type(model).__name__} computes it when it is built, and "
                                  "transformers does not recompute it for a model built without weights")
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes: dict[int, torch.nn.Parameter] = {}  # tied weights stay one parameter
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            if id(param) not in fakes:
                with mode:
                    fake = torch.empty(param.shape, dtype=param.dtype, device="cpu")
                fakes[id(param)] = torch.nn.Parameter(fake, requires_grad=False)
            module._parameters[name] = fakes[id(param)]
    return model, mode


def kv_shapes(config: object) -> list[tuple[int, int]]:
    """Each cache layer's (kv_heads, head_dim), from the config (checked against the capture's outputs)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config  # type: ignore[attr-defined]
    heads = int(text.num_attention_heads)
    kv = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or int(text.hidden_size) // heads
    return [(int(kv), int(head_dim))] * int(text.num_hidden_layers)


class KVCacheLM:  # a torch.nn.Module, made in _wrapper() so that importing this module needs no torch
    """See ``_wrapper``."""


def _wrapper(model: torch.nn.Module, layers: int, last_only: bool) -> torch.nn.Module:
    """Return the module deployments run: ids, mask, positions and the past in; logits and present out."""
    import inspect

    import torch
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    keep = "logits_to_keep" in inspect.signature(model.forward).parameters

    class _KVCacheLM(torch.nn.Module):
        """A causal LM with its key/value cache as flat inputs and outputs."""

        def __init__(self) -> None:
            super().__init__()
            self.lm = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                    past: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
            cache = DynamicCache()
            cache.layers = []
            for i in range(layers):  # every layer keeps its whole past: a sliding window is in the mask
                layer = DynamicLayer()  # filled as its own lazy_initialization would, with the past
                layer.dtype, layer.device = past[2 * i].dtype, past[2 * i].device
                layer.keys, layer.values = past[2 * i], past[2 * i + 1]
                layer.is_initialized = True
                cache.layers.append(layer)
            kwargs = {"logits_to_keep": 1} if last_only and keep else {}
            out = self.lm(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                          past_key_values=cache, use_cache=True, **kwargs)
            logits = out.logits[:, -1:] if last_only and not keep else out.logits
            present: list[torch.Tensor] = []
            for layer in out.past_key_values.layers:
                present += [layer.keys, layer.values]
            return (logits, *present)

    return _KVCacheLM().eval()


def _export(wrapper: torch.nn.Module, shapes: Sequence[tuple[int, int]], mode: object, source: str) -> object:
    import torch
    from torch.export import Dim

    from convert.frontends.pytorch.capture import quiet_torch

    batch, seq, past = _EXAMPLE
    with mode:  # type: ignore[attr-defined]
        ids = torch.zeros(batch, seq, dtype=torch.int64)
        mask = torch.ones(batch, past + seq, dtype=torch.int64)
        pos = torch.zeros(batch, seq, dtype=torch.int64)
        cache = tuple(torch.zeros(batch, kv, past, hd) for kv, hd in shapes for _ in range(2))
    b, s = Dim("batch", min=1), Dim("sequence", min=1)
    p, t = Dim("past_sequence", min=0), Dim.AUTO  # the mask's length is past + sequence: torch infers it
    dynamic = ({0: b, 1: s}, {0: b, 1: t}, {0: b, 1: s}, tuple({0: b, 2: p} for _ in cache))
    try:
        with torch.no_grad(), quiet_torch():
            program = torch.export.export(wrapper, (ids, mask, pos, cache), dynamic_shapes=dynamic, strict=False)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise ConversionError(f"model {source}", f"torch.export could not capture it with a key/value cache: "
                              f"{first}") from exc
    out = next(n for n in program.graph.nodes if n.op == "output").args[0]  # type: ignore[attr-defined]
    for i, (kv, hd) in enumerate(shapes):
        val = out[1 + 2 * i].meta.get("val")
        if val is None or int(val.shape[1]) != kv or int(val.shape[3]) != hd:
            got = "?" if val is None else f"{val.shape[1]} x {val.shape[3]}"
            raise ConversionError(f"model {source}", f"cache layer {i} holds {got} (heads x head size), the config "
                                  f"gives {kv} x {hd}")
    return program


def _rename_io(model: ir.Model, layers: int, shapes: Sequence[tuple[int, int]], vocab: int, last_only: bool) -> None:
    """Give the graph's inputs and outputs deployment names and named free dimensions."""
    ins, outs = deployed_names(layers)
    graph = model.graph
    sym = ir.SymbolicDim
    batch, seq, past, total = sym("batch"), sym("sequence"), sym("past_sequence"), sym("total_sequence")
    for value, name in zip(graph.inputs, ins, strict=True):
        value.name = name
    graph.inputs[0].shape = ir.Shape([batch, seq])
    graph.inputs[1].shape = ir.Shape([batch, total])
    graph.inputs[2].shape = ir.Shape([batch, seq])
    for i, (kv, hd) in enumerate(shapes):
        for value in graph.inputs[3 + 2 * i: 5 + 2 * i]:
            value.shape = ir.Shape([batch, kv, past, hd])
    editor = ir.GraphEditor(graph)
    for i, name in enumerate(outs):
        value = graph.outputs[i]
        holder = next((v for n in graph for v in n.outputs if v.name == name and v is not value), None)
        if holder is not None:
            holder.name = editor.fresh(f"{name}_inner")
        value.name = name
    graph.outputs[0].shape = ir.Shape([batch, 1 if last_only else seq, vocab])
    for i, (kv, hd) in enumerate(shapes):
        for value in graph.outputs[1 + 2 * i: 3 + 2 * i]:
            value.shape = ir.Shape([batch, kv, total, hd])


Supply = Callable[[str, "torch.Tensor"], ir.TensorProtocol]


def _aliases(model: torch.nn.Module) -> dict[str, list[str]]:
    """Return, for every parameter and buffer name, all names of the same tensor (tied weights)."""
    groups: dict[int, list[str]] = {}
    for name, tensor in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        groups.setdefault(id(tensor), []).append(name)
    return {name: names for names in groups.values() for name in names}


def _lookup(name: str, names: Callable[[str], bool], prefix: str) -> str | None:
    """Find ``name`` among a checkpoint's tensor names: as is, or with/without the base model's prefix
    (a checkpoint saved from the base model stores ``h.0.attn...`` for ``transformer.h.0.attn...``)."""
    if names(name):
        return name
    if prefix and name.startswith(prefix + ".") and names(name[len(prefix) + 1:]):
        return name[len(prefix) + 1:]
    if prefix and names(f"{prefix}.{name}"):
        return f"{prefix}.{name}"
    return None


def _renamed(model: torch.nn.Module, keys: Sequence[str], source: str) -> dict[str, str]:
    """Map the model's names to the checkpoint's keys, through transformers' own renamings of older
    checkpoints (GPT-NeoX's ``embed_out`` is ``lm_head``; ``LayerNorm.gamma`` is ``.weight``).

    Raises:
        ConversionError: a key transformers changes on load by more than a name (experts merged, a
            projection split), which this route does not stream.
    """
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightRenaming
    except ImportError:  # an older transformers: the names are the checkpoint's
        return {k: k for k in keys}
    transforms = get_model_conversion_mapping(model)
    out: dict[str, str] = {}
    for key in keys:
        name = key
        for transform in transforms:
            renamed, matched = transform.rename_source_key(name)
            if matched is None:
                continue
            if not isinstance(transform, WeightRenaming):
                raise ConversionError(source, f"transformers converts tensor {shown(key)} on load "
                                      f"({type(transform).__name__}: its values change, not only its name), which "
                                      "this route does not stream")
            name = renamed
        out.setdefault(name, key)
    return out


def check_weights(model: torch.nn.Module, keys: Sequence[str], shape_of: Callable[[str], tuple[int, ...]],
                  source: str) -> dict[str, str]:
    """Map each parameter (and persistent buffer) of ``model`` to a tensor of the checkpoint.

    Raises:
        ModelFormatError: a tensor is missing, or its shape is not the one the config gives.
    """
    import torch

    index = _renamed(model, keys, source)
    aliases = _aliases(model)
    prefix = str(getattr(model, "base_model_prefix", "") or "")
    persistent = set(model.state_dict().keys())
    found: dict[str, str] = {}
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if name not in persistent:
            continue
        hit = next((k for alias in aliases.get(name, [name]) if (k := _lookup(alias, index.__contains__, prefix))),
                   None)
        if hit is None:
            if not isinstance(tensor, torch.nn.Parameter):
                continue  # a persistent buffer the checkpoint lacks keeps the value the model computes
            raise ModelFormatError(f"{source}: the weights lack {shown(name)} ({'x'.join(map(str, tensor.shape))}), "
                                   "which the config's model has: are the config and the weights of one model?")
        key = index[hit]
        want = tuple(int(d) for d in tensor.shape)
        got = tuple(shape_of(key))
        if got != want and not (math.prod(got) == math.prod(want) == 1):  # a scalar stored as [1] is fine
            dims = "x".join(map(str, got)) or "scalar"
            raise ModelFormatError(f"{source}: tensor {shown(key)} is {dims}, the config makes it "
                                   f"{'x'.join(map(str, want)) or 'scalar'}: are the config and the weights of one "
                                   "model?")
        for alias in aliases.get(name, [name]):
            found[alias] = key
    return found


def _supply(mapping: dict[str, str], make: Callable[[str, str, torch.Tensor], ir.TensorProtocol],
            source: str) -> Supply:
    """Return the ``META_WEIGHTS`` callable: each weight of the program as ``make(name, key, meta)``."""

    def supply(name: str, meta: torch.Tensor) -> ir.TensorProtocol:
        plain = name[3:] if name.startswith("lm.") else name
        key = mapping.get(plain)
        if key is None:
            if meta.numel() == 0:  # an empty constant of the capture
                return ir.from_array(np.zeros(tuple(meta.shape), np.float32), name=name)
            raise ConversionError(f"weight {shown(plain)}", f"{source} has no tensor for it")
        return make(name, key, meta)

    return supply


def _info(config: object, arch: Architecture, shapes: Sequence[tuple[int, int]], generation: dict[str, object],
          last_only: bool) -> DeployedInfo:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config  # type: ignore[attr-defined]

    def pick(key: str) -> object:
        value = generation.get(key)
        return value if value is not None else getattr(text, key, None)

    heads = int(text.num_attention_heads)
    hidden = int(text.hidden_size)
    context = int(getattr(text, "max_position_embeddings", 0) or getattr(text, "n_positions", 0) or 2048)
    eos = pick("eos_token_id")
    return DeployedInfo(
        model_type=str(getattr(config, "model_type", "")), genai_type=arch.genai_type, layers=len(shapes),
        kv_heads=shapes[0][0], head_dim=shapes[0][1], heads=heads, hidden=hidden,
        vocab=int(text.vocab_size), context_length=context,
        bos_token_id=pick("bos_token_id"), eos_token_id=eos if isinstance(eos, (int, list)) else None,  # type: ignore[arg-type]
        pad_token_id=pick("pad_token_id"), logits="last" if last_only else "all")  # type: ignore[arg-type]


def _capture(config: object, mapping_for: Callable[[torch.nn.Module], dict[str, str]],
             make: Callable[[str, str, torch.Tensor], ir.TensorProtocol], generation: dict[str, object],
             options: Options, source: str, name: str) -> tuple[ir.Model, DeployedInfo]:
    from .replicate import NotReplicable, plan_replication, replicate, shallow_config

    arch = architecture_of(config, source)
    last_only = str(options.get("logits", "all")) == "last"
    options.progress("capturing", 0, 3)
    model, mode = meta_model(config, arch)
    mapping = mapping_for(model)
    supply = _supply(mapping, make, source)
    shapes = kv_shapes(config)
    lowered: ir.Model | None = None
    try:
        plan = plan_replication(config, arch, model)
    except NotReplicable as exc:
        logger.info("%s: every layer captured: %s", source, exc)
    else:  # a few layers captured, the rest cloned from them in the graph (replicate.py)
        small, small_mode = meta_model(shallow_config(config, plan), arch)
        lowered = _lowered(small, small_mode, kv_shapes(shallow_config(config, plan)), last_only, supply, options,
                           source, name)
        weights = {f"lm.{n}": t for n, t in [*model.named_parameters(), *model.named_buffers()]}

        def weight(key: str) -> ir.TensorProtocol | None:
            meta = weights.get(key)
            return None if meta is None or key[3:] not in mapping else supply(key, meta)

        try:
            added = replicate(lowered, plan, weight)
        except NotReplicable as exc:
            logger.info("%s: every layer captured: %d captured layers do not replicate: %s", source,
                        plan.captured, exc)
            lowered = None
        else:
            logger.info("%s: %d of %d layers captured (period %d), %d nodes cloned for the others", source,
                        plan.captured, plan.layers, plan.period, added)
            lowered.meta[REPLICATED] = (plan.captured, plan.layers, plan.period)
    if lowered is None:
        lowered = _lowered(model, mode, shapes, last_only, supply, options, source, name)
    options.progress("capturing", 2, 3)
    info = _info(config, arch, shapes, generation, last_only)
    _rename_io(lowered, len(shapes), shapes, info.vocab, last_only)
    gemms = untranspose(lowered)
    logger.info("%s: %d projections as Gemm(transB=1) on the stored weights", source, gemms)
    # Float32 whatever the dtype in transformers: the rotary angles (autocast off) and RMS norms (they
    # upcast): so they stay under --precision fp16/bf16.
    norms = {f"lm.{n}" for n, m in model.named_modules() if "RMSNorm" in type(m).__name__}
    for node in lowered.graph:
        layer = ir.get_provenance(node).layer
        if _ROTARY.search(layer) or layer in norms:
            node.metadata_props[ir.KEEP_FLOAT32] = "1"
    lowered.metadata_props["convert:hf_model_type"] = info.model_type
    options.progress("capturing", 3, 3)
    return lowered, info


def _lowered(model: torch.nn.Module, mode: object, shapes: Sequence[tuple[int, int]], last_only: bool,
             supply: Supply, options: Options, source: str, name: str) -> ir.Model:
    """Capture ``model`` with its cache and lower it, its weights from ``supply``."""
    from convert.frontends.pytorch.lower import META_WEIGHTS, lower_program

    wrapper = _wrapper(model, len(shapes), last_only)
    program = _export(wrapper, shapes, mode, source)
    options.progress("capturing", 1, 3)
    options.extra[META_WEIGHTS] = supply
    try:
        ins, _ = deployed_names(len(shapes))
        with warnings.catch_warnings():  # torch warns when the lowering looks at a fake weight's storage
            warnings.filterwarnings("ignore", message=".*data pointer of FakeTensor.*")
            return lower_program(program, source=source, options=options, input_names=ins, name=name)
    finally:
        options.extra.pop(META_WEIGHTS, None)


_FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE)


def capture_folder(folder: ModelFolder, options: Options) -> tuple[ir.Model, DeployedInfo]:
    """Capture the model of ``folder`` with its weights as slices of its shards (see the module docstring)."""
    source = folder.path.name or str(folder.path)
    config = hf_config(folder)
    tensors = folder.tensors

    def mapping_for(model: torch.nn.Module) -> dict[str, str]:
        return check_weights(model, list(tensors), lambda k: tensors[k].shape, source)

    def make(name: str, key: str, meta: torch.Tensor) -> ir.TensorProtocol:
        entry = tensors[key]
        if meta.dtype.is_floating_point and entry.dtype not in _FLOATS:
            raise ModelFormatError(f"{entry.path.name}: tensor {shown(key)} is {entry.dtype_name}, not a float type "
                                   "a weight can be read as")
        from convert.frontends.pytorch.lower import ir_dtype

        weight = file_weight(entry, ir_dtype(meta.dtype), name=name)
        return _reshaped(weight, tuple(meta.shape), key)

    return _capture(config, mapping_for, make, folder.generation, options, source, source)


def _reshaped(weight: SourceWeight, shape: tuple[int, ...], key: str) -> ir.TensorProtocol:
    """A scalar stored as [1] (or the reverse): the same bytes in the shape the model has."""
    if tuple(int(d) for d in weight.shape) == shape:
        return weight
    return ir.lazy(lambda: weight.numpy().reshape(shape), weight.dtype, shape, name=weight.name or key)


def capture_module(module: torch.nn.Module, options: Options) -> tuple[ir.Model, DeployedInfo]:
    """Capture an in-memory ``PreTrainedModel``; its weights are written from its own tensors (no copy
    until written)."""
    import torch

    from convert.frontends.pytorch.lower import ir_dtype

    config = module.config  # type: ignore[attr-defined]
    source = type(module).__name__
    state = {k: v for k, v in module.state_dict().items()}
    generation: dict[str, object] = {}
    gen = getattr(module, "generation_config", None)
    if gen is not None:
        generation = {k: getattr(gen, k, None) for k in ("bos_token_id", "eos_token_id", "pad_token_id")}

    def mapping_for(model: torch.nn.Module) -> dict[str, str]:
        return check_weights(model, list(state), lambda k: tuple(state[k].shape), source)

    def make(name: str, key: str, meta: torch.Tensor) -> ir.TensorProtocol:
        t = state[key].detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        if t.dtype == torch.bfloat16:
            import ml_dtypes

            array = t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        else:
            array = t.numpy()
        return _reshaped(array_weight(array, ir_dtype(meta.dtype), name=name, source_name=key), tuple(meta.shape), key)

    return _capture(config, mapping_for, make, generation, options, source, source)
