"""Fast in-process fuzzing at scale: many cases per worker process, each reader's own load + export.

    python tests/fuzz/fastfuzz.py --cases 100000 --minutes 10 --workers 2 --save --stats fuzz.json

The forking harness (``harness.run_case``) runs the whole CLI in a forked child per case, about 3
cases/s. Here each worker process imports the frameworks once and runs many cases in-process
through ``convert.api.convert(paths, to=..., out=dir/, format=..., check=False)``: the same
frontend ``load`` and exporter the CLI calls, without click and the fork. Each case:

- is made deterministically from ``(campaign seed, reader, case number)`` with the mutators of
  ``harness.py`` (1-2 mutations), so the parent can rebuild any case from its number;
- runs under a per-case time limit (``signal.setitimer``; the parent kills a worker that does
  not answer within the limit plus a grace period) and a per-worker address-space limit
  (``RLIMIT_AS``: a blow-up is a ``MemoryError``, not a dead machine);
- is classified: ``success``; ``clean`` (a ``ConvertError``, the CLI's exit 2); ``internal``
  (any other exception, the CLI's exit 3); ``hang``; ``blowup`` (``MemoryError``, or the worker
  killed); ``leftover`` (an error that left files in the output folder).

A worker that dies is restarted at the next case. Every new internal error, hang, blow-up or
leftover is stored under ``tests/fuzz/crashes/`` with ``--save`` (``--per-class``, default 1, per
reader and class), where ``test_crash_corpus.py`` replays it through the CLI. TensorFlow and TFLite cases
are stored as ``known`` (their frontends are not this campaign's to fix; the corpus xfails them).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]

from harness import CRASHES_DIR, Case, Outcome, Seed, load_seeds, mutate, mutators_for, save_case  # noqa: E402

KINDS = ("success", "clean", "internal", "hang", "blowup", "leftover")
GRACE_S = 20.0  # the parent kills a worker this long after a case's own limit has passed
# a worker may map this much beyond what its imports mapped (CONVERT_FUZZ_HEADROOM_MIB: a tighter
# `ulimit -v`, so that running out of address space is exercised, not only reported)
MEMORY_HEADROOM = int(os.environ.get("CONVERT_FUZZ_HEADROOM_MIB", "3072")) * 2**20
# CONVERT_FUZZ_STRUCTURAL=1: the round-three mutators only (harness.mutators_for(structural=True)):
# zip structure, wire-level protobuf field swaps, cycles and forward references, huge and negative dims
STRUCTURAL = os.environ.get("CONVERT_FUZZ_STRUCTURAL", "") == "1"


class _CaseTimeout(BaseException):
    """Raised by the per-case timer (a BaseException: the code under test must not swallow it)."""


def make_case(seed: Seed, contents: dict[str, bytes], campaign: int, index: int) -> Case:
    """Return case ``index`` of ``seed``: 1-2 mutations drawn from a stream keyed by the numbers."""
    rnd = random.Random(f"{campaign}:{seed.name}:{index}")
    case = Case(seed, dict(contents))
    names = sorted(contents)
    for _ in range(rnd.randint(1, 2)):
        file = rnd.choice(names)
        mutator = rnd.choice(mutators_for(file, structural=STRUCTURAL))
        try:
            mutate(case, file, mutator, random.Random(rnd.getrandbits(32)))
        except Exception as exc:  # a mutator that cannot handle this input: the case keeps the file as it was
            case.steps.append(f"{mutator.__name__}({file}) failed: {type(exc).__name__}")
    return case


# ---------------------------------------------------------------------------------------------
# The worker: reads task lines {"start", "count"} on stdin, answers one JSON line per case.
# ---------------------------------------------------------------------------------------------
def _vm_size() -> int:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _import(route: str) -> None:
    from convert import formats

    src, _, dst = route.partition(":")
    formats.frontend(src)
    formats.exporter(dst)
    if src == "pytorch":
        import torch  # noqa: F401
    if src == "paddle":
        from convert.frontends.paddle import ops
    if src == "tensorflow":
        import tensorflow  # noqa: F401

        from convert.frontends.tensorflow import loader, ops  # noqa: F401


def _where(exc: BaseException) -> str:
    """The innermost frame of the traceback inside ``convert/`` (else the innermost): file:function."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/convert/" in f.filename]
    f = (ours or frames or [None])[-1]
    if f is None:
        return "?"
    name = f.filename.split("/convert/", 1)[-1] if "/convert/" in f.filename else Path(f.filename).name
    return f"{name}:{f.name}"


