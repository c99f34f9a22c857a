"""Benchmark: a Hugging Face decoder past 2 GiB of fp32 weights -> ONNX with external data.

The model is transformers' own ``LlamaForCausalLM`` built from a config (``from_config``, seeded
random weights, nothing downloaded): hidden 2048, 10 layers, grouped-query attention (16 heads,
4 key/value heads), SwiGLU 5632, vocabulary 32000, untied head: 582 M parameters, 2.17 GiB in
float32. It is exported as ``(input_ids, attention_mask) -> logits``, the way a user wraps it.

Each exporter runs in its own fresh process (one at a time) that first builds the model, then
resets its peak-RSS counter (``/proc/self/clear_refs``) and converts:

- ``ours``: ``convert.convert(module, example, to="onnx", check=False)`` (external data past 1.8 GiB),
  then the parity check on two inputs (seeds 1 and 2), timed apart from the conversion;
- ``torch.onnx (TorchScript)``: ``torch.onnx.export(..., dynamo=False)``;
- ``torch.onnx (dynamo)``: ``torch.onnx.export(..., dynamo=True)`` (needs ``onnxscript``; the row says so
  when it is missing).

The table gives the conversion's wall time and its ratio to ours, the process's peak resident set
during the conversion (the module included, as torch holds it) divided by the weights, the same
peak less the process before the model was built (torch and transformers imported: what the
module and the conversion hold) divided by the weights (1.0 = the module once, nothing more), the
anonymous memory the conversion added on top of the built model, and, for ours, the parity
check's time and verdict. A child past ``--max-rss`` GiB is stopped (the row says so).

    python benchmarks/bench_hf_decoder.py [--layers 10] [--tools ours,torchscript,dynamo] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOLS = {"ours": "ours", "torchscript": "torch.onnx (TorchScript)", "dynamo": "torch.onnx (dynamo)"}
SEQ = 32
VOCAB = 32000


def _status(key: str, pid: str = "self") -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def build(layers: int) -> tuple[object, int]:
    """Return (the eval-mode ``(input_ids, attention_mask) -> logits`` module, its weight bytes)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=2048, intermediate_size=5632, num_hidden_layers=layers,
                         num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048,
                         use_cache=False, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()

    class Logits(torch.nn.Module):
        """``(input_ids, attention_mask) -> logits`` of a causal LM."""

        def __init__(self, lm: torch.nn.Module) -> None:
            super().__init__()
            self.lm = lm

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return self.lm(input_ids=input_ids, attention_mask=attention_mask).logits

    module = Logits(model).eval()
    weights = sum(t.numel() * t.element_size() for t in [*module.parameters(), *module.buffers()])
    return module, weights


