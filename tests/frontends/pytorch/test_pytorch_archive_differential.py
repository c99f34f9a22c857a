"""What PyTorch reads from an archive is what convert checked (#48 item 1, security).

Each case first shows the threat on torch itself (a payload that touches a marker file: the file's
code runs when torch loads it), then that convert refuses the file before torch sees it:

- a ``.pt2`` with two members of one name: Python's zipfile reads the last, PyTorch's reader the first;
- two names that differ in case only: PyTorch's reader (miniz) looks names up ignoring case;
- a NUL in a name (zipfile cuts the name there, miniz does not), bytes before the archive;
- an AOTInductor package: torch.export.load dlopen()s its library;
- torch <= 2.7's top-level layout, which torch unpickles with ``weights_only=False`` as a fallback;
- a second program in the archive, and a payload config naming a file outside its folder;
- duplicate members in a ``.keras`` archive.

The pickle check streams each member with its tensors on the meta device: a 256 MiB pickled
sample input costs no more memory than a small one.
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import pickle
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from convert import api  # noqa: E402
from convert._archive import read_members  # noqa: E402
from convert.ir import ConvertError, ModelFormatError, UsageError  # noqa: E402

pytestmark = pytest.mark.torch
ROOT = Path(__file__).resolve().parents[3]


class _Touch:
    """A pickle that creates ``marker`` when unpickled: the stand-in for code from a model file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (pathlib.Path.touch, (pathlib.PosixPath(str(self.marker)),))


class _Twice(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def _program(path: Path) -> Path:
    torch.export.save(torch.export.export(_Twice(), (torch.randn(2, 3),)), path)
    return path


def _rewrite(src: Path, dst: Path, members: list[tuple[str, bytes]] | None = None,
             replace: dict[str, list[tuple[str, bytes]]] | None = None, prefix: bytes = b"") -> Path:
    """Copy ``src`` member by member (stored), replacing some by others and appending ``members``."""
    replace = replace or {}
    buf = io.BytesIO()
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            for name, data in replace.get(info.filename, [(info.filename, zin.read(info.filename))]):
                zout.writestr(zipfile.ZipInfo(name), data)
        for name, data in members or []:
            zout.writestr(zipfile.ZipInfo(name), data)
    dst.write_bytes(prefix + buf.getvalue())
    return dst


def _convert(path: Path, tmp: Path) -> None:
    api.convert(path, to="onnx", out=tmp / "out.onnx", check=False)


def _evil(marker: Path) -> bytes:
    return pickle.dumps(_Touch(marker), protocol=4)


def test_duplicate_members_torch_reads_the_first(tmp_path: Path) -> None:
    good = _program(tmp_path / "m.pt2")
    member = next(n for n in zipfile.ZipFile(good).namelist() if n.endswith("data/sample_inputs/model.pt"))
    marker = tmp_path / "ran"
    data = zipfile.ZipFile(good).read(member)
    dup = _rewrite(good, tmp_path / "dup.pt2", replace={member: [(member, _evil(marker)), (member, data)]})
    assert zipfile.ZipFile(dup).read(member) == data  # what a zipfile check reads: the harmless last one
    with pytest.raises(ModelFormatError, match=r"holds member '.*sample_inputs/model\.pt' twice"):
        _convert(dup, tmp_path)
    assert not marker.exists()
    with pytest.raises(Exception):  # noqa: B017 - torch's own error after the payload ran
        torch.export.load(dup)
    assert marker.exists(), "torch read the first member: the threat this test guards against"


def test_names_differing_in_case_are_one_name_to_torch(tmp_path: Path) -> None:
    good = _program(tmp_path / "m.pt2")
    member = next(n for n in zipfile.ZipFile(good).namelist() if n.endswith("data/sample_inputs/model.pt"))
    upper = member[: -len("model.pt")] + "MODEL.pt"
    marker = tmp_path / "ran"
    data = zipfile.ZipFile(good).read(member)
    forged = _rewrite(good, tmp_path / "case.pt2", replace={member: [(upper, _evil(marker)), (member, data)]})
    # the differential itself: one name, two readers, two members
    assert zipfile.ZipFile(forged).read(member) == data
    assert torch._C.PyTorchFileReader(str(forged)).get_record("data/sample_inputs/model.pt") != data
    with pytest.raises(ModelFormatError, match=r"one name to PyTorch's reader \(it ignores case\)"):
        _convert(forged, tmp_path)
    assert not marker.exists()


def test_a_nul_in_a_name_and_bytes_before_the_archive_are_refused(tmp_path: Path) -> None:
    good = _program(tmp_path / "m.pt2")
    named = _rewrite(good, tmp_path / "nul.pt2", members=[("m/extra/a#b", b"x")])
    nul = tmp_path / "nul.pt2"  # zipfile cuts a name at NUL when writing too: patched in both headers
    nul.write_bytes(named.read_bytes().replace(b"m/extra/a#b", b"m/extra/a\x00b"))
    with pytest.raises(ModelFormatError, match="control character"):
        read_members(nul, what="PyTorch archive")
    stub = _rewrite(good, tmp_path / "stub.pt2", prefix=b"#!/bin/sh\n" * 10)
    with pytest.raises(ModelFormatError, match="100 bytes stand before"):
        read_members(stub, what="PyTorch archive")
    assert len(read_members(good, what="PyTorch archive")) == len(zipfile.ZipFile(good).namelist())


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc builds the stand-in library")
def test_an_aotinductor_library_is_never_loaded(tmp_path: Path) -> None:
    good = _program(tmp_path / "m.pt2")
    root = zipfile.ZipFile(good).namelist()[0].split("/")[0]
    marker = tmp_path / "ran"
    (tmp_path / "lib.c").write_text('#include <stdio.h>\n__attribute__((constructor)) static void f(void) '
                                    f'{{ FILE* h = fopen("{marker}", "w"); if (h) fclose(h); }}\n')
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "lib.so"), str(tmp_path / "lib.c")],
                   check=True)
    aoti = _rewrite(good, tmp_path / "aoti.pt2", members=[
        (f"{root}/data/aotinductor/model/model.wrapper.so", (tmp_path / "lib.so").read_bytes()),
        (f"{root}/data/aotinductor/model/model.wrapper_metadata.json", b'{"AOTI_DEVICE_KEY": "cpu"}')])
    with pytest.raises(UsageError, match=r"AOTInductor package .* runs native code"):
        _convert(aoti, tmp_path)
    assert not marker.exists()
    with pytest.raises(RuntimeError):
        torch.export.load(aoti)
    assert marker.exists(), "torch.export.load dlopen()ed the library: the threat this test guards against"