def run_one(route: str, inputs: list[str], outdir: Path, limit: float) -> dict[str, object]:
    """Convert ``inputs`` in this process; return the outcome (kind, why, class signature)."""
    from convert import api, formats
    from convert.ir import ConvertError

    src, _, dst = route.partition(":")
    outdir.mkdir(parents=True, exist_ok=True)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        try:
            api.convert([Path(p) for p in inputs], to=dst, out=str(outdir) + "/", format=src, check=False)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _CaseTimeout:
        return {"kind": "hang", "why": f"still running after {limit:.0f} s", "sig": "hang"}
    except MemoryError as exc:
        return {"kind": "blowup", "why": f"MemoryError at {_where(exc)}", "sig": f"MemoryError {_where(exc)}"}
    except ConvertError as exc:
        left = sorted(p.relative_to(outdir).as_posix() for p in outdir.rglob("*"))
        if left:
            return {"kind": "leftover", "why": f"{type(exc).__name__} but left {left[:5]}",
                    "sig": f"leftover {type(exc).__name__}"}
        return {"kind": "clean"}
    except RecursionError as exc:
        return {"kind": "internal", "why": f"RecursionError at {_where(exc)}", "sig": f"RecursionError {_where(exc)}"}
    except Exception as exc:
        if formats.missing_framework(exc) is not None:
            return {"kind": "clean"}
        root = exc  # the class is where the first exception was raised (a pass wraps what it caught)
        while root.__cause__ is not None and root.__cause__ is not root:
            root = root.__cause__
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        where = _where(root)
        return {"kind": "internal", "why": f"{type(exc).__name__}: {first} (at {where})",
                "sig": f"{type(root).__name__} {where}"}
    return {"kind": "success"}


def _on_alarm(signum: int, frame: object) -> None:
    raise _CaseTimeout


def _scratch(name: str) -> Path:
    """A folder for a worker's cases (in memory where /dev/shm exists: many small files)."""
    shm = "/dev/shm" if Path("/dev/shm").is_dir() else None
    return Path(tempfile.mkdtemp(prefix=f"fastfuzz-{name}-", dir=shm))


def worker(seed_name: str, campaign: int, limit: float, base: Path | None = None) -> None:
    """Serve tasks for one seed until stdin closes (see the module docstring)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    seed = {s.name: s for s in load_seeds(campaign=True)}[seed_name]
    contents = seed.read()
    _import(seed.route)
    limit_as = _vm_size() + MEMORY_HEADROOM
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))
    signal.signal(signal.SIGALRM, _on_alarm)
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)  # frameworks print: keep the reply pipe clean
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    base = base or _scratch(seed_name)  # the parent's, which it removes if this process dies
    try:
        for line in sys.stdin:
            task = json.loads(line)
            for index in range(task["start"], task["start"] + task["count"]):
                case = make_case(seed, contents, campaign, index)
                work = base / str(index)
                from harness import write_case

                inputs = write_case(case, work / "in")
                try:
                    result = run_one(seed.route, inputs, work / "out", limit)
                except MemoryError:
                    result = {"kind": "blowup", "why": "MemoryError", "sig": "MemoryError"}
                shutil.rmtree(work, ignore_errors=True)
                result["i"] = index
                reply.write(json.dumps(result) + "\n")
            reply.write(json.dumps({"done": task["start"]}) + "\n")
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# The parent: keeps N workers busy on one seed, restarts dead ones, tallies, stores failures.
# ---------------------------------------------------------------------------------------------
class _Worker:
    def __init__(self, seed: Seed, campaign: int, limit: float) -> None:
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        self.base = _scratch(seed.name)
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", seed.name,
                                      "--campaign", str(campaign), "--limit", str(limit), "--base", str(self.base)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                     start_new_session=True)
        self.pending: list[int] = []  # case numbers sent and not answered, in order
        self.buf = ""
        self.last = time.monotonic()

    def send(self, start: int, count: int) -> None:
        assert self.proc.stdin is not None
        self.pending.extend(range(start, start + count))
        self.proc.stdin.write(json.dumps({"start": start, "count": count}) + "\n")
        self.proc.stdin.flush()
        self.last = time.monotonic()

    def stop(self) -> int | None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
            return None
        finally:
            self.reap()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.reap()

    def reap(self) -> None:
        """Remove the worker's case folder (a worker that died could not)."""
        shutil.rmtree(self.base, ignore_errors=True)


