"""The first hour, round three (#52): what a new user trips on, through the real command in a subprocess.

No input accepted that yields a broken file, one statement of the exit statuses, a quiet mode
that is quiet, the summary word of the verdict, output paths that say what they write, the
input's real format, and the hints that agree with each other.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import models_onnx
import onnx
import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY_CFG = ROOT / "models" / "darknet" / "yolov4-tiny.cfg"


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def _run(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convert", *args], capture_output=True, text=True, timeout=600,
                          cwd=cwd, env=_env(**env))


def _errors(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("convert: error:")]


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "m.onnx"
    onnx.save(models_onnx.conv_net(), str(path))
    return path


def _plain(markdown: str) -> str:
    """Markdown's bold and code marks removed, whitespace collapsed."""
    return " ".join(markdown.replace("**", "").replace("`", "").split())


# ---- item 5: one statement of the exit statuses, the README's, in `convert --help` too
def test_help_states_the_readme_exit_statuses(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("The exit status says what happened:")
    statement = _plain(readme[start:readme.index("\n\n", start)]).removeprefix("The exit status says what happened: ")
    r = _run(tmp_path, "--help")
    assert r.returncode == 0, r.stderr
    helped = _plain(r.stdout[r.stdout.index("Exit status:"):]).removeprefix("Exit status: ")
    assert helped == statement
    # one statement: the missing framework is said once, under 2 (reading) and 1 (the check's reference)
    assert helped.count("not installed") == 2 and "exit 2" not in helped


# ---- item 16: the help lists -h once; dir(convert) is the API
@pytest.mark.parametrize("args", [["--help"], ["-h"], ["help"], ["onnx:onnx", "--help"], ["check", "--help"],
                                  ["batch", "--help"], ["inspect", "--help"]],
                         ids=["help", "h", "help-cmd", "convert", "check", "batch", "inspect"])
def test_help_option_listed_once(tmp_path: Path, args: list[str]) -> None:
    r = _run(tmp_path, *args)
    assert r.returncode == 0, r.stderr
    assert len(re.findall(r"^\s+-h, --help\b", r.stdout, re.M)) == 1, r.stdout


def test_dir_of_the_package_is_its_api() -> None:
    import convert

    assert "annotations" not in dir(convert)
    assert set(convert.__all__) <= set(dir(convert))


def test_caffe_doc_names_every_source_format() -> None:
    from convert import formats

    shown = {"onnx": "ONNX", "pytorch": "PyTorch", "tensorflow": "TensorFlow", "tflite": "TFLite",
             "darknet": "Darknet", "paddle": "Paddle", "caffe": "Caffe"}
    first = (ROOT / "docs" / "caffe.md").read_text().split("\n\n")[1]
    # hf (Hugging Face decoders) aside: attention has no Caffe layer (README, Limits)
    assert all(re.search(rf"\b{shown[n]}\b", first) for n in formats.frontend_names() if n != "hf"), first


def test_models_caffe_readme_does_not_call_a_converting_net_refused() -> None:
    row = next(ln for ln in (ROOT / "models" / "caffe" / "README.md").read_text().splitlines()
               if ln.startswith("| mobilenet_ssd |") and "Caffe -> Caffe" not in ln and "real Caffe" not in ln)
    assert "refused" not in row.split("|")[3], row  # tests/frontends/caffe/test_deploy_nets.py converts it


# Makes the modules named in $BLOCK_MODULES unimportable, as in an environment without them.
_SITECUSTOMIZE = """
import os, sys
_BLOCKED = set(filter(None, os.environ.get("BLOCK_MODULES", "").split(",")))
class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _NotInstalled())
"""


def _without(tmp_path: Path, modules: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the command with ``modules`` unimportable and no real Caffe."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    return subprocess.run([sys.executable, "-m", "convert", *args], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path, env={**_env(**env), "PYTHONPATH": f"{site}{os.pathsep}{ROOT}",
                                             "BLOCK_MODULES": modules, "CONVERT_CAFFE_HOME": str(tmp_path / "none"),
                                             "CONVERT_CAFFE_PYTHON": "", "CONVERT_CAFFE_BVLC_PYTHON": ""})


