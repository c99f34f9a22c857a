"""The check of a converted language model: greedy generation, token by token, against transformers.

A decoder is deployed as a loop: the prompt runs once (past length 0), then one token at a time with
the key/value cache the previous call returned. The check runs that loop in ONNX Runtime on the
converted file and compares it with transformers' ``generate(do_sample=False)`` on the source, for
``N`` new tokens (``--new-tokens``, 16) from two prompts: one of batch 1, and a batch of 2 whose
shorter row is left-padded (the mask and the positions of padding both matter there). The prompts
are seeded token ids (a tokenizer is not needed); generation never stops at an end token, on either
side, so both generate exactly ``N`` tokens.

The verdict of each prompt:

* **PASS**: every token identical, and each step's logits within ``tol`` of their scale
  (``max|ours - ref| / max|ref|``), or, where float32 rounding in a deep model exceeds ``tol``, at
  most ``FLOAT64_MARGIN`` times as far from the source's float64 run as the source's own float32 run.
* **NOT VERIFIED** from step ``t``: the first token that differs is at a step where the source's two
  candidates (its token and ours) are closer, in its float64 run, than twice the float32 error of
  that step (the larger of the source's and ours, each measured from float64): float32 cannot tell
  which is larger, and either continuation is right. That step and the steps after it (whose
  contexts differ) are NOT VERIFIED, never FAIL.
* **FAIL**: a token differs where the candidates are further apart than that, or a step's logits
  miss the tolerance (the first differing step and both tokens are reported).

A half-precision file (``--precision fp16``) is judged as docs/precision.md says: against the float32
source, each step's error allowed up to ``HALF_MARGIN`` times the source's own half-precision run's,
and a near tie measured against that error. A bf16 file cannot run on ONNX Runtime's CPU provider:
NOT VERIFIED. Where onnxruntime-genai is installed, it runs the output folder (``genai_config.json``)
on the batch-1 prompt too, and its tokens must be the source's.

A model whose float32 weights take more than half the memory cannot have the source and an ONNX
Runtime session side by side: it is checked block by block instead (``blockwise.py``), a verdict of
its own regime.
"""

from __future__ import annotations

import gc
import json
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from convert.ir import Options, UsageError

from .compare import FLOAT32_LIMIT, FLOAT64_MARGIN, HALF_MARGIN

__all__ = ["GenerationReport", "PromptResult", "check_converted", "default_prompts", "ort_generate"]

logger = logging.getLogger(__name__)

#: A near tie: the two candidates' float64 logits closer than this many times the step's float32 error.
TIE_MARGIN = 2.0


@dataclass(slots=True)
class PromptResult:
    """How one prompt's generation compared (a row of the table)."""

    name: str
    shape: tuple[int, ...]
    steps: int
    matched: int  # steps whose tokens agree in every row, from the first
    ref_tokens: list[list[int]] = field(default_factory=list)
    got_tokens: list[list[int]] = field(default_factory=list)
    max_err: float = 0.0  # largest logits error / scale over the compared steps
    worst_step: int = -1
    first_diff: dict[str, int] | None = None  # {"step", "row", "source_token", "our_token"}
    undecided_from: int | None = None  # NOT VERIFIED from this step (a near tie)
    result: str = "PASS"
    note: str = ""

    @property
    def passed(self) -> bool:
        """Whether the prompt passed."""
        return self.result == "PASS"


