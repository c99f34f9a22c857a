"""Benchmark: a language model folder -> the deployed decoder ONNX, ours beside the peers, one run.

Sizes (``models/llm/decoders.py``, seeded random weights written as a downloaded folder: bf16
safetensors shards with an index, config, generation config and a word-level tokenizer):

- ``tinyllama``: TinyLlama-1.1B's dimensions (22 layers, hidden 2048, 32/4 heads, vocabulary
  32000), 2.2 GB of bf16 shards, converted to float32 by every tool;
- ``7b``: Llama-2-7B's dimensions (32 layers, hidden 4096, MLP 11008, vocabulary 32000),
  13.5 GB of bf16 shards: ours to bf16 (the shards' bytes copied, beside ``cp`` of the same
  bytes) and to fp16 (checked block by block); the peers in float32 / fp16.

Tools, each in its own process group, one at a time, stopped when the group's resident memory
passes ``--max-rss`` GiB (the row says so):

- ``ours``: ``convert hf:onnx SRC -o OUT --no-check [--precision P]`` (the check is timed apart);
- ``optimum``: ``optimum-cli export onnx --task text-generation-with-past`` (optimum-onnx 0.1.0 in
  a venv of its own with transformers 4.57.1, given by ``--optimum-venv``);
- ``genai-fp32``, ``genai-fp16``: onnxruntime-genai's model builder, ``-e cpu -p fp32|fp16``;
- ``dynamo``: ``torch.onnx.export(dynamo=True)`` of the model loaded by ``from_pretrained`` in a
  wrapper with the same inputs and outputs as ours (past_key_values.N.key/.value ...).

For each output: wall time, peak resident memory of the tool's process group, the files' size,
whether ONNX Runtime loads it and generates 16 greedy tokens (its own inputs fed: position_ids
where it takes them), whether onnxruntime-genai runs the folder (where it has a genai_config.json),
and whether those tokens are the source's (transformers' ``generate(do_sample=False)`` on the
folder in float32, batch-1 prompt of ``convert.parity.generation.default_prompts``). The 7B
source does not fit here in float32, so its tokens are not compared: the block check stands in.

    python benchmarks/bench_llm.py --work /big/disk/dir [--sizes tinyllama,7b] [--tools ours,optimum,...]
        [--optimum-venv /tmp/venv-optimum] [--max-rss 14] [--json results.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "frontends" / "hf"))

GiB = 2**30


# -- running a tool and measuring it ----------------------------------------------------------------
def _tree(pid: int) -> list[int]:
    found, stack = [], [pid]
    while stack:
        p = stack.pop()
        found.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    stack.extend(int(c) for c in fh.read().split())
        except OSError:
            continue
    return found


def _rss(pid: int) -> tuple[int, int]:
    """Resident memory of ``pid``'s process tree: (VmRSS, RssAnon), bytes. VmRSS counts the pages of
    files a tool maps (shards read through mmap: the kernel drops them when memory is short);
    RssAnon is the memory the tool itself holds."""
    total = anon = 0
    for p in _tree(pid):
        try:
            with open(f"/proc/{p}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                    elif line.startswith("RssAnon:"):
                        anon += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total, anon


def run(cmd: list[str], *, limit: int, timeout: int = 7200, env: dict[str, str] | None = None) -> dict[str, object]:
    """Run ``cmd`` in its own process group; return wall time, peak RSS of the group, rc, killed, log tail."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env=env, cwd=ROOT)
    peak = [0, 0]
    killed = [""]

    def watch() -> None:
        while proc.poll() is None:
            rss, anon = _rss(proc.pid)
            peak[0] = max(peak[0], rss)
            peak[1] = max(peak[1], anon)
            if anon > limit and not killed[0]:
                killed[0] = f"stopped at {anon / GiB:.1f} GiB (limit {limit / GiB:.0f} GiB)"
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            if time.perf_counter() - start > timeout and not killed[0]:
                killed[0] = f"stopped after {timeout} s"
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(0.1)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    out, _ = proc.communicate()
    thread.join()
    return {"seconds": time.perf_counter() - start, "peak_rss": peak[0], "peak_anon": peak[1], "rc": proc.returncode,
            "killed": killed[0], "log": out[-3000:]}


