"""The machine's limits are not bugs: Darknet conversions and their check under real limits.

Out of memory, out of address space and a full disk end in one line naming the resource and what
was being done, exit 2 (the conversion) or 1 (its check), with nothing left behind; and the
conversion itself needs no more of them than the model does:

- the slices of a ``.weights`` file share one map of it (onnx-ir mapped the whole file for each
  tensor: yolov3's 366 slices of 236 MiB needed 85 GiB of address space);
- the check streams the weights it matches to the lineage through a pipe (it copied the whole
  file into ``TMPDIR`` first, and a small ``TMPDIR`` failed a conversion that had succeeded);
- ``--random-weights`` draws a large tensor a chunk at a time and refuses, before drawing it, a
  file its folder has no room for (a cfg that asks for terabytes was a ``MemoryError``).

The limits are real: ``RLIMIT_AS`` (``ulimit -v``) in the child process, and a 1 MiB tmpfs as
``TMPDIR`` in a private mount namespace (``unshare``; where this machine allows none, the child's
file size limit, ``RLIMIT_FSIZE``, which fails the same writes with ``EFBIG``).
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from darknet_helpers import ROOT, needs_libdarknet, write_cfg

from convert.frontends.darknet.loader import build_model
from convert.frontends.darknet.random_weights import random_weights_bytes, write_random_weights
from convert.frontends.darknet.weights import ParamRequest, RandomWeights
from convert.ir import Options, TensorProtocol

MIB = 1 << 20
TMPDIR_SIZE = 1 * MIB


def _limits(address_space: int | None = None, file_size: int | None = None) -> Callable[[], None]:
    def apply() -> None:
        if address_space is not None:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        if file_size is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))

    return apply


@functools.cache
def _tmpfs_allowed() -> bool:
    """Whether this machine lets a process mount a tmpfs in a private mount namespace."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt 2>/dev/null "
                            "|| mount -t tmpfs -o size=64k tmpfs /tmp"], capture_output=True, check=False)
    return probe.returncode == 0