@dataclass(slots=True)
class GenerationReport:
    """The verdict of a converted language model (``convert.parity.ParityReport``'s interface)."""

    source: str
    source_runtime: str
    source_device: str
    dest: str
    dest_runtime: str
    dest_device: str
    tol: float
    new_tokens: int
    regime: str = "generation"  # or "blocks" (blockwise.py)
    rows: list[PromptResult] = field(default_factory=list)
    precision: str = "fp32"
    seed: int | None = 0
    notes: list[str] = field(default_factory=list)
    method: list[str] = field(default_factory=list)
    #: Peak resident memory of this process during the check (bytes), when measured.
    peak_rss: int = 0
    not_run: str = ""  # why the converted model could not be run (a bf16 file on the CPU): NOT VERIFIED

    @property
    def outputs(self) -> list[PromptResult]:
        """The rows (what ``ParityReport.outputs`` is to a summary line: the things compared)."""
        return self.rows

    @property
    def passed(self) -> bool:
        """True when every row passed."""
        return bool(self.rows) and all(r.passed for r in self.rows) and not self.not_run

    @property
    def verdict(self) -> str:
        """PASS, NOT VERIFIED (no row failed, some could not be decided), or FAIL."""
        if self.passed:
            return "PASS"
        if any(r.result == "FAIL" for r in self.rows):
            return "FAIL"
        return "NOT VERIFIED"

    def to_json(self) -> str:
        """Return the report as JSON."""
        data = asdict(self)
        data["passed"] = self.passed
        data["verdict"] = self.verdict
        data["criterion"] = ("greedy tokens identical and each step's logits max|ours-ref| / max|ref| <= tol; "
                             "near ties in float64 NOT VERIFIED")
        return json.dumps(data, indent=2)

    def table(self, *, quiet: bool = False) -> str:
        """Return the plain-text table: one row per prompt (or block); ``quiet`` leaves out the how and notes."""
        what = "block by block" if self.regime == "blocks" else f"greedy generation, {self.new_tokens} new tokens"
        head = (f"check ({what}): {self.source} on {self.source_runtime} [{self.source_device}]  vs  "
                f"{self.dest} on {self.dest_runtime} [{self.dest_device}]"
                + (f"  ({self.precision} model vs the float32 source)" if self.precision != "fp32" else ""))
        if self.regime == "blocks":
            cols = ["block", "shape", "err/scale", "result"]
            rows = [[r.name, "x".join(map(str, r.shape)), f"{r.max_err:.3g}", r.result + (f" ({r.note})" if r.note
                                                                                            else "")]
                    for r in self.rows]
        else:
            cols = ["prompt", "shape", "tokens", "first difference", "logits err/scale", "result"]
            rows = []
            for r in self.rows:
                diff = "-" if r.first_diff is None else (
                    f"step {r.first_diff['step']} row {r.first_diff['row']}: source {r.first_diff['source_token']}, "
                    f"ours {r.first_diff['our_token']}")
                err = "-" if r.worst_step < 0 else f"{r.max_err:.3g} (step {r.worst_step})"
                rows.append([r.name, "x".join(map(str, r.shape)), f"{r.matched}/{r.steps}", diff, err,
                             r.result + (f" ({r.note})" if r.note else "")])
        widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c) for i, c in enumerate(cols)]
        out = [head, "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)),
               "  ".join("-" * w for w in widths)]
        out += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in rows]
        if self.not_run:
            out.append(f"NOT VERIFIED: {self.not_run}")
        elif self.regime == "blocks":
            half = (f", or at most {HALF_MARGIN:g}x as far as the source's own {self.precision} run of it"
                    if self.precision != "fp32" else "")
            out.append(f"{self.verdict} (block-by-block regime, not a check of generation): each decoder block of "
                       f"the converted graph on the source's activations within tol={self.tol:g} of its output's "
                       f"scale{half}, real positions" + (f"; peak memory of the check {self.peak_rss / 2**30:.2f} GiB"
                                                         if self.peak_rss else ""))
        elif self.precision != "fp32":
            out.append(f"{self.verdict}: tokens identical and each step's logits within tol={self.tol:g} of their "
                       f"scale, or at most {HALF_MARGIN:g}x as far from the float32 source as the source's own "
                       f"{self.precision} run; a first difference at a near tie (within {self.precision}'s error) is "
                       "NOT VERIFIED from that step")
        else:
            out.append(f"{self.verdict}: tokens identical and each step's logits within tol={self.tol:g} of their "
                       f"scale (or at most {FLOAT64_MARGIN:g}x the source's own float32 distance from its float64 "
                       "run); a first difference at a float64 near tie is NOT VERIFIED from that step")
        if not quiet:
            out += [f"how: {line}" for line in self.method]
        out += [f"NOTE: {note}" for note in self.notes]
        return "\n".join(out)


