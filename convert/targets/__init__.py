"""Deployment targets: the converted file checked in the toolchain it is deployed with.

``convert ROUTE SRC -o OUT --on openvino,rknn,ncnn`` (and ``convert check ... --on``) runs, after
the usual check, the converted file in each target's own toolchain on the same inputs and judges
its outputs against the source by the same rules (``convert.parity.run_parity`` with the
toolchain as the converted model's runtime). Each toolchain runs in a worker process of its own,
so that a toolchain that crashes on a file is a FAIL of that target, naming the signal, while the
other targets still run.

=========  ===========================================================  =======================
target     toolchain (package)                                          reads
=========  ===========================================================  =======================
openvino   OpenVINO's CPU plugin (``openvino``), default and f32        ONNX
rknn       Rockchip's rknn-toolkit2 simulator, in its own venv          ONNX, Caffe
ncnn       ncnn (``ncnn``), the ONNX file brought in by pnnx            ONNX
tensorrt   TensorRT: refused here (no GPU); not built for a GPU yet     ONNX
=========  ===========================================================  =======================

The registry below is all that ``import convert`` loads: each target's module is imported when it
runs, and whether its package is installed is looked up without importing it.
"""

from __future__ import annotations

import importlib
import importlib.util
import shutil
from collections.abc import Sequence
from dataclasses import dataclass

from convert._errors import UsageError

__all__ = ["TARGETS", "TargetInfo", "check_available", "parse_targets", "summary", "target_module"]


@dataclass(frozen=True, slots=True)
class TargetInfo:
    """One deployment target: its name, module, package, extra, and the formats it reads."""

    name: str
    module: str
    toolchain: str
    #: Import names that must be installed in convert's own environment (looked up, not imported).
    packages: tuple[str, ...]
    extra: str
    formats: tuple[str, ...]


TARGETS: dict[str, TargetInfo] = {
    t.name: t for t in (
        TargetInfo("openvino", "convert.targets.openvino", "OpenVINO", ("openvino",), "openvino", ("onnx",)),
        TargetInfo("rknn", "convert.targets.rknn", "rknn-toolkit2", (), "rknn", ("onnx", "caffe")),
        TargetInfo("ncnn", "convert.targets.ncnn", "ncnn", ("ncnn", "pnnx"), "ncnn", ("onnx",)),
        TargetInfo("tensorrt", "convert.targets.tensorrt", "TensorRT", (), "tensorrt", ("onnx",)),
    )
}


def parse_targets(spec: str | Sequence[str] | None) -> list[str]:
    """Return the target names of ``--on A,B`` (or a list), in order, without repeats.

    Raises:
        UsageError: a name that is no target (all of them named at once).
    """
    if spec is None:
        return []
    items = [spec] if isinstance(spec, str) else list(spec)
    names = [n.strip().lower() for item in items for n in str(item).split(",") if n.strip()]
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        raise UsageError(f"--on {','.join(unknown)}: no such target{'s' if len(unknown) > 1 else ''}; "
                         f"the targets are {', '.join(TARGETS)}")
    return list(dict.fromkeys(names))


def check_available(names: Sequence[str], dest_format: str) -> None:
    """Refuse, before anything is converted, a target that cannot run here on ``dest_format`` files:
    one that does not read the format, whose package is not installed (naming the extra), or that
    needs a GPU this machine does not have.

    Raises:
        UsageError: one line naming the target and what to do.
    """
    for name in names:
        info = TARGETS[name]
        if dest_format not in info.formats:
            raise UsageError(f"--on {name}: {info.toolchain} does not read {dest_format} files (it reads "
                             f"{' and '.join(f.upper() if f == 'onnx' else f.capitalize() for f in info.formats)}); "
                             "convert to onnx for this target")
        if name == "tensorrt":
            _needs_gpu()
        for package in info.packages:
            try:
                found = importlib.util.find_spec(package) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                raise UsageError(f"--on {name}: {info.toolchain} is not installed "
                                 f"(pip install 'convert-toolkit[{info.extra}]')")
        if name == "rknn":
            from .rknn import check_setup

            check_setup()


def _needs_gpu() -> None:
    """TensorRT builds engines for a CUDA GPU only: refuse where none is visible."""
    if shutil.which("nvidia-smi") is None:
        raise UsageError("--on tensorrt: TensorRT runs only on an NVIDIA GPU, and this machine has none "
                         "(no nvidia-smi); check on openvino, ncnn or rknn here, or on a machine with a GPU")
    raise UsageError("--on tensorrt: not built yet: the TensorRT target has not been tested on a GPU in this "
                     "project; check on openvino, ncnn or rknn")


def summary(report: object) -> str:
    """Return `` | on openvino PASS, rknn FAIL`` for a report's summary line ('' without targets)."""
    results = list(getattr(report, "targets", []) or [])
    if not results:
        return ""
    names = [r.target for r in results]
    return " | on " + ", ".join(f"{r.target if names.count(r.target) == 1 else r.label} {r.verdict}" for r in results)


def target_module(name: str) -> object:
    """Import and return the module of target ``name``."""
    return importlib.import_module(TARGETS[name].module)