def inputs(seed: int) -> tuple[object, object]:
    """Return seeded ``(input_ids, attention_mask)`` of shape (1, SEQ); seed 2 pads its last quarter."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (1, SEQ), generator=gen)
    mask = torch.ones(1, SEQ, dtype=torch.int64)
    if seed % 2 == 0:
        mask[:, -SEQ // 4:] = 0
    return ids, mask


def child(tool: str, layers: int, out: str) -> None:
    """Build the model, convert it with ``tool`` to ``out``, print one JSON measurement."""
    import torch
    import transformers  # noqa: F401

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    idle = _status("VmRSS")  # torch and transformers imported, no model yet
    t0 = time.perf_counter()
    module, weights = build(layers)
    example = inputs(0)
    build_s = time.perf_counter() - t0
    base_anon = _status("RssAnon")
    with open("/proc/self/clear_refs", "w") as fh:  # reset VmHWM: the peak from here on
        fh.write("5")
    peak = [base_anon]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _status("RssAnon"))
            time.sleep(0.01)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    error = ""
    result: dict[str, object] = {}
    t0 = time.perf_counter()
    try:
        if tool == "ours":
            import convert

            convert.convert(module, example, to="onnx", out=out, check=False)
        else:
            with torch.no_grad():
                torch.onnx.export(module, example, out, input_names=["input_ids", "attention_mask"],
                                  output_names=["logits"], opset_version=18 if tool == "dynamo" else 17,
                                  dynamo=tool == "dynamo", external_data=True)
    except Exception as exc:  # reported in the table
        text = str(exc).strip().splitlines()
        error = f"{type(exc).__name__}: {text[0][:150] if text else ''}"
    seconds = time.perf_counter() - t0
    stop.set()
    thread.join()
    result.update(seconds=seconds, hwm=_status("VmHWM"), extra_anon=peak[0] - base_anon, base_anon=base_anon,
                  idle_rss=idle, weights=weights, build_s=build_s, error=error)
    files = [p for p in Path(out).parent.iterdir() if p.is_file()]
    result["file_bytes"] = sum(p.stat().st_size for p in files)
    if tool == "ours" and not error:
        result.update(_parity(module, out))
    print("@@" + json.dumps(result), flush=True)


def _parity(module: object, out: str) -> dict[str, object]:
    """Run the parity check of the written file against the module on two inputs (seeds 1 and 2)."""
    from convert.ir import Options
    from convert.parity import open_runtime, run_parity
    from convert.parity.runtimes.torch import module_runtime

    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    options = Options()
    t0 = time.perf_counter()
    verdicts, worst = [], 0.0
    runtime = module_runtime(module, inputs(0), options)
    written = sorted(Path(out).parent.iterdir(), key=lambda p: p.suffix != ".onnx")
    converted = open_runtime("onnx", written, options)  # one session for both inputs
    for seed in (1, 2):
        ids, mask = inputs(seed)
        report = run_parity("pytorch", [], "onnx", written, options=options, source_runtime=runtime,
                            dest_runtime=converted,
                            inputs={"input_ids": ids.numpy(), "attention_mask": mask.numpy()})  # type: ignore[attr-defined]
        verdicts.append(bool(report.passed))
        worst = max([worst, *(float(o.rel_to_scale) for o in report.outputs)])
    return {"parity_s": time.perf_counter() - t0, "parity_ok": all(verdicts), "parity_err": worst,
            "parity_hwm": _status("VmHWM")}


def _run_child(tool: str, layers: int, out: Path, max_rss: float) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               HF_HUB_OFFLINE="1")
    proc = subprocess.Popen([sys.executable, __file__, "--child", tool, str(layers), str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    killed = [0]

    def watch() -> None:  # keep the child under max_rss (the machine is shared)
        while proc.poll() is None:
            rss = _status("VmRSS", str(proc.pid))
            if rss > max_rss * 2**30:
                killed[0] = rss
                proc.kill()
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    stdout, stderr = proc.communicate()
    watcher.join()
    if killed[0]:
        return {"error": f"stopped at {killed[0] / 2**30:.1f} GiB resident (over --max-rss {max_rss:g} GiB)"}
    lines = [ln for ln in stdout.splitlines() if ln.startswith("@@")]
    if not lines:
        tail = [ln for ln in stderr.strip().splitlines() if ln.strip()] or ["failed"]
        return {"error": tail[-1][:150]}
    return json.loads(lines[-1][2:])  # type: ignore[no-any-return]


def main() -> None:
    """Run each exporter in turn and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=10)
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--max-rss", type=float, default=9.0, help="GiB; a child past it is stopped")
    parser.add_argument("--dir", type=Path, help="work folder (default: a temporary one, removed after)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", nargs=3, metavar=("TOOL", "LAYERS", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.child[2])
        return
    import torch
    import transformers

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {os.cpu_count()} CPUs; "
          f"LlamaForCausalLM, {args.layers} layers, input (1, {SEQ})", flush=True)
    rows: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_hf_", dir=args.dir) as tmp:
        for key in args.tools.split(","):
            folder = Path(tmp) / key
            folder.mkdir()
            rows[key] = _run_child(key, args.layers, folder / "decoder.onnx", args.max_rss)
            print(f"{TOOLS[key]}: {json.dumps(rows[key])}", flush=True)
            for p in folder.iterdir():
                p.unlink()
    ours = rows.get("ours", {})
    header = (f"{'exporter':26} {'time s':>7} {'/ours':>6} {'peak RSS':>9} {'/weights':>8} {'-idle /w':>8} "
              f"{'+anon':>8} {'files':>9} {'parity s':>8} {'parity':>7}")
    out = [header, "-" * len(header)]
    for key, m in rows.items():
        if m.get("error"):
            out.append(f"{TOOLS[key]:26} failed: {m['error']}")
            continue
        ratio = float(m["seconds"]) / float(ours["seconds"]) if ours and not ours.get("error") else float("nan")  # type: ignore[arg-type]
        weights = float(m["weights"])  # type: ignore[arg-type]
        parity = (f"{float(m['parity_s']):8.1f} {'pass' if m['parity_ok'] else 'FAIL':>7}"  # type: ignore[arg-type]
                  if "parity_s" in m else f"{'':8} {'':7}")
        out.append(f"{TOOLS[key]:26} {float(m['seconds']):7.1f} {ratio:6.2f} "  # type: ignore[arg-type]
                   f"{float(m['hwm']) / 2**30:7.2f} G {float(m['hwm']) / weights:8.2f} "  # type: ignore[arg-type]
                   f"{(float(m['hwm']) - float(m['idle_rss'])) / weights:8.2f} "  # type: ignore[arg-type]
                   f"{float(m['extra_anon']) / 2**20:6.0f} M {float(m['file_bytes']) / 2**30:7.2f} G {parity}")  # type: ignore[arg-type]
    if ours and not ours.get("error"):
        out.append(f"\nweights {float(ours['weights']) / 2**30:.2f} GiB; ours: parity on 2 inputs, "  # type: ignore[arg-type]
                   f"max rel err {float(ours.get('parity_err', float('nan'))):.1e}, "  # type: ignore[arg-type]
                   f"peak RSS during parity {float(ours.get('parity_hwm', 0)) / 2**30:.2f} GiB")  # type: ignore[arg-type]
    print("\n".join(out))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