# ---- item 15: one install hint per package, everywhere; a route whose destination's check needs an extra is starred
def test_caffe_destination_check_is_starred_and_hinted_alike(tmp_path: Path, model: Path) -> None:
    r = _without(tmp_path, "cv2", "formats")
    assert r.returncode == 0, r.stderr
    hint = "pip install 'convert-toolkit[caffe]' (or real Caffe: scripts/build_caffe)"
    dest = next(ln for ln in r.stdout.split("destinations:")[1].splitlines() if ln.split()[:1] == ["caffe"])
    assert f"[the parity check needs OpenCV: {hint}]" in dest, r.stdout
    routes = r.stdout.split("routes:")[1]
    assert "onnx->caffe*" in routes and "onnx->onnx*" not in routes and "pytorch->caffe*" in routes, routes
    r = _without(tmp_path, "cv2", "onnx:caffe", "m.onnx", "-o", "m.prototxt")
    assert r.returncode == 1, r.stderr
    said = next(ln for ln in r.stderr.splitlines() if "parity NOT CHECKED" in ln)
    assert f"OpenCV: {hint}" in said and "opencv-python-headless" not in said, said


def test_tflite_reference_has_an_extra() -> None:
    import tomllib

    from convert import formats

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(dep.startswith("ai-edge-litert") for dep in extras["tflite"])
    said = formats.missing_framework(ModuleNotFoundError(name="ai_edge_litert"))
    assert said is not None and said.endswith("pip install 'convert-toolkit[tflite]'")
    source = (ROOT / "convert" / "parity" / "runtimes" / "tflite.py").read_text()
    assert "'convert-toolkit[tflite]'" in source and "pip install ai-edge-litert" not in source


# ---- item 16: a Caffe file OpenCV cannot run says how to get the Caffe that runs it
def test_upsample_not_checked_names_build_caffe(tmp_path: Path) -> None:
    r = _run(tmp_path, "darknet:caffe", str(TINY_CFG), "--random-weights", "--caffe-upsample-layer", "-o", "t/",
             CONVERT_CAFFE_RUNTIME="opencv")
    assert r.returncode == 1, r.stderr
    said = next(ln for ln in r.stderr.splitlines() if "parity NOT CHECKED" in ln)
    assert "Upsample" in said and "scripts/build_caffe" in said and "--no-check" in said, said