def _size(folder: Path) -> int:
    """The model's files (model.onnx and its external data, whatever its name), not the tokenizer or configs."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and p.name.startswith("model"))


# -- the snippets each tool and probe runs ----------------------------------------------------------------
_DYNAMO = """
import os, sys, torch, transformers
from transformers import AutoModelForCausalLM, DynamicCache
from transformers.cache_utils import DynamicLayer
src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
cfg = model.config
L, kv = cfg.num_hidden_layers, cfg.num_key_value_heads
hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
class W(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.lm = model
    def forward(self, input_ids, attention_mask, position_ids, past):
        cache = DynamicCache(); cache.layers = []
        for i in range(L):
            layer = DynamicLayer(); layer.dtype, layer.device = past[2*i].dtype, past[2*i].device
            layer.keys, layer.values = past[2*i], past[2*i+1]; layer.is_initialized = True
            cache.layers.append(layer)
        o = self.lm(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                    past_key_values=cache, use_cache=True)
        return (o.logits, *[t for l in o.past_key_values.layers for t in (l.keys, l.values)])
b, s, p = 2, 3, 5
args = (torch.zeros(b, s, dtype=torch.int64), torch.ones(b, p + s, dtype=torch.int64),
        torch.zeros(b, s, dtype=torch.int64), tuple(torch.zeros(b, kv, p, hd) for _ in range(2 * L)))
B, S, P = torch.export.Dim("batch"), torch.export.Dim("sequence"), torch.export.Dim("past_sequence")
dyn = ({0: B, 1: S}, {0: B, 1: torch.export.Dim.AUTO}, {0: B, 1: S}, tuple({0: B, 2: P} for _ in range(2 * L)))
names = ["input_ids", "attention_mask", "position_ids"]
names += [f"past_key_values.{i}.{k}" for i in range(L) for k in ("key", "value")]
outs = ["logits"] + [f"present.{i}.{k}" for i in range(L) for k in ("key", "value")]
with torch.no_grad():
    torch.onnx.export(W().eval(), args, out + "/model.onnx", dynamo=True, dynamic_shapes=dyn, input_names=names,
                      output_names=outs, external_data=True)
"""

_SOURCE_TOKENS = """
import json, sys, torch
from transformers import AutoModelForCausalLM
from convert.parity.generation import default_prompts, source_generate
src, vocab = sys.argv[1], int(sys.argv[2])
model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
name, ids, mask = default_prompts(vocab, 0, [1, 2], 0)[0]
tokens, _ = source_generate(model, ids, mask, 16, 0)
print("@@" + json.dumps(tokens[0].tolist()))
"""

_ORT = """
import json, sys, numpy as np, onnxruntime as ort
from convert.parity.generation import default_prompts, positions
path, vocab, kv, hd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
so = ort.SessionOptions(); so.log_severity_level = 3
try:
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
except Exception as exc:
    print("@@" + json.dumps({"loads": False, "why": str(exc).splitlines()[0][:200]})); sys.exit()
ins = {i.name: i for i in sess.get_inputs()}
name, ids, mask = default_prompts(vocab, 0, [1, 2], 0)[0]
past = [n for n in ins if n.startswith("past_key_values.")]
feeds = {"input_ids": ids, "attention_mask": mask}
pos = positions(mask)
if "position_ids" in ins: feeds["position_ids"] = pos
for n in past:
    i = ins[n]; dt = np.float16 if i.type == "tensor(float16)" else np.float32
    feeds[n] = np.zeros((1, kv, 0, hd), dt)  # [batch, kv_heads, past, head_dim]; some name the dims
outs = [o.name for o in sess.get_outputs()]
tokens = []
try:
    for _ in range(16):
        r = dict(zip(outs, sess.run(outs, {k: v for k, v in feeds.items() if k in ins})))
        nxt = np.asarray(r["logits"][:, -1], np.float32).argmax(-1)
        tokens.append(int(nxt[0]))
        mask = np.concatenate([mask, np.ones((1, 1), mask.dtype)], 1); pos = pos[:, -1:] + 1
        feeds = {"input_ids": nxt[:, None].astype(np.int64), "attention_mask": mask, "position_ids": pos}
        for n in past: feeds[n] = r[n.replace("past_key_values.", "present.")]
except Exception as exc:
    print("@@" + json.dumps({"loads": True, "generates": False, "why": str(exc).splitlines()[0][:200]})); sys.exit()
print("@@" + json.dumps({"loads": True, "generates": True, "tokens": tokens}))
"""

_GENAI = """
import json, sys, numpy as np, onnxruntime_genai as og
from convert.parity.generation import default_prompts
folder, vocab = sys.argv[1], int(sys.argv[2])
name, ids, mask = default_prompts(vocab, 0, [1, 2], 0)[0]
try:
    model = og.Model(folder)
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=int(ids.shape[1] + 16), batch_size=1)
    gen = og.Generator(model, params)
    gen.append_tokens(ids.astype(np.int32))
    while not gen.is_done():
        gen.generate_next_token()
    print("@@" + json.dumps({"runs": True, "tokens": [int(t) for t in gen.get_sequence(0)[ids.shape[1]:]]}))
