"""The committed framework_pb2.py/.pyi are what protoc generates from framework.proto.

Regenerate after editing the schema::

    python tests/frontends/paddle/test_proto.py --write

As for Caffe's schema (convert/_proto/generate.py), the module is post-processed: protoc's
runtime-version guard is removed so it imports under every supported protobuf (>=4.25; it uses
only the ``builder`` API of protobuf 3.20+), and the stub is marked as not ours to lint. The
proto is compiled under its repository path, so its descriptor-pool name
(``convert/frontends/paddle/framework.proto``) cannot clash with Paddle's own ``framework.proto``.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PKG = ROOT / "convert" / "frontends" / "paddle"
_GUARD = re.compile(r"from google\.protobuf import runtime_version as _runtime_version\n"
                    r"|_runtime_version\.ValidateProtobufRuntimeVersion\(\n(?:[^\n]*\n)*?\)\n")
_NOTE = "# Post-processed by tests/frontends/paddle/test_proto.py: runtime version guard removed.\n"


def generate(out_dir: Path) -> list[Path]:
    """Run grpc_tools' protoc on framework.proto; write the module and stub into ``out_dir``."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT}", f"--python_out={tmp}",
                        f"--pyi_out={tmp}", str(PKG / "framework.proto")], check=True, capture_output=True,
                       text=True)
        made = Path(tmp) / PKG.relative_to(ROOT)
        module = _GUARD.sub("", (made / "framework_pb2.py").read_text())
        module = module.replace('"""Generated protocol buffer code."""\n',
                                _NOTE + '"""Generated protocol buffer code."""\n', 1)
        stub = "# ruff: noqa\n# fmt: off\n" + (made / "framework_pb2.pyi").read_text()
    out = [out_dir / "framework_pb2.py", out_dir / "framework_pb2.pyi"]
    out[0].write_text(module)
    out[1].write_text(stub)
    return out


def test_generated_module_is_up_to_date(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    for fresh in generate(tmp_path):
        committed = PKG / fresh.name
        assert committed.is_file() and fresh.read_text() == committed.read_text(), (
            f"{fresh.name} is stale: run python tests/frontends/paddle/test_proto.py --write")


def test_module_has_no_runtime_guard_and_a_unique_pool_name() -> None:
    from convert.frontends.paddle import framework_pb2 as fw

    assert "ValidateProtobufRuntimeVersion" not in (PKG / "framework_pb2.py").read_text()
    assert fw.DESCRIPTOR.name == "convert/frontends/paddle/framework.proto"


def test_field_numbers_match_paddle() -> None:
    """Spot-check the wire facts the readers rely on."""
    from convert.frontends.paddle import framework_pb2 as fw

    assert fw.ProgramDesc.DESCRIPTOR.fields_by_name["blocks"].number == 1
    assert fw.BlockDesc.DESCRIPTOR.fields_by_name["ops"].number == 4
    assert fw.OpDesc.DESCRIPTOR.fields_by_name["type"].number == 3
    assert fw.OpDesc.Attr.DESCRIPTOR.fields_by_name["longs"].number == 15
    assert fw.VarType.TensorDesc.DESCRIPTOR.fields_by_name["dims"].number == 2
    assert fw.VarType.FP32 == 5 and fw.VarType.LOD_TENSOR == 7


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    print(*generate(PKG), sep="\n")