# -- prompts -----------------------------------------------------------------------------------------
def default_prompts(vocab: int, seed: int, special: Sequence[int | None], pad: int) -> list[tuple[str, np.ndarray,
                                                                                                      np.ndarray]]:
    """Return ``[(name, input_ids, attention_mask)]``: a batch of 1 (7 tokens) and a batch of 2 (9 and 5
    tokens, the second left-padded with ``pad``). Token ids are seeded, never a special token."""
    rng = np.random.default_rng(seed)
    avoid = {int(t) for t in special if t is not None} | {pad}
    pool = np.array([t for t in range(min(vocab, 1 << 20)) if t not in avoid], dtype=np.int64)

    def draw(n: int) -> np.ndarray:
        return pool[rng.integers(0, len(pool), n)]

    one = draw(7)[None]
    two = np.full((2, 9), pad, dtype=np.int64)
    two[0] = draw(9)
    two[1, 4:] = draw(5)
    mask2 = np.ones((2, 9), dtype=np.int64)
    mask2[1, :4] = 0
    return [("prompt 1", one, np.ones_like(one)), ("prompt 2 (left-padded)", two, mask2)]


def positions(mask: np.ndarray) -> np.ndarray:
    """Position ids as transformers' generate makes them: the running count of real tokens, 1 on padding."""
    pos = np.cumsum(mask, axis=-1) - 1
    pos[mask == 0] = 1
    return pos.astype(np.int64)


# -- the converted model: the deployment loop in ONNX Runtime ----------------------------------------
def _session(path: Path, device: str = "cpu") -> object:
    import onnxruntime as ort

    from .runtimes.onnxruntime import session_providers

    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), sess_options=so,
                                providers=session_providers(device, ort.get_available_providers()))


def _past_specs(session: object) -> tuple[list[str], list[tuple[int, int]], np.dtype]:
    names = [i.name for i in session.get_inputs() if i.name.startswith("past_key_values.")]  # type: ignore[attr-defined]
    shapes = []
    dtype: np.dtype = np.dtype(np.float32)
    for i in session.get_inputs():  # type: ignore[attr-defined]
        if i.name.startswith("past_key_values.") and i.name.endswith(".key"):
            shapes.append((int(i.shape[1]), int(i.shape[3])))
            dtype = np.dtype(np.float16) if i.type == "tensor(float16)" else np.dtype(np.float32)
    return names, shapes, dtype


def ort_generate(session: object, ids: np.ndarray, mask: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Greedy-generate ``steps`` tokens with the deployment loop; return (tokens [b, steps], logits [steps, b, V])."""
    names, shapes, dtype = _past_specs(session)
    batch = ids.shape[0]
    feeds: dict[str, np.ndarray] = {"input_ids": ids, "attention_mask": mask, "position_ids": positions(mask)}
    for layer, (kv, hd) in enumerate(shapes):
        for kind in ("key", "value"):
            feeds[f"past_key_values.{layer}.{kind}"] = np.zeros((batch, kv, 0, hd), dtype=dtype)
    outputs = [o.name for o in session.get_outputs()]  # type: ignore[attr-defined]
    tokens, logits = [], []
    for _ in range(steps):
        result = dict(zip(outputs, session.run(outputs, feeds), strict=True))  # type: ignore[attr-defined]
        last = np.asarray(result["logits"][:, -1], dtype=np.float32)
        nxt = last.argmax(-1).astype(np.int64)
        tokens.append(nxt)
        logits.append(last)
        mask = np.concatenate([mask, np.ones((batch, 1), dtype=mask.dtype)], axis=1)
        feeds = {"input_ids": nxt[:, None], "attention_mask": mask,
                 "position_ids": (feeds["position_ids"][:, -1:] + 1).astype(np.int64)}
        for name in names:
            feeds[name] = result[name.replace("past_key_values.", "present.")]
    return np.stack(tokens, axis=1), np.stack(logits)


# -- the source: transformers ------------------------------------------------------------------------
def _clean_generation(pad: int, steps: int) -> object:
    from transformers import GenerationConfig

    return GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=steps, min_new_tokens=0, eos_token_id=[],
                            pad_token_id=pad, repetition_penalty=1.0, temperature=None, top_k=None, top_p=None,
                            output_logits=True, return_dict_in_generate=True)


def source_generate(model: object, ids: np.ndarray, mask: np.ndarray, steps: int,
                    pad: int) -> tuple[np.ndarray, np.ndarray]:
    """transformers' greedy ``generate``: (tokens [b, steps], raw logits [steps, b, V])."""
    import torch

    from convert.frontends.pytorch.capture import quiet_torch

    with torch.no_grad(), quiet_torch():
        out = model.generate(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),  # type: ignore[attr-defined]
                             generation_config=_clean_generation(pad, steps))
    tokens = out.sequences[:, ids.shape[1]:].numpy()
    logits = torch.stack(out.logits).float().numpy()
    return tokens, logits