def campaign_for(seed: Seed, *, cases: int, minutes: float, workers: int, campaign: int, limit: float,
                 save: bool, start: int = 0, per_class: int = 1, log: bool = True) -> dict[str, object]:
    """Run up to ``cases`` cases of ``seed`` (or until ``minutes`` pass); return the tally."""
    tally: Counter[str] = Counter()
    classes: dict[str, dict[str, object]] = {}
    contents = seed.read()
    batch = 50
    next_index = start
    end = start + cases
    t0 = time.monotonic()
    deadline = t0 + minutes * 60
    pool = [_Worker(seed, campaign, limit) for _ in range(workers)]
    last_log = t0

    def record(index: int, result: dict[str, object]) -> None:
        kind = str(result["kind"])
        tally[kind] += 1
        if kind in ("success", "clean"):
            return
        sig = str(result.get("sig", kind))
        entry = classes.setdefault(sig, {"kind": kind, "count": 0, "first": index, "why": result.get("why", ""),
                                         "saved": []})
        entry["count"] = int(entry["count"]) + 1  # type: ignore[call-overload]
        if save and len(entry["saved"]) < per_class:  # type: ignore[arg-type]
            case = make_case(seed, contents, campaign, index)
            outcome = Outcome("crash" if kind != "hang" else "hang", None, "", f"{kind}: {result.get('why', '')}")
            folder = save_case(case, outcome, CRASHES_DIR, per_class=per_class)
            if folder is not None:
                meta = json.loads((folder / "case.json").read_text())
                meta["found_by"] = f"fastfuzz campaign {campaign} case {index}"
                (folder / "case.json").write_text(json.dumps(meta, indent=1) + "\n")
                entry["saved"].append(folder.name)  # type: ignore[attr-defined]

    try:
        for w in pool:
            n = min(batch, end - next_index)
            if n > 0:
                w.send(next_index, n)
                next_index += n
        while any(w.pending for w in pool):
            streams = {w.proc.stdout.fileno(): w for w in pool if w.pending}  # type: ignore[union-attr]
            ready, _, _ = select.select(list(streams), [], [], 1.0)
            now = time.monotonic()
            for fd in ready:
                w = streams[fd]
                chunk = os.read(fd, 65536).decode()
                if not chunk:  # the worker died: the case in flight killed it
                    code = w.proc.wait()
                    w.reap()
                    index = w.pending.pop(0)
                    why = f"worker died (signal {-code})" if code < 0 else f"worker exited {code}"
                    record(index, {"kind": "blowup" if code in (-9, 137) else "internal", "why": why,
                                   "sig": why})
                    rest = w.pending
                    pool[pool.index(w)] = nw = _Worker(seed, campaign, limit)
                    if rest:
                        nw.send(rest[0], len(rest))
                    continue
                w.buf += chunk
                w.last = now
                *lines, w.buf = w.buf.split("\n")
                for line in lines:
                    msg = json.loads(line)
                    if "done" in msg:
                        continue
                    w.pending.remove(int(msg["i"]))
                    record(int(msg["i"]), msg)
            for i, w in enumerate(pool):
                if w.pending and now - w.last > limit + GRACE_S:  # stuck where the timer cannot reach
                    index = w.pending.pop(0)
                    w.kill()
                    record(index, {"kind": "hang", "why": f"no answer after {limit + GRACE_S:.0f} s", "sig": "hang"})
                    rest = w.pending
                    pool[i] = nw = _Worker(seed, campaign, limit)
                    if rest:
                        nw.send(rest[0], len(rest))
            for w in pool:
                if not w.pending and next_index < end and now < deadline:
                    n = min(batch, end - next_index)
                    w.send(next_index, n)
                    next_index += n
            if log and now - last_log > 30:
                last_log = now
                done = sum(tally.values())
                print(f"  {seed.name}: {done} cases, {done / (now - t0):.1f}/s, {dict(tally)}", flush=True)
    finally:
        for w in pool:
            if w.stop() is None:
                pass
    seconds = time.monotonic() - t0
    total = sum(tally.values())
    return {"route": seed.route, "cases": total, **{k: tally[k] for k in KINDS}, "seconds": round(seconds, 1),
            "cases_per_s": round(total / seconds, 1) if seconds else 0.0, "first_case": start,
            "classes": classes}


