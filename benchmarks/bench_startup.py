"""CPU time of the commands that need no model (#30 goal 1: <= 0.15 s each), and of their imports.

    python benchmarks/bench_startup.py [--runs 7] [--cold] [--root CHECKOUT]

Runs each command in a fresh interpreter several times and prints the median and the minimum of
its CPU time (user + sys of the child, from ``resource.getrusage``), next to ``python -c pass`` in
the same run: absolute times are noisy on a shared machine, the ratio much less. The command runs
as the console script does (``from convert.cli import main; main()``), without pyenv's shim.

The catalog of the formats is cached per user (convert/catalog.py): the first command after an
edit, upgrade or install rebuilds it (``--cold`` measures that first run, with an empty cache).
``--root`` measures another checkout of the project (``git archive HEAD~1 | tar -x -C /tmp/old``)
in the same run, for a before/after table.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_SCRIPT = "import sys; sys.argv[0] = 'convert'; from convert.cli import main; main()"

COMMANDS: list[tuple[str, list[str]]] = [
    ("python -c pass", [sys.executable, "-c", "pass"]),
    ("import convert", [sys.executable, "-c", "import convert"]),
    ("import convert.cli", [sys.executable, "-c", "import convert.cli"]),
    ("convert --help", [sys.executable, "-c", _SCRIPT, "--help"]),
    ("convert --version", [sys.executable, "-c", _SCRIPT, "--version"]),
    ("convert formats", [sys.executable, "-c", _SCRIPT, "formats"]),
    ("convert ops onnx", [sys.executable, "-c", _SCRIPT, "ops", "onnx"]),
    ("convert help darknet", [sys.executable, "-c", _SCRIPT, "help", "darknet"]),
    ("refusal: unknown route", [sys.executable, "-c", _SCRIPT, "nosuch:onnx", "bench_startup.py"]),
]


def cpu_seconds(cmd: list[str], env: dict[str, str]) -> float:
    """Run ``cmd`` to completion and return the CPU time (user + sys) it used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=Path(__file__).parent,
                   check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--cold", action="store_true", help="also time the first run with an empty catalog cache")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to measure (default: this one)")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(args.root.resolve())}
    print(f"checkout: {args.root.resolve()}")
    with tempfile.TemporaryDirectory() as cache:
        env["XDG_CACHE_HOME"] = cache
        if args.cold:
            cold = cpu_seconds(COMMANDS[3][1], env)  # builds the catalog
            print(f"{'convert --help (empty cache)':28s} {cold:6.3f} s (once: the catalog is built and cached)")
        else:
            cpu_seconds(COMMANDS[3][1], env)  # warm the catalog cache
        base = 0.0
        print(f"{'command':28s} {'median':>8s} {'min':>8s} {'x pass':>7s}   (CPU s, {args.runs} runs)")
        for name, cmd in COMMANDS:
            times = [cpu_seconds(cmd, env) for _ in range(args.runs)]
            median = statistics.median(times)
            base = base or median
            print(f"{name:28s} {median:8.3f} {min(times):8.3f} {median / base:7.1f}")


if __name__ == "__main__":
    main()
