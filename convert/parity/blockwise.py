"""The check of a language model too large for the source and ONNX Runtime side by side: block by block.

A 7B model in float32 takes 27 GB: the source module and a session of the converted file cannot
both be held on a machine with less than twice that. So each decoder block is checked on its own:
the source runs the prompt (the left-padded batch of 2 of ``generation.default_prompts``, past
length 0) through transformers' own modules, each block's weights read from the shards just
before the block runs and dropped after (forward hooks), the embeddings and the head (final norm
and ``lm_head``) held throughout. After each source block, the same block of the converted graph
(its nodes, found by their provenance: the block's module path) runs in ONNX Runtime on the
source's activations entering that block, and its outputs (the hidden state leaving the block and
the block's present keys and values) are compared with the source's. At most one block of each
side is in memory at a time.

Rows: ``embeddings`` (the graph from ``input_ids`` to the first block's input), ``block 0`` ...
``block N-1``, ``head`` (logits from the last block's output). A row passes when every output's
error relative to its scale is within ``tol``. This is its own regime in the verdict: each block
is right on the source's activations, which is not a check of generation (the loop, the cache
over many steps, the tokens).
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from convert import ir
from convert.ir import ConversionError, Options, UsageError

from .compare import HALF_MARGIN
from .generation import BF16_ON_CPU, GenerationReport, PromptResult, default_prompts, file_metadata, positions

__all__ = ["block_values", "check_blocks"]

logger = logging.getLogger(__name__)

_PREFIX = "lm."  # the capture's wrapper holds the model as ``lm``


def _reset_peak() -> None:
    """Reset this process's peak-RSS mark (Linux: ``/proc/self/clear_refs``), so the check's own is read."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def _peak() -> int:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _layer_list(model: object, count: int) -> tuple[str, object]:
    """The ``ModuleList`` of the decoder blocks: (its path, it)."""
    import torch

    best = None
    for name, module in model.named_modules():  # type: ignore[attr-defined]
        if (isinstance(module, torch.nn.ModuleList) and len(module) == count
                and (best is None or name.count(".") < best[0].count("."))):
            best = (name, module)
    if best is None:
        raise ConversionError("block check", f"no list of {count} decoder blocks in {type(model).__name__}")
    return best


def block_values(model: ir.Model, layers_path: str, count: int) -> list[tuple[ir.Value, ir.Value]]:
    """Return, for each block, (the hidden state entering it, the hidden state leaving it) in the graph.

    A block's nodes are those whose provenance is the block's module path or below it. The value
    leaving block ``i`` is the one of its nodes' outputs that nodes outside it read (not a graph
    output: those are its present keys and values). The value entering block ``i > 0`` is the one
    leaving block ``i - 1``; the one entering block 0 is read by block 0's node in the place where
    block 1's reads its input (the blocks are built alike).
    """
    prefix = f"{_PREFIX}{layers_path}."
    nodes: list[list[ir.Node]] = [[] for _ in range(count)]
    for node in model.graph:
        layer = ir.get_provenance(node).layer
        if layer.startswith(prefix):
            index = layer[len(prefix):].split(".", 1)[0]
            if index.isdigit() and int(index) < count:
                nodes[int(index)].append(node)
    outs: list[ir.Value] = []
    for i, block in enumerate(nodes):
        members = set(map(id, block))
        produced = {id(v) for n in block for v in n.outputs}
        leaving = [v for n in block for v in n.outputs
                   if not v.is_graph_output() and not _passes_through(n, produced)
                   and any(id(u.node) not in members and not _to_output(u.node) for u in v.uses())]
        if len(leaving) != 1:
            raise ConversionError("block check", f"block {i} of the converted graph has {len(leaving)} values read "
                                  "outside it, not one hidden state")
        outs.append(leaving[0])
    ins: list[ir.Value | None] = [None, *outs[:-1]]
    if count > 1:
        second = nodes[1]
        where = next(((j, k) for j, n in enumerate(second) for k, v in enumerate(n.inputs) if v is outs[0]), None)
        if where is not None and where[0] < len(nodes[0]) and where[1] < len(nodes[0][where[0]].inputs):
            ins[0] = nodes[0][where[0]].inputs[where[1]]
    if ins[0] is None:
        raise ConversionError("block check", "cannot tell which value enters the first block of the converted graph")
    return [(a, b) for a, b in zip(ins, outs, strict=True)]  # type: ignore[misc]


