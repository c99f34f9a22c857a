"""The batch manifest: TOML and YAML, defaults, relative paths, and errors that name the model and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from convert.batch import load_manifest, pool_size
from convert.batch.manifest import ModelSpec
from convert.ir import UsageError

TOML = """\
output = "converted"
[defaults]
tol = 1e-5
input_shape = ["x=1,3,64,64"]
options = { caffe-flavor = "bvlc" }

[[models]]
name = "a"
route = "pytorch->onnx"
files = "nets/a.pt2"
options = { opset = 13 }

[[models]]
route = "darknet:caffe"
files = ["yolo.cfg", "yolo.weights"]
tol = 3e-5
input_shape = { data = [1, 3, 416, 416] }
inputs = "in.npz"
locate = true
opset = 17
"""

YAML = """\
output: converted
defaults:
  tol: 1e-5            # YAML 1.1 reads this as a string: it must still be a number
  input_shape: ["x=1,3,64,64"]
  options: {caffe-flavor: bvlc}
models:
  - name: a
    route: pytorch->onnx
    files: nets/a.pt2
    options: {opset: 13}
  - route: darknet:caffe
    files: [yolo.cfg, yolo.weights]
    tol: 3.0e-5
    input_shape: {data: [1, 3, 416, 416]}
    inputs: in.npz
    locate: true
    opset: 17
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_toml_defaults_paths_and_options(tmp_path: Path) -> None:
    m = load_manifest(_write(tmp_path, "m.toml", TOML))
    a, yolo = m.models
    assert m.output == tmp_path / "converted"
    assert (a.name, a.source, a.dest, a.files) == ("a", "pytorch", "onnx", (str(tmp_path / "nets/a.pt2"),))
    assert a.tol == 1e-5 and a.input_shapes == {"x": (1, 3, 64, 64)} and a.locate is None
    # a default option applies to the routes that take it (#52 item 2): pytorch->onnx takes no caffe_flavor
    assert a.options == {"opset": 13}
    assert yolo.name == "yolo" and yolo.route == "darknet:caffe"  # the name defaults to the first file's stem
    assert yolo.files == (str(tmp_path / "yolo.cfg"), str(tmp_path / "yolo.weights"))
    assert yolo.tol == 3e-5 and yolo.input_shapes == {"data": (1, 3, 416, 416)}
    assert yolo.inputs == str(tmp_path / "in.npz") and yolo.locate is True
    assert yolo.options == {"caffe_flavor": "bvlc", "opset": 17}
    assert (yolo.atol, yolo.rtol, yolo.seed, yolo.check, yolo.fold_bn) == (1e-4, 1e-3, 0, True, True)


def test_yaml_equals_toml(tmp_path: Path) -> None:
    pytest.importorskip("yaml")
    assert load_manifest(_write(tmp_path, "m.yaml", YAML)).models == load_manifest(
        _write(tmp_path, "m.toml", TOML)).models


@pytest.mark.parametrize(("text", "words"), [
    ('[[models]]\nroute = "onnx:onnx"\nfiles = "a.onnx"\nfile = "b"\n', ["model #1", "'file'", "options"]),
    ('[[models]]\nname = "x"\nroute = "onnx:onnx"\nfiles = "a.onnx"\n[[models]]\nname = "x"\nroute = "onnx:caffe"\n'
     'files = "a.onnx"\n', ["model #2 'x'", "already used by model #1"]),
    ('[[models]]\nroute = "onnx"\nfiles = "a.onnx"\n', ["model #1", "SRC:DST"]),
    ('[[models]]\nroute = "onnx:tflite"\nfiles = "a.onnx"\n', ["model #1", "tflite"]),
    ('[[models]]\nroute = "onnx:onnx"\n', ["model #1", "'files'"]),
    ('[[models]]\nroute = "onnx:onnx"\nfiles = "a.onnx"\ntol = "tight"\n', ["'tol'", "number"]),
    ('[[models]]\nroute = "onnx:onnx"\nfiles = "a.onnx"\ninput_shape = {x = [1, 0]}\n', ["'x'", "positive"]),
    ('models = []\n', ["non-empty 'models'"]),
    ('[defaults]\nfiles = "a.onnx"\n[[models]]\nroute = "onnx:onnx"\nfiles = "a.onnx"\n', ["[defaults]", "'files'"]),
    ('output = "o"\nmodel = 1\n', ["top-level", "'model'"]),
    ('[[models]\n', ["not valid TOML"]),
], ids=["unknown-key", "duplicate-name", "bad-route", "unknown-format", "no-files", "tol-not-number",
        "zero-dim", "no-models", "files-in-defaults", "unknown-top-key", "bad-toml"])
def test_errors_name_the_model_and_key(tmp_path: Path, text: str, words: list[str]) -> None:
    with pytest.raises(UsageError) as info:
        load_manifest(_write(tmp_path, "m.toml", text))
    for word in words:
        assert word in str(info.value)


def test_other_suffix_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"expected a \.toml, \.yaml or \.yml"):
        load_manifest(_write(tmp_path, "m.json", "{}"))


def test_pool_size_rule(tmp_path: Path) -> None:
    """min(cores, models, 80 % of available memory // (1 GiB + 3 x the largest model's files)), at least 1."""
    big = tmp_path / "big.onnx"
    with open(big, "wb") as f:
        f.truncate(256 << 20)  # a sparse 256 MiB file: only its size matters
    specs = [ModelSpec(name=f"m{i}", dest="onnx", files=(str(big),)) for i in range(6)]
    gib = 1 << 30
    per_worker = gib + 3 * (256 << 20)  # 1.75 GiB
    assert pool_size(specs, cores=8, mem_available=8 * gib) == int(8 * gib * 0.8) // per_worker == 3
    assert pool_size(specs, cores=2, mem_available=64 * gib) == 2  # cores bound it
    assert pool_size(specs[:1], cores=8, mem_available=64 * gib) == 1  # models bound it
    assert pool_size(specs, cores=8, mem_available=gib) == 1  # never 0


def test_docs_manifests_give_each_route_the_defaults_it_takes(tmp_path: Path) -> None:
    """docs/batch.md's own manifests (#52 item 2): [defaults] caffe_flavor reaches the darknet->caffe model
    only; the pytorch:onnx model, which takes no such option, no longer fails 'unknown option(s)'."""
    import re

    from convert import api, formats

    doc = (Path(__file__).resolve().parents[2] / "docs" / "batch.md").read_text()
    blocks = re.findall(r"```(toml|yaml)\n(.*?)```", doc, re.S)
    assert [kind for kind, _ in blocks] == ["toml", "yaml"]
    for kind, text in blocks:
        if kind == "yaml":
            pytest.importorskip("yaml")
        m = load_manifest(_write(tmp_path, f"m.{kind}", text))
        by_name = {s.name: s for s in m.models}
        assert by_name["resnet50"].options == {} and by_name["yolov4-tiny"].options == {"caffe_flavor": "bvlc"}
        for spec in m.models:  # the options each conversion gets are ones its route takes
            specs = [formats.frontend(spec.source or ""), formats.exporter(spec.dest)]
            api.make_options(specs, spec.options)


def test_default_option_no_format_takes_is_refused(tmp_path: Path) -> None:
    text = '[defaults]\noptions = { caffe_flavour = "bvlc" }\n[[models]]\nroute = "onnx:onnx"\nfiles = "a.onnx"\n'
    with pytest.raises(UsageError, match=r"\[defaults\]: no format takes the option\(s\) 'caffe_flavour'"):
        load_manifest(_write(tmp_path, "m.toml", text))
