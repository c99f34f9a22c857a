"""The committed framework_pb2.py is what protoc generates from framework.proto.

Regenerate after editing the schema::

    python tests/frontends/paddle/test_proto.py --write
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[3] / "convert" / "frontends" / "paddle"


def generate(out_dir: Path) -> Path:
    """Run grpc_tools' protoc on framework.proto into ``out_dir``; return the generated file."""
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{PKG}", f"--python_out={out_dir}",
                    str(PKG / "framework.proto")], check=True, capture_output=True, text=True)
    return out_dir / "framework_pb2.py"


def test_generated_module_is_up_to_date(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    fresh = generate(tmp_path).read_text()
    committed = (PKG / "framework_pb2.py").read_text()
    assert fresh == committed, "framework_pb2.py is stale: run python tests/frontends/paddle/test_proto.py --write"


def test_field_numbers_match_paddle() -> None:
    """Spot-check the wire facts the readers rely on."""
    from convert.frontends.paddle import framework_pb2 as fw

    assert fw.ProgramDesc.DESCRIPTOR.fields_by_name["blocks"].number == 1
    assert fw.BlockDesc.DESCRIPTOR.fields_by_name["ops"].number == 4
    assert fw.OpDesc.DESCRIPTOR.fields_by_name["type"].number == 3
    assert fw.OpDesc.Attr.DESCRIPTOR.fields_by_name["longs"].number == 15
    assert fw.VarType.TensorDesc.DESCRIPTOR.fields_by_name["dims"].number == 2
    assert fw.VarType.FP32 == 5 and fw.VarType.LOD_TENSOR == 7


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        print(generate(PKG))