def _passes_through(node: ir.Node, produced: set[int]) -> bool:
    """A cast (or identity) of a value from outside the block that the block's first user of it made
    and later blocks share (``--precision``'s casts of the mask and the rotary angles): not its output."""
    return node.op_type in ("Cast", "Identity") and bool(node.inputs) and node.inputs[0] is not None \
        and id(node.inputs[0]) not in produced


def _to_output(node: ir.Node) -> bool:
    """A cast whose output is a graph output (a half file's present keys cast back to float32)."""
    return node.op_type in ("Cast", "Identity") and all(v.is_graph_output() for v in node.outputs)


def _subsession(path: Path, inputs: Sequence[str], outputs: Sequence[str]) -> object:
    """An ONNX Runtime session of the part of ``path``'s graph that computes ``outputs`` from ``inputs``
    (graph inputs or inner values): only that part's weights are read from the external data."""
    import onnxruntime as ort

    model = ir.load_file(path)
    graph = model.graph
    by_name = {v.name: v for v in graph.inputs}
    for node in graph:
        for v in node.outputs:
            by_name[v.name] = v
    cut = {id(by_name[n]) for n in inputs}
    needed: list[ir.Node] = []
    seen: set[int] = set()
    used_inputs: list[ir.Value] = []
    stack = [by_name[n] for n in outputs]
    while stack:
        value = stack.pop()
        if id(value) in cut:
            if value not in used_inputs:
                used_inputs.append(value)
            continue
        producer = value.producer()
        if producer is None:
            if value.is_graph_input() and value not in used_inputs:
                used_inputs.append(value)
            continue
        if id(producer) in seen:
            continue
        seen.add(id(producer))
        needed.append(producer)
        stack.extend(v for v in producer.inputs if v is not None)
    keep = set(map(id, needed))
    feeds: list[ir.Value] = []
    for value in used_inputs:  # an inner value fed from outside: a new graph input takes its place
        if value.is_graph_input():
            feeds.append(value)
            continue
        fresh = ir.Value(name=value.name, shape=value.shape, type=value.type)
        for use in list(value.uses()):
            use.node.replace_input_with(use.idx, fresh)
        value.name = None
        feeds.append(fresh)
    for node in reversed(list(graph)):
        if id(node) not in keep:
            for v in node.outputs:
                if v.is_graph_output():
                    graph.outputs.remove(v)
            graph.remove(node, safe=False)
    graph.outputs.clear()
    graph.inputs.clear()
    for value in feeds:
        graph.inputs.append(value)
    for name in outputs:
        graph.outputs.append(by_name[name])
    for name in [n for n, v in graph.initializers.items() if not v.uses()]:
        del graph.initializers[name]
    proto = ir.serde.serialize_model(model)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry("session.model_external_initializers_file_folder_path", str(path.parent))
    return ort.InferenceSession(proto.SerializeToString(), sess_options=so, providers=["CPUExecutionProvider"])


def _err(got: np.ndarray, ref: np.ndarray) -> float:
    scale = float(np.abs(ref).max())
    diff = float(np.abs(np.asarray(got, np.float64) - np.asarray(ref, np.float64)).max())
    return diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))


