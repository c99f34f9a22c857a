"""`convert batch` on 16 small sample models: 1 and 2 local workers, and Ray with 2 CPUs.

    python benchmarks/bench_batch.py [--keep DIR] [--skip-ray]

Builds the models with the scripts in models/ (PyTorch nets at 64x64 and the TorchScript sample,
Caffe nets, the test suite's ONNX nets, yolov4-tiny with seeded random weights), writes one
manifest, and runs `convert batch` three times in a fresh process each: `-j 1`, `-j 2`, and
`--ray ADDRESS` on a local Ray instance with 2 CPUs started beforehand (its start-up is not timed;
connecting, shipping the package and starting Ray's workers is). Prints wall time, speed-up over
one worker, and the peak RSS of each worker process (the largest high-water mark of the models it
ran, read from the JSON report).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "models" / "pytorch"), str(ROOT / "models" / "caffe")]

import onnx  # noqa: E402


def build_models(folder: Path) -> str:
    """Write the sample models into ``folder``; return the manifest's text."""
    import build_nets
    import models_onnx
    import nets
    import torch

    from convert.frontends.darknet.random_weights import write_random_weights

    entries: list[tuple[str, str, list[str], str]] = []  # name, route, files, extra TOML
    for name in ("resnet", "mobilenetv2", "vit", "yolo"):
        model = nets.build(name, size=64)
        x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(1))
        torch.export.save(torch.export.export(model, (x,)), folder / f"{name}.pt2")
        entries.append((f"{name}-pt2", "pytorch:onnx", [f"{name}.pt2"], ""))
        if name in ("resnet", "mobilenetv2"):
            torch.jit.save(torch.jit.trace(model, (x,)), folder / f"{name}.pt")
            entries.append((f"{name}-pt-caffe", "pytorch:caffe", [f"{name}.pt"], ""))
    shutil.copy(ROOT / "models" / "pytorch" / "sample.pt", folder / "sample.pt")
    entries.append(("sample", "pytorch:onnx", ["sample.pt"], ""))
    for name in ("lenet", "resnet", "mobilenet", "vgg"):
        proto, weights = build_nets.build(name, folder)
        entries.append((f"caffe-{name}", "caffe:onnx", [proto.name, weights.name], ""))
    for name, dest in (("conv_net", "onnx"), ("transformer_block", "onnx"), ("simple_cnn", "caffe"),
                       ("reshapes", "onnx")):
        onnx.save(getattr(models_onnx, name)(), str(folder / f"{name}.onnx"))
        entries.append((f"onnx-{name}", f"onnx:{dest}", [f"{name}.onnx"], ""))
    shutil.copy(ROOT / "models" / "darknet" / "yolov4-tiny.cfg", folder / "yolov4-tiny.cfg")
    write_random_weights(folder / "yolov4-tiny.cfg", folder / "yolov4-tiny.weights", seed=0)
    entries.append(("yolov4-tiny", "darknet:onnx", ["yolov4-tiny.cfg", "yolov4-tiny.weights"], ""))
    lines = ['output = "out"', ""]
    for name, route, files, extra in entries:
        lines += ["[[models]]", f'name = "{name}"', f'route = "{route}"', f"files = {json.dumps(files)}", extra, ""]
    return "\n".join(lines)


def run(folder: Path, tag: str, *args: str) -> tuple[float, dict[str, object], int, float]:
    """Run `convert batch` in a fresh process; return wall time, the JSON report, the exit status and the
    CPU time (user + sys) of the process and the workers it waited for (Ray's workers are not among them)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "convert", "batch", "models.toml", "-q", "-o", f"out-{tag}",
                        "--report", f"{tag}.json", *args], cwd=folder, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if r.returncode not in (0, 1, 2) or not (folder / f"{tag}.json").exists():
        sys.exit(f"{tag}: convert batch failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    print(r.stdout, file=sys.stderr)
    return wall, json.loads((folder / f"{tag}.json").read_text()), r.returncode, cpu


def per_worker_peaks(report: dict[str, object]) -> list[int]:
    peaks: dict[str, int] = {}
    for m in report["models"]:  # type: ignore[attr-defined]
        peaks[m["worker"]] = max(peaks.get(m["worker"], 0), int(m["peak_rss_bytes"]))
    return sorted(peaks.values(), reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="build in this folder and keep it")
    parser.add_argument("--skip-ray", action="store_true")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-batch-"))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "models.toml").write_text(build_models(folder))
    results = []
    for tag, extra in (("j1", ["-j", "1"]), ("j2", ["-j", "2"])):
        results.append((tag, *run(folder, tag, *extra)))
    if not args.skip_ray:
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            results.append(("ray", *run(folder, "ray", "--ray", ray.get_runtime_context().gcs_address)))
        finally:
            ray.shutdown()
    base = results[0][1]
    n = len(results[0][2]["models"])  # type: ignore[arg-type]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\n{n} models, {os.cpu_count()} cores, load average at the end {load}; peak RSS per worker process "
          "(largest first); CPU: user + sys of the batch and its pool workers (not Ray's)\n")
    print("| run | wall | speed-up | CPU | sum of model times | verdicts | peak RSS per worker |")
    print("|---|---:|---:|---:|---:|---|---|")
    names = {"j1": "local pool, 1 worker", "j2": "local pool, 2 workers", "ray": "Ray, 2 CPUs (local instance)"}
    for tag, wall, report, code, cpu in results:
        counts = ", ".join(f"{v} {k}" for k, v in report["counts"].items() if v)  # type: ignore[attr-defined]
        busy = sum(m["seconds"] for m in report["models"])  # type: ignore[attr-defined]
        peaks = ", ".join(f"{p / 2**20:.0f}" for p in per_worker_peaks(report)[:6]) + " MiB"
        cpu_text = "–" if tag == "ray" else f"{cpu:.1f} s"
        print(f"| {names[tag]} | {wall:.1f} s | {base / wall:.2f}x | {cpu_text} | {busy:.1f} s "
              f"| {counts} (exit {code}) | {peaks} |")
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
