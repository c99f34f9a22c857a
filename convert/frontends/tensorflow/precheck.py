"""Cheap checks of a TensorFlow model's files, run before TensorFlow is imported (seconds of start-up).

A missing, truncated or foreign file is refused here in one line, without TensorFlow: a
SavedModel's ``saved_model.pb`` and a frozen ``.pb`` are walked as protobuf wire format at their
top level (every field's length must fit the file, and the message must hold its main field), a
``.keras`` file must be a complete zip archive with Keras' ``config.json``, an ``.h5`` file must
start with HDF5's signature, and a SavedModel's ``variables/variables.index`` must be present when
its ``variables.data-*`` files are.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from convert._archive import read_members
from convert._wire import read_varint as _varint
from convert.ir import ModelFormatError, UsageError

__all__ = ["precheck"]

_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def _top_level_fields(data: bytes, name: str, what: str) -> set[int]:
    """Return the field numbers of a protobuf message's top level; refuse a damaged one."""
    fields: set[int] = set()
    pos = 0
    size = len(data)
    while pos < size:
        start = pos
        try:
            tag, pos = _varint(data, pos)
            wire = tag & 7
            if wire == 0:
                _, pos = _varint(data, pos)
            elif wire == 1:
                pos += 8
            elif wire == 2:
                length, pos = _varint(data, pos)
                pos += length
            elif wire == 5:
                pos += 4
            else:
                raise ValueError(start)
        except ValueError:
            raise ModelFormatError(f"{name}: not a {what}: no protobuf field can start at byte {start:,}") from None
        if pos > size or tag >> 3 == 0:
            raise ModelFormatError(f"{name}: truncated: the field at byte {start:,} runs past the end of the "
                                   f"{size:,}-byte file. Is it a complete {what}?")
        fields.add(tag >> 3)
    return fields


def precheck(path: Path) -> None:
    """Refuse a model whose files cannot be a complete TensorFlow model, without importing TensorFlow.

    Raises:
        UsageError: no such file or folder. ModelFormatError: a damaged or foreign file (named).
    """
    if not path.exists():
        raise UsageError(f"{path}: no such file or folder")
    if path.is_dir():
        pb = path / "saved_model.pb"
        if not pb.is_file():
            raise ModelFormatError(f"{path.name}: not a SavedModel folder (no saved_model.pb in it)")
        fields = _top_level_fields(pb.read_bytes(), f"{path.name}/saved_model.pb", "SavedModel")
        if 2 not in fields:  # SavedModel.meta_graphs
            raise ModelFormatError(f"{path.name}/saved_model.pb: a SavedModel without a meta graph")
        variables = path / "variables"
        if any(variables.glob("variables.data-*")) and not (variables / "variables.index").is_file():
            raise ModelFormatError(f"{path.name}: variables/variables.index is missing (the variables' table); "
                                   "copy the whole SavedModel folder")
        return
    suffix = path.suffix.lower()
    if suffix == ".keras":
        if not zipfile.is_zipfile(path):
            raise ModelFormatError(f"{path.name}: not a complete .keras archive (a zip file): File is not a "
                                   "zip file")
        # duplicate member names refused: what is checked here and what Keras reads must be one member
        names = {info.filename for info in read_members(path, what=".keras archive")}
        if "config.json" not in names:
            raise ModelFormatError(f"{path.name}: a zip file without Keras' config.json: not a .keras model")
    elif suffix in (".h5", ".hdf5"):
        with path.open("rb") as f:
            head = f.read(8)
        if head != _HDF5_SIGNATURE:
            raise ModelFormatError(f"{path.name}: not an HDF5 file (Keras .h5): no HDF5 signature at byte 0")
    elif suffix == ".pb":
        fields = _top_level_fields(path.read_bytes(), path.name, "GraphDef")
        if 1 not in fields:  # GraphDef.node
            raise ModelFormatError(f"{path.name}: not a GraphDef (no nodes)")