def check_blocks(source: object, model_path: Path, options: Options, *, tol: float = 1e-4,
                 seed: int = 0) -> GenerationReport:
    """Check ``model_path`` against the model folder ``source`` block by block (see the module docstring)."""
    import onnxruntime as ort
    import torch
    import transformers
    from transformers import DynamicCache

    from convert.frontends.hf.architectures import architecture_of
    from convert.frontends.hf.capture import _renamed, hf_config
    from convert.frontends.hf.folder import read_folder
    from convert.frontends.hf.weights import file_weight

    if not isinstance(source, (list, tuple)):
        raise UsageError("--check-by blocks: checks a model folder (an in-memory model is checked by generation)")
    _reset_peak()
    folder = read_folder(Path(source[0]))
    config = hf_config(folder)
    arch = architecture_of(config, folder.path.name)
    report = GenerationReport(
        source="hf", source_runtime=f"transformers {transformers.__version__} (block by block)", source_device="cpu",
        dest="onnx", dest_runtime=f"ONNX Runtime {ort.__version__} (block by block)",
        dest_device="CPUExecutionProvider", tol=tol, new_tokens=0, regime="blocks", seed=seed)
    report.precision = file_metadata(model_path).get("convert:precision", "fp32")
    if report.precision == "bf16":
        report.not_run = BF16_ON_CPU
        return report
    from convert.frontends.pytorch.capture import quiet_torch

    with quiet_torch(), torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32,
                                                              attn_implementation=arch.attention)
    model.eval()
    _real_buffers(model)
    count = int(config.get_text_config().num_hidden_layers)
    layers_path, layers = _layer_list(model, count)
    index = _renamed(model, list(folder.tensors), folder.path.name)
    prefix = str(getattr(model, "base_model_prefix", "") or "")

    def entry_of(name: str) -> object:
        for key in (name, name[len(prefix) + 1:] if name.startswith(prefix + ".") else None,
                    f"{prefix}.{name}" if prefix else None):
            if key and key in index:
                return folder.tensors[index[key]]
        raise ConversionError("block check", f"the weights lack '{name}'")

    aliases: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        aliases.setdefault(id(p), []).append(name)

    def load(module: torch.nn.Module, base: str) -> None:
        for name, param in list(module.named_parameters(recurse=True)):
            full = f"{base}.{name}" if base else name
            names = aliases.get(id(param), [full])
            entry = next((e for n in names if (e := _try(entry_of, n)) is not None), None)
            if entry is None:
                entry_of(full)  # raises, naming it
            data = torch.from_numpy(file_weight(entry, ir.DataType.FLOAT, name=full).numpy())  # type: ignore[arg-type]
            owner, attr = _owner(module, name)
            owner._parameters[attr] = torch.nn.Parameter(data, requires_grad=False)

    def drop(module: torch.nn.Module) -> None:
        module.to("meta")

    # everything but the blocks stays loaded (embeddings, head); a block is loaded as it runs
    block_ids = {id(m) for m in layers.modules()}  # type: ignore[attr-defined]
    for name, module in model.named_modules():
        if id(module) in block_ids:
            continue
        own = dict(module.named_parameters(recurse=False))
        for attr, param in own.items():
            if not param.is_meta:
                continue
            full = f"{name}.{attr}" if name else attr
            names = aliases.get(id(param), [full])
            entry = next((e for n in names if (e := _try(entry_of, n)) is not None), None)
            if entry is None:
                entry_of(full)
            data = torch.from_numpy(file_weight(entry, ir.DataType.FLOAT, name=full).numpy())  # type: ignore[arg-type]
            new = torch.nn.Parameter(data, requires_grad=False)
            for alias in names:
                owner, leaf = _owner(model, alias)
                owner._parameters[leaf] = new
    vocab = int(config.get_text_config().vocab_size)
    gen = folder.generation
    special = [gen.get("bos_token_id"), gen.get("eos_token_id")]
    special = [t for s in special for t in (s if isinstance(s, list) else [s])]
    pad = gen.get("pad_token_id", getattr(config, "pad_token_id", None))
    pad = int(pad if pad is not None else next((t for t in special if t is not None), 0))  # type: ignore[arg-type]
    name, ids, mask = default_prompts(vocab, seed, special, pad)[1]
    report.method.append(f"{name} ({ids.shape[0]}x{ids.shape[1]}), the prompt run once (past length 0); each "
                         "block of the converted graph on the source's activations entering it")
    graph_path = model_path
    ir_model = ir.load_file(graph_path)
    pairs = block_values(ir_model, layers_path, count)
    names = [(a.name, b.name) for a, b in pairs]
    del ir_model
    feeds_base = {"input_ids": ids, "attention_mask": mask, "position_ids": positions(mask)}
    cache = DynamicCache(config=config)
    captured: dict[str, np.ndarray] = {}
    half_file = report.precision == "fp16"
    if half_file:
        report.method.append(f"fp16 file: each part judged against the source's own fp16 run of it (the block "
                             f"in half on the same input; at most {HALF_MARGIN:g}x its error from float32)")
    head = getattr(model, "lm_head", None) or model.get_output_embeddings()
    head_hook = head.register_forward_pre_hook(  # the head's input, for its fp16 run
        lambda _m, a: captured.__setitem__("head_in", a[0].detach().clone())) if half_file else None

    def before(index_: int):
        def hook(module: torch.nn.Module, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
            load(module, f"{layers_path}.{index_}")
            hidden = args[0] if args else kwargs.get("hidden_states")
            captured[f"in{index_}"] = hidden.detach().numpy().copy()  # type: ignore[union-attr]
        return hook

    def after(index_: int):
        def hook(module: torch.nn.Module, args: tuple[object, ...], kwargs: dict[str, object], output: object) -> None:
            hidden = output[0] if isinstance(output, tuple) else output
            ref = {"hidden": hidden.detach().numpy()}  # type: ignore[union-attr]
            layer = cache.layers[index_] if index_ < len(cache.layers) else None
            if layer is not None and getattr(layer, "keys", None) is not None and layer.keys.numel():
                ref["key"], ref["value"] = layer.keys.detach().numpy(), layer.values.detach().numpy()
            half = _half_block(module, index_, args, kwargs, config) if half_file else None
            drop(module)
            gc.collect()
            captured["last"] = ref["hidden"]
            report.rows.append(_run_block(graph_path, index_, names, feeds_base, captured, ref, tol, half))
        return hook

    handles = []
    for i, block in enumerate(layers):  # type: ignore[arg-type]
        handles.append(block.register_forward_pre_hook(before(i), with_kwargs=True))
        handles.append(block.register_forward_hook(after(i), with_kwargs=True))
    try:
        with torch.no_grad():
            out = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                        position_ids=torch.from_numpy(positions(mask)), past_key_values=cache, use_cache=True)
    finally:
        for h in handles:
            h.remove()
        if head_hook is not None:
            head_hook.remove()
    logits = out.logits.detach().numpy()
    embeds = captured["in0"]
    # fp16 runs of the parts outside the blocks: the embeddings rounded to half (a half Gather of
    # half weights), the head's projection in half (then the model's final soft-capping, if any)
    half_embeds = embeds.astype(np.float16).astype(np.float32) if half_file else None
    half_logits = _half_head(head, captured.get("head_in"), config) if half_file else None
    report.rows.insert(0, _run_part(graph_path, "embeddings", [], [names[0][0]], feeds_base,
                                    {names[0][0]: embeds}, tol, half_embeds))
    head_in = names[-1][1]
    report.rows.append(_run_part(graph_path, "head (norm, lm_head)", [head_in], ["logits"],
                                 {**feeds_base, head_in: captured["last"]}, {"logits": logits}, tol, half_logits))
    report.peak_rss = _peak()
    size32 = sum(4 * t.numel for t in folder.tensors.values())
    report.method.append(f"peak resident memory of the check: {report.peak_rss / 2**30:.2f} GiB (the model's float32 "
                         f"weights: {size32 / 2**30:.1f} GiB)")
    return report


