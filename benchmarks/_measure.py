"""Shared helpers for the benchmarks: run a snippet in a fresh process and measure it."""

from __future__ import annotations

import json
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


def timed(cmd: list[str]) -> float:
    """Wall time of a command."""
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0


def gib(n: float) -> str:
    return f"{n / 1024**3:.2f} GiB"


def mib(n: float) -> str:
    return f"{n / 1024**2:.1f} MiB"
