"""A damaged TensorFlow model is refused in one line before TensorFlow is imported (``precheck.py``).

Each case is a real model's file cut short or replaced; the refusal must name the file and the
cause, and (checked in a fresh interpreter) TensorFlow must not have been imported by then.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from convert.frontends.tensorflow.precheck import precheck
from convert.ir import ModelFormatError, UsageError


def _saved_model(folder: Path, payload: bytes) -> Path:
    folder.mkdir()
    (folder / "saved_model.pb").write_bytes(payload)
    return folder


# A SavedModel proto's top level: field 1 (varint 1), field 2 (meta graph, 5 bytes announced).
_GOOD = bytes([0x08, 0x01, 0x12, 0x05]) + b"\x0a\x03abc"


def test_truncated_saved_model_pb_names_the_byte(tmp_path: Path) -> None:
    precheck(_saved_model(tmp_path / "ok", _GOOD))
    with pytest.raises(ModelFormatError, match=r"saved_model.pb: truncated: the field at byte 2 runs past the end"):
        precheck(_saved_model(tmp_path / "cut", _GOOD[:-2]))
    with pytest.raises(ModelFormatError, match="without a meta graph"):
        precheck(_saved_model(tmp_path / "empty", bytes([0x08, 0x01])))


def test_missing_variables_index_and_foreign_files(tmp_path: Path) -> None:
    folder = _saved_model(tmp_path / "sm", _GOOD)
    (folder / "variables").mkdir()
    (folder / "variables" / "variables.data-00000-of-00001").write_bytes(b"\0" * 8)
    with pytest.raises(ModelFormatError, match=r"variables/variables.index is missing"):
        precheck(folder)
    (tmp_path / "m.keras").write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(ModelFormatError, match=r"m.keras: not a complete .keras archive"):
        precheck(tmp_path / "m.keras")
    with zipfile.ZipFile(tmp_path / "z.keras", "w") as z:
        z.writestr("model.weights.h5", b"")
    with pytest.raises(ModelFormatError, match=r"without Keras' config\.json"):
        precheck(tmp_path / "z.keras")
    (tmp_path / "m.h5").write_bytes(b"not hdf5")
    with pytest.raises(ModelFormatError, match=r"not an HDF5 file"):
        precheck(tmp_path / "m.h5")
    (tmp_path / "g.pb").write_bytes(b"\xff\xff\xff")
    with pytest.raises(ModelFormatError, match=r"g\.pb: not a GraphDef"):
        precheck(tmp_path / "g.pb")
    with pytest.raises(UsageError, match="no such file or folder"):
        precheck(tmp_path / "absent.keras")


def test_refused_before_tensorflow_is_imported(tmp_path: Path) -> None:
    folder = _saved_model(tmp_path / "cut", _GOOD[:-2])
    code = ("import sys; from pathlib import Path; from convert.frontends.tensorflow import FRONTEND; "
            "from convert.ir import Options, ModelFormatError\n"
            f"try:\n    FRONTEND.check_support([Path({str(folder)!r})], Options())\n"
            "except ModelFormatError as e:\n    print('refused', 'tensorflow' in sys.modules, e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.startswith("refused False"), done.stdout + done.stderr
