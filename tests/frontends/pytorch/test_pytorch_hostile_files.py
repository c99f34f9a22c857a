"""Hostile PyTorch archives: pickles that run code, archive bombs, corrupt files (one line, exit 2)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")


class _RunsAShellCommand:
    """A pickle payload that would create a file if anything unpickled it with the full unpickler."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def _pt2(tmp_path: Path) -> Path:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
    program = torch.export.export(model, (torch.randn(1, 3, 8, 8),))
    path = tmp_path / "m.pt2"
    torch.export.save(program, path)
    return path


def _convert(src: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convert", "pytorch:onnx", str(src), "-o", str(out), *extra],
                          capture_output=True, text=True, timeout=300)


def test_pt2_with_a_code_running_pickle_is_refused(tmp_path: Path) -> None:
    good = _pt2(tmp_path)
    marker = tmp_path / "PWNED"
    evil = tmp_path / "evil.pt2"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(evil, "w") as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename.endswith("/data/sample_inputs/model.pt"):
                buf = io.BytesIO()
                torch.save(_RunsAShellCommand(marker), buf)
                data = buf.getvalue()
            dst.writestr(info, data)
    result = _convert(evil, tmp_path / "o.onnx")
    assert result.returncode == 2, result.stderr
    assert "--trust-pickle" in result.stderr and "Traceback" not in result.stderr
    assert not marker.exists(), "the payload ran"
    assert not (tmp_path / "o.onnx").exists()
    assert _convert(good, tmp_path / "ok.onnx").returncode == 0


