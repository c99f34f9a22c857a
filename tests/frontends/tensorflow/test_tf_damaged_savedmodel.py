"""A SavedModel damaged in its variables index, its variables data or its object graph ends as one
``ModelFormatError`` naming the file (exit 2), not an internal error.

Each case damages the fuzz seed (``tests/fuzz/seeds/tensorflow``) as a failure class of #29's
campaign did; the comment names where it failed before (a protobuf ``DecodeError``, TensorFlow's
``TypeError`` for an unknown dtype, an ``AttributeError`` on a root object without signatures).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from convert.ir import ModelFormatError, Options

pytestmark = pytest.mark.tensorflow
pytest.importorskip("tensorflow")

SEED = Path(__file__).resolve().parents[2] / "fuzz" / "seeds" / "tensorflow"
INDEX = Path("variables") / "variables.index"


def _entry_value(folder: Path) -> tuple[bytearray, int]:
    """Return the index's bytes and the position of a variable's serialised ``BundleEntryProto``."""
    from convert.frontends.tensorflow.bundle import read_table

    raw = bytearray((folder / INDEX).read_bytes())
    value = next(v for k, v in read_table(bytes(raw)) if k.endswith(b"VARIABLE_VALUE"))
    assert value[:1] == b"\x08" and raw.count(value) == 1  # field 1 (dtype) first; found once
    return raw, raw.find(value)


def _damaged_entry(folder: Path) -> None:
    raw, pos = _entry_value(folder)
    raw[pos] = 0xFF  # an invalid wire type
    (folder / INDEX).write_bytes(bytes(raw))


def _unknown_dtype(folder: Path) -> None:
    raw, pos = _entry_value(folder)
    raw[pos + 1] = 65  # DataType 65 does not exist
    (folder / INDEX).write_bytes(bytes(raw))


def _kernel_of_another_shape(folder: Path) -> None:
    """The entries of the rank-4 kernel say [h, w, 1, i * o] instead: the size still fits the data."""
    from tensorflow.core.protobuf import tensor_bundle_pb2

    from convert.frontends.tensorflow.bundle import read_table

    raw = (folder / INDEX).read_bytes()
    for _, value in read_table(raw):
        entry = tensor_bundle_pb2.BundleEntryProto.FromString(value) if value[:1] == b"\x08" else None
        if entry is not None and len(entry.shape.dim) == 4:  # the kernel (the seed keeps it under two keys)
            dims = entry.shape.dim
            dims[3].size, dims[2].size = dims[2].size * dims[3].size, 1
            changed = entry.SerializeToString()
            assert len(changed) == len(value) and raw.count(value) == 1
            raw = raw.replace(value, changed)
    (folder / INDEX).write_bytes(raw)


def _damaged_object_graph(folder: Path) -> None:
    from convert.frontends.tensorflow.bundle import Bundle

    bundle = Bundle(folder / "variables" / "variables")
    entry = bundle.entries["_CHECKPOINTABLE_OBJECT_GRAPH"]
    shard = bundle.shard_path(entry.shard)
    data = bytearray(shard.read_bytes())
    start = entry.offset + 1 + 4  # past the (one-byte) varint length and the checksum
    data[start:start + 8] = b"\xff" * 8
    shard.write_bytes(bytes(data))


def _no_signature_map(folder: Path) -> None:
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((folder / "saved_model.pb").read_bytes())
    children = proto.meta_graphs[0].object_graph_def.nodes[0].children
    keep = [c for c in children if c.local_name != "signatures"]
    assert len(keep) < len(children)
    del children[:]
    children.extend(keep)
    (folder / "saved_model.pb").write_bytes(proto.SerializeToString())


CASES = [  # (id, damage, what the message says)
    ("bundle-entry-damaged", _damaged_entry,  # bundle.py:__init__ DecodeError
     r"variables\.index: the entry of '.*' is damaged \(Error parsing message"),
    ("bundle-entry-of-unknown-dtype", _unknown_dtype,  # bundle.py:_numpy_dtype TypeError
     r"variables\.index: variable '.*' has data type 65, which is no TensorFlow data type"),
    ("variable-of-another-shape", _kernel_of_another_shape,  # graph.py:_with_values ValueError (TF's shapes)
     r"variables\.index: variable '.*' has shape \[3, 3, 1, 12\]; saved_model\.pb declares \[3, 3, 3, 4\]"),
    ("object-graph-damaged", _damaged_object_graph,  # graph.py:_captured_values DecodeError
     r"variables/variables\.data-00000-of-00001: the checkpoint's object graph is damaged"),
    ("root-without-signature-map", _no_signature_map,  # graph.py:_signature AttributeError
     r"the SavedModel's root object has no signature map"),
]


@pytest.mark.parametrize(("damage", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_damaged_savedmodel_is_a_model_format_error(damage: Callable[[Path], None], message: str,
                                                    tmp_path: Path) -> None:
    from convert.frontends.tensorflow import FRONTEND

    folder = tmp_path / "saved"
    shutil.copytree(SEED, folder, ignore=shutil.ignore_patterns("case.json"))
    damage(folder)
    with pytest.raises(ModelFormatError, match=message) as info:
        FRONTEND.load([folder], Options())
    assert "\n" not in str(info.value)
