"""Start-up (#30 goal 1): what `import convert`, `convert --help` and the other model-free commands import.

Asserts *what* is imported, never how long it takes (benchmarks/bench_startup.py measures that).
onnx-ir imports sympy and numpy when it is imported, so none of these may reach it: the formats'
declarations come from convert.catalog's cache instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from convert import catalog, formats

ROOT = Path(__file__).resolve().parents[1]
HEAVY = {"onnx_ir", "sympy", "numpy", "onnx", "onnxruntime", "torch", "tensorflow", "paddle", "cv2",
         "convert.api", "convert.ir", "convert.parity"}


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}


# Runs `convert ARGS` for each ARGS given (a JSON list) in one process, as the console script does,
# and prints each exit status, then the modules the process imported.
_RUN_ALL = """
import contextlib, io, json, sys
from convert.cli import main
for args in json.loads(sys.argv[1]):
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            main(args)
    except SystemExit as exc:
        print("EXIT", exc.code or 0)
print("MODULES", " ".join(sorted(sys.modules)))
"""


def _imported(tmp_path: Path, *commands: list[str]) -> tuple[list[int], set[str]]:
    """Run the commands in one fresh interpreter; return their exit statuses and the modules imported."""
    r = subprocess.run([sys.executable, "-c", _RUN_ALL, json.dumps(commands)], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path, env=_env(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    return [int(ln.split()[1]) for ln in lines if ln.startswith("EXIT")], set(lines[-1].split()[1:])


def test_importing_the_package_and_the_cli_imports_nothing_heavy(tmp_path: Path) -> None:
    code = "import sys, convert, convert.cli; print(' '.join(sorted(sys.modules)))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=_env(tmp_path))
    assert r.returncode == 0, r.stderr
    assert HEAVY.isdisjoint(r.stdout.split()), sorted(HEAVY & set(r.stdout.split()))
    # ... and nothing was read or cached: the catalog is needed only when a command runs
    assert not (tmp_path / "cache").exists()


def test_model_free_commands_import_nothing_heavy_once_the_catalog_is_cached(tmp_path: Path) -> None:
    codes, names = _imported(tmp_path, ["formats"])  # a cold cache: the catalog is built (and onnx-ir imported)
    assert codes == [0] and "onnx_ir" in names
    assert len(list((tmp_path / "cache" / "convert-toolkit").glob("catalog-*.json"))) == 1
    (tmp_path / "m.onnx").write_bytes(b"")  # refused before it is read
    fine = [["--help"], ["formats"], ["ops", "onnx"], ["ops", "caffe", "--markdown"], ["help"], ["help", "darknet"],
            ["help", "inspect"], ["--version"], ["darknet:onnx", "--help"]]
    refusals = [["nosuch:onnx", "m.onnx"], ["onnx:nosuch", "m.onnx"], ["onnx:onnx"], ["onnx:onnx", "none.onnx"],
                ["onnx:onnx", "m.onnx", "--report", "nodir/r.json"], ["onnx:onnx", "m.onnx", "--input-shape", "x=a"],
                ["onnx:onnx", "m.onnx", "--decode"], ["ops", "nosuch"], ["help", "nosuch"]]
    codes, names = _imported(tmp_path, *fine, *refusals)
    assert codes == [0] * len(fine) + [2] * len(refusals)
    assert HEAVY.isdisjoint(names), sorted(HEAVY & names)


def _forget() -> None:
    """Drop what this process read from the cache file, as a new process would start."""
    catalog._catalog.cache_clear()
    catalog._data.cache_clear()


def test_the_cached_catalog_is_what_the_packages_declare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _forget()
    try:
        cached = catalog.load(formats._BUILTIN)  # built live, written, read back
        assert catalog.cache_path().is_file()
        _forget()
        assert catalog.load(formats._BUILTIN) == cached  # read from the file: the same records
        for name in formats.frontend_names():
            assert cached["frontends"][formats._FRONTENDS[name]] == formats._info_of(formats.frontend(name)), name
        for name in formats.exporter_names():
            assert cached["exporters"][formats._EXPORTERS[name]] == formats._info_of(formats.exporter(name)), name
        for damaged in ("{not json", '{"version": 1, "frontends": {"convert.frontends.onnx": {"name": 1}}}'):
            catalog.cache_path().write_text(damaged)  # a damaged file is rebuilt, not trusted
            _forget()
            assert catalog.load(formats._BUILTIN) == cached
    finally:
        _forget()


def test_the_fingerprint_follows_the_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "a.py"
    src.write_text("x = 1\n")
    monkeypatch.setattr(catalog, "_sources", lambda: [src])
    catalog.fingerprint.cache_clear()
    try:
        first = catalog.fingerprint()
        catalog.fingerprint.cache_clear()
        src.write_text("x = 12\n")  # an edit: another catalog file, built from the packages again
        assert catalog.fingerprint() != first
    finally:
        catalog.fingerprint.cache_clear()


def test_the_fingerprint_follows_install_folders_not_a_scripts_own(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    script_folder, site = tmp_path / "work", tmp_path / "site"
    script_folder.mkdir()
    (site / "pkg-1.0.dist-info").mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "bench"), str(script_folder), str(site)])
    catalog.fingerprint.cache_clear()
    try:
        first = catalog.fingerprint()
        catalog.fingerprint.cache_clear()
        (script_folder / "out.onnx").write_bytes(b"")  # a script writing beside itself: the same catalog
        os.utime(script_folder, ns=(1, 1))
        assert catalog.fingerprint() == first
        catalog.fingerprint.cache_clear()
        (site / "other-2.0.dist-info").mkdir()  # an install: its entry points may be new
        os.utime(site, ns=(2, 2))
        assert catalog.fingerprint() != first
        big = tmp_path / "data"  # too many entries to look through: counted, as every folder was before
        big.mkdir()
        for i in range(catalog._SCAN_MAX + 1):
            (big / f"f{i}").touch()
        assert catalog._holds_installs(str(big)) and not catalog._holds_installs(str(script_folder))
    finally:
        catalog.fingerprint.cache_clear()


def test_the_clis_parity_defaults_are_the_apis_and_the_checks() -> None:
    from convert import api, parity
    from convert.cli import _base

    defaults = (api.DEFAULT_TOL, api.DEFAULT_ATOL, api.DEFAULT_RTOL)
    assert defaults == (_base.DEFAULT_TOL, _base.DEFAULT_ATOL, _base.DEFAULT_RTOL)
    assert defaults == (parity.DEFAULT_TOL, parity.DEFAULT_ATOL, parity.DEFAULT_RTOL)


def test_a_conversion_without_the_check_does_not_import_it(tmp_path: Path) -> None:
    """The parity check (numpy's comparisons, the runtimes' modules) is imported where it runs."""
    code = ("import sys, onnx\n"
            "from onnx import helper, TensorProto\n"
            "g = helper.make_graph([helper.make_node('Relu', ['x'], ['y'])], 'g',\n"
            "    [helper.make_tensor_value_info('x', TensorProto.FLOAT, [1, 4])],\n"
            "    [helper.make_tensor_value_info('y', TensorProto.FLOAT, [1, 4])])\n"
            "m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)], ir_version=8)\n"
            f"onnx.save(m, r'{tmp_path / 'm.onnx'}')\n"
            "import convert\n"
            f"convert.convert(r'{tmp_path / 'm.onnx'}', to='onnx', out=r'{tmp_path / 'o.onnx'}', check=False)\n"
            "assert 'convert.parity' not in sys.modules, 'imported'\n"
            f"report = convert.convert(r'{tmp_path / 'm.onnx'}', to='onnx', out=r'{tmp_path / 'p.onnx'}').report\n"
            "assert report is not None and report.passed and 'convert.parity' in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_public_api_is_still_there_lazily() -> None:
    import convert

    assert callable(convert.convert) and callable(convert.verify) and convert.ParityReport.__name__ == "ParityReport"
    assert issubclass(convert.UsageError, convert.ConvertError)
    from convert import ir

    assert convert.UsageError is ir.UsageError  # one class, however it was imported first
    with pytest.raises(AttributeError):
        _ = convert.no_such_name


# Converts an in-memory module through the API (parity off) in a fresh process and prints whether the
# format catalog's fingerprint or the installed packages' entry points were asked for.
_MODULE_CONVERSION = """
import sys
import torch
import convert
from convert import catalog, formats
result = convert.convert(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()), (torch.rand(2, 4),),
                         to="onnx", out=sys.argv[1], check=False)
print("ROUTE", result.route)
print("CATALOG", catalog.fingerprint.cache_info().currsize, formats._add_entry_points.cache_info().currsize)
"""


def test_a_module_conversion_reads_no_catalog(tmp_path: Path) -> None:
    """The API converting an nn.Module finds the PyTorch frontend and the ONNX exporter among the built-in
    formats: no entry points read, no catalog fingerprint (it stats every source file of the toolkit,
    4 ms of a 0.1 s conversion; docs/performance.md, eighth round)."""
    pytest.importorskip("torch")
    out = subprocess.run([sys.executable, "-c", _MODULE_CONVERSION, str(tmp_path / "m.onnx")], env=_env(tmp_path),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ROUTE pytorch:onnx" in out.stdout and "CATALOG 0 0" in out.stdout, out.stdout
    assert (tmp_path / "m.onnx").stat().st_size > 0