def teacher_forced(model: object, ids: np.ndarray, mask: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """The logits of each step when ``tokens`` are the ones generated (one forward over the whole
    sequence, in the model's own dtype): [steps, b, V] in float64."""
    import torch

    steps = tokens.shape[1]
    full = np.concatenate([ids, tokens[:, :-1]], axis=1)
    fmask = np.concatenate([mask, np.ones_like(tokens[:, :-1])], axis=1)
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(full), attention_mask=torch.from_numpy(fmask),  # type: ignore[operator]
                    position_ids=torch.from_numpy(positions(fmask)), use_cache=False)
    logits = out.logits[:, ids.shape[1] - 1: ids.shape[1] - 1 + steps].double().numpy()
    return np.transpose(logits, (1, 0, 2))


# -- the verdict -------------------------------------------------------------------------------------
def _err(got: np.ndarray, ref: np.ndarray) -> float:
    scale = float(np.abs(ref).max())
    return float(np.abs(got.astype(np.float64) - ref).max()) / scale if scale > 0 else math.inf


@dataclass(slots=True)
class _Arbiter:
    """Each step's logits in an exact(er) run of the source: float64 (fp32 files) or its half run."""

    logits: np.ndarray | None  # [steps, b, V], float64
    kind: str  # "float64" or "fp16"...
    why_missing: str = ""


def judge_prompt(name: str, ref_tokens: np.ndarray, ref_logits: np.ndarray, got_tokens: np.ndarray,
                 got_logits: np.ndarray, tol: float, arbiter: _Arbiter | None, *,
                 half: np.ndarray | None = None) -> PromptResult:
    """Compare one prompt's generation (see the module docstring for the rule).

    ``arbiter``: the source's float64 logits along its own tokens (needed only when a step misses
    ``tol`` or a token differs). ``half``: for a half-precision file, the source's half-precision
    logits along its tokens (what half precision itself costs at each step).
    """
    steps = ref_tokens.shape[1]
    res = PromptResult(name=name, shape=(int(ref_tokens.shape[0]), 0), steps=steps, matched=0,
                       ref_tokens=ref_tokens.tolist(), got_tokens=got_tokens.tolist())
    diff_rows = np.nonzero((ref_tokens != got_tokens).any(axis=0))[0]
    first = int(diff_rows[0]) if len(diff_rows) else steps
    res.matched = first
    compared = min(first + 1, steps)  # the step of the first difference has the same context: compare it too
    failed_step = None
    for t in range(compared):
        err = _err(got_logits[t], ref_logits[t])
        if err > res.max_err or res.worst_step < 0:
            res.max_err, res.worst_step = err, t
        if err <= tol:
            continue
        verdict, note = _settle_step(t, ref_logits[t], got_logits[t], arbiter, half, tol)
        if verdict != "PASS" and failed_step is None:
            failed_step = t
            res.result, res.note = verdict, note
    if first < steps:
        row = int(np.nonzero(ref_tokens[:, first] != got_tokens[:, first])[0][0])
        ref_tok, got_tok = int(ref_tokens[row, first]), int(got_tokens[row, first])
        res.first_diff = {"step": first, "row": row, "source_token": ref_tok, "our_token": got_tok}
        if failed_step is None or failed_step >= first:
            verdict, note = _settle_tie(first, row, ref_tok, got_tok, ref_logits[first], got_logits[first], arbiter,
                                        half)
            if failed_step is None or verdict == "FAIL":
                res.result, res.note = verdict, note
            if verdict == "NOT VERIFIED":
                res.undecided_from = first
    elif res.result == "PASS" and any(_err(got_logits[t], ref_logits[t]) > tol for t in range(steps)):
        res.note = ("steps past tol passed by the half-precision rule" if half is not None
                    else "steps past tol passed by the float64 rule")
    return res


