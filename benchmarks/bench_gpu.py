"""GPU parity and half-precision exports: what each math mode costs in accuracy, size and speed.

Models: torchvision's ResNet-50, MobileNetV3-Large, EfficientNet-B0, ConvNeXt-T and ResNet-152
(``models/pytorch/vision_zoo.py``: seeded random weights, batch norm recalibrated) and a 4-layer
BERT with a padded mask (``models/pytorch/hf.py``); nothing is downloaded. Every error is
``max|x - torch eager fp32 on the CPU| / max|torch eager fp32|`` on the same seeded input.

Table 1, the float32 verdict on CUDA (printed only where torch and ONNX Runtime both see CUDA):
our ``--device cuda`` verdict and error, ONNX Runtime's CUDA provider with its default options
(TF32 on) and with ``use_tf32=0``, torch on CUDA in IEEE fp32 and in TF32.

Table 2, half precision (any machine; latencies on CUDA when there, else ONNX Runtime's CPU provider,
where fp16 mostly runs as float32 between fp16 tensors and says little about GPU speed): our
``--precision fp16`` and ``bf16`` files beside onnxconverter-common's ``convert_float_to_float16``
(``keep_io_types=True``, when installed) on our float32 file, and torch's own ``.half()`` /
``.to(bfloat16)`` run and autocast (CUDA only) as yardsticks: error, file size, median latency,
and our verdict (bf16 has no CPU kernels in ONNX Runtime: checked on CUDA only).

    python benchmarks/bench_gpu.py [--models tv:resnet50,hf:bert] [--runs 20]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "models" / "pytorch"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

DEFAULT = ["tv:resnet50", "tv:mobilenet_v3_large", "tv:efficientnet_b0", "tv:convnext_tiny", "tv:resnet152",
           "hf:bert"]


def _build(name: str, size: int) -> tuple[object, tuple[object, ...]]:
    """``hf:NAME`` from models/pytorch/hf.py; ``tv:NAME`` torchvision's model at ``size`` x ``size``
    (random weights, batch norm recalibrated by models/pytorch/nets.py)."""
    import torch

    if name.startswith("hf:"):
        import hf

        model, inputs = hf.build(name[3:])
        return model, inputs(1)
    import nets
    import torchvision

    torch.manual_seed(0)
    shape = (1, 3, size, size)
    model = nets.recalibrate(torchvision.models.get_model(name.removeprefix("tv:"), weights=None).eval(), shape)
    return model, (torch.randn(shape, generator=torch.Generator().manual_seed(1)),)


def _rel(x: np.ndarray, ref: np.ndarray) -> float:
    ref64 = np.asarray(ref, np.float64)
    return float(np.abs(np.asarray(x, np.float64) - ref64).max() / np.abs(ref64).max())


def _first(result: object) -> object:
    import torch

    while isinstance(result, (tuple, list)) or hasattr(result, "to_tuple"):
        result = result.to_tuple()[0] if hasattr(result, "to_tuple") else result[0]
    assert isinstance(result, torch.Tensor)
    return result


def _torch(model: object, xs: tuple[object, ...], device: str, *, dtype: object = None, tf32: bool = False,
           autocast: object = None) -> np.ndarray:
    import torch

    from convert.parity.runtimes._gpu import torch_exact_fp32

    m = copy.deepcopy(model).to(device)
    args = [x.to(device) for x in xs]  # type: ignore[attr-defined]
    if dtype is not None:
        m = m.to(dtype)
        args = [a.to(dtype) if a.is_floating_point() else a for a in args]
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    with torch.no_grad():
        if tf32:
            before = (matmul.fp32_precision, cudnn.fp32_precision)
            matmul.fp32_precision = cudnn.fp32_precision = "tf32"
            try:
                out = _first(m(*args))
            finally:
                matmul.fp32_precision, cudnn.fp32_precision = before
        elif autocast is not None:
            with torch.autocast(device, dtype=autocast):
                out = _first(m(*args))
        else:
            with torch_exact_fp32():
                out = _first(m(*args))
    return out.float().cpu().numpy()  # type: ignore[attr-defined,no-any-return]


def _session(path: Path, cuda: bool, tf32: bool | None = None) -> object:
    import onnxruntime as ort

    if cuda:
        opts = {} if tf32 is None else {"use_tf32": "1" if tf32 else "0"}
        providers: list[object] = [("CUDAExecutionProvider", opts), "CPUExecutionProvider"]
    else:
        providers = ["CPUExecutionProvider"]
    return ort.InferenceSession(str(path), providers=providers)


def _feeds(sess: object, xs: tuple[object, ...]) -> dict[str, np.ndarray]:
    out = {}
    for spec, x in zip(sess.get_inputs(), xs, strict=True):  # type: ignore[attr-defined]
        arr = x.numpy()  # type: ignore[attr-defined]
        out[spec.name] = arr.astype(np.float16) if spec.type == "tensor(float16)" else arr
    return out


def _run(sess: object, xs: tuple[object, ...]) -> np.ndarray:
    return np.asarray(sess.run(None, _feeds(sess, xs))[0], np.float32)  # type: ignore[attr-defined]


def _latency(sess: object, xs: tuple[object, ...], runs: int) -> float:
    feeds = _feeds(sess, xs)
    sess.run(None, feeds)  # type: ignore[attr-defined]
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        sess.run(None, feeds)  # type: ignore[attr-defined]
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def _table(rows: list[list[str]], head: list[str]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(DEFAULT))
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--size", type=int, default=224, help="image side of the torchvision models")
    args = parser.parse_args()

    import onnxruntime as ort
    import torch

    import convert

    cuda = torch.cuda.is_available() and "CUDAExecutionProvider" in ort.get_available_providers()
    gpu = torch.cuda.get_device_name(0) if cuda else "no GPU"
    print(f"torch {torch.__version__}, onnxruntime {ort.__version__}, {gpu}\n")
    try:
        from onnxconverter_common import float16 as occ
    except ImportError:
        occ = None
        print("onnxconverter-common is not installed: its column is left out (pip install onnxconverter-common)\n")
    fp32_rows: list[list[str]] = []
    half_rows: list[list[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            model, xs = _build(name, args.size)
            ref = _torch(model, xs, "cpu")
            f32 = Path(tmp) / f"{name.replace(':', '_')}_fp32.onnx"
            convert.convert(model, xs, to="onnx", out=f32, check=False)
            if cuda:
                ours = convert.convert(model, xs, to="onnx", out=f32, device="cuda")
                verdict = ours.report.verdict if ours.report else ours.parity_error[:40]
                fp32_rows.append([name, verdict, *(f"{e:.2g}" for e in (
                    _rel(_run(_session(f32, True, True), xs), ref),
                    _rel(_run(_session(f32, True, False), xs), ref),
                    _rel(_torch(model, xs, "cuda"), ref),
                    _rel(_torch(model, xs, "cuda", tf32=True), ref)))])
            device = "cuda" if cuda else "cpu"
            yard = {p: _rel(_torch(model, xs, device, dtype=d), ref)
                    for p, d in (("fp16", torch.float16), ("bf16", torch.bfloat16))}
            auto = {p: _rel(_torch(model, xs, "cuda", autocast=d), ref) if cuda else float("nan")
                    for p, d in (("fp16", torch.float16), ("bf16", torch.bfloat16))}
            base = _latency(_session(f32, cuda, False), xs, args.runs)
            half_rows.append([name, "ours fp32", "-", "-", "-", f"{f32.stat().st_size / 2**20:.1f}", f"{base:.2f}",
                              "-"])
            for prec in ("fp16", "bf16"):
                path = Path(tmp) / f"{name.replace(':', '_')}_{prec}.onnx"
                res = convert.convert(model, xs, to="onnx", out=path, precision=prec,
                                      check=cuda or prec == "fp16")
                verdict = res.report.verdict if res.report else (res.parity_error[:30] or "not checked")
                try:
                    sess = _session(path, cuda, False)
                    err, lat = f"{_rel(_run(sess, xs), ref):.2g}", f"{_latency(sess, xs, args.runs):.2f}"
                except Exception as exc:  # bf16 on the CPU: no kernels
                    err, lat = "-", type(exc).__name__
                half_rows.append([name, f"ours {prec}", err, f"{yard[prec]:.2g}", f"{auto[prec]:.2g}",
                                  f"{path.stat().st_size / 2**20:.1f}", lat, verdict])
            if occ is not None:
                import onnx

                path = Path(tmp) / f"{name.replace(':', '_')}_occ.onnx"
                try:
                    onnx.save(occ.convert_float_to_float16(onnx.load(f32), keep_io_types=True), path)
                    sess = _session(path, cuda, False)
                    err, lat = f"{_rel(_run(sess, xs), ref):.2g}", f"{_latency(sess, xs, args.runs):.2f}"
                except Exception as exc:  # the peer's file may not load (a float32 output left typed float16)
                    err, lat = "does not load", type(exc).__name__
                size = f"{path.stat().st_size / 2**20:.1f}" if path.exists() else "-"
                half_rows.append([name, "onnxconverter-common fp16", err, f"{yard['fp16']:.2g}", f"{auto['fp16']:.2g}",
                                  size, lat, "-"])
            print(f"done {name}", file=sys.stderr)
    if fp32_rows:
        print(f"Table 1: float32 on CUDA ({gpu}), error vs torch eager fp32 on the CPU")
        _table(fp32_rows, ["model", "ours --device cuda", "ORT CUDA default", "ORT CUDA use_tf32=0",
                           "torch CUDA fp32", "torch CUDA TF32"])
    where = f"ORT CUDA ({gpu}, TF32 off)" if cuda else "ORT CPU (2 cores here)"
    print(f"Table 2: half precision, error vs torch eager fp32 on the CPU; latency {where}, batch as built")
    _table(half_rows, ["model", "file", "error", "torch .half()/bf16", "torch autocast", "MiB", "ms", "verdict"])


if __name__ == "__main__":
    main()