def _cli(args: list[str], tmp_path: Path, *, address_space: int | None = None,
         small_tmpdir: bool = False) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run ``convert ARGS`` under the limits; return the result and what the command left in TMPDIR.

    ``small_tmpdir``: TMPDIR is a 1 MiB tmpfs (or, without namespaces, files are limited to 1 MiB).
    """
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    cmd = [sys.executable, "-m", "convert", *args]
    file_size = None
    if small_tmpdir and _tmpfs_allowed():
        left = tmp_path / "tmpdir.left"
        cmd = ["unshare", "-rm", "sh", "-c", f'mount -t tmpfs -o size={TMPDIR_SIZE} tmpfs "$0" || exit 99; "$@"; '
               'rc=$?; ls -A "$0" > "$0.left"; exit $rc', str(tmpdir), *cmd]
    elif small_tmpdir:
        left = tmpdir
        file_size = TMPDIR_SIZE
    else:
        left = tmpdir
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300, check=False,
                            preexec_fn=_limits(address_space, file_size))
    assert result.returncode != 99, result.stderr
    found = (left.read_text().split() if left.is_file() else sorted(p.name for p in left.iterdir()))
    return result, [n for n in found if n != ".ses"]  # ONNX Runtime's import leaves its session id there


def _errors(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("convert: error:")]


def _conv_stack(n: int, filters: int, side: int) -> str:
    layers = "".join(f"[convolutional]\nbatch_normalize=1\nfilters={filters}\nsize=3\nstride=1\npad=1\n"
                     "activation=leaky\n\n" for _ in range(n))
    return f"[net]\nwidth={side}\nheight={side}\nchannels=3\n\n{layers}"


def _sparse_weights(path: Path, floats: int) -> Path:
    """A .weights file of ``floats`` zeros after its header, as a hole (no disk)."""
    with open(path, "wb") as fh:
        fh.write(struct.pack("<3iQ", 0, 2, 0, 0))
        fh.truncate(20 + 4 * floats)
    return path


@needs_libdarknet
@pytest.mark.darknet
def test_slices_of_one_weights_file_share_one_map(tmp_path: Path) -> None:
    """24 convolutions of 192 filters: 120 slices of a 30 MiB file. Mapped once per slice they needed
    3.6 GiB of address space; under a 1.5 GiB limit the conversion was an internal error (exit 3).
    Mapped once, it converts and its check passes against libdarknet within tol."""
    cfg = write_cfg(tmp_path, _conv_stack(24, 192, 8))
    weights = write_random_weights(cfg, tmp_path / "net.weights")
    assert weights.stat().st_size > 29 * MIB
    out = tmp_path / "out" / "net.onnx"
    result, _ = _cli(["darknet:onnx", str(cfg), str(weights), "-o", str(out), "--darknet-lineage", "original"],
                     tmp_path, address_space=1536 * MIB)
    assert result.returncode == 0, result.stderr
    summary = result.stdout.strip().splitlines()[-1]
    assert summary.startswith("OK darknet:onnx") and "parity PASS" in summary, result.stdout
    table = result.stdout.splitlines()
    row = next(ln for ln in table if ln.startswith("convolutional_23"))
    assert float(row.split()[4]) <= 1e-4  # err/scale against the reference


def test_out_of_address_space_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    """A 938 MiB weights file (a hole on disk) under a 700 MiB address-space limit: the map the
    conversion needs cannot be made. One line naming the limit and the step, exit 2, nothing
    written (was an internal error, exit 3)."""
    text = ("[net]\nwidth=64\nheight=64\nchannels=3\n\n[convolutional]\nbatch_normalize=1\nfilters=3\nsize=1\n"
            "stride=1\npad=0\nactivation=leaky\n\n[connected]\noutput=20000\nactivation=linear\n")
    cfg = write_cfg(tmp_path, text)
    weights = _sparse_weights(tmp_path / "net.weights", 3 * 4 + 3 * 3 + 20000 + 12288 * 20000)
    out = tmp_path / "out"
    result, left = _cli(["darknet:onnx", str(cfg), str(weights), "-o", str(out / "net.onnx"), "--no-check"],
                        tmp_path, address_space=700 * MIB)
    assert result.returncode == 2, result.stderr
    errors = _errors(result.stderr)
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "out of memory (address space limited to 700 MiB: ulimit -v)" in errors[0], errors
    assert "while converting" in errors[0] and "not a bug in convert" in errors[0], errors
    assert not out.exists() and left == []


@needs_libdarknet
@pytest.mark.darknet
def test_check_needs_no_room_in_tmpdir(tmp_path: Path) -> None:
    """The check matches the weights to the lineage (variances rewritten) by streaming them: with
    1 MiB of TMPDIR and a 4.1 MiB .weights file (a small net and bytes left over) the conversion
    and its check pass (the whole file was copied into TMPDIR first: exit 3, nothing written)."""
    cfg = write_cfg(tmp_path, _conv_stack(3, 16, 16))
    weights = write_random_weights(cfg, tmp_path / "net.weights")
    with open(weights, "ab") as fh:  # bytes left over: the file is larger than TMPDIR, the output is not
        fh.write(np.zeros(MIB, np.float32).tobytes())
    out = tmp_path / "out.onnx"
    result, left = _cli(["darknet:onnx", str(cfg), str(weights), "-o", str(out), "--allow-trailing-bytes",
                         "--darknet-lineage", "alexeyab"], tmp_path, small_tmpdir=True)
    assert result.returncode == 0, result.stderr
    assert "parity PASS" in result.stdout.strip().splitlines()[-1], result.stdout
    assert "rewritten so that this yields AlexeyAB's" in result.stdout  # the matched weights were used
    row = next(ln for ln in result.stdout.splitlines() if ln.startswith("convolutional_2"))
    assert float(row.split()[4]) <= 1e-4
    assert out.is_file() and left == []


def test_random_weights_in_a_full_tmpdir_is_one_line(tmp_path: Path) -> None:
    """--random-weights writes the generated file to TMPDIR: 3.8 MiB do not fit in 1 MiB. One line
    that names the size, the room and TMPDIR, exit 2, no output, nothing left in TMPDIR (was exit 3)."""
    cfg = write_cfg(tmp_path, _conv_stack(4, 192, 16))
    need = random_weights_bytes(cfg)
    assert need > 3 * TMPDIR_SIZE
    out = tmp_path / "out.onnx"
    result, left = _cli(["darknet:onnx", str(cfg), "--random-weights", "-o", str(out)], tmp_path, small_tmpdir=True)
    assert result.returncode == 2, result.stderr
    errors = _errors(result.stderr)
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "cannot write the random weights of net.cfg" in errors[0] and "Nothing was written" in errors[0]
    assert f"{need / MIB:.1f} MiB" in errors[0], errors  # what they need
    assert "TMPDIR" in errors[0] or "ulimit -f" in errors[0], errors
    assert not out.exists() and left == []


def test_random_weights_larger_than_the_disk_are_refused_before_drawing(tmp_path: Path) -> None:
    """A cfg within every per-option cap whose one [connected] layer needs 192 TiB: refused at once,
    naming the size and the free space (was a MemoryError, exit 3)."""
    cfg = write_cfg(tmp_path, "[net]\nwidth=16384\nheight=16384\nchannels=3\n\n[connected]\noutput=65536\n"
                    "activation=linear\n")
    assert random_weights_bytes(cfg) > 100 * 2**40
    for args in (["darknet:onnx", str(cfg), "--random-weights", "-o", str(tmp_path / "o.onnx")],
                 ["random-weights", "darknet", str(cfg), "-o", str(tmp_path / "o.weights")]):
        result = subprocess.run([sys.executable, "-m", "convert", *args], capture_output=True, text=True, cwd=ROOT,
                                timeout=120, check=False)
        assert result.returncode == 2, result.stderr
        errors = _errors(result.stderr)
        assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
        assert "they need 192.0 TiB" in errors[0] and "free" in errors[0], errors
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.cfg"]


def test_random_weights_draw_a_large_tensor_in_chunks(tmp_path: Path) -> None:
    """One 96 MiB kernel under a 300 MiB address-space limit: drawn whole (and scaled: twice its
    size) it was a MemoryError, exit 3; drawn and written a chunk at a time, it holds the very values
    of one whole draw."""
    cfg = write_cfg(tmp_path, "[net]\nwidth=32\nheight=32\nchannels=3\n\n[connected]\noutput=8192\n"
                    "activation=linear\n")
    limited = tmp_path / "limited.weights"
    result, _ = _cli(["random-weights", "darknet", str(cfg), "-o", str(limited), "--seed", "7"], tmp_path,
                     address_space=300 * MIB)
    assert result.returncode == 0, result.stderr
    assert limited.stat().st_size == random_weights_bytes(cfg) > 95 * MIB

    class Whole(RandomWeights):  # no sink: each tensor drawn in one piece, as before
        arrays: ClassVar[list[np.ndarray]] = []

        def take(self, req: ParamRequest) -> TensorProtocol:
            tensor = super().take(req)
            self.arrays.append(tensor.numpy().ravel())
            return tensor

    build_model(cfg, Whole(seed=7), Options())
    written = np.fromfile(limited, dtype="<f4", offset=20)
    assert np.array_equal(written, np.concatenate(Whole.arrays)) and float(written[8192:].std()) > 0