def _constant_output_model(path: Path) -> Path:
    """y = x * 0 + 1: a reference without spread, whatever the input (NOT VERIFIED)."""
    import numpy as np
    from onnx import numpy_helper, parser

    m = parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
    g (float[1, 4] x) => (float[1, 4] y) { z = Mul (x, zero)  y = Add (z, one) }""")
    m.graph.initializer.extend([numpy_helper.from_array(np.zeros(1, np.float32), "zero"),
                                numpy_helper.from_array(np.ones(1, np.float32), "one")])
    onnx.save(m, str(path))
    return path


# ---- item 7: the summary word is the verdict's; a long note does not widen the table
def test_not_verified_is_summarised_as_such(tmp_path: Path) -> None:
    _constant_output_model(tmp_path / "c.onnx")
    r = _run(tmp_path, "onnx:onnx", "c.onnx", "-o", "o.onnx")
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert lines[-1].startswith("NOT VERIFIED onnx:onnx |") and lines[-1].endswith("parity NOT VERIFIED "
                                                                                  "(CPUExecutionProvider)"), lines[-1]
    table = lines[1:4]  # header, rule, the row
    assert table[0].startswith("output") and all(len(ln) <= 100 for ln in table), table
    assert all(ln == ln.rstrip() for ln in lines), [ln for ln in lines if ln != ln.rstrip()]
    assert "NOT VERIFIED (1)" in table[2] and lines[4].strip().startswith("(1) y: reference is degenerate")


# ---- item 8: -q prints the table and the summary line, nothing else (warnings and errors aside)
def test_quiet_is_the_table_and_the_summary(tmp_path: Path) -> None:
    r = _run(tmp_path, "darknet:onnx", str(TINY_CFG), "--random-weights", "-o", "t.onnx", "-q")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("parity: darknet on ") and lines[1].startswith("output")
    assert len(lines) == 3 + 2 + 1 and lines[-1].startswith("OK darknet:onnx |"), r.stdout  # 2 outputs
    assert r.stderr == "", r.stderr  # no lineage note, no loaded line, no progress
    r = _run(tmp_path, "check", "t.onnx", "--against", "t.onnx", "-q")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 3 + 2 + 1 and "PASS:" not in r.stdout, r.stdout


# ---- item 14: a model whose output is constant whatever the input is not blamed on the inputs; nor does
# locate invent a difference after a NOT VERIFIED
def test_constant_model_hint_and_locate_without_difference(tmp_path: Path) -> None:
    _constant_output_model(tmp_path / "c.onnx")
    r = _run(tmp_path, "onnx:onnx", "c.onnx", "-o", "o.onnx", "--locate")
    assert r.returncode == 1, r.stderr
    said = next(ln for ln in r.stdout.splitlines() if ln.startswith("NOT VERIFIED: the reference output 'y'"))
    assert "Nor on a second, differently seeded draw" in said and "whatever the input" in said, said
    assert not said.endswith("Give real inputs with --inputs FILE.npz."), said
    located = next(ln for ln in r.stdout.splitlines() if ln.startswith("locate:"))
    assert located.endswith("no output failed either: there is no difference to locate"), located
    assert "any difference arises after" not in r.stdout
    # with given inputs there is no second draw: the hint stays the inputs'
    import numpy as np

    np.save(tmp_path / "x.npy", np.ones((1, 4), np.float32))
    r = _run(tmp_path, "onnx:onnx", "c.onnx", "-o", "o.onnx", "--inputs", "x.npy")
    assert "Give real inputs with --inputs FILE.npz." in r.stdout and "second" not in r.stdout, r.stdout


# ---- item 13: the Python API speaks Python (keywords, not flags) and suggests a misspelled keyword
def test_api_errors_say_keywords_and_the_cli_flags(tmp_path: Path, model: Path) -> None:
    import convert

    with pytest.raises(convert.UsageError) as caught:
        convert.convert(model, to="onnx", out=model)
    said = str(caught.value)
    assert said.endswith("choose another path with out=") and not re.search(r"(?<![\w-])-o\b", said), said
    with pytest.raises(convert.UsageError) as caught:
        convert.convert(model, to="onnx", out=tmp_path / "o.onnx", input_shapes={"x": (1, 3, 32)})
    assert str(caught.value).startswith("input_shapes['x']: rank 3"), caught.value
    with pytest.raises(convert.UsageError) as caught:
        convert.convert([TINY_CFG], to="onnx", out=tmp_path / "y.onnx")
    assert "random_weights=True" in str(caught.value) and "--random-weights" not in str(caught.value)
    r = _run(tmp_path, "onnx:onnx", "m.onnx", "-o", "m.onnx")  # the same refusals in the CLI keep its flags
    assert r.returncode == 2 and _errors(r.stderr)[0].endswith("choose another path with -o"), r.stderr


@pytest.mark.parametrize("keyword,meant", [("outt", "out"), ("random_weight", "random_weights"), ("opst", "opset")])
def test_api_suggests_a_misspelled_keyword(tmp_path: Path, model: Path, keyword: str, meant: str) -> None:
    import convert

    with pytest.raises(convert.UsageError, match=rf"unknown option\(s\) {keyword} \(did you mean '{meant}'\?\)"):
        convert.convert(model, to="onnx", out=tmp_path / "o.onnx", **{keyword: 1})


# ---- item 11: an output name in another format's suffix is warned; the model's own folder is not written into
def test_output_suffix_of_another_format_is_warned(tmp_path: Path, model: Path) -> None:
    r = _run(tmp_path, "onnx:onnx", "m.onnx", "-o", "wrong.prototxt", "--no-check")
    assert r.returncode == 0, r.stderr
    assert ("convert: warning: the output 'wrong.prototxt' ends in '.prototxt', not '.onnx': the onnx file is "
            "written under that name all the same") in r.stderr.splitlines(), r.stderr
    r = _run(tmp_path, "onnx:caffe", "m.onnx", "-o", "net.onnx", "--no-check")
    assert r.returncode == 0 and (tmp_path / "net.onnx.prototxt").is_file(), r.stderr
    assert "the output name 'net.onnx' ends in '.onnx', another format's suffix" in r.stderr, r.stderr
    for args in (["onnx:onnx", "m.onnx", "-o", "fine.onnx"], ["onnx:caffe", "m.onnx", "-o", "net"]):
        r = _run(tmp_path, *args, "--no-check")
        assert r.returncode == 0 and "warning" not in r.stderr, r.stderr


def test_the_source_folder_is_not_written_into_unasked(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "inference.json").write_text("{}")
    r = _run(tmp_path, "paddle:caffe", "model/", "-o", "model", "--input-shape", "x=1,3,8,8")
    assert r.returncode == 2, r.stderr
    assert _errors(r.stderr) == ["convert: error: -o model is the folder of the model being converted: nothing is "
                                 "written into it unasked. Write -o model/ to put model.prototxt there, or name a "
                                 "file (-o model.prototxt)"], r.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["inference.json"]


# ---- item 12: the input's real format is said before any output-path check
@pytest.mark.parametrize("route,name,said", [
    ("darknet:onnx", "m.onnx", "m.onnx is an ONNX model, not a Darknet cfg: convert it as onnx (onnx:onnx)"),
    ("onnx:onnx", "yolov4-tiny.cfg", "yolov4-tiny.cfg is a Darknet cfg, not an ONNX model: convert it as darknet "
                                     "(darknet:onnx)"),
    ("caffe:onnx", "m.onnx", "m.onnx is an ONNX model, not a Caffe deploy prototxt"),
], ids=["darknet-given-onnx", "onnx-given-cfg", "caffe-given-onnx"])
def test_the_input_real_format_is_said(tmp_path: Path, model: Path, route: str, name: str, said: str) -> None:
    (tmp_path / "yolov4-tiny.cfg").write_text(TINY_CFG.read_text())
    r = _run(tmp_path, route, name)  # the default output of m.onnx -> onnx would overwrite the input
    assert r.returncode == 2, r.stderr
    errors = _errors(r.stderr)
    assert len(errors) == 1 and said in errors[0] and "overwrite" not in errors[0], r.stderr
    import convert

    with pytest.raises(convert.UsageError, match=re.escape(said.split(":")[0])):  # the API says the same
        convert.convert(tmp_path / name, to="onnx", out=tmp_path / "o.onnx", format=route.split(":")[0])


# ---- item 1: a given shape the model contradicts is refused before anything is written, in the order expected;
# and a file that would not load is never written
SMALL_TFLITE = ROOT / "models" / "tflite" / "small_cnn.tflite"


@pytest.mark.parametrize("check", ["--check", "--no-check"])
def test_tflite_nhwc_shape_is_refused_in_the_order_expected(tmp_path: Path, check: str) -> None:
    r = _run(tmp_path, "tflite:onnx", str(SMALL_TFLITE), "--input-shape", "image=1,32,32,3", "-o", "a.onnx", check)
    assert r.returncode == 2, r.stdout + r.stderr
    errors = _errors(r.stderr)
    assert len(errors) == 1 and errors[0].startswith("convert: error: --input-shape image=1,32,32,3 contradicts "
                                                     "small_cnn.tflite: its input 'image' is Nx3x32x32"), r.stderr
    assert errors[0].endswith("In the order expected: --input-shape image=1,3,32,32"), errors[0]
    assert list(tmp_path.iterdir()) == []  # nothing written
    r = _run(tmp_path, "tflite:onnx", str(SMALL_TFLITE), "--input-shape", "image=2,3,32,32", "-o", "a.onnx", check)
    assert r.returncode == 0, r.stderr  # the order expected, with another batch: the batch is free


def test_keras_nhwc_shape_is_refused(tmp_path: Path) -> None:
    keras = pytest.importorskip("keras")
    inp = keras.Input((16, 16, 3), name="image")
    keras.Model(inp, keras.layers.Conv2D(4, 3)(inp)).save(str(tmp_path / "m.keras"))
    r = _run(tmp_path, "tensorflow:onnx", "m.keras", "--input-shape", "image=1,16,16,3", "-o", "k.onnx", "--no-check")
    assert r.returncode == 2 and not (tmp_path / "k.onnx").exists(), r.stderr
    assert _errors(r.stderr)[0].endswith("In the order expected: --input-shape image=1,3,16,16"), r.stderr


@pytest.mark.parametrize("route,files,shape,expected", [
    ("onnx:onnx", ["m.onnx"], "x=1,32,32,3", "x=1,3,32,32"),
    ("darknet:onnx", [str(TINY_CFG), "--random-weights"], "data=1,416,416,3", "data=1,3,416,416"),
], ids=["onnx-fixed-dims", "darknet-channels"])
def test_fixed_dimensions_contradicted_are_refused(tmp_path: Path, model: Path, route: str, files: list[str],
                                                  shape: str, expected: str) -> None:
    r = _run(tmp_path, route, *files, "--input-shape", shape, "-o", "o.onnx", "--no-check")
    assert r.returncode == 2 and not (tmp_path / "o.onnx").exists(), r.stderr
    assert _errors(r.stderr)[0].endswith(f"In the order expected: --input-shape {expected}"), r.stderr


def test_onnx_file_that_would_not_load_is_not_written(tmp_path: Path) -> None:
    """The backstop, for whatever a frontend lets through: the IR of the TFLite sample with the NHWC input
    shape its converter used to write. ONNX Runtime refuses that file ("Can't merge shape info"); the
    exporter refuses it before writing (strict shape inference on the graph without its weights)."""
    import onnxruntime as ort

    from convert import formats, ir

    model = formats.frontend("tflite").load([SMALL_TFLITE], ir.Options())
    ir.passes.standard_pipeline()(model)
    model.graph.inputs[0].shape = ir.Shape([1, 32, 32, 3])
    with pytest.raises(ir.ExportError, match=r"would not load in ONNX Runtime: .*Can't merge shape info.* Nothing was "
                                             r"written"):
        formats.exporter("onnx").save(model, tmp_path / "x.onnx", ir.Options())
    assert list(tmp_path.iterdir()) == []
    # the same IR written without the check does not load: the refusal is ONNX Runtime's own
    from convert.ir.passes.shape_inference import weightless_proto

    with pytest.raises(Exception, match="Can't merge shape info"):
        ort.InferenceSession(weightless_proto(model).SerializeToString(), providers=["CPUExecutionProvider"])


def test_onnx_strictness_beyond_the_runtime_is_no_refusal(tmp_path: Path) -> None:
    """onnx's strict inference objects to a graph output declared 1x5 where Relu makes 1x4; ONNX Runtime loads
    and runs that file (it merges leniently): no false refusal, the file is written and loads."""
    import onnxruntime as ort
    from onnx import parser

    from convert.ir.passes.shape_inference import strict_inference_error

    proto = parser.parse_model('<ir_version: 8, opset_import: ["" : 17]>\n'
                               "g (float[1, 4] x) => (float[1, 5] y) { y = Relu (x) }")
    assert strict_inference_error(proto)  # onnx objects ("Inferred shape and existing shape differ" ...)
    onnx.save(proto, str(tmp_path / "lenient.onnx"))
    r = _run(tmp_path, "onnx:onnx", "lenient.onnx", "-o", "out.onnx", "--no-check")
    assert r.returncode == 0, r.stderr
    so = ort.SessionOptions()
    so.log_severity_level = 4
    ort.InferenceSession(str(tmp_path / "out.onnx"), so, providers=["CPUExecutionProvider"])


def test_caffe_prototxt_that_would_not_load_is_refused() -> None:
    from convert.exporters.caffe.writer import refuse_unloadable
    from convert.ir import ExportError

    good = ('name: "n"\nlayer { name: "in" type: "Input" top: "x" }\n'
            'layer { name: "r" type: "ReLU" bottom: "x" top: "y" }\n')
    refuse_unloadable(good, "n.prototxt")
    with pytest.raises(ExportError, match="layer 'r' \\(ReLU\\) reads 'z', which no earlier layer makes"):
        refuse_unloadable(good.replace('bottom: "x"', 'bottom: "z"'), "n.prototxt")
    with pytest.raises(ExportError, match="would not parse in Caffe"):
        refuse_unloadable(good + "layer { name: 1 2 }\n", "n.prototxt")


# ---- item 6: progress on a terminal (phases, the parity runs, locate's layers); nothing when piped or with -q
def _on_a_terminal(cwd: Path, *args: str) -> tuple[int, str, str]:
    """Run the command with stderr on a pseudo-terminal; return its status, stdout and what the terminal got."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))  # a terminal 200 columns wide
    proc = subprocess.Popen([sys.executable, "-m", "convert", *args], stdout=subprocess.PIPE, stderr=slave,
                            cwd=cwd, env=_env())
    os.close(slave)
    seen = bytearray()
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the command closed the terminal's other end
            break
        if not data:
            break
        seen += data
    os.close(master)
    out = proc.stdout.read().decode() if proc.stdout else ""
    return proc.wait(timeout=600), out, seen.decode(errors="replace")


