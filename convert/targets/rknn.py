"""The RKNN target: Rockchip's rknn-toolkit2 loads the ONNX or Caffe file, builds it for an NPU
(rk3588 by default, ``CONVERT_RKNN_PLATFORM``) without quantization, and runs it in its x86
simulator. The NPU computes in float16, so outputs are judged by the half-precision rule
(docs/precision.md). On a FAIL of an ONNX file, every layer's value is made an output and
compared layer by layer.

rknn-toolkit2 2.5.0 pins numpy <= 1.26.4, onnx <= 1.18.0, protobuf <= 4.25.4 and torch <= 2.4.0,
which cannot share convert's environment, so it runs as a worker (``_rknn_worker.py``) in a virtual
environment of its own, found or created here:

1. ``CONVERT_RKNN_PYTHON``: the Python of an environment you made, with rknn-toolkit2 installed;
2. else ``~/.cache/convert-rknn/venv`` (``CONVERT_RKNN_HOME`` moves it), made on first use with
   ``python -m venv`` and pip: rknn-toolkit2 without its dependencies, then those it imports at the
   versions below. It imports torch at start-up (its PyTorch loader and two of its rules use it);
   a CPU-only torch is installed where pip finds one (``CONVERT_RKNN_TORCH`` names another
   requirement, e.g. ``torch==2.4.0``, with ``CONVERT_RKNN_PIP_ARGS`` for an index).
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from convert._errors import UsageError
from convert.ir import Options

from .base import OnnxFile, WorkerRun, one_line, run_worker

__all__ = ["REQUIREMENTS", "RknnToolchain", "check_setup", "ensure_venv", "find_python", "toolchain"]

logger = logging.getLogger(__name__)

_WORKER = Path(__file__).with_name("_rknn_worker.py")
TOOLKIT = "rknn-toolkit2==2.5.0"
#: What rknn-toolkit2 2.5.0 imports, at versions inside its own pins (numpy<=1.26.4, onnx<=1.18.0,
#: protobuf<=4.25.4); setuptools for its pkg_resources; opencv-python-headless for the GUI build it names.
REQUIREMENTS = [
    "numpy==1.26.4", "onnx==1.18.0", "protobuf==4.25.4", "onnxruntime==1.26.0", "scipy==1.17.1",
    "psutil==7.2.2", "ruamel.yaml==0.19.1", "tqdm==4.70.1", "opencv-python-headless==4.11.0.86",
    "fast-histogram==0.14", "setuptools==69.5.1",
]
#: The torch it imports: a CPU build first (about 190 MB), then its own pin from the index (CUDA wheels, GBs).
TORCH_CHOICES = ["torch==2.13.0+cpu", "torch>=1.10.1,<=2.4.0"]


def _home() -> Path:
    return Path(os.environ.get("CONVERT_RKNN_HOME", Path.home() / ".cache" / "convert-rknn"))


def find_python() -> Path | None:
    """Return the Python of the RKNN worker's environment, or None when there is none yet."""
    given = os.environ.get("CONVERT_RKNN_PYTHON")
    if given:
        return Path(given)
    python = _home() / "venv" / "bin" / "python"
    return python if (_home() / "venv" / ".complete").is_file() and python.exists() else None


def check_setup() -> None:
    """Refuse ``--on rknn`` up front where its environment can be neither found nor made."""
    given = os.environ.get("CONVERT_RKNN_PYTHON")
    if given and not Path(given).exists():
        raise UsageError(f"--on rknn: CONVERT_RKNN_PYTHON={given}: no such file (the Python of an environment "
                         "with rknn-toolkit2 installed)")
    if sys.platform != "linux" or os.uname().machine not in ("x86_64", "aarch64"):
        raise UsageError("--on rknn: rknn-toolkit2 has wheels for Linux x86_64 and aarch64 only")
    if find_python() is None:
        ensure_venv()


def ensure_venv(*, quiet: bool = False) -> Path:
    """Return the worker environment's Python, creating the environment first when there is none.

    Raises:
        UsageError: pip could not install it (its last line said).
    """
    found = find_python()
    if found is not None:
        return found
    home = _home()
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one creation at a time (convert batch runs several workers)
        found = find_python()
        if found is not None:
            return found
        if not quiet:
            logger.warning("creating the RKNN worker environment in %s (rknn-toolkit2 and its pinned numpy, onnx, "
                           "protobuf, torch; once, about 2 minutes)", home / "venv")
        building = Path(tempfile.mkdtemp(prefix="venv-", dir=home))
        try:
            _build(building)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
        final = home / "venv"
        if final.exists():
            shutil.rmtree(final)
        # Moved whole into place: the worker runs its bin/python (a link to this interpreter beside
        # pyvenv.cfg), which finds its packages wherever the folder is.
        (building / ".complete").write_text(TOOLKIT + "\n")
        os.replace(building, final)
        return final / "bin" / "python"


