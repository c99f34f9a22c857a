"""What the CLI says (#33 items 14 and 15): formats and extras, the help's layout, the unquoted route's
rescue, `check`'s summary, `--accept`'s words, and missing output folders made alike for ONNX and Caffe.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import models_onnx
import onnx
import pytest
from click.testing import CliRunner

from convert import api, formats, ir
from convert.cli import cli

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "m.onnx"
    onnx.save(models_onnx.conv_net(), str(path))
    return path


# ---- convert formats: aligned, and which routes need an extra that is not installed
def test_formats_are_aligned_and_name_missing_extras(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("torch", "cv2")
                        else real(name, *a))
    monkeypatch.setenv("CONVERT_CAFFE_HOME", str(tmp_path))  # no real Caffe either
    monkeypatch.delenv("CONVERT_CAFFE_PYTHON", raising=False)
    code, out, _ = _run("formats")
    assert code == 0
    listing = out.split("routes:")[0].splitlines()
    rows = [ln for ln in listing if ln.startswith("  ")]
    names = formats.frontend_names() + formats.exporter_names()
    columns = {len(ln) - len(ln[2:].split(maxsplit=1)[1]) for ln in rows}
    assert len(rows) == len(names) and len(columns) == 1, out  # every description starts at one column
    pytorch = next(ln for ln in rows if ln.split()[0] == "pytorch")
    assert "[needs PyTorch: pip install 'convert-toolkit[torch]']" in pytorch
    caffe = next(ln for ln in rows if ln.split()[0] == "caffe")
    assert ("[the parity check needs OpenCV: pip install 'convert-toolkit[caffe]' (or real Caffe: "
            "scripts/build_caffe)]") in caffe
    assert "pytorch->onnx*" in out and "onnx->onnx*" not in out and "(* needs an extra" in out


# ---- convert --help: common options first, one line per format, each option once, no empty default
def test_main_help_is_grouped() -> None:
    code, out, _ = _run("--help")
    assert code == 0
    sections = [ln for ln in out.splitlines() if ln and not ln.startswith(" ")]
    assert sections[1:] == ["Options:", "Parity options:", "Format options (`convert help FORMAT` explains them):"]
    assert out.index("-o, --output") < out.index("--tol") < out.index("--caffe-flavor")
    assert out.count("-h, --help") == 1 and '[default: ""]' not in out and "Commands:" not in out
    assert "darknet (source)" in out and "caffe (destination)" in out
    assert "OpenCV cannot create Upsample" not in out  # a format's long help is in `convert help caffe`
    assert len(out.splitlines()) < 110
    assert _run() == (0, out, "")  # `convert` alone shows the same help


def test_help_for_a_format_explains_its_options() -> None:
    code, out, _ = _run("help", "caffe")
    assert code == 0 and "caffe as a source" in out and "caffe as a destination" in out
    assert "--caffe-flavor FLAVOR" in out and "OpenCV cannot create Upsample" in out
    code, out, _ = _run("help", "torch")  # an alias
    assert code == 0 and "--trust-pickle" in out
    code, out, _ = _run("darknet:onnx", "--help")
    assert code == 0 and "Format options" in out and out.count("-h, --help") == 1


# ---- the unquoted route: a file the shell truncated is not removed, and is named as truncated
def test_unquoted_route_over_an_existing_file_says_it_was_truncated(tmp_path: Path, model: Path) -> None:
    (tmp_path / "onnx").write_text("the user's notes\n")
    old = 1_000_000_000
    os.utime(tmp_path, (old, old))  # the folder last changed long ago: the redirection made no new entry
    script = f"convert() {{ {shlex.quote(sys.executable)} -m convert \"$@\"; }}\nconvert onnx->onnx m.onnx -o o.onnx " \
             "--no-check"
    r = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    assert "it truncated your existing file 'onnx'" in r.stderr and "I removed" not in r.stderr, r.stderr
    assert (tmp_path / "onnx").exists() and (tmp_path / "o.onnx").is_file()


# ---- convert check: -q, the NOTE count, "1 output"
def test_check_summary(tmp_path: Path, model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = SimpleNamespace(table=lambda quiet=False: "TABLE", outputs=["y"], notes=["a note"], passed=True,
                             verdict="PASS", dest_device="cpu", source="onnx", dest="onnx", to_json=lambda: "{}")
    monkeypatch.setattr(api, "verify", lambda *a, **k: report)
    code, out, err = _run("check", str(model), "--against", str(model), "-q")
    assert code == 0, err
    assert out.splitlines()[-1] == "OK check onnx:onnx | 1 output | parity PASS (cpu; 1 NOTE: see above)"


# ---- --accept when parity failed: a baseline that did not exist is "not written", not "unchanged"
def test_check_accept_without_a_baseline_file(tmp_path: Path, model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = SimpleNamespace(table=lambda quiet=False: "TABLE", outputs=["y"], notes=[], passed=False, verdict="FAIL",
                             dest_device="cpu", source="onnx", dest="onnx", to_json=lambda: "{}")
    monkeypatch.setattr(api, "verify", lambda *a, **k: report)
    base = tmp_path / "accepted.json"
    code, _, err = _run("check", str(model), "--against", str(model), "--baseline", str(base), "--accept")
    assert code == 1 and f"{base} was not written" in err and "unchanged" not in err, err


def test_batch_accept_without_a_baseline_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from convert import batch

    row = SimpleNamespace(verdict=batch.ERROR)
    result = SimpleNamespace(rows=[row], notes=[], table=lambda quiet=False: "TABLE", summary_line=lambda: "FAIL batch",
                             exit_status=2)
    monkeypatch.setattr(batch, "load_manifest", lambda path: SimpleNamespace(models=[1], output=tmp_path / "out"))
    monkeypatch.setattr(batch, "run_batch", lambda *a, **k: result)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    base = tmp_path / "accepted.json"
    code, _, err = _run("batch", str(tmp_path / "m.toml"), "-q", "--baseline", str(base), "--accept")
    assert code == 2 and f"{base} was not written" in err and "unchanged" not in err, err
    base.write_text("{}")
    code, _, err = _run("batch", str(tmp_path / "m.toml"), "-q", "--baseline", str(base), "--accept")
    assert f"{base} is unchanged" in err, err


# ---- -o with missing folders: made, and said, by both exporters; removed again if writing fails
@pytest.mark.parametrize(("out", "made", "files"), [("nd/sub/x.onnx", "nd/sub", ["x.onnx"]),
                                                     ("nd/sub/x.prototxt", "nd/sub", ["x.caffemodel", "x.prototxt"]),
                                                     ("nd/", "nd", ["m.onnx"])])
def test_missing_output_folders_are_made_for_every_exporter(tmp_path: Path, model: Path, out: str, made: str,
                                                            files: list[str]) -> None:
    dst = "caffe" if out.endswith(".prototxt") else "onnx"
    code, _, err = _run(str(model), "--to", dst, "-o", f"{tmp_path}/{out}", "--no-check")
    assert code == 0, err
    assert f"convert: note: made the folder '{tmp_path / made}' for the output" in err, err
    assert sorted(p.name for p in (tmp_path / "nd").rglob("*") if p.is_file()) == files


def test_folders_made_for_an_output_that_failed_are_removed(tmp_path: Path) -> None:
    def full_disk() -> list[Path]:
        raise OSError(errno.ENOSPC, "No space left on device")

    target = tmp_path / "nd" / "sub" / "x.onnx"
    with pytest.raises(ir.ExportError, match="the disk is full"):
        api._write_making_folders(target, ir.Options(), full_disk)
    assert list(tmp_path.iterdir()) == []


def test_a_model_folder_is_recognised_without_from(tmp_path: Path) -> None:
    """A SavedModel folder (and a Paddle model folder) is told by its contents, as files are, so
    `convert inspect FOLDER` needs no --from; a folder of nothing known is still refused by name."""
    from convert.formats import detect_format
    from convert.ir import UsageError

    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "saved_model.pb").write_bytes(b"")
    paddle = tmp_path / "inference"
    paddle.mkdir()
    (paddle / "model.pdmodel").write_bytes(b"")
    assert detect_format([saved]) == "tensorflow"
    assert detect_format([paddle]) == "paddle"
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(UsageError, match="cannot tell the format"):
        detect_format([other])


def test_inspect_shows_an_opset_only_for_onnx_files(tmp_path: Path, model: Path) -> None:
    """An opset is an ONNX file's own; a Caffe model has none (#33 showed "opset 17", our IR's)."""
    code, out, _ = _run("inspect", str(model))
    assert code == 0 and "[onnx]  opset " in out.splitlines()[0], out
    written = api.convert([model], to="caffe", out=tmp_path / "c.prototxt", check=False).outputs
    code, out, _ = _run("inspect", *(str(p) for p in written))
    assert code == 0 and out.splitlines()[0].rstrip().endswith("[caffe]"), out  # nothing after the format
