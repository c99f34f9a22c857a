"""Ctrl-C during a conversion leaves nothing at the output path."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_interrupt_leaves_nothing_behind(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "models"))
    import large_onnx

    src = large_onnx.build(tmp_path / "src", n=8192, layers=4)  # 1 GiB, sparse
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "convert", "onnx:onnx", str(src), "-o", str(out_dir / "m.onnx"),
         "--external-data", "--no-check"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    # wait until the writer has started (its temporary folder appears), then interrupt
    deadline = time.time() + 60
    while time.time() < deadline and not any(out_dir.iterdir()) and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the conversion finished before the interrupt arrived")
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert list(out_dir.iterdir()) == []


@pytest.mark.slow
def test_sigterm_is_handled_like_ctrl_c(tmp_path: Path) -> None:
    """SIGTERM used to kill the process where it stood, leaving the writer's .tmp folder behind."""
    sys.path.insert(0, str(ROOT / "models"))
    import large_onnx

    src = large_onnx.build(tmp_path / "src", n=8192, layers=4)  # 1 GiB, sparse
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "convert", "onnx:onnx", str(src), "-o", str(out_dir / "m.onnx"),
         "--external-data", "--no-check"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.time() + 60
    while time.time() < deadline and not any(out_dir.iterdir()) and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the conversion finished before the interrupt arrived")
    assert proc.returncode == 143, err
    assert "terminated; nothing was left at the output path" in err and "Traceback" not in err
    assert list(out_dir.iterdir()) == []


# The parity check is made to receive the signal itself (fault injection), so the test does not
# depend on timing: the interrupt arrives after the output is in place.
_PARITY_INTERRUPTED = """
import os, signal, sys, time
import convert.parity
SIG = getattr(signal, sys.argv.pop(1))
def run_parity(*args, **kwargs):
    os.kill(os.getpid(), SIG)
    time.sleep(30)
convert.parity.run_parity = run_parity  # the API imports the check where it runs it
from convert.cli import main
main(sys.argv[1:])
"""


@pytest.mark.parametrize(("sig", "code", "word"), [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "terminated")])
def test_interrupt_during_parity_keeps_the_output_and_says_so(tmp_path: Path, sig: str, code: int,
                                                              word: str) -> None:
    pytest.importorskip("onnxruntime")
    import onnx
    from onnx import parser

    src = tmp_path / "m.onnx"
    onnx.save(parser.parse_model('<ir_version: 8, opset_import: ["" : 17]> g (float[1, 4] x) => (float[1, 4] y) '
                                 "{ y = Relu (x) }"), src)
    out = tmp_path / "o.onnx"
    result = subprocess.run([sys.executable, "-c", _PARITY_INTERRUPTED, sig, "onnx:onnx", str(src), "-o", str(out)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == code, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("convert: error:")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"{word} during the parity check" in lines[0] and "NOT checked" in lines[0] and str(out) in lines[0]
    assert "nothing was left" not in result.stderr
    assert out.is_file()  # the message is true: the output is there
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


# A meta-path finder that raises KeyboardInterrupt when the module $CTRL_C_AT is imported: Ctrl-C
# at start-up (the command imports convert.cli's command modules; `import convert` the error classes).
_SITECUSTOMIZE = """
import os, sys
class _CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == os.environ.get("CTRL_C_AT"):
            raise KeyboardInterrupt
        return None
sys.meta_path.insert(0, _CtrlC())
"""


@pytest.mark.parametrize("how", ["python -m convert", "console script"])
def test_ctrl_c_during_start_up_imports_is_one_line(tmp_path: Path, how: str) -> None:
    import os

    (tmp_path / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "CTRL_C_AT": "convert.cli.cmd_convert"}
    if how == "python -m convert":
        cmd = [sys.executable, "-m", "convert", "formats"]
    else:  # what pip's generated `convert` script does
        cmd = [sys.executable, "-c", "import sys; sys.argv[0] = '/usr/local/bin/convert'; "
               "from convert.cli import main; sys.exit(main())", "formats"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert result.returncode == 130, result.stderr
    assert result.stderr.strip() == "convert: error: interrupted while starting; nothing was written"


def test_importing_the_package_keeps_keyboard_interrupt(tmp_path: Path) -> None:
    """A program that imports convert gets its KeyboardInterrupt unchanged."""
    import os

    (tmp_path / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "CTRL_C_AT": "convert._errors"}
    result = subprocess.run([sys.executable, "-c", "import convert"], capture_output=True, text=True, timeout=120,
                            env=env, cwd=tmp_path)
    assert result.returncode != 130 and "KeyboardInterrupt" in result.stderr
