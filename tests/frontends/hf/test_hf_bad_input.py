"""A model folder that cannot be converted: one line naming what is wrong, exit 2, nothing written.

Every case starts from a good folder (models/llm/decoders.py's llama, 2 shards and an index) and
breaks one thing: no config.json, a shard the index names missing or cut short, a header longer
than its file, a dtype safetensors does not define, a tensor whose shape the config contradicts, an
architecture the route does not convert, a rope scaling no fixed graph holds, weights only in a
pickle, and code of the folder's own (auto_map), which would run with trust_remote_code: refused,
naming the file, never imported.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from _llm import decoders
from click.testing import CliRunner

pytest.importorskip("torch")
pytest.importorskip("transformers")

from convert.cli import cli

pytestmark = [pytest.mark.torch, pytest.mark.transformers]


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return decoders().write_folder("llama", tmp_path_factory.mktemp("good") / "llama", shards=2)


@pytest.fixture
def folder(good: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(good, tmp_path / "model"))


def _refused(folder: Path, tmp_path: Path, *words: str) -> str:
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["hf:onnx", str(folder), "-o", f"{out}/"])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2, (result.exit_code, result.stderr, result.exception)
    assert len(lines) == 1 and lines[0].startswith("convert: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert not out.exists(), sorted(out.rglob("*"))  # nothing written, not even the folder
    return lines[0]


def _shards(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.safetensors"))


def _rewrite_header(path: Path, change: object) -> None:
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    change(header)  # type: ignore[operator]
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (n - len(text)) if len(text) <= n else b""
    assert len(text) == n, "the new header must fit the old one's length"
    path.write_bytes(raw[:8] + text + raw[8 + n:])


def test_no_config(folder: Path, tmp_path: Path) -> None:
    (folder / "config.json").unlink()
    _refused(folder, tmp_path, "no config.json")


def test_missing_shard(folder: Path, tmp_path: Path) -> None:
    gone = _shards(folder)[1]
    gone.unlink()
    _refused(folder, tmp_path, "model.safetensors.index.json", gone.name, "missing")


def test_shard_cut_short(folder: Path, tmp_path: Path) -> None:
    shard = _shards(folder)[0]
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) - 100])
    _refused(folder, tmp_path, shard.name, "cut short")


def test_header_longer_than_file(folder: Path, tmp_path: Path) -> None:
    shard = _shards(folder)[0]
    data = bytearray(shard.read_bytes())
    data[:8] = struct.pack("<Q", len(data) + 1)
    shard.write_bytes(bytes(data))
    _refused(folder, tmp_path, shard.name, "header", "longer than the file")


def test_dtype_safetensors_does_not_define(folder: Path, tmp_path: Path) -> None:
    shard = _shards(folder)[0]

    def change(header: dict[str, dict[str, object]]) -> None:
        name = next(k for k in header if k != "__metadata__")
        header[name]["dtype"] = "F17"

    _rewrite_header(shard, change)
    _refused(folder, tmp_path, shard.name, "'F17'", "does not define")


def test_shape_contradicts_config(folder: Path, tmp_path: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    config["intermediate_size"] = 96
    (folder / "config.json").write_text(json.dumps(config))
    _refused(folder, tmp_path, "mlp", "128x64", "the config makes it 96x64")


def test_architecture_not_converted(folder: Path, tmp_path: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "mixtral"
    (folder / "config.json").write_text(json.dumps(config))
    _refused(folder, tmp_path, "'mixtral'", "not an architecture this route converts", "llama")


def test_rope_that_no_fixed_graph_holds(folder: Path, tmp_path: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    config["rope_parameters"] = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}
    (folder / "config.json").write_text(json.dumps(config))
    _refused(folder, tmp_path, "rope type 'dynamic'")


def test_weights_only_in_a_pickle(folder: Path, tmp_path: Path) -> None:
    for shard in _shards(folder):
        shard.unlink()
    (folder / "model.safetensors.index.json").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"not read")
    _refused(folder, tmp_path, "pytorch_model.bin", "unpickle")


def test_remote_code_is_refused_naming_the_file_and_never_run(folder: Path, tmp_path: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "configuration_evil.EvilConfig",
                          "AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}
    (folder / "config.json").write_text(json.dumps(config))
    marker = tmp_path / "ran"
    for name in ("configuration_evil.py", "modeling_evil.py"):
        (folder / name).write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    line = _refused(folder, tmp_path, "configuration_evil.py", "trust_remote_code")
    assert "never runs code" in line
    assert not marker.exists()
