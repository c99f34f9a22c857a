"""Protobuf schemas the toolkit owns (Caffe), shared by the Caffe frontend and exporter.

``caffe_pb2`` is generated from ``caffe.proto`` by ``python -m convert._proto.generate`` and
committed; ``tests/test_caffe_proto.py`` fails when it is out of date. Importing this package
imports nothing; import ``convert._proto.caffe_pb2`` (which needs protobuf) where it is used.
"""

from __future__ import annotations

__all__: list[str] = []