def test_progress_on_a_terminal_only(tmp_path: Path) -> None:
    args = ["darknet:onnx", str(TINY_CFG), "--random-weights", "-o", "t.onnx", "--locate"]
    code, out, terminal = _on_a_terminal(tmp_path, *args)
    assert code == 0, terminal
    for phase in ("convert: reading the darknet model...", "convert: writing t.onnx...",
                  "convert: parity: the source in ", "convert: parity: the converted model in ONNX Runtime",
                  "convert: locate: every layer of the source in", "locate: comparing layers"):
        assert phase in terminal, (phase, terminal[-2000:])
    assert "data 1x3x416x416" in terminal  # the parity inputs
    assert out.splitlines()[-1].startswith("OK darknet:onnx")
    code, out, terminal = _on_a_terminal(tmp_path, *args, "-q")
    assert code == 0 and "convert:" not in terminal and "locate: comparing" not in terminal, terminal
    r = _run(tmp_path, *args)  # piped: no progress
    assert r.returncode == 0 and "parity: the source in" not in r.stderr and "\r" not in r.stderr, r.stderr


# ---- items 3 and 9: the README's commands work as pasted and leave nothing un-ignored in the checkout
def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"```(?:bash|sh)\n(.*?)```", text, re.S)


def test_readme_command_one_is_the_pt2_sample_and_says_how_to_get_cpu_torch() -> None:
    readme = (ROOT / "README.md").read_text()
    first = _bash_blocks(readme)[0]
    assert "python models/pytorch/make_sample.py && convert 'pytorch->caffe' models/pytorch/sample.pt2 -o out/" in first
    assert "pip install torch==2.14.1 --index-url https://download.pytorch.org/whl/cpu" in readme
    assert "models/pytorch/sample.pt2" in (ROOT / ".gitignore").read_text()