def _half_block(module: object, index: int, args: tuple[object, ...], kwargs: dict[str, object],
                config: object) -> dict[str, np.ndarray]:
    """The source's own fp16 run of a block, on the same input (its hidden state, keys and values)."""
    import torch
    from transformers import DynamicCache

    def half(x: object) -> object:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            return x.half()
        if isinstance(x, tuple):
            return tuple(half(v) for v in x)
        return x

    cache = DynamicCache(config=config)
    call_kwargs = {k: half(v) for k, v in kwargs.items()}
    if "past_key_values" in call_kwargs:
        call_kwargs["past_key_values"] = cache
    hooks = module._forward_hooks, module._forward_pre_hooks  # type: ignore[attr-defined]
    module._forward_hooks, module._forward_pre_hooks = type(hooks[0])(), type(hooks[1])()  # type: ignore[attr-defined]
    try:
        module.half()  # type: ignore[attr-defined]
        with torch.no_grad():
            out = module(*(half(a) for a in args), **call_kwargs)  # type: ignore[operator]
    finally:
        module._forward_hooks, module._forward_pre_hooks = hooks  # type: ignore[attr-defined]
    hidden = out[0] if isinstance(out, tuple) else out
    result = {"hidden": hidden.float().numpy()}
    layer = cache.layers[index] if index < len(cache.layers) else None
    if layer is not None and getattr(layer, "keys", None) is not None and layer.keys.numel():
        result["key"], result["value"] = layer.keys.float().numpy(), layer.values.float().numpy()
    return result


