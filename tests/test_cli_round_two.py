"""The first hour, round two: what a new user still trips on, through the real command in a subprocess.

A framework that is not installed, a pipe closed early, output folders checked late, a replaced
file, advice that does not work, options before the command, the second command name.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import models_onnx
import onnx
import pytest

from convert import formats

ROOT = Path(__file__).resolve().parents[1]
TINY_CFG = ROOT / "models" / "darknet" / "yolov4-tiny.cfg"

# Makes the modules named in $BLOCK_MODULES (and their submodules) unimportable, as in an
# environment without them: a real ModuleNotFoundError(name=...) from the import system.
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


def _env(tmp_path: Path, blocked: str = "") -> dict[str, str]:
    (tmp_path / "site").mkdir(exist_ok=True)
    (tmp_path / "site" / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    return {**os.environ, "PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{ROOT}", "BLOCK_MODULES": blocked}


def _run(tmp_path: Path, *args: str, blocked: str = "", stdout: int | None = subprocess.PIPE,
         cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convert", *args], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=300, cwd=cwd or tmp_path, env=_env(tmp_path, blocked))


def _errors(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("convert: error:")]


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "m.onnx"
    onnx.save(models_onnx.conv_net(), str(path))
    return path


# ---- item 2: a framework that is not installed is the user's set-up (exit 2, the extra to install)
@pytest.mark.parametrize("args", [["inspect", "x.pt"], ["pytorch:onnx", "x.pt", "--input-shape", "1,3,8,8"],
                                  ["check", "x.pt", "--against", "m.onnx"]],
                         ids=["inspect", "convert", "check"])
def test_missing_torch_names_the_extra(tmp_path: Path, model: Path, args: list[str]) -> None:
    (tmp_path / "x.pt").write_bytes(b"PK\x03\x04 not read: torch is imported first")
    r = _run(tmp_path, *args, blocked="torch")
    assert r.returncode == 2, r.stderr
    errors = _errors(r.stderr)
    assert len(errors) == 1 and errors[0].endswith("pip install 'convert-toolkit[torch]'"), r.stderr
    if args[0] != "check":  # check opens the PyTorch runtime, which says so itself
        assert errors[0] == ("convert: error: this needs PyTorch, which is not installed (no module named 'torch'): "
                             "pip install 'convert-toolkit[torch]'")
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "site", "x.pt"]


def test_missing_framework_table() -> None:
    assert "'convert-toolkit[paddle]'" in str(formats.missing_framework(ModuleNotFoundError(name="paddle")))
    assert "'convert-toolkit[caffe]'" in str(formats.missing_framework(ModuleNotFoundError(name="cv2")))
    assert "'convert-toolkit[tensorflow]'" in str(formats.missing_framework(ModuleNotFoundError(name="tensorflow")))
    # Not the user's set-up: a submodule missing from an installed framework, a module of our own.
    assert formats.missing_framework(ModuleNotFoundError(name="torch._export.converter")) is None
    assert formats.missing_framework(ModuleNotFoundError(name="convert.frontends.nothing")) is None
    assert formats.missing_framework(ImportError("cannot import name 'x'", name="torch")) is None


# ---- item 3: a closed pipe is not an error
@pytest.mark.parametrize("args", [["inspect", "m.onnx"], ["formats"], ["ops", "onnx"], ["help"],
                                  ["onnx:onnx", "m.onnx", "-o", "o.onnx"]],
                         ids=["inspect", "formats", "ops", "help", "convert"])
def test_stdout_closed_by_its_reader_exits_quietly(tmp_path: Path, model: Path, args: list[str]) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line: every write is EPIPE
    try:
        r = _run(tmp_path, *args, stdout=write)
    finally:
        os.close(write)
    assert r.returncode == 141, r.stderr
    assert _errors(r.stderr) == [] and "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr


def test_head_in_a_shell_pipeline(tmp_path: Path, model: Path) -> None:
    cmd = f"{shlex.quote(sys.executable)} -m convert inspect m.onnx | head -1; echo \"status ${{PIPESTATUS[0]}}\""
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env=_env(tmp_path))
    first, status = r.stdout.splitlines()
    assert first.startswith("m.onnx  [onnx]") and status in ("status 0", "status 141"), r.stdout
    assert r.stderr == ""


# ---- item 4: every output path is checked before any work (a model's missing folders are made: #33 item 14)
def test_missing_report_folder_is_refused_before_loading(tmp_path: Path, model: Path) -> None:
    r = _run(tmp_path, "onnx:onnx", "m.onnx", "-o", "o.onnx", "--report", "nodir/r.json")
    assert r.returncode == 2, r.stderr
    errors = _errors(r.stderr)
    assert len(errors) == 1 and "cannot write the report" in errors[0] and "'nodir' does not exist" in errors[0]
    assert "loaded onnx model" not in r.stderr  # refused before loading, not after converting
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "site"]


def test_check_report_folder_is_refused_before_running(tmp_path: Path, model: Path) -> None:
    r = _run(tmp_path, "check", "m.onnx", "--against", "m.onnx", "--report", "nodir/r.json")
    assert r.returncode == 2 and "'nodir' does not exist" in r.stderr and "parity" not in r.stdout, r.stderr


def test_output_folder_with_slash_is_still_made(tmp_path: Path, model: Path) -> None:
    r = _run(tmp_path, "onnx:onnx", "m.onnx", "-o", "newdir/", "--no-check")
    assert r.returncode == 0 and (tmp_path / "newdir" / "m.onnx").is_file(), r.stderr


# ---- item 5: replacing a file is said
def test_replacing_an_existing_file_is_said(tmp_path: Path, model: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    model.rename(src / "m.onnx")
    r = _run(tmp_path, "onnx:caffe", "src/m.onnx", "--no-check")  # nothing there yet
    assert r.returncode == 0 and "replaced" not in r.stdout + r.stderr, r.stderr
    (tmp_path / "m.onnx").write_text("someone else's model")
    r = _run(tmp_path, "onnx:onnx", "src/m.onnx", "--no-check")
    last = r.stdout.strip().splitlines()[-1]
    assert r.returncode == 0 and re.search(r"\| replaced \S*m\.onnx$", last), last
    assert "replaced the existing" in r.stderr  # the default path: -o writes elsewhere
    r = _run(tmp_path, "onnx:caffe", "src/m.onnx", "--no-check", "-o", "m.prototxt")
    last = r.stdout.strip().splitlines()[-1]
    assert r.returncode == 0 and "| replaced m.prototxt + m.caffemodel" in last, last


# ---- item 10: the advice for a cfg without weights works when followed
@pytest.mark.parametrize("command", [["inspect"], ["darknet:onnx", "--no-check", "-o", "out.onnx"]],
                         ids=["inspect", "convert"])
def test_cfg_without_weights_advice_works(tmp_path: Path, command: list[str]) -> None:
    r = _run(tmp_path, *command, str(TINY_CFG))
    assert r.returncode == 2, r.stderr
    advice = re.findall(r"(?<![\w-])--[a-z][a-z-]+", " ".join(_errors(r.stderr)))
    assert advice == ["--random-weights"], r.stderr
    r = _run(tmp_path, *command, str(TINY_CFG), *advice)
    assert r.returncode == 0, r.stderr
    if command == ["inspect"]:
        assert "inputs:" in r.stdout and "Conv" in r.stdout


def test_inspect_refuses_an_option_of_another_format(tmp_path: Path, model: Path) -> None:
    r = _run(tmp_path, "inspect", "m.onnx", "--random-weights")
    assert r.returncode == 2 and _errors(r.stderr) == ["convert: error: --random-weights does not apply to onnx "
                                                       "models"], r.stderr


# ---- item 13: global options before the command
@pytest.mark.parametrize("args", [["-v", "inspect", "m.onnx"], ["--debug", "inspect", "m.onnx"],
                                  ["-vv", "--debug", "formats"], ["-v", "onnx:onnx", "m.onnx", "-o", "o.onnx"],
                                  ["--verbose", "check", "m.onnx", "--against", "m.onnx"]],
                         ids=["v-inspect", "debug-inspect", "vv-debug-formats", "v-convert", "verbose-check"])
def test_options_before_the_command(tmp_path: Path, model: Path, args: list[str]) -> None:
    r = _run(tmp_path, *args)
    assert r.returncode == 0, r.stderr
    assert "no destination format" not in r.stderr and "Traceback" not in r.stderr


def test_debug_before_the_command_shows_debug_logs(tmp_path: Path, model: Path) -> None:
    r = _run(tmp_path, "--debug", "inspect", "m.onnx")
    assert r.returncode == 0 and "convert: DEBUG:" in r.stderr, r.stderr


@pytest.mark.parametrize("args,words", [(["help"], "Other commands:"), (["help", "inspect"], "--random-weights"),
                                        (["-v", "help", "batch"], "MANIFEST")])
def test_help_command(tmp_path: Path, args: list[str], words: str) -> None:
    r = _run(tmp_path, *args)
    assert r.returncode == 0 and words in r.stdout, r.stdout + r.stderr


def test_help_for_an_unknown_command(tmp_path: Path) -> None:
    r = _run(tmp_path, "help", "nosuch")
    assert r.returncode == 2 and "no command or format 'nosuch'" in r.stderr and "inspect" in r.stderr


# ---- item 18: a second command name, and python -m convert
def test_second_command_name_and_python_m(tmp_path: Path, model: Path) -> None:
    assert 'convert-model = "convert.cli:main"' in (ROOT / "pyproject.toml").read_text()
    r = _run(tmp_path, "formats")
    assert r.returncode == 0 and "routes:" in r.stdout  # python -m convert
    script = shutil.which("convert-model", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    if script is None:
        pytest.skip("convert-model is not installed as a package here (pip install -e . writes it)")
    r = subprocess.run([script, "inspect", "m.onnx"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("m.onnx  [onnx]"), r.stderr
    r = subprocess.run([script, "inspect"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 2 and "Try 'convert-model inspect --help'" in r.stderr, r.stderr