def _settle_step(t: int, ref: np.ndarray, got: np.ndarray, arbiter: _Arbiter | None, half: np.ndarray | None,
                 tol: float) -> tuple[str, str]:
    """A step whose logits miss ``tol``: PASS by the float64 (or half) rule, else FAIL or NOT VERIFIED."""
    if half is not None:  # a half-precision file: at most HALF_MARGIN x the source's own half run
        theirs, ours = _err(half[t], ref), _err(got, ref)
        note = f"step {t}: ours {ours:.2g} from the float32 source, the source's own half run {theirs:.2g}"
        return ("PASS", "") if ours <= HALF_MARGIN * theirs else ("FAIL", note)
    if arbiter is None or arbiter.logits is None:
        why = arbiter.why_missing if arbiter is not None else "no float64 run"
        return "FAIL", f"step {t} logits {_err(got, ref):.2g} of scale, over tol ({why})"
    r64 = arbiter.logits[t]
    theirs, ours = _err(ref, r64), _err(got, r64)
    note = f"step {t}: float64 run of the source: ours {ours:.2g} from it, the source's float32 run {theirs:.2g}"
    if ours > FLOAT64_MARGIN * theirs:
        return "FAIL", note
    if theirs > FLOAT32_LIMIT * tol:
        return "NOT VERIFIED", note + " (the model amplifies float32 rounding past what can be judged)"
    return "PASS", ""


def _settle_tie(t: int, row: int, ref_tok: int, got_tok: int, ref: np.ndarray, got: np.ndarray,
                arbiter: _Arbiter | None, half: np.ndarray | None) -> tuple[str, str]:
    """The first differing token: NOT VERIFIED at a near tie of the two candidates, else FAIL."""
    if half is not None:
        exact = ref[row].astype(np.float64)  # the float32 source decides; half precision's error is the margin
        error = max(float(np.abs(half[t][row] - exact).max()), float(np.abs(got[row] - exact).max()))
        kind = "the source's half-precision"
    elif arbiter is not None and arbiter.logits is not None:
        exact = arbiter.logits[t][row]
        error = max(float(np.abs(ref[row] - exact).max()), float(np.abs(got[row] - exact).max()))
        kind = "float32"
    else:
        why = arbiter.why_missing if arbiter is not None else "no float64 run"
        return "NOT VERIFIED", (f"step {t}: tokens differ and whether it is a near tie is unknown ({why})")
    gap = abs(float(exact[ref_tok]) - float(exact[got_tok]))
    said = (f"step {t} row {row}: tokens {ref_tok} and {got_tok} are {gap:.3g} apart in the source's "
            f"{'float64' if half is None else 'float32'} logits, {kind} error {error:.3g}")
    if gap <= TIE_MARGIN * error:
        return "NOT VERIFIED", said + f": a near tie, steps {t}+ not verified"
    return "FAIL", said


# -- running it --------------------------------------------------------------------------------------
BF16_ON_CPU = ("ONNX Runtime's CPU provider has no bf16 kernels, so the bf16 file cannot run here "
               "(docs/precision.md); convert with --precision fp32 or fp16 to check it on the CPU")


def file_metadata(path: Path) -> dict[str, str]:
    """The converted file's ``metadata_props`` (its precision), read without loading its weights."""
    from convert import ir

    return dict(ir.load_file(path).metadata_props)


def _peak_rss() -> int:
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    except (ImportError, OSError):
        return 0


def memory_total() -> int:
    """Return the machine's memory (bytes; 0 when unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _source_model(source: object, dtype: str, attention: str | None = None) -> object:
    """The source as a transformers model in ``dtype`` (a folder read by transformers; a module copied)."""
    import copy

    import torch
    from transformers import AutoModelForCausalLM

    torch_dtype = {"float32": torch.float32, "float64": torch.float64, "fp16": torch.float16,
                   "bf16": torch.bfloat16}[dtype]
    if isinstance(source, (list, tuple)):
        folder = Path(source[0])
        kwargs = {"attn_implementation": attention} if attention else {}
        from convert.frontends.pytorch.capture import quiet_torch

        with quiet_torch():
            model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch_dtype, local_files_only=True,
                                                         trust_remote_code=False, **kwargs)
        return model.eval()
    module = source
    if next(module.parameters()).dtype != torch_dtype:  # type: ignore[attr-defined]
        module = copy.deepcopy(module).to(torch_dtype)
    return module.eval()  # type: ignore[attr-defined]


def _capture_attention(source: object) -> str | None:
    """The attention implementation the capture used for a folder (the reference runs the same: Gemma 2's
    SDPA path drops its attention soft-capping); None for a module (it runs as the user built it)."""
    if not isinstance(source, (list, tuple)):
        return None
    from convert.frontends.hf.architectures import architecture_of
    from convert.frontends.hf.capture import hf_config
    from convert.frontends.hf.folder import read_folder

    return architecture_of(hf_config(read_folder(Path(source[0]))), str(source[0])).attention


def _weights_bytes32(source: object) -> int:
    """The float32 size of the source's weights (what its reference run holds)."""
    if isinstance(source, (list, tuple)):
        from convert.frontends.hf.folder import read_folder

        folder = read_folder(Path(source[0]))
        return sum(4 * t.numel for t in folder.tensors.values())
    return sum(4 * p.numel() for p in source.parameters())  # type: ignore[attr-defined]