def _half_head(head: object, head_in: object, config: object) -> np.ndarray | None:
    """The head's projection in fp16 on its float32 input, then the final soft-capping (Gemma 2)."""
    import torch

    if head_in is None:
        return None
    weight = head.weight.detach().half()  # type: ignore[attr-defined]
    with torch.no_grad():
        logits = torch.nn.functional.linear(head_in.half(), weight).float()  # type: ignore[attr-defined]
        cap = getattr(config.get_text_config(), "final_logit_softcapping", None)  # type: ignore[attr-defined]
        if cap:
            logits = torch.tanh(logits / cap) * cap
    return logits.numpy()


def _real(value: np.ndarray, mask: np.ndarray, kind: str) -> np.ndarray:
    """The values of the real (not padding) positions: a hidden state or logits [b, s, ...] or a
    block's keys/values [b, heads, s, d]. A padding position's query attends to nothing; what a
    runtime makes of it is arbitrary, and generation never reads it."""
    real = mask.astype(bool)
    if kind in ("key", "value"):
        return np.swapaxes(value, 1, 2)[real]
    return value[real]


def _judge(got: np.ndarray, ref: np.ndarray, half: np.ndarray | None, tol: float) -> tuple[float, str, str]:
    """(error, PASS/FAIL/NOT VERIFIED, note): within ``tol``, or for a half file at most HALF_MARGIN x the
    source's own half run's error (NOT VERIFIED where that run is not finite)."""
    err = _err(got, ref)
    if err <= tol:
        return err, "PASS", ""
    if half is None:
        return err, "FAIL", ""
    theirs = _err(half, ref)
    note = f"ours {err:.2g}, the source's fp16 run {theirs:.2g}"
    if not np.isfinite(theirs):
        return err, "NOT VERIFIED", note + " (its fp16 run overflows: what fp16 costs is unknown)"
    return err, "PASS" if err <= HALF_MARGIN * theirs else "FAIL", note


def _verdict_of(judged: dict[str, tuple[float, str, str]]) -> tuple[str, str]:
    results = [r for _, r, _ in judged.values()]
    result = "FAIL" if "FAIL" in results else "NOT VERIFIED" if "NOT VERIFIED" in results else "PASS"
    note = "; ".join(f"{k} {note or f'{e:.2g}'}" for k, (e, r, note) in judged.items() if r != "PASS")
    return result, note


