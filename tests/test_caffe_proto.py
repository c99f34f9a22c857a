"""The committed caffe_pb2.py matches caffe.proto and imports on old protobuf runtimes."""

from __future__ import annotations

from pathlib import Path

import pytest

from convert._proto import caffe_pb2
from convert._proto.generate import HERE, postprocess


def test_generated_module_is_up_to_date(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools.protoc")
    from convert._proto.generate import generate

    fresh = generate(tmp_path).read_text()
    committed = (HERE / "caffe_pb2.py").read_text()

    def descriptor(text: str) -> str:
        return next(line for line in text.splitlines() if line.startswith("DESCRIPTOR = "))

    assert (tmp_path / "caffe_pb2.pyi").read_text() == (HERE / "caffe_pb2.pyi").read_text()
    assert descriptor(fresh) == descriptor(committed), "caffe_pb2.py is stale: run `python -m convert._proto.generate`"


def test_no_runtime_version_guard() -> None:
    text = (HERE / "caffe_pb2.py").read_text()
    assert "runtime_version" not in text  # protobuf>=4.25 has no such module
    assert postprocess(text) == text


def test_bvlc_field_numbers() -> None:
    lp = caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_name
    assert lp["convolution_param"].number == 106 and lp["batch_norm_param"].number == 139
    assert lp["permute_param"].number == 202 and lp["norm_param"].number == 206
    assert caffe_pb2.NetParameter.DESCRIPTOR.fields_by_name["layer"].number == 100
    assert caffe_pb2.NetParameter.DESCRIPTOR.fields_by_name["layers"].number == 2
    pool = caffe_pb2.PoolingParameter.DESCRIPTOR.fields_by_name
    assert pool["round_mode"].number == 13
    assert caffe_pb2.BlobProto.DESCRIPTOR.fields_by_name["shape"].number == 7