def check_converted(source: object, written: Sequence[Path], options: Options, *, tol: float = 1e-4,
                    seed: int = 0, inputs: object = None) -> GenerationReport:
    """Check the converted decoder ``written[0]`` against ``source`` (a model folder's paths, or the module).

    The regime is chosen by ``--check-by`` (auto: blocks when the float32 weights take more than
    half the memory).
    """
    import onnxruntime as ort
    import transformers

    if inputs is not None:
        raise UsageError("--inputs: the language-model check generates from its own prompts (two, seeded); "
                         "it takes no input file")
    model_path = Path(written[0])
    steps = int(options.get("new_tokens", 16))  # type: ignore[call-overload]
    if steps < 1:
        raise UsageError(f"--new-tokens {steps}: give at least 1")
    regime = str(options.get("check_by", "auto"))
    size32 = _weights_bytes32(source)
    total = memory_total()
    if regime == "auto":
        regime = "blocks" if total and size32 > total / 2 else "generation"
    if regime == "blocks":
        from .blockwise import check_blocks

        return check_blocks(source, model_path, options, tol=tol, seed=seed)
    report = GenerationReport(
        source="hf", source_runtime=f"transformers {transformers.__version__} generate()", source_device="cpu",
        dest="onnx", dest_runtime=f"ONNX Runtime {ort.__version__} (KV-cache loop)", dest_device="",
        tol=tol, new_tokens=steps, seed=seed)
    report.method.append("greedy generation, never stopping at an end token; prompts of seeded token ids "
                         f"(seed {seed}); position ids the running count of real tokens, as generate() makes them")
    precision = file_metadata(model_path).get("convert:precision", "fp32")
    report.precision = precision
    if precision == "bf16":
        report.dest_device = "CPUExecutionProvider"
        report.not_run = BF16_ON_CPU
        return report
    try:
        session = _session(model_path)
    except Exception as exc:  # ONNX Runtime's own refusal of the file
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        report.rows.append(PromptResult(name="the converted file", shape=(), steps=steps, matched=0, result="FAIL",
                                        note=f"ONNX Runtime cannot load it: {first}"))
        return report
    report.dest_device = session.get_providers()[0]  # type: ignore[attr-defined]
    vocab = int(session.get_outputs()[0].shape[-1])  # type: ignore[attr-defined]
    attention = _capture_attention(source)
    ref_model = _source_model(source, "float32", attention)
    config = ref_model.config  # type: ignore[attr-defined]
    gen = getattr(ref_model, "generation_config", None)
    special = [getattr(gen, "bos_token_id", None), getattr(gen, "eos_token_id", None)] if gen is not None else []
    special = [t for s in special for t in (s if isinstance(s, list) else [s])]
    pad = getattr(gen, "pad_token_id", None) if gen is not None else None
    if pad is None:
        pad = getattr(config, "pad_token_id", None)
    if pad is None:
        pad = next((t for t in special if t is not None), 0)
    prompts = default_prompts(vocab, seed, special, int(pad))
    refs = [source_generate(ref_model, ids, mask, steps, int(pad)) for _, ids, mask in prompts]
    del ref_model
    gc.collect()
    gots = [ort_generate(session, ids, mask, steps) for _, ids, mask in prompts]
    del session
    gc.collect()
    half = None
    if precision in ("fp16",):
        half_model = _source_model(source, precision, attention)
        half = [teacher_forced(half_model, ids, mask, ref[0])
                for (_, ids, mask), ref in zip(prompts, refs, strict=True)]
        del half_model
        gc.collect()
        report.method.append("half-precision file: judged against the source's own fp16 run along the source's "
                             f"tokens (each step at most {HALF_MARGIN:g}x its error from the float32 source)")
    arbiters: list[_Arbiter | None] = [None] * len(prompts)
    needs = [half is None and (np.any(ref[0] != got[0]) or
                               any(_err(got[1][t], ref[1][t]) > tol for t in range(steps)))
             for ref, got in zip(refs, gots, strict=True)]
    if any(needs):
        arbiters = _float64_runs(source, prompts, refs, needs, size32, total, attention)
    for i, ((name, ids, _), ref, got) in enumerate(zip(prompts, refs, gots, strict=True)):
        row = judge_prompt(name, ref[0], ref[1], got[0], got[1], tol, arbiters[i],
                           half=None if half is None else half[i])
        row.shape = tuple(ids.shape)
        report.rows.append(row)
    genai = _genai_row(model_path, prompts[0], refs[0], steps)
    if genai is not None:
        report.rows.append(genai)
    report.peak_rss = _peak_rss()
    return report