def test_readme_and_batch_doc_examples_paste_one_command_a_line_and_write_under_out() -> None:
    for doc in (ROOT / "README.md", ROOT / "docs" / "batch.md"):
        text = doc.read_text()
        for block in _bash_blocks(text):
            for line in block.splitlines():
                command = line.split("  #")[0]
                assert len(re.findall(r"(?:^|\s)convert\s", command)) <= 1, (doc.name, line)
        for block in re.findall(r"```python\n(.*?)```", text, re.S):  # every file a Python example writes: out/
            written = re.findall(r"out=\"([^\"]+)\"|save\([^,]+, \"([^\"]+)\"|Path\(\"([^\"]+)\"\)\.write_text", block)
            paths = [p for group in written for p in group if p]
            assert paths and all(p.startswith("out/") for p in paths), (doc.name, paths)
    batch = (ROOT / "docs" / "batch.md").read_text()
    for flag in ("--junit", "--report", "--summary"):
        assert f"{flag} out/" in batch.split("```")[1], flag


# ---- item 10: a Slice's unused pieces end in a Silence layer, not among the net's outputs
def test_unused_slice_tops_are_silenced(tmp_path: Path) -> None:
    from convert.frontends.caffe.reader import read_prototxt

    r = _run(tmp_path, "darknet:caffe", str(TINY_CFG), "--random-weights", "-o", "t/")
    assert r.returncode == 0 and "parity PASS" in r.stdout, r.stdout + r.stderr
    net = read_prototxt(tmp_path / "t" / "yolov4-tiny.prototxt")
    read = {b for layer in net.layers for b in layer.bottoms}
    outputs = [t for layer in net.layers for t in layer.tops if t not in read]
    assert outputs == ["yolo_30", "yolo_37"], outputs  # as the ONNX file's; were 9 with 7 unused pieces
    assert [layer.type for layer in net.layers].count("Silence") == 1