except Exception as exc:
    print("@@" + json.dumps({"runs": False, "why": str(exc).splitlines()[0][:200]}))
"""

_CHECK = """
import json, sys, time
from pathlib import Path
from convert import ir
from convert.parity.generation import check_converted
src, model, by = sys.argv[1], sys.argv[2], sys.argv[3]
opts = ir.Options(); opts.extra["check_by"] = by
t = time.perf_counter()
report = check_converted([Path(src)], [Path(model)], opts)
print(report.table())
print("@@" + json.dumps({"verdict": report.verdict, "seconds": time.perf_counter() - t, "peak_rss": report.peak_rss,
                          "rows": [[r.name, r.result, r.max_err] for r in report.rows]}))
"""


def _py(snippet: str, *args: str, limit: int, python: str = sys.executable) -> tuple[dict[str, object], object]:
    code = textwrap.dedent(snippet)
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    result = run([python, "-c", code, *args], limit=limit, env=env)
    found = None
    for line in str(result["log"]).splitlines():
        if line.startswith("@@"):
            found = json.loads(line[2:])
    return result, found


# -- the benchmark ------------------------------------------------------------------------------------------
#: size -> the dimensions (models/llm/decoders.py DIMS, or config keywords: "smoke" is a 2-layer Llama
#: that runs every tool in a minute, to try the script).
SIZES: dict[str, str | dict[str, object]] = {
    "smoke": {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 512,
              "tie_word_embeddings": False},
    "tinyllama": "tinyllama-1.1b",
    "7b": "llama-2-7b",
}


def prepare(size: str, work: Path) -> tuple[Path, int]:
    """Write (once) the source folder of ``size`` under ``work``; return it and its vocabulary size."""
    from _llm import decoders

    mod = decoders()
    dims = SIZES[size]
    vocab = int((mod.DIMS[dims] if isinstance(dims, str) else dims)["vocab_size"])
    folder = work / f"src-{size}"
    if not (folder / "model.safetensors.index.json").is_file():
        mod.write_random_folder(dims, folder, dtype="bf16")
    if not (folder / "tokenizer.json").is_file():
        mod.write_tokenizer(folder, vocab)
    return folder, vocab


def tool_command(tool: str, src: Path, out: Path, precision: str, venv: Path | None,
                 dynamo_python: str = sys.executable) -> list[str] | None:
    """The command line of ``tool`` writing ``src`` to the folder ``out`` (None: the tool is not installed)."""
    if tool == "ours":
        return [sys.executable, "-m", "convert", "hf:onnx", str(src), "-o", f"{out}/", "--no-check", "-q",
                "--precision", precision]
    if tool == "optimum":
        if venv is None:
            return None
        return [str(venv / "bin" / "optimum-cli"), "export", "onnx", "-m", str(src), "--task",
                "text-generation-with-past", "--device", "cpu", "--dtype", precision, str(out)]
    if tool.startswith("genai-"):
        return [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(src), "-o", str(out), "-p",
                tool.split("-", 1)[1], "-e", "cpu", "-c", str(out.parent / f"{out.name}-cache")]
    if tool == "dynamo":
        return [dynamo_python, "-c", _DYNAMO, str(src), str(out)]
    raise SystemExit(f"unknown tool {tool}")


def _plan(size: str, tools: list[str]) -> list[tuple[str, str]]:
    """(tool, precision) runs: float32 everywhere but the 7B, where ours writes bf16 (the shards' bytes,
    beside cp) and fp16 (checked block by block), and the peers float32 / fp16."""
    plan = []
    for tool in tools:
        if tool.startswith("genai-"):
            plan.append((tool, tool.split("-", 1)[1]))
        elif tool == "ours" and size == "7b":
            plan += [("ours", "bf16"), ("ours", "fp16")]
        else:
            plan.append((tool, "fp32"))
    return plan


def bench(size: str, tools: list[str], work: Path, limit: int, venv: Path | None, keep: bool,
          dynamo_python: str = sys.executable) -> list[dict[str, object]]:
    src, vocab = prepare(size, work)
    config = json.loads((src / "config.json").read_text())
    kv = int(config["num_key_value_heads"])
    hd = int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])
    weights = sum(p.stat().st_size for p in src.glob("*.safetensors"))
    rows: list[dict[str, object]] = []
    ref_tokens = None
    if size != "7b":
        res, ref_tokens = _py(_SOURCE_TOKENS, str(src), str(vocab), limit=limit)
        print(f"source tokens ({res['seconds']:.0f} s, {res['peak_anon'] / GiB:.1f} GiB): {ref_tokens}", flush=True)
        if ref_tokens is None:
            print(str(res["log"])[-2000:], flush=True)
    else:
        copy = work / "cp-copy"
        copy.mkdir(exist_ok=True)
        subprocess.run(["sync"], check=False)  # each timed tool starts with no dirty pages; none syncs its own
        res = run(["cp", *[str(p) for p in sorted(src.glob("*.safetensors"))], str(copy)], limit=limit)
        rows.append({"size": size, "tool": "cp", "precision": "bf16 (the shards)", "seconds": res["seconds"],
                     "peak_rss": res["peak_rss"], "peak_anon": res["peak_anon"], "bytes": weights, "weights": weights})
        print(json.dumps(rows[-1]), flush=True)
        shutil.rmtree(copy)
    for tool, precision in _plan(size, tools):
        out = work / f"out-{size}-{tool}-{precision}"
        shutil.rmtree(out, ignore_errors=True)
        cmd = tool_command(tool, src, out, precision, venv, dynamo_python)
        if cmd is None:
            rows.append({"size": size, "tool": tool, "precision": precision,
                         "error": "not run: no --optimum-venv"})
            continue
        print(f"== {size} {tool} {precision}", flush=True)
        subprocess.run(["sync"], check=False)
        res = run(cmd, limit=limit)
        row: dict[str, object] = {"size": size, "tool": tool, "precision": precision, "seconds": res["seconds"],
                                  "peak_rss": res["peak_rss"], "peak_anon": res["peak_anon"], "rc": res["rc"],
                                  "killed": res["killed"], "weights": weights}
        model = out / "model.onnx"
        if res["rc"] != 0 or not model.is_file():
            lines = str(res["log"]).strip().splitlines()
            row["error"] = res["killed"] or (lines[-1][:300] if lines else f"exit {res['rc']}")
        else:
            row["bytes"] = _size(out)
            if int(row["bytes"]) > limit:  # an ONNX Runtime session holds the weights: past the limit here
                why = f"not run: {int(row['bytes']) / GiB:.1f} GiB of weights, over --max-rss {limit / GiB:.0f} GiB"
                row["ort"] = {"loads": None, "why": why}
                row["genai"] = {"runs": None, "why": why}
            else:
                probe, found = _py(_ORT, str(model), str(vocab), str(kv), str(hd), limit=limit)
                row["ort"] = found or {"loads": False, "why": probe["killed"] or "crashed"}
                if (out / "genai_config.json").is_file():
                    probe, found = _py(_GENAI, str(out), str(vocab), limit=limit)
                    row["genai"] = found or {"runs": False, "why": probe["killed"] or "crashed"}
                else:
                    row["genai"] = {"runs": None, "why": "no genai_config.json"}
            if ref_tokens is not None:
                for key in ("ort", "genai"):
                    got = row.get(key)
                    if isinstance(got, dict) and "tokens" in got:
                        got["match"] = got["tokens"][:16] == ref_tokens
            if tool == "ours" and precision != "bf16":
                by = "generation" if size != "7b" else "blocks"
                probe, found = _py(_CHECK, str(src), str(model), by, limit=limit)
                row["check"] = found or {"verdict": "did not finish", "why": probe["killed"] or
                                         str(probe["log"]).strip().splitlines()[-1][:300]}
                if isinstance(row["check"], dict):
                    row["check"]["process_peak_rss"] = probe["peak_rss"]
                    row["check"]["process_peak_anon"] = probe["peak_anon"]
                    row["check"]["wall"] = probe["seconds"]
                print(str(probe["log"])[-2500:], flush=True)
        print(json.dumps(row), flush=True)
        rows.append(row)
        if not keep:
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(out.parent / f"{out.name}-cache", ignore_errors=True)
    return rows


def _yes(probe: object, key: str) -> str:
    if not isinstance(probe, dict):
        return "-"
    if probe.get(key) is None:
        return "not run"
    if not probe.get(key):
        return "no: " + str(probe.get("why", ""))[:60]
    if key == "loads" and probe.get("generates") is False:
        return "loads, fails: " + str(probe.get("why", ""))[:60]
    match = probe.get("match")
    return "yes" + ("" if match is None else (", tokens match" if match else ", tokens differ"))


def table(rows: list[dict[str, object]]) -> str:
    """The rows as a Markdown table."""
    out = ["| size | tool | precision | wall s | peak RSS GiB (anon) | output GiB | ORT generates | "
           "onnxruntime-genai | check |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "seconds" not in r:
            out.append(f"| {r['size']} | {r['tool']} | {r['precision']} | {r.get('error', '')} | | | | | |")
            continue
        size = f"{int(r['bytes']) / GiB:.2f}" if "bytes" in r else "-"
        err = r.get("error")
        check = r.get("check")
        check_s = "-"
        if isinstance(check, dict):
            check_s = (f"{check.get('verdict')} ({check.get('wall', 0):.0f} s, "
                       f"{check.get('peak_rss', 0) / GiB:.2f} GiB)")
        wall = f"{float(r['seconds']):.1f}"
        out.append(f"| {r['size']} | {r['tool']} | {r['precision']} | {wall} | "
                   f"{int(r['peak_rss']) / GiB:.2f} ({int(r.get('peak_anon', 0)) / GiB:.2f}) | "
                   f"{size if not err else 'FAILED: ' + str(err)[:80]} | {_yes(r.get('ort'), 'loads')} | "
                   f"{_yes(r.get('genai'), 'runs')} | {check_s} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--sizes", default="tinyllama,7b", help=f"of {', '.join(SIZES)}")
    parser.add_argument("--tools", default="ours,optimum,genai-fp32,genai-fp16,dynamo")
    parser.add_argument("--optimum-venv", type=Path, default=None)
    parser.add_argument("--dynamo-python", default=sys.executable,
                        help="a Python with onnxscript (torch.onnx's dynamo exporter needs it; the toolkit does not)")
    parser.add_argument("--max-rss", type=float, default=12.0,
                        help="GiB of anonymous memory (the tool's own, not mapped files); a tool past it is stopped")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the outputs (they are deleted after measuring)")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, object]] = []
    for size in args.sizes.split(","):
        rows += bench(size, args.tools.split(","), args.work, int(args.max_rss * GiB), args.optimum_venv, args.keep,
                      args.dynamo_python)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
