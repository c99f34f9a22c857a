"""Shared helpers for the benchmarks: run a snippet in a fresh process and measure it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The child samples its own RssAnon and reads VmHWM (peak resident set, file-backed pages included).
_WRAPPER = """
import json, sys, threading, time
sys.path.insert(0, {tests!r})
import rss
def _hwm():
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM:'):
            return int(line.split()[1]) * 1024
    return 0
_t0 = time.perf_counter()
with rss.PeakRssAnon() as _peak:
{body}
_dt = time.perf_counter() - _t0
print('@@MEASURE@@' + json.dumps({{'seconds': _dt, 'rss_anon_peak': _peak.peak + _peak.start, 'vm_hwm': _hwm()}}))
"""


@dataclass
class Measurement:
    """Wall time of the measured block, peak anonymous RSS and peak RSS of the process."""

    seconds: float
    rss_anon_peak: int
    vm_hwm: int
    ok: bool = True
    error: str = ""


def measure(body: str, *, timeout: int = 1800) -> Measurement:
    """Run ``body`` (Python source) in a fresh interpreter and measure it."""
    code = _WRAPPER.format(tests=str(ROOT / "tests"), body=textwrap.indent(textwrap.dedent(body), "    "))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    for line in r.stdout.splitlines():
        if line.startswith("@@MEASURE@@"):
            return Measurement(**json.loads(line[len("@@MEASURE@@"):]))
    return Measurement(0.0, 0, 0, ok=False, error=(r.stderr.strip().splitlines() or ["failed"])[-1])


def user_env(*, toolkit_on_path: bool = False) -> dict[str, str]:
    """The environment of a timed process, as a user's: with Python's bytecode cache.

    pip compiles an installed package's modules at install (torch's and onnx's too); a machine that
    switches the cache off (PYTHONDONTWRITEBYTECODE, as this one does) would make every run of ours
    compile the toolkit again, 35-40 ms that a user does not pay. ``toolkit_on_path``: the checkout
    first on PYTHONPATH (a child that imports ``convert`` from it).
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if toolkit_on_path:
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    return env


def compile_toolkit() -> None:
    """Write the toolkit's bytecode cache before the first timed run (see ``user_env``), and its format
    catalog (convert/catalog.py), which a user's first command writes: later ones read it."""
    import compileall

    compileall.compile_dir(str(ROOT / "convert"), quiet=1)
    subprocess.run([sys.executable, "-m", "convert", "formats"], capture_output=True, check=True,
                   env=user_env(toolkit_on_path=True), timeout=600)


def timed(cmd: list[str]) -> float:
    """Wall time of a command."""
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0


def gib(n: float) -> str:
    return f"{n / 1024**3:.2f} GiB"


def mib(n: float) -> str:
    return f"{n / 1024**2:.1f} MiB"


# A child's ``ru_maxrss`` (from ``wait4``) is at least the peak RSS its parent had when it forked:
# Linux carries the pre-exec high-water mark into the exec'd program's accounting. A benchmark
# that has run ONNX Runtime sessions on big models would thus report its own peak for every later
# child. Children are therefore started by this small launcher, itself started before the
# benchmark grows, and each reports its own peak.
_LAUNCHER = """
import json, os, subprocess, sys, time
for line in sys.stdin:
    job = json.loads(line)
    with open(job["stderr"], "wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(job["cmd"], stdout=subprocess.DEVNULL, stderr=err, env=job["env"], cwd=job["cwd"])
        _, status, usage = os.wait4(proc.pid, 0)
    print(json.dumps({"seconds": time.perf_counter() - t0, "exit": os.waitstatus_to_exitcode(status),
                      "peak_rss_mib": usage.ru_maxrss / 1024}), flush=True)
"""


class Launcher:
    """Run commands from a small helper process and return each one's wall time, exit and peak RSS."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)

    def run(self, cmd: list[str], *, env: dict[str, str] | None, cwd: Path, stderr: Path) -> dict[str, float]:
        """Run ``cmd`` to completion; its stderr goes to ``stderr``."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        job = {"cmd": cmd, "env": env, "cwd": str(cwd), "stderr": str(stderr)}
        self._proc.stdin.write(json.dumps(job) + "\n")
        self._proc.stdin.flush()
        return json.loads(self._proc.stdout.readline())

    def close(self) -> None:
        """Stop the helper process."""
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait()