def _build(folder: Path) -> None:
    _pip_step([sys.executable, "-m", "venv", str(folder)], "python -m venv")
    pip = [str(folder / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
           *os.environ.get("CONVERT_RKNN_PIP_ARGS", "").split()]
    _pip_step([*pip, "--no-deps", TOOLKIT], f"pip install {TOOLKIT}")
    _pip_step([*pip, *REQUIREMENTS], "pip install rknn-toolkit2's dependencies")
    choices = [os.environ["CONVERT_RKNN_TORCH"]] if os.environ.get("CONVERT_RKNN_TORCH") else TORCH_CHOICES
    last = ""
    for choice in choices:
        try:
            _pip_step([*pip, "--no-deps" if "+cpu" in choice else "--upgrade-strategy=only-if-needed", choice,
                       *(["filelock", "typing-extensions", "sympy", "networkx", "jinja2", "fsspec"]
                         if "+cpu" in choice else [])], f"pip install {choice}")
            return
        except UsageError as exc:
            last = str(exc)
    raise UsageError(last)


def _pip_step(cmd: Sequence[str], what: str) -> None:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, errors="replace", check=False,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("ERROR")]
        raise UsageError(f"--on rknn: could not create the RKNN worker environment: {what} failed: "
                         f"{one_line((errors[:1] or lines[-1:] or ['no message'])[0], 300)}. Set CONVERT_RKNN_PYTHON "
                         "to the Python of an environment with rknn-toolkit2")


class RknnToolchain:
    """rknn-toolkit2's simulator, run by ``_rknn_worker`` in its own environment."""

    target = "rknn"
    toolchain = "rknn-toolkit2"
    exposes_layers = True
    precision = "fp16"

    def __init__(self) -> None:
        """Find (or make) the worker's environment."""
        self.python = ensure_venv()
        self.platform = os.environ.get("CONVERT_RKNN_PLATFORM", "rk3588")
        self.device = f"{self.platform} simulator"

    def inputs(self, dest_format: str, paths: Sequence[Path], onnx_file: OnnxFile | None) -> list[object]:
        """Return the file's inputs."""
        if onnx_file is not None:
            return list(onnx_file.inputs())
        return list(_caffe_io(paths)[0])

    def outputs(self, dest_format: str, paths: Sequence[Path], onnx_file: OnnxFile | None) -> list[str]:
        """Return the file's outputs, in order."""
        if onnx_file is not None:
            return list(onnx_file.output_names)
        return list(_caffe_io(paths)[1])

    def run(self, dest_format: str, paths: Sequence[Path], feeds: Mapping[str, np.ndarray], *,
            configs: Sequence[str] = ("fp16",)) -> WorkerRun:
        """Load, build and simulate the file in the worker."""
        if dest_format == "caffe":
            from convert.frontends.caffe.frontend import split_paths

            proto, weights = split_paths([Path(p) for p in paths])
            request = {"format": "caffe", "model": str(proto), "weights": str(weights),
                       "output_names": list(_caffe_io(paths)[1])}
        else:
            model = next((p for p in paths if str(p).endswith(".onnx")), paths[0])
            request = {"format": "onnx", "model": str(model), "output_names": OnnxFile(Path(model)).output_names}
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        return run_worker(str(self.python), _WORKER, dict(request, platform=self.platform), feeds,
                          f"rknn-toolkit2 ({self.platform} simulator)", env=env)

    def results(self, run: WorkerRun, order: Sequence[str]
                ) -> Iterator[tuple[str, str, str, dict[str, np.ndarray], list[str]]]:
        """Yield the one float16 run."""
        computed = {n: run.arrays[f"fp16|{n}"] for n in order if f"fp16|{n}" in run.arrays}
        yield "fp16", "fp16", f"{self.platform} simulator", computed, []

    @staticmethod
    def parity_precision(label: str) -> str:
        """The NPU computes in float16."""
        return "fp16"


def _caffe_io(paths: Sequence[Path]) -> tuple[list[object], list[str]]:
    from convert.frontends.caffe.frontend import split_paths
    from convert.frontends.caffe.reader import read_prototxt
    from convert.parity.runtimes.opencv_caffe import net_io

    proto, _ = split_paths([Path(p) for p in paths])
    inputs, outputs, _ = net_io(read_prototxt(proto))
    return list(inputs), list(outputs)


def toolchain(options: Options) -> RknnToolchain:
    """Return the RKNN toolchain."""
    return RknnToolchain()
