"""The cost of checking on each deployment target, beside the conversion (docs/targets.md).

For each model of the targets' test zoo (PyTorch modules of models/pytorch, Caffe deploy nets of
models/caffe with seeded weights, a Darknet cfg with random weights), converts it with its parity
check, then checks the written file on each target alone, timing each step and printing the
verdict and worst error per target. Each cell gives the CPU seconds the step took (this process and
the workers it started: the figure a shared, loaded machine does not inflate), then the wall time:

    python benchmarks/bench_targets.py                     # every model, openvino,ncnn,rknn
    python benchmarks/bench_targets.py --models caffe:squeezenet --targets openvino

The figures in docs/targets.md come from this script on the project's machine (2 cores).
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def _pytorch(name: str, size: int) -> Callable[[Path], tuple[list[Path], dict[str, object]]]:
    def make(tmp: Path) -> tuple[list[Path], dict[str, object]]:
        import sample_models
        import torch

        if name.startswith("tv:"):
            model, inputs = sample_models.vision_zoo().build(name)  # type: ignore[attr-defined]
            example = inputs(0)
        else:
            model = sample_models.nets().build(name, size=size)  # type: ignore[attr-defined]
            example = (torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(1)),)
        path = tmp / f"{name.replace(':', '_')}.pt"
        torch.jit.trace(model, example, check_trace=False).save(str(path))
        return [path], {}
    return make


def _caffe(net: str) -> Callable[[Path], tuple[list[Path], dict[str, object]]]:
    def make(tmp: Path) -> tuple[list[Path], dict[str, object]]:
        sys.path.insert(0, str(ROOT / "models" / "caffe"))
        from fill_weights import fill

        proto = ROOT / "models" / "caffe" / "deploy" / f"{net}.prototxt"
        weights = tmp / f"{net}.caffemodel"
        fill(proto, weights, 0)
        return [proto, weights], {}
    return make


def _darknet(cfg: str, size: int) -> Callable[[Path], tuple[list[Path], dict[str, object]]]:
    def make(tmp: Path) -> tuple[list[Path], dict[str, object]]:
        text = (ROOT / "models" / "darknet" / cfg).read_text()
        import re

        text = re.sub(r"(?m)^width=\d+", f"width={size}", text)
        text = re.sub(r"(?m)^height=\d+", f"height={size}", text)
        path = tmp / cfg
        path.write_text(text)
        return [path], {"random_weights": True}
    return make


MODELS: dict[str, tuple[str, Callable[[Path], tuple[list[Path], dict[str, object]]]]] = {
    "pytorch:resnet": ("classifier", _pytorch("resnet", 64)),
    "pytorch:mobilenetv2": ("classifier", _pytorch("mobilenetv2", 64)),
    "pytorch:yolo": ("detector", _pytorch("yolo", 64)),
    "pytorch:lraspp": ("segmenter", _pytorch("tv:lraspp_mobilenet_v3_large", 64)),
    "caffe:squeezenet": ("classifier", _caffe("squeezenet_v1.1")),
    "caffe:mobilenet_v2": ("classifier", _caffe("mobilenet_v2")),
    "caffe:mobilenet_ssd": ("detector", _caffe("mobilenet_ssd")),
    "darknet:yolov4-tiny": ("detector", _darknet("yolov4-tiny.cfg", 128)),
}


def _cpu() -> float:
    """CPU seconds used so far by this process and its finished children."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class _Clock:
    """Wall and CPU time of one step."""

    def __enter__(self) -> _Clock:
        self.wall, self.cpu = time.perf_counter(), _cpu()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall, self.cpu = time.perf_counter() - self.wall, _cpu() - self.cpu


def main() -> None:
    """Convert each model, then check it on each target alone; print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--targets", default="openvino,ncnn,rknn")
    parser.add_argument("--to", default="onnx")
    args = parser.parse_args()
    from convert import api

    targets = [t for t in args.targets.split(",") if t]
    print(f"{'model':22} {'kind':10} {'convert cpu/wall s':>18} {'verdict':7} {'check cpu/wall':>14}  "
          + "  ".join(f"{t + ' cpu/wall s':>18} {'verdict':20}" for t in targets), flush=True)
    for name in args.models.split(","):
        kind, make = MODELS[name]
        with tempfile.TemporaryDirectory() as tmp:
            src, opts = make(Path(tmp))
            out = Path(tmp) / ("model.onnx" if args.to == "onnx" else "model.prototxt")
            with _Clock() as converted:
                result = api.convert(src, to=args.to, out=out, **opts)  # type: ignore[arg-type]
            with _Clock() as check:  # the usual check alone: subtracted from each target's
                api.verify(src, result.outputs, **opts)  # type: ignore[arg-type]
            cells = []
            for target in targets:
                if args.to == "caffe" and target != "rknn":
                    cells.append(f"{'-':>18} {'(reads no Caffe)':20}")
                    continue
                with _Clock() as spent:
                    try:
                        found = api.verify(src, result.outputs, on=target, **opts).targets  # type: ignore[arg-type]
                        verdicts = ", ".join(f"{t.verdict} {t.worst() or 0:.2g}" for t in found)
                    except Exception as exc:  # said in the table, the next target runs
                        verdicts = f"error: {exc}"[:20]
                times = f"{spent.cpu - check.cpu:.1f}/{spent.wall - check.wall:.1f}"
                cells.append(f"{times:>18} {verdicts:20}")
            verdict = result.report.verdict if result.report is not None else "-"
            print(f"{name:22} {kind:10} {f'{converted.cpu:.1f}/{converted.wall:.1f}':>18} {verdict:7} "
                  f"{f'{check.cpu:.1f}/{check.wall:.1f}':>14}  " + "  ".join(cells), flush=True)

if __name__ == "__main__":
    main()