def test_torch_26_layout_pickles_are_checked(tmp_path: Path) -> None:
    legacy = ROOT / "models" / "pytorch" / "torch26_convnet.pt2"
    marker = tmp_path / "ran"
    forged = _rewrite(legacy, tmp_path / "legacy.pt2",
                      replace={"serialized_example_inputs.pt": [("serialized_example_inputs.pt", _evil(marker))]})
    with pytest.raises(UsageError, match=r"serialized_example_inputs\.pt' is a pickle"):
        _convert(forged, tmp_path)
    assert not marker.exists()
    with pytest.raises(RuntimeError):  # the fallback unpickles it with weights_only=False, then fails
        torch.export.load(forged)
    assert marker.exists(), "torch ran the legacy layout's pickle: the threat this test guards against"
    _convert(legacy, tmp_path)  # the untouched file converts


def _second_program(good: Path, tmp: Path, path_name: str, marker: Path) -> Path:
    """``good`` with a second program 'x' whose weights config has torch unpickle ``path_name``."""
    with zipfile.ZipFile(good) as z:
        names = z.namelist()
        root = names[0].split("/")[0]
        model = z.read(f"{root}/models/model.json")
        inputs = z.read(f"{root}/data/sample_inputs/model.pt")
        constants = z.read(f"{root}/data/constants/model_constants_config.json")
    config = {"config": {"w": {"path_name": path_name, "is_param": True, "use_pickle": True,
                               "tensor_meta": None}}}
    return _rewrite(good, tmp / f"two-{len(path_name)}.pt2", members=[
        (f"{root}/models/x.json", model), (f"{root}/data/sample_inputs/x.pt", inputs),
        (f"{root}/data/constants/x_constants_config.json", constants),
        (f"{root}/data/weights/x_weights_config.json", json.dumps(config).encode()),
        (f"{root}/data/weights/weight_x", _evil(marker))])


