"""The local pool: a killed worker's model runs once more; `convert check --baseline`; worst elements; progress."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from batch_helpers import KILLED, kill_once, run_cli, write_zoo

from convert.batch import ERROR, PASS, Event, ModelResult, load_manifest, run_local
from convert.parity import compare_one


def test_killed_worker_is_retried_once_and_reported(tmp_path: Path) -> None:
    manifest = load_manifest(write_zoo(tmp_path, KILLED))
    events: list[Event] = []
    rows = run_local(manifest.models, tmp_path / "out", workers=2, on_event=events.append, work=kill_once)
    cnn, always = rows
    assert (cnn.name, cnn.verdict, cnn.attempts) == ("cnn", PASS, 2)  # died once, converted on the retry
    assert cnn.retry_reason == "its worker killed by SIGKILL while converting"
    # The same graph run twice: equal up to the summation order of ORT's threads (1.5e-8 seen in CI).
    assert cnn.report is not None and cnn.report.outputs[0].rel_to_scale <= 1e-6
    assert (always.verdict, always.attempts) == (ERROR, 2)
    assert always.error == "its worker killed by SIGKILL while converting, and again on the retry"
    assert [e.name for e in events if e.kind == "done"].count("cnn") == 1
    assert sum(e.kind == "started" for e in events) == 4  # each model twice


def test_check_against_a_baseline(tmp_path: Path) -> None:
    """`convert check --baseline`: the accepted --report of one pair; a 1000x closer baseline is a regression."""
    write_zoo(tmp_path)
    r = run_cli("onnx:caffe", "simple.onnx", "-o", "s.prototxt", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    args = ("check", "onnx:caffe", "simple.onnx", "--against", "s.prototxt", "--against", "s.caffemodel",
            "--baseline", "base.json", "--regression-floor", "1e-12")
    r = run_cli(*args, "--accept", cwd=tmp_path)
    assert r.returncode == 0 and "accepted this run as the baseline base.json" in r.stderr, r.stderr
    base = json.loads((tmp_path / "base.json").read_text())
    err = base["outputs"][0]["rel_to_scale"]
    assert 1e-8 < err < 1e-4, "the test needs a conversion with a small non-zero error"
    base["outputs"][0]["rel_to_scale"] = err / 1000
    (tmp_path / "base.json").write_text(json.dumps(base))
    r = run_cli(*args, cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert "baseline: output 'y' REGRESSED" in r.stdout
    assert r.stdout.splitlines()[-1].endswith("| REGRESSED vs base.json")


def test_worst_element_is_the_largest_difference() -> None:
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((2, 3, 4)).astype(np.float32)
    got = ref.copy()
    got[1, 2, 3] += 0.5
    got[0, 1, 1] -= 0.25
    out = compare_one("y", ref, "y", got, 1e-4, 1e-3)
    assert out.worst_index == (1, 2, 3)
    assert (out.worst_ref, out.worst_got) == (float(ref[1, 2, 3]), float(got[1, 2, 3]))
    assert out.max_abs == pytest.approx(0.5, rel=1e-6)


def test_progress_on_a_terminal_draws_bars(capsys: pytest.CaptureFixture[str]) -> None:
    from convert.cli import _BatchProgress

    progress = _BatchProgress(2, tty=True)
    progress(Event("started", 0, "a", slot=0))
    progress(Event("progress", 0, "a", slot=0, step="write weights", done=5, total=10))
    progress(Event("done", 0, "a", slot=0, result=ModelResult("a", "onnx:onnx", PASS, 1.0, 100 << 20)))
    progress.close()
    err = capsys.readouterr().err
    assert "batch:" in err and "[1/2] PASS      a  onnx:onnx" in err and "write weights" in err
    assert sys.stderr is not None


def test_onnx_runtime_takes_the_workers_thread_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pool workers set OMP_NUM_THREADS = cores // workers; ONNX Runtime's own pool follows it."""
    from convert.parity.runtimes.onnxruntime import OnnxRuntime

    write_zoo(tmp_path, KILLED)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert OnnxRuntime(tmp_path / "cnn.onnx").session.get_session_options().intra_op_num_threads == 1
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert OnnxRuntime(tmp_path / "cnn.onnx").session.get_session_options().intra_op_num_threads == 0  # ORT's default


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="Linux only (/proc)")
def test_sigterm_stops_the_workers_and_says_what_finished(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import time

    from batch_helpers import ROOT

    write_zoo(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "convert", "batch", "models.toml", "-j", "2"], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    workers: list[int] = []
    while len(workers) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
        workers = [p for p in _children(proc.pid) if "multiprocessing" in Path(f"/proc/{p}/cmdline").read_text()]
    assert proc.poll() is None, "the batch finished before the test could stop it"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "convert: error: terminated after " in err and "no report was written" in err
    time.sleep(0.5)
    assert workers and not [p for p in workers if _alive(p)]


def test_a_model_past_its_timeout_is_killed_and_the_batch_goes_on(tmp_path: Path) -> None:
    manifest = load_manifest(write_zoo(tmp_path, """\
[[models]]
name = "hurried"
route = "onnx:onnx"
files = "cnn.onnx"
timeout = 0.001

[[models]]
name = "cnn"
route = "onnx:onnx"
files = "cnn.onnx"
"""))
    hurried, cnn = run_local(manifest.models, tmp_path / "out", workers=1)
    assert (hurried.verdict, hurried.attempts) == (ERROR, 1)  # a hang is not retried
    assert hurried.error == "timed out after 0.001 s (timeout = 0.001); its worker was killed"
    assert cnn.verdict == PASS  # on a fresh worker