# ---------------------------------------------------------------------------------------------
# Coverage-guided mode (measured against random mutation; see docs/fuzzing.md)
# ---------------------------------------------------------------------------------------------
class _LineSet:
    """The (file, line) pairs run in ``convert/`` (sys.settrace; Python 3.11 has no sys.monitoring)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.seen: set[tuple[str, int]] = set()
        self._ours: dict[str, bool] = {}

    def _global(self, frame, event, arg):  # type: ignore[no-untyped-def]
        name = frame.f_code.co_filename
        ours = self._ours.get(name)
        if ours is None:
            ours = self._ours[name] = name.startswith(self.root)
        return self._local if ours else None

    def _local(self, frame, event, arg):  # type: ignore[no-untyped-def]
        if event == "line":
            self.seen.add((frame.f_code.co_filename, frame.f_lineno))
        return self._local

    def __enter__(self) -> _LineSet:
        sys.settrace(self._global)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(None)


def guided(seed_name: str, seconds: float, mode: str, campaign: int, limit: float) -> dict[str, object]:
    """Fuzz one seed for ``seconds`` in this process, traced; ``mode`` 'guided' keeps every input that
    ran a new line of ``convert/`` as a parent of later mutants, 'random' mutates the seed only."""
    import convert

    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    seed = {s.name: s for s in load_seeds(campaign=True)}[seed_name]
    _import(seed.route)
    signal.signal(signal.SIGALRM, _on_alarm)
    from harness import write_case

    rnd = random.Random(f"{campaign}:{mode}:{seed_name}")
    corpus = [seed.read()]
    lines = _LineSet(str(Path(convert.__file__).parent))
    classes: Counter[str] = Counter()
    tally: Counter[str] = Counter()
    base = Path(tempfile.mkdtemp(prefix=f"fastfuzz-{mode}-"))
    end = time.monotonic() + seconds
    n = 0
    try:
        while time.monotonic() < end:
            parent = corpus[-1 - min(int(rnd.expovariate(0.1)), len(corpus) - 1)] if mode == "guided" else corpus[0]
            case = Case(seed, dict(parent))
            for _ in range(rnd.randint(1, 2)):
                file = rnd.choice(sorted(parent))
                mutate(case, file, rnd.choice(mutators_for(file, structural=STRUCTURAL)),
                       random.Random(rnd.getrandbits(32)))
            work = base / str(n)
            inputs = write_case(case, work / "in")
            before = len(lines.seen)
            with lines:
                result = run_one(seed.route, inputs, work / "out", limit)
            shutil.rmtree(work, ignore_errors=True)
            n += 1
            tally[str(result["kind"])] += 1
            if result["kind"] not in ("success", "clean"):
                classes[str(result.get("sig", result["kind"]))] += 1
            if mode == "guided" and len(lines.seen) > before:
                corpus.append(case.contents)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return {"seed": seed_name, "mode": mode, "seconds": seconds, "cases": n, "lines": len(lines.seen),
            "corpus": len(corpus), "failing_classes": len(classes), "failing_cases": sum(classes.values()),
            **{k: tally[k] for k in KINDS}, "classes": dict(classes)}


def replay(folders: list[Path], limit: float) -> None:
    """Run each stored case (``crashes/<name>/``) in this process and print its outcome."""
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    signal.signal(signal.SIGALRM, _on_alarm)
    for folder in folders:
        meta = json.loads((folder / "case.json").read_text())
        work = Path(tempfile.mkdtemp(prefix="fastfuzz-replay-"))
        try:
            inputs = [str(folder / f) for f in meta["files"]]
            result = run_one(meta["route"], inputs, work / "out", limit)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(f"{folder.name}: {result['kind']} {result.get('why', '')}", flush=True)


def recheck(stats: Path, campaign: int, limit: float, names: list[str] | None) -> None:
    """Rebuild the first case of each failing class in ``stats`` and print how it ends now."""
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    signal.signal(signal.SIGALRM, _on_alarm)
    seeds = {s.name: s for s in load_seeds(campaign=True)}
    for name, row in json.loads(stats.read_text()).items():
        if names and name not in names:
            continue
        seed = seeds[name]
        contents = seed.read()
        for sig, entry in row["classes"].items():
            case = make_case(seed, contents, campaign, int(entry["first"]))
            work = Path(tempfile.mkdtemp(prefix="fastfuzz-recheck-"))
            try:
                from harness import write_case

                result = run_one(seed.route, write_case(case, work / "in"), work / "out", limit)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            print(f"{name} case {entry['first']} ({entry['kind']} x{entry['count']}: {sig}): now {result['kind']} "
                  f"{result.get('why', '')}", flush=True)


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and run the campaign (or serve as a worker)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--base", help=argparse.SUPPRESS)
    ap.add_argument("--seeds", default="", help="comma-separated seed names (default: all, TF and TFLite included); "
                    "NAME=CASES or NAME=CASES/MINUTES overrides --cases and --minutes for that seed")
    ap.add_argument("--cases", type=int, default=100_000, help="cases per seed (default 100000)")
    ap.add_argument("--minutes", type=float, default=1e9, help="stop each seed after this many minutes")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--campaign", type=int, default=1, help="the campaign seed (cases are numbered within it)")
    ap.add_argument("--start", type=int, default=0, help="the first case number")
    ap.add_argument("--limit", type=float, default=10.0, help="seconds per case before it counts as a hang")
    ap.add_argument("--save", action="store_true", help="store failing inputs under tests/fuzz/crashes/")
    ap.add_argument("--per-class", type=int, default=1, help="inputs stored per reader and failure class")
    ap.add_argument("--stats", help="a JSON file each seed's tally is added to")
    ap.add_argument("--guided", metavar="SEED", help="coverage-guided (or with --mode random, plain) fuzzing of one "
                    "seed in this process for --seconds, traced; prints a JSON line")
    ap.add_argument("--mode", choices=["guided", "random"], default="guided")
    ap.add_argument("--seconds", type=float, default=240.0)
    ap.add_argument("--recheck", metavar="STATS", help="rebuild the first case of every failing class of a --stats "
                    "file from its number and run it in-process (after fixing: what still fails?)")
    ap.add_argument("--replay", nargs="+", metavar="CASE", help="run stored case folders in-process and print how "
                    "each ends (no campaign)")
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.worker, args.campaign, args.limit, Path(args.base) if args.base else None)
        return
    if args.replay:
        replay([Path(p) for p in args.replay], args.limit)
        return
    if args.guided:
        print(json.dumps(guided(args.guided, args.seconds, args.mode, args.campaign, args.limit)), flush=True)
        return
    if args.recheck:
        recheck(Path(args.recheck), args.campaign, args.limit, args.seeds.split(",") if args.seeds else None)
        return
    by_name = {s.name: s for s in load_seeds(campaign=True)}
    plan: list[tuple[Seed, int, float]] = []
    for item in (args.seeds.split(",") if args.seeds else list(by_name)):
        name, _, budget = item.partition("=")
        count, _, minutes = budget.partition("/")
        if name not in by_name:
            raise SystemExit(f"unknown seed '{name}'; seeds: {', '.join(by_name)}")
        plan.append((by_name[name], int(count or args.cases), float(minutes or args.minutes)))
    for seed, cases, minutes in plan:
        print(f"{seed.name} ({seed.route}): up to {cases} cases, {minutes:g} min", flush=True)
        row = campaign_for(seed, cases=cases, minutes=minutes, workers=args.workers,
                           campaign=args.campaign, limit=args.limit, save=args.save, start=args.start,
                           per_class=args.per_class)
        print(json.dumps({k: v for k, v in row.items() if k != "classes"}), flush=True)
        for sig, entry in row["classes"].items():  # type: ignore[attr-defined]
            print(f"    {entry['kind']} x{entry['count']}: {sig} -- {entry['why']} {entry['saved']}", flush=True)
        if args.stats:
            path = Path(args.stats)
            stats = json.loads(path.read_text()) if path.exists() else {}
            stats[seed.name] = row
            path.write_text(json.dumps(stats, indent=1) + "\n")


if __name__ == "__main__":
    main()