def _run_block(path: Path, i: int, names: Sequence[tuple[str, str]], base: dict[str, np.ndarray],
               captured: dict[str, np.ndarray], ref: dict[str, np.ndarray], tol: float,
               half: dict[str, np.ndarray] | None = None) -> PromptResult:
    hidden_in, hidden_out = names[i]
    first_in = names[0][0]
    mask = base["attention_mask"]
    batch = mask.shape[0]
    feeds = dict(base)
    feeds[hidden_in] = captured[f"in{i}"]
    if first_in != hidden_in:
        feeds[first_in] = captured["in0"]
    outputs = [hidden_out, f"present.{i}.key", f"present.{i}.value"]
    session = _subsession(path, [*feeds, f"past_key_values.{i}.key", f"past_key_values.{i}.value"], outputs)
    for spec in session.get_inputs():  # type: ignore[attr-defined]
        if spec.name.startswith("past_key_values."):
            dtype = np.float16 if spec.type == "tensor(float16)" else np.float32
            feeds[spec.name] = np.zeros((batch, int(spec.shape[1]), 0, int(spec.shape[3])), dtype=dtype)
    got = [np.asarray(g, np.float32) for g in session.run(outputs, _typed(session, feeds))]  # type: ignore[attr-defined]
    del session
    judged = {}
    for j, kind in ((0, "hidden"), (1, "key"), (2, "value")):
        if kind in ref and ref[kind].shape == got[j].shape:
            theirs = None if half is None or kind not in half else _real(half[kind], mask, kind)
            judged[kind] = _judge(_real(got[j], mask, kind), _real(ref[kind], mask, kind), theirs, tol)
    worst = max(judged, key=lambda k: judged[k][0])
    row = PromptResult(name=f"block {i}", shape=tuple(ref["hidden"].shape), steps=0, matched=0,
                       max_err=judged[worst][0], worst_step=0)
    row.result, row.note = _verdict_of(judged)
    gc.collect()
    return row


def _run_part(path: Path, label: str, cut: Sequence[str], outputs: Sequence[str], feeds: dict[str, np.ndarray],
              ref: dict[str, np.ndarray], tol: float, half: np.ndarray | None = None) -> PromptResult:
    session = _subsession(path, [*cut, "input_ids", "attention_mask", "position_ids"], outputs)
    got = [np.asarray(g, np.float32) for g in session.run(list(outputs), _typed(session, feeds))]  # type: ignore[attr-defined]
    del session
    mask = feeds["attention_mask"]
    judged = {outputs[0]: _judge(_real(got[0], mask, ""), _real(ref[outputs[0]], mask, ""),
                                 None if half is None else _real(half, mask, ""), tol)}
    shape = tuple(np.asarray(ref[outputs[0]]).shape)
    row = PromptResult(name=label, shape=shape, steps=0, matched=0, max_err=judged[outputs[0]][0], worst_step=0)
    row.result, row.note = _verdict_of(judged)
    return row


_ORT_FLOATS = {"tensor(float16)": np.float16, "tensor(float)": np.float32, "tensor(double)": np.float64}


def _typed(session: object, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The feeds ``session`` takes, each float one in the type it takes (a half file's inner values)."""
    out = {}
    for spec in session.get_inputs():  # type: ignore[attr-defined]
        value = feeds[spec.name]
        want = _ORT_FLOATS.get(spec.type)
        out[spec.name] = value.astype(want) if want is not None and value.dtype.kind == "f" else value
    return out


def _try(fn: object, arg: str) -> object | None:
    try:
        return fn(arg)  # type: ignore[operator]
    except ConversionError:
        return None


def _owner(module: object, dotted: str) -> tuple[object, str]:
    parts = dotted.split(".")
    for part in parts[:-1]:
        module = getattr(module, part)
    return module, parts[-1]


def _real_buffers(model: object) -> None:
    """The buffers a constructor computes, recomputed on the CPU (as the capture does)."""
    import torch

    init = getattr(model, "_init_weights", None)
    for module in model.modules():  # type: ignore[attr-defined]
        own = [(n, b) for n, b in module.named_buffers(recurse=False) if b.is_meta]
        if not own:
            continue
        for name, buf in own:
            module.register_buffer(name, torch.zeros(buf.shape, dtype=buf.dtype),
                                   persistent=name not in module._non_persistent_buffers_set)
        if callable(init):
            with torch.no_grad():
                init(module)