def test_archive_bomb_is_refused_in_one_line(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.pt"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        zf.writestr("m/code/__torch__.py", "")
        zf.writestr("m/constants.pkl", b"")
        zf.writestr("m/traced_inputs.pkl", bytes(300 * 2**20))  # 300 MiB of zeros, ~300 KiB packed
    assert bomb.stat().st_size < 2 * 2**20
    result = _convert(bomb, tmp_path / "o.onnx")
    assert result.returncode == 2, result.stderr
    assert "archive bomb" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("cut", [0.3, 0.7], ids=["cut-30%", "cut-70%"])
def test_truncated_pt2_is_one_line(tmp_path: Path, cut: float) -> None:
    data = _pt2(tmp_path).read_bytes()
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(data[: int(len(data) * cut)])
    result = _convert(bad, tmp_path / "o.onnx")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and len([ln for ln in result.stderr.splitlines() if ln.strip()]) <= 2


@pytest.fixture(scope="module")
def good_pt2(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return _pt2(tmp_path_factory.mktemp("pt2")).read_bytes()


def _damaged_member(tmp_path: Path, good: bytes, suffix: str, how: str) -> Path:
    """The .pt2 with one member damaged: its bytes (bad CRC), its local header, or its directory entry."""
    with zipfile.ZipFile(io.BytesIO(good)) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith(suffix))
    data = bytearray(good)
    if how in ("method", "encrypted", "version"):  # fields of the member's central directory entry
        entry = data.find(b"PK\x01\x02")
        while entry >= 0 and data[entry + 46:entry + 46 + len(info.filename)] != info.filename.encode():
            entry = data.find(b"PK\x01\x02", entry + 4)
        if how == "method":
            data[entry + 10:entry + 12] = (99).to_bytes(2, "little")
        elif how == "encrypted":
            data[entry + 8] |= 1
        else:
            data[entry + 6:entry + 8] = (64).to_bytes(2, "little")  # "version needed to extract" 6.4
    elif how == "crc":  # the data starts after the local header's own name and extra field
        at = info.header_offset
        name_len, extra_len = (int.from_bytes(data[at + i:at + i + 2], "little") for i in (26, 28))
        start = at + 30 + name_len + extra_len
        data[start + 8] ^= 0xFF
    else:
        data[info.header_offset:info.header_offset + 4] = b"XXXX"
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(bytes(data))
    return bad


@pytest.mark.parametrize(("suffix", "how", "said"), [
    ("/data/sample_inputs/model.pt", "crc", "a member of the archive is damaged (BadZipFile: "),
    ("/model_weights_config.json", "crc", "a member of the archive is damaged (BadZipFile: "),
    ("/data/sample_inputs/model.pt", "header", "a member of the archive is damaged (BadZipFile: "),
    ("/model_weights_config.json", "method", "uses compression method 99; PyTorch archives store or deflate"),
    ("/model_weights_config.json", "encrypted", "is flagged encrypted; PyTorch archives are never encrypted"),
    ("/model_weights_config.json", "version", "a damaged zip archive (NotImplementedError: zip file version 6.4"),
], ids=["pickled-member-bad-crc", "payload-config-bad-crc", "bad-local-header", "unknown-compression",
        "encrypted-member", "zip-version-6.4"])
def test_damaged_pt2_member_is_one_line(tmp_path: Path, good_pt2: bytes, suffix: str, how: str, said: str) -> None:
    """#29: BadZipFile from the pickle scan (bad CRC, bad local header) was an exit 3; so were (found
    by the #29 campaign) an unknown compression method, a member flagged encrypted, a zip version
    past Python's."""
    from convert.frontends.pytorch.files import check_pt2_payloads, classify
    from convert.ir import ModelFormatError

    bad = _damaged_member(tmp_path, good_pt2, suffix, how)
    with pytest.raises(ModelFormatError) as info:
        classify(bad)
        check_pt2_payloads(bad, trust=False)
    assert str(info.value).startswith("bad.pt2: ") and said in str(info.value), info.value


@pytest.mark.parametrize("damage", ["truncated", "wrong-magic"])
def test_damaged_legacy_pickle_is_one_line(tmp_path: Path, damage: str) -> None:
    """#29: a legacy (non-zip) torch.save file cut short or with a wrong magic number: one line, not an
    EOFError with an empty message, nor a claim that the file is a pickled module."""
    from convert import convert
    from convert.ir import ModelFormatError

    good = tmp_path / "good.pt"
    torch.save(torch.nn.Linear(2, 2).state_dict(), good, _use_new_zipfile_serialization=False)
    data = good.read_bytes()
    bad = tmp_path / "bad.pt"
    bad.write_bytes(data[:100] if damage == "truncated" else data[:2] + b"\0\0" + data[4:])
    with pytest.raises(ModelFormatError) as info:
        convert(bad, to="onnx", out=tmp_path / "o.onnx", format="pytorch", check=False)
    message = str(info.value)
    assert message.startswith("bad.pt: cannot read") and "\n" not in message, message
    assert not (tmp_path / "o.onnx").exists()


def test_attribute_error_of_the_weights_only_loader_is_the_files_fault(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """#29 campaign: a damaged legacy pickle made torch's weights-only loader raise AttributeError
    ("'collections.OrderedDict' object has no attribute 'dtype'"), which was taken for a class that
    cannot be imported (exit 3). The weights-only unpickler imports nothing: it is the file's fault.
    (The fuzz input itself: tests/fuzz/crashes/pytorch_legacy-0fadf0e260.)"""
    from convert.frontends.pytorch import files
    from convert.ir import ModelFormatError

    def damaged(*args: object, **kw: object) -> object:
        raise AttributeError("'collections.OrderedDict' object has no attribute 'dtype'")

    monkeypatch.setattr(torch, "load", damaged)
    path = tmp_path / "m.pt"
    path.write_bytes(b"x")
    with pytest.raises(ModelFormatError, match=r"m\.pt: cannot read \(AttributeError: 'collections"):
        files._load(path, weights_only=True)
    with pytest.raises(AttributeError):  # the full unpickler: a class of the model that cannot be imported
        files._load(path, weights_only=False)


def _rewritten(src: Path, dst: Path, change: dict[str, bytes]) -> Path:
    """Copy the zip ``src`` to ``dst`` with the members named in ``change`` replaced (same order, stored)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, change.get(info.filename, zin.read(info.filename)))
    return dst


@pytest.mark.parametrize("damage", ["short-tensor-member", "missing-tensor-member", "cut-debug-pkl"])
def test_damaged_torchscript_members_are_refused_before_torch_reads_them(tmp_path: Path, damage: str) -> None:
    """#29 campaign: a tensor member shorter than data.pkl declares, or a cut .debug_pkl, made torch
    crash the process (SIGSEGV in its C++ while converting: 183 of 96,400 cases). Checked before torch
    reads the archive; torch is never given these files here."""
    from convert.frontends.pytorch.files import check_torchscript_storages
    from convert.ir import ModelFormatError

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(144, 2))
    good = tmp_path / "good.pt"
    torch.jit.save(torch.jit.trace(model, torch.randn(1, 3, 8, 8)), good)
    check_torchscript_storages(good)  # the untouched file passes
    with zipfile.ZipFile(good) as zf:
        names = zf.namelist()
        tensor = next(n for n in names if "/data/" in n and zf.getinfo(n).file_size >= 16)
        debug = next(n for n in names if n.endswith(".debug_pkl"))
        change = {"short-tensor-member": {tensor: zf.read(tensor)[:-2]},
                  "missing-tensor-member": {tensor: b""},
                  "cut-debug-pkl": {debug: zf.read(debug)[: zf.getinfo(debug).file_size // 3]}}[damage]
    bad = _rewritten(good, tmp_path / "bad.pt", change)
    with pytest.raises(ModelFormatError) as info:
        check_torchscript_storages(bad)
    said = str(info.value)
    assert said.startswith("bad.pt: ") and "\n" not in said
    assert ("debug member" in said) if damage == "cut-debug-pkl" else ("data.pkl declares" in said)


def _genops_verdict(data: bytes) -> str:
    """The walk's specification, from the standard library: pickletools.genops reads every opcode
    and argument (ValueError on an unknown opcode, a short argument, a missing STOP), and a memo
    index past the pickle's own length is refused as well."""
    import pickletools

    try:
        for op, arg, _ in pickletools.genops(data):
            if op.name in ("PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET") and int(arg) > len(data):
                return "refused: memo"
    except Exception as exc:
        return f"refused: {type(exc).__name__}"
    return "walked"


def _our_verdict(data: bytes) -> str:
    from convert.frontends.pytorch.files import _walk_pickle

    try:
        _walk_pickle(data)
    except Exception as exc:
        return "refused: memo" if str(exc).startswith("memo index") else f"refused: {type(exc).__name__}"
    return "walked"


def test_pickle_walk_refuses_what_pickletools_genops_refuses(tmp_path: Path) -> None:
    """The archive check's opcode walk steps over fixed-width opcodes with a regular expression
    (files._walk_pickle, 4x faster than genops on a traced detector): on real TorchScript pickles
    (data.pkl, the .debug_pkl source ranges) and the standard library's own pickles of every
    protocol, cut, flipped, spliced and with memo indices inflated, it accepts and refuses exactly
    what genops does."""
    import pickle
    import random

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(144, 2))
    traced = tmp_path / "m.pt"
    torch.jit.save(torch.jit.trace(model, torch.randn(1, 3, 8, 8)), traced)
    with zipfile.ZipFile(traced) as zf:
        seeds = [zf.read(n) for n in zf.namelist() if n.endswith((".pkl", ".debug_pkl"))]
    value = {"a": [1, -2, 300, 70000, 2**70, 1.5, None, True], "b": ("s", "\u00e9\u4e2d", b"\x00\xff", bytearray(3)),
             "c": {frozenset({1, 2}), (3,)}, "d": [("text",) * 3] * 300}  # 300 repeats: memo past 255
    seeds += [pickle.dumps(value, protocol=p) for p in range(pickle.HIGHEST_PROTOCOL + 1)]
    seeds += [b"K\x01.", b".", b""]
    rng = random.Random(29)
    cases: list[bytes] = []
    for seed in seeds:
        cases += [seed, seed[:-1], seed[: len(seed) // 2]]
        for _ in range(300):
            blob = bytearray(seed)
            for _ in range(rng.choice((1, 1, 2, 4))):
                at = rng.randrange(len(blob) + 1)
                how = rng.randrange(5)
                if how == 0 and blob:  # flip a byte
                    blob[min(at, len(blob) - 1)] = rng.randrange(256)
                elif how == 1:  # cut
                    del blob[at:]
                elif how == 2:  # insert an opcode byte or a memo opcode with a wild index
                    blob[at:at] = rng.choice((bytes([rng.randrange(256)]), b"r\xff\xff\xff\x7f", b"q\xfe", b"h\xf0",
                                              b"j\x00\x00\x01\x00", b"p99999\n"))
                elif how == 3:  # splice bytes of another seed
                    other = rng.choice(seeds)
                    start = rng.randrange(len(other) + 1)
                    blob[at:at] = other[start:start + rng.randrange(1, 40)]
                else:  # delete a few bytes
                    del blob[at:at + rng.randrange(1, 5)]
            cases.append(bytes(blob))
    differ = [(c[:60], _genops_verdict(c), _our_verdict(c)) for c in cases if _genops_verdict(c) != _our_verdict(c)]
    assert not differ, f"{len(differ)} of {len(cases)} verdicts differ, e.g. {differ[:3]}"
    verdicts = {_genops_verdict(c).split(":")[0] for c in cases}
    assert verdicts == {"walked", "refused"}  # the corpus has both kinds
    assert sum(_genops_verdict(c) == "refused: memo" for c in cases) >= 20  # and memo indices past the end


def test_pickle_walk_memory_does_not_grow_with_a_run_of_opcodes() -> None:
    """A debug member may be hundreds of MB of one-byte-argument opcodes: the walk's regular expression
    steps over at most a few thousand a match, as the regex engine keeps state for each repeat until the
    match ends (one unbounded match over 10 MB of BININT1 took 0.5 GB)."""
    import tracemalloc

    from convert.frontends.pytorch.files import _walk_pickle

    data = b"\x80\x02(" + b"K\x01" * 1_000_000 + b"l."
    tracemalloc.start()
    try:
        _walk_pickle(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20, f"walking a 2 MB pickle allocated {peak / 2**20:.0f} MiB"