def test_a_second_program_in_the_archive_is_checked(tmp_path: Path) -> None:
    good = _program(tmp_path / "m.pt2")
    marker = tmp_path / "ran"
    forged = _second_program(good, tmp_path, "weight_x", marker)
    with pytest.raises(UsageError, match=r"weight_x' is a pickle"):
        _convert(forged, tmp_path)
    assert not marker.exists()
    with pytest.raises(Exception):  # noqa: B017 - torch's own error after the payload ran
        torch.export.load(forged)
    assert marker.exists(), "torch unpickled program 'x''s weight: the threat this test guards against"
    with pytest.raises(ModelFormatError, match="not a file of data/weights/"):
        _convert(_second_program(good, tmp_path, "../sample_inputs/model.pt", marker), tmp_path)


def test_convert_check_checks_a_pt2_it_reads_first(tmp_path: Path) -> None:
    good = _program(tmp_path / "m.pt2")
    api.convert(good, to="onnx", out=tmp_path / "m.onnx", check=False)
    member = next(n for n in zipfile.ZipFile(good).namelist() if n.endswith("data/sample_inputs/model.pt"))
    marker = tmp_path / "ran"
    evil = _rewrite(good, tmp_path / "evil.pt2", replace={member: [(member, _evil(marker))]})
    with pytest.raises(ConvertError, match="is a pickle that the safe"):
        api.verify(evil, tmp_path / "m.onnx")
    assert not marker.exists()


def test_duplicate_members_in_a_keras_archive(tmp_path: Path) -> None:
    from convert.frontends.tensorflow.precheck import precheck

    path = tmp_path / "m.keras"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(zipfile.ZipInfo("config.json"), b"{}")
        z.writestr(zipfile.ZipInfo("config.json"), b"{}")
    with pytest.raises(ModelFormatError, match=r"holds member 'config\.json' twice"):
        precheck(path)


_RSS_SCRIPT = """
import sys, torch
from pathlib import Path
from convert.frontends.pytorch.files import check_pt2_payloads
def rss(key):
    return next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith(key)) * 1024
check_pt2_payloads(Path(sys.argv[1]), trust=False)  # warm: torch's serialization modules
base = rss('VmRSS:')
with open('/proc/self/clear_refs', 'w') as f:
    f.write('5')  # reset the high-water mark
check_pt2_payloads(Path(sys.argv[2]), trust=False)
print(rss('VmHWM:') - base)
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux only")
def test_a_large_pickled_member_is_streamed(tmp_path: Path) -> None:
    good = _program(tmp_path / "m.pt2")
    member = next(n for n in zipfile.ZipFile(good).namelist() if n.endswith("data/sample_inputs/model.pt"))
    buf = io.BytesIO()
    torch.save(((torch.zeros(64, 2**20),), {}), buf)  # 256 MiB of sample input
    big = _rewrite(good, tmp_path / "big.pt2", replace={member: [(member, buf.getvalue())]})
    out = subprocess.run([sys.executable, "-c", _RSS_SCRIPT, str(good), str(big)], capture_output=True,
                         text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    grew = int(out.stdout.split()[-1])
    assert grew < 64 * 2**20, f"checking a 256 MiB member grew RSS by {grew / 2**20:.0f} MiB"


class _Empty(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("w", torch.empty_strided((0, 2**62, 10**6), (0, 0, 0)))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * 2, self.w


def test_a_weight_with_impossible_dims_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.pt"
    torch.jit.save(torch.jit.script(_Empty()), path)
    with pytest.raises(ModelFormatError, match=r"weight 'w' has dims 0 x 4,611,686,018,427,387,904 x 1,000,000"):
        api.convert(path, to="onnx", out=tmp_path / "o.onnx", check=False, input_shapes={"x": (2, 3)})
