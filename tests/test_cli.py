"""The command line through a real shell: routes, exit codes, one-line errors, nothing left behind."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import models_onnx
import onnx
import pytest

PY = shlex.quote(sys.executable)


def sh(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in bash, with `convert` meaning this interpreter's CLI."""
    script = f"convert() {{ {PY} -m convert \"$@\"; }}\n{command}"
    return subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "m.onnx"
    onnx.save(models_onnx.conv_net(), str(path))
    return path


def test_quoted_route_converts_and_prints_parity(model: Path, tmp_path: Path) -> None:
    r = sh("convert 'onnx->onnx' m.onnx -o out.onnx --opset 13", tmp_path)
    assert r.returncode == 0, r.stderr
    assert "PASS: 1/1 outputs" in r.stdout
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("OK onnx:onnx | ") and "out.onnx" in last and "parity PASS (CPUExecutionProvider)" in last
    assert (tmp_path / "out.onnx").exists()


@pytest.mark.parametrize("route", ["onnx:onnx", "--from onnx --to onnx"], ids=["colon", "from-to"])
def test_other_route_spellings(model: Path, tmp_path: Path, route: str) -> None:
    args = f"{route} m.onnx" if ":" in route else f"m.onnx {route}"
    r = sh(f"convert {args} -o o.onnx -q", tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "o.onnx").exists()


def test_unquoted_route_is_recovered(model: Path, tmp_path: Path) -> None:
    # bash reads `onnx->onnx` as `onnx-` with stdout redirected into a new file named `onnx`.
    r = sh("convert onnx->onnx m.onnx -o o.onnx", tmp_path)
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "onnx").exists(), "the file the shell created must be removed"
    assert (tmp_path / "o.onnx").exists()
    assert "quote the route" in r.stderr and "'onnx->onnx'" in r.stderr
    assert "OK onnx:onnx" in r.stderr  # the rest of the run went to the terminal (stderr here)


def test_cut_route_without_recovery_says_how_to_quote(model: Path, tmp_path: Path) -> None:
    r = sh("convert onnx- m.onnx -o o.onnx", tmp_path)
    assert r.returncode == 2
    assert "quote the route" in r.stderr and "onnx:onnx" in r.stderr
    assert not (tmp_path / "o.onnx").exists()


def test_report_json(model: Path, tmp_path: Path) -> None:
    r = sh("convert onnx:onnx m.onnx -o o.onnx --report rep.json", tmp_path)
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "rep.json").read_text())
    assert report["passed"] is True
    assert report["dest_device"] == "CPUExecutionProvider"
    out = report["outputs"][0]
    assert out["max_abs"] < 1e-4 and out["cosine"] > 0.99999


def test_user_inputs_npz(model: Path, tmp_path: Path) -> None:
    import numpy as np

    np.savez(tmp_path / "in.npz", x=np.ones((1, 3, 32, 32), np.float32))
    r = sh("convert onnx:onnx m.onnx -o o.onnx --inputs in.npz --report rep.json", tmp_path)
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "rep.json").read_text())
    assert report["seed"] is None and report["inputs"] == {"x": [1, 3, 32, 32]}
    np.savez(tmp_path / "bad.npz", a=np.ones(3), b=np.ones(3))
    r = sh("convert onnx:onnx m.onnx -o o2.onnx --inputs bad.npz", tmp_path)
    assert r.returncode == 2 and "has 2 arrays, the model takes 1" in r.stderr
    assert not (tmp_path / "o2.onnx").exists()


def test_parity_failure_exits_1(model: Path, tmp_path: Path) -> None:
    # a "converted" model that computes something else: same graph, other weights
    onnx.save(models_onnx.conv_net(seed=1), str(tmp_path / "wrong.onnx"))
    r = sh("convert check m.onnx --against wrong.onnx", tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAIL" in r.stdout and r.stdout.strip().splitlines()[-1].startswith("FAIL check onnx:onnx")


@pytest.mark.parametrize(
    ("setup", "words"),
    [
        ("printf 'not a model' > bad.onnx", ["bad.onnx", "ONNX"]),
        ("head -c 300 m.onnx > trunc.onnx && mv trunc.onnx bad.onnx", ["bad.onnx", "truncated"]),
        ("true", ["absent.onnx", "no such file"]),
    ],
    ids=["not-onnx", "truncated", "missing"],
)
def test_bad_input_is_one_line_exit_2(model: Path, tmp_path: Path, setup: str, words: list[str]) -> None:
    name = "absent.onnx" if "absent.onnx" in words else "bad.onnx"
    r = sh(f"{setup} && convert onnx:onnx {name} -o o.onnx", tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("convert: error: "), r.stderr
    assert "Traceback" not in r.stderr
    for word in words:
        assert word in lines[0]
    assert not (tmp_path / "o.onnx").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".o.onnx")]


