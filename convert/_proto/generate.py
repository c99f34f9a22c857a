"""Regenerate ``caffe_pb2.py`` from ``caffe.proto`` with grpcio-tools' protoc.

Run ``python -m convert._proto.generate``. The generated module is post-processed so that it
imports under every protobuf runtime the project supports (``protobuf>=4.25``): recent protoc
releases add a ``runtime_version`` guard that refuses runtimes older than the generator,
although the module only uses APIs present since protobuf 3.20 (``builder``). The guard is the
only thing removed.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["HERE", "generate", "postprocess"]

HERE = Path(__file__).resolve().parent

_GUARD = re.compile(
    r"from google\.protobuf import runtime_version as _runtime_version\n"
    r"|_runtime_version\.ValidateProtobufRuntimeVersion\(\n(?:[^\n]*\n)*?\)\n"
)
_NOTE = "# Post-processed by convert/_proto/generate.py: runtime version guard removed.\n"


def postprocess(source: str) -> str:
    """Remove protoc's runtime version guard from generated ``source``."""
    out = _GUARD.sub("", source)
    if _NOTE in out:
        return out
    return out.replace('"""Generated protocol buffer code."""\n', _NOTE + '"""Generated protocol buffer code."""\n', 1)


def generate(out_dir: Path = HERE) -> Path:
    """Run protoc on ``caffe.proto`` into ``out_dir``; return the path of ``caffe_pb2.py``.

    The ``.pyi`` stub is written beside it, for type checkers.
    """
    with tempfile.TemporaryDirectory() as tmp:
        # protoc (grpcio-tools, a test/development dependency) runs in a process of its own: loaded
        # into a process that already holds TensorFlow's protobuf and absl libraries, it segfaults.
        args = [f"-I{HERE.parent.parent}", f"--python_out={tmp}", f"--pyi_out={tmp}", str(HERE / "caffe.proto")]
        done = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"protoc failed with status {done.returncode}: {done.stderr.strip()}")
        made = Path(tmp) / "convert" / "_proto"
        text = (made / "caffe_pb2.py").read_text()
        stub = (made / "caffe_pb2.pyi").read_text()
    target = Path(out_dir) / "caffe_pb2.py"
    target.write_text(postprocess(text))
    # Generated stubs are not ours to lint (pyproject excludes only *_pb2.py).
    (Path(out_dir) / "caffe_pb2.pyi").write_text("# ruff: noqa\n# fmt: off\n" + stub)
    return target


if __name__ == "__main__":
    sys.stdout.write(f"wrote {generate()}\n")
    subprocess.run([sys.executable, "-c", "import convert._proto.caffe_pb2"], check=True, cwd=HERE.parent.parent)
