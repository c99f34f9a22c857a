"""Outputs that cannot be written: one line, exit 2, before converting, nothing left behind (#11).

We run as root in CI, where a chmod'ed folder is still writable; the cases use what root cannot
write either: a path through a regular file, /proc, /sys (read-only), and a simulated full disk.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from convert.cli import cli

FILE_AS_PARENT = "is a file, not a folder"
NO_NEW_FILES = "does not take new files"


def _model(tmp: Path) -> Path:
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
                              [numpy_helper.from_array(np.ones((2, 2), np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp / "m.onnx"
    onnx.save(model, path)
    return path


def _run(*args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, [ln for ln in result.stderr.splitlines() if ln.startswith("convert: error:")]


def _read_only_folder(tmp: Path) -> Path:
    if os.geteuid() != 0:
        folder = tmp / "ro"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    return Path("/sys")  # read-only for root too (sysfs takes no new files)


@pytest.mark.parametrize("route", ["onnx:onnx", "onnx:caffe"])
@pytest.mark.parametrize("case", ["parent-is-a-file", "parent-is-a-file-slash", "proc-self", "read-only-folder"])
def test_unwritable_output_is_one_line(tmp_path: Path, route: str, case: str) -> None:
    src = _model(tmp_path)
    (tmp_path / "afile").write_text("x")
    out, words = {
        "parent-is-a-file": (str(tmp_path / "afile" / "o.onnx"), FILE_AS_PARENT),
        "parent-is-a-file-slash": (str(tmp_path / "afile") + "/", FILE_AS_PARENT),
        "proc-self": ("/proc/self", NO_NEW_FILES),
        "read-only-folder": (str(_read_only_folder(tmp_path) / "o.onnx"), NO_NEW_FILES),
    }[case]
    code, errors = _run(route, str(src), "-o", out, "--no-check")
    assert code == 2 and len(errors) == 1, errors
    assert words in errors[0] and "cannot write the output" in errors[0], errors
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "m.onnx"]


@pytest.mark.parametrize("case", ["parent-is-a-file", "proc", "read-only-folder", "a-folder"])
def test_unwritable_report_is_refused_before_converting(tmp_path: Path, case: str) -> None:
    src = _model(tmp_path)
    (tmp_path / "afile").write_text("x")
    report, words = {
        "parent-is-a-file": (str(tmp_path / "afile" / "r.json"), FILE_AS_PARENT),
        "proc": ("/proc/r.json", NO_NEW_FILES),
        "read-only-folder": (str(_read_only_folder(tmp_path) / "r.json"), NO_NEW_FILES),
        "a-folder": (str(tmp_path), "it is a folder"),
    }[case]
    code, errors = _run("onnx:onnx", str(src), "-o", str(tmp_path / "o.onnx"), "--report", report)
    assert code == 2 and len(errors) == 1 and words in errors[0] and "the report" in errors[0], errors
    assert not (tmp_path / "o.onnx").exists()


@pytest.mark.parametrize("route", ["onnx:onnx", "onnx:caffe"])
def test_full_disk_is_one_line_and_leaves_nothing(tmp_path: Path, route: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC in the middle of writing (simulated: a write that fails as a full disk does)."""
    import builtins

    src = _model(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    real_open = builtins.open
    real_fdopen = os.fdopen

    class FullDisk:
        def __init__(self, fh: object) -> None:
            self.fh = fh

        def __enter__(self) -> FullDisk:
            return self

        def __exit__(self, *exc: object) -> None:
            self.fh.close()  # type: ignore[attr-defined]

        def __getattr__(self, name: str) -> object:
            return getattr(self.fh, name)

        def write(self, data: bytes) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def full_open(file: object, mode: str = "r", *args: object, **kw: object) -> object:
        fh = real_open(file, mode, *args, **kw)  # type: ignore[call-overload]
        return FullDisk(fh) if "w" in mode and str(out) in str(file) else fh

    def full_fdopen(fd: int, mode: str = "r", *args: object, **kw: object) -> object:
        fh = real_fdopen(fd, mode, *args, **kw)  # type: ignore[call-overload]
        return FullDisk(fh) if "w" in mode else fh

    monkeypatch.setattr(builtins, "open", full_open)
    monkeypatch.setattr(os, "fdopen", full_fdopen)
    code, errors = _run(route, str(src), "-o", f"{out}/", "--no-check")
    monkeypatch.undo()
    assert code == 2 and len(errors) == 1, errors
    assert "the disk is full" in errors[0] and "MiB free there" in errors[0], errors
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_written_files_honour_the_umask(tmp_path: Path, umask: int) -> None:
    """Caffe files were 0600 (mkstemp's mode) whatever the umask; ONNX files already followed it."""
    src = _model(tmp_path)
    old = os.umask(umask)
    try:
        for route, out in (("onnx:caffe", "net.prototxt"), ("onnx:onnx", "o.onnx")):
            code, errors = _run(route, str(src), "-o", str(tmp_path / out), "--no-check")
            assert code == 0, errors
    finally:
        os.umask(old)
    for name in ("net.prototxt", "net.caffemodel", "o.onnx"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~umask, name


def test_a_folder_given_as_dot_names_the_output_after_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`convert tensorflow:onnx .` inside a SavedModel wrote '.onnx' (a hidden file named only by its
    suffix; found by the #48 fuzz campaign): the folder's own name is the stem."""
    from types import SimpleNamespace

    from convert._paths import default_output

    folder = tmp_path / "resnet_saved"
    folder.mkdir()
    monkeypatch.chdir(folder)
    spec = SimpleNamespace(suffix=".onnx")
    assert default_output([Path(".")], spec, None) == folder / "resnet_saved.onnx"
    assert default_output([Path(".")], spec, f"{tmp_path / 'out'}/") == tmp_path / "out" / "resnet_saved.onnx"