def _float64_runs(source: object, prompts: Sequence[tuple[str, np.ndarray, np.ndarray]],
                  refs: Sequence[tuple[np.ndarray, np.ndarray]], needs: Sequence[bool], size32: int, total: int,
                  attention: str | None) -> list[_Arbiter | None]:
    """The source's float64 logits along its own tokens, for the prompts that need the arbiter."""
    if total and 2 * size32 > 0.6 * total:
        why = (f"the float64 run would take {2 * size32 / 2**30:.1f} GiB of {total / 2**30:.1f} GiB")
        return [_Arbiter(None, "float64", why) if n else None for n in needs]
    try:
        model64 = _source_model(source, "float64", attention)
    except Exception as exc:  # a model without float64 kernels: the arbiter is missing, said
        why = f"no float64 run ({type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:120]})"
        return [_Arbiter(None, "float64", why) if n else None for n in needs]
    out: list[_Arbiter | None] = []
    for (_, ids, mask), ref, need in zip(prompts, refs, needs, strict=True):
        out.append(_Arbiter(teacher_forced(model64, ids, mask, ref[0]), "float64") if need else None)
    del model64
    gc.collect()
    return out


def _genai_row(model_path: Path, prompt: tuple[str, np.ndarray, np.ndarray], ref: tuple[np.ndarray, np.ndarray],
               steps: int) -> PromptResult | None:
    """Run the output folder in onnxruntime-genai (when installed) on the batch-1 prompt; its tokens
    must be the source's (it stops early only at an end token the source also chose)."""
    try:
        import onnxruntime_genai as og
    except ImportError:
        return None
    _, ids, _ = prompt
    folder = model_path.parent
    name = "onnxruntime-genai (genai_config.json)"
    try:
        model = og.Model(str(folder))
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=int(ids.shape[1] + steps), batch_size=1)
        generator = og.Generator(model, params)
        generator.append_tokens(ids.astype(np.int32))
        while not generator.is_done():
            generator.generate_next_token()
        seq = np.asarray(generator.get_sequence(0))[ids.shape[1]:]
    except Exception as exc:  # its own error: the folder does not run in onnxruntime-genai
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return PromptResult(name=name, shape=tuple(ids.shape), steps=steps, matched=0, result="FAIL",
                            note=f"onnxruntime-genai {getattr(og, '__version__', '')} could not run it: {first}")
    want = ref[0][0]
    n = min(len(seq), steps)
    same = int(np.argmax(seq[:n] != want[:n])) if np.any(seq[:n] != want[:n]) else n
    row = PromptResult(name=name, shape=tuple(ids.shape), steps=steps, matched=same,
                       ref_tokens=[want.tolist()], got_tokens=[seq.tolist()])
    if same < n:
        row.first_diff = {"step": same, "row": 0, "source_token": int(want[same]), "our_token": int(seq[same])}
        row.result = "FAIL"
        row.note = "onnxruntime-genai's tokens are not the source's"
    elif n < steps:
        row.note = f"stopped at an end token after {n}"
    return row