def test_debug_shows_traceback(tmp_path: Path) -> None:
    (tmp_path / "bad.onnx").write_text("nope")
    r = sh("convert onnx:onnx bad.onnx -o o.onnx --debug", tmp_path)
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_unknown_formats_and_options(model: Path, tmp_path: Path) -> None:
    r = sh("convert onnx:tflite m.onnx", tmp_path)
    assert r.returncode == 2 and "unknown destination format 'tflite'" in r.stderr
    r = sh("convert onnx:onnx m.onnx --no-such-flag", tmp_path)
    assert r.returncode == 2 and "no-such-flag" in r.stderr


def test_output_would_overwrite_input(model: Path, tmp_path: Path) -> None:
    r = sh("convert onnx:onnx m.onnx -o m.onnx", tmp_path)
    assert r.returncode == 2 and "overwrite the input" in r.stderr


def test_check_inspect_formats_ops(model: Path, tmp_path: Path) -> None:
    assert sh("convert onnx:onnx m.onnx -o o.onnx -q", tmp_path).returncode == 0
    r = sh("convert check m.onnx --against o.onnx", tmp_path)
    assert r.returncode == 0 and "OK check onnx:onnx" in r.stdout, r.stderr
    r = sh("convert inspect m.onnx", tmp_path)
    assert r.returncode == 0
    assert "x: FLOAT 1x3x32x32" in r.stdout and "Conv" in r.stdout and "parameters:" in r.stdout
    r = sh("convert formats", tmp_path)
    assert r.returncode == 0 and "onnx->onnx" in r.stdout
    r = sh("convert ops onnx", tmp_path)
    assert r.returncode == 0 and "Conv" in r.stdout
    r = sh("convert ops nosuch", tmp_path)
    assert r.returncode == 2


def test_inspect_every_format(model: Path, tmp_path: Path) -> None:
    """`convert inspect` reads each source format (Caffe, Darknet and PyTorch where available)."""
    root = Path(__file__).resolve().parents[1]
    onnx.save(models_onnx.simple_cnn(), str(tmp_path / "cnn.onnx"))
    r = sh("convert onnx:caffe cnn.onnx -o net.prototxt -q", tmp_path)
    assert r.returncode == 0, r.stderr
    cases = [("net.prototxt net.caffemodel", "[caffe]", "x: FLOAT 1x3x32x32")]
    tiny = Path("/usr/share/darknet/cfg/yolov3-tiny.cfg")
    if tiny.exists():
        assert sh(f"convert random-weights darknet {tiny} -o yt.weights", tmp_path).returncode == 0
        cases.append((f"{tiny} yt.weights", "[darknet]", "FLOAT 1x255x13x13"))
    try:
        import torch  # noqa: F401

        cases.append((str(root / "models" / "pytorch" / "sample.pt"), "[pytorch]", "output: FLOAT 1x10"))
    except ImportError:
        pass
    for args, fmt, words in cases:
        r = sh(f"convert inspect {args}", tmp_path)
        assert r.returncode == 0, r.stderr
        assert fmt in r.stdout and words in r.stdout and "parameters:" in r.stdout, r.stdout


def test_help_teaches_and_imports_no_framework(tmp_path: Path) -> None:
    code = ("import sys, runpy; sys.argv=['convert','--help']\n"
            "try:\n    runpy.run_module('convert', run_name='__main__')\nexcept SystemExit: pass\n"
            "bad=[m for m in ('torch','paddle','cv2','tensorflow') if m in sys.modules]\n"
            "print('FRAMEWORKS', bad)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "FRAMEWORKS []" in r.stdout, r.stdout[-500:] + r.stderr[-2000:]
    for words in ("Examples:", "--opset", "--check / --no-check", "Exit status", "convert check"):
        assert words in r.stdout


def test_onnx_conversion_imports_no_framework(model: Path, tmp_path: Path) -> None:
    code = ("import sys, convert\n"
            f"convert.convert({str(model)!r}, to='onnx', out={str(tmp_path / 'o.onnx')!r})\n"
            "print('FRAMEWORKS', [m for m in ('torch','paddle','cv2','tensorflow') if m in sys.modules])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "FRAMEWORKS []" in r.stdout, r.stderr[-2000:]


def test_console_script_is_installed(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "convert"
    if not script.exists():
        pytest.skip("not installed as a package here")
    r = subprocess.run([str(script), "formats"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "routes:" in r.stdout
