"""Bad Darknet input: each a clear one-line error naming file, line and layer (and exit 2 in the CLI)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from darknet_helpers import ROOT, write_cfg, write_weights

from convert.frontends.darknet import FRONTEND
from convert.frontends.darknet.random_weights import write_random_weights
from convert.ir import ConvertError, ModelFormatError, Options, UnsupportedOpsError, UsageError

NET = "[net]\nbatch=1\nchannels=3\nheight=8\nwidth=8\n"
CONV = "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
CONV_PARAMS = 4 + 3 * 4 + 4 * 3 * 3 * 3  # biases, BN scales/mean/var, kernels


def _load(paths: list[Path], **extra: object) -> Options:
    options = Options(extra=dict(extra))
    FRONTEND.load(paths, options)
    return options


def _expect(error: type[Exception], paths: list[Path], *words: str, **extra: object) -> str:
    with pytest.raises(error) as info:
        _load(paths, **extra)
    message = str(info.value)
    assert "\n" not in message, message
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    return message


def _weights(tmp: Path, params: int, extra: bytes = b"") -> Path:
    return write_weights(tmp / "net.weights", [np.ones(params, np.float32)], extra=extra)


def test_truncated_weights_name_layer_line_and_missing_bytes(tmp_path: Path) -> None:
    cfg = write_cfg(tmp_path, NET + CONV + CONV)
    weights = _weights(tmp_path, CONV_PARAMS + (4 + 3 * 4 + 4 * 4 * 3 * 3) - 10)  # 10 floats short
    _expect(ModelFormatError, [cfg, weights], "net.weights", "truncated", "layer 1", "[convolutional]",
            "net.cfg:13", "expected 40 more bytes", "same model")


def test_trailing_bytes_are_an_error_unless_allowed(tmp_path: Path) -> None:
    cfg = write_cfg(tmp_path, NET + CONV)
    weights = _weights(tmp_path, CONV_PARAMS, extra=b"\0" * 12)
    _expect(ModelFormatError, [cfg, weights], "net.weights", "12 bytes left over", "--allow-trailing-bytes")
    _load([cfg, weights], allow_trailing_bytes=True)


def test_weights_of_another_cfg(tmp_path: Path) -> None:
    other = write_cfg(tmp_path, NET + CONV + CONV.replace("filters=4", "filters=16"), "other.cfg")
    weights = write_random_weights(other, tmp_path / "other.weights")
    cfg = write_cfg(tmp_path, NET + CONV + CONV)
    _expect(ModelFormatError, [cfg, weights], "other.weights", "left over", "net.cfg")


def test_route_to_a_missing_layer(tmp_path: Path) -> None:
    cfg = write_cfg(tmp_path, NET + CONV + "[route]\nlayers=-5\n")
    _expect(ModelFormatError, [cfg], "layer 1 [route]", "net.cfg:13", "layers=-5", "does not exist",
            random_weights=True)


def test_negative_filter_count(tmp_path: Path) -> None:
    cfg = write_cfg(tmp_path, NET + CONV.replace("filters=4", "filters=-3"))
    _expect(ModelFormatError, [cfg], "layer 0 [convolutional]", "net.cfg:6", "filters=-3", random_weights=True)


def test_route_joining_maps_of_different_sizes(tmp_path: Path) -> None:
    cfg = write_cfg(tmp_path, NET + CONV + "[maxpool]\nsize=2\nstride=2\n[route]\nlayers=-1,-2\n")
    _expect(ModelFormatError, [cfg], "layer 2 [route]", "different spatial sizes", "4x4x4, 4x8x8",
            random_weights=True)


def test_binary_file_as_cfg(tmp_path: Path) -> None:
    cfg = tmp_path / "model.cfg"
    cfg.write_bytes(b"\x00\x01\x02garbage\x00" * 10)
    _expect(ModelFormatError, [cfg], "model.cfg", "not a Darknet cfg", random_weights=True)


def test_cfg_without_net_section(tmp_path: Path) -> None:
    cfg = write_cfg(tmp_path, CONV)
    _expect(ModelFormatError, [cfg], "net.cfg:1", "expected [net]", random_weights=True)


def test_unknown_sections_are_all_listed_with_lines(tmp_path: Path) -> None:
    cfg = write_cfg(tmp_path, NET + CONV + "[implicit_add]\nfilters=4\n" + CONV + "[gru]\noutput=4\n"
                    + "[implicit_add]\nfilters=4\n")
    message = _expect(UnsupportedOpsError, [cfg], "net.cfg uses 2 unsupported",
                      "[implicit_add] x2 (first at net.cfg:13)", "[gru] (first at net.cfg:22)",
                      "convert ops darknet", random_weights=True)
    gaps = FRONTEND.check_support([cfg], Options())
    assert [g.op for g in gaps] == ["[implicit_add]", "[gru]"]
    assert "x2" in message


def test_unsupported_activation_and_option_values_are_listed(tmp_path: Path) -> None:
    cfg = write_cfg(tmp_path, NET + CONV.replace("leaky", "plse") + "[reorg]\nstride=2\nreverse=1\n")
    gaps = FRONTEND.check_support([cfg], Options())
    assert {g.op for g in gaps} == {"activation=plse", "[reorg] reverse=1"}
    _expect(UnsupportedOpsError, [cfg], "activation=plse", "[reorg] reverse=1", random_weights=True)


def test_unknown_option_warns_once_and_fails_under_strict(tmp_path: Path) -> None:
    cfg = write_cfg(tmp_path, NET + CONV.replace("pad=1", "pad=1\nfancy=3") + CONV.replace("pad=1", "pad=1\nfancy=2"))
    options = _load([cfg], random_weights=True)
    assert options.diagnostics.warnings == ["ignored unknown cfg option [convolutional] fancy x2 (first at net.cfg:12)"]
    strict = Options(strict=True, extra={"random_weights": True})
    strict.diagnostics.strict = True
    with pytest.raises(ConvertError, match="fancy"):
        FRONTEND.load([cfg], strict)


def test_training_options_are_silent(tmp_path: Path) -> None:
    text = (NET + "learning_rate=0.001\nmomentum=0.9\nmosaic=1\n" + CONV.replace("filters=4", "filters=14")
            + "[yolo]\nmask=0,1\nanchors=1,2,3,4\nclasses=2\nnum=2\njitter=.3\nignore_thresh=.7\ntruth_thresh=1\n"
            "random=1\niou_loss=ciou\nnms_kind=greedynms\nbeta_nms=0.6\n")
    options = _load([write_cfg(tmp_path, text)], random_weights=True)
    assert options.diagnostics.warnings == []


def test_yolo_channel_mismatch(tmp_path: Path) -> None:
    cfg = write_cfg(tmp_path, NET + CONV + "[yolo]\nmask=0\nanchors=1,2\nclasses=2\nnum=1\n")
    _expect(ModelFormatError, [cfg], "layer 1 [yolo]", "4 channels", "expected 1 anchors x (5 + 2 classes) = 7",
            random_weights=True)


def test_no_weights_needs_random_weights(tmp_path: Path) -> None:
    cfg = write_cfg(tmp_path, NET + CONV)
    _expect(UsageError, [cfg], "no .weights file", "--random-weights")


@pytest.mark.parametrize("case", ["truncated", "unsupported"])
def test_cli_exits_2_and_writes_nothing(case: str, tmp_path: Path) -> None:
    if case == "truncated":
        cfg = write_cfg(tmp_path, NET + CONV)
        inputs = [cfg, _weights(tmp_path, CONV_PARAMS - 1)]
    else:
        cfg = write_cfg(tmp_path, NET + CONV + "[implicit_add]\n")
        inputs = [cfg, _weights(tmp_path, CONV_PARAMS)]
    out = tmp_path / "out.onnx"
    proc = subprocess.run([sys.executable, "-m", "convert", "darknet:onnx", *map(str, inputs), "-o", str(out)],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "net.cfg" in proc.stderr
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.cfg", "net.weights"]


@pytest.mark.parametrize("option", ["width=1000000000", "height=100000", "channels=10000000"])
def test_absurd_input_size_is_one_line(tmp_path: Path, option: str) -> None:
    """A corrupt [net] size must not reach a MemoryError (with --decode it used to)."""
    key = option.split("=")[0]
    text = (ROOT / "models" / "darknet" / "yolov4-tiny.cfg").read_text()
    lines = [option if ln.strip().startswith(f"{key}=") else ln for ln in text.splitlines()]
    cfg = tmp_path / "huge.cfg"
    cfg.write_text("\n".join(lines) + "\n")
    result = subprocess.run([sys.executable, "-m", "convert", "darknet:onnx", str(cfg), "--random-weights", "--decode",
                             "-o", str(tmp_path / "o.onnx")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "beyond any network's size" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(("section", "option", "why"), [
    (CONV, "filters=100000000", "beyond any network's size (at most 65,536)"),  # --random-weights: 10 GB
    (CONV, "filters=99999999999999999999999", "outside a C int"),  # was OverflowError
    (CONV, "size=9223372036854775808", "outside a C int"),  # was a SerdeError at shape inference
    (CONV, "pad=4294967296", "outside a C int"),  # to Caffe: "Value out of range"
    ("[convolutional]\nfilters=255\nsize=1\nactivation=linear\n\n[yolo]\nclasses=80\nnum=2147483648\n",
     "num=2147483648", "outside a C int"),  # without mask: a MemoryError with an empty message
])
def test_out_of_range_integers_are_one_line_at_parse_time(section: str, option: str, why: str,
                                                          tmp_path: Path) -> None:
    """Integers no network has (or no C int holds) are refused where the cfg says them: file, line,
    option, exit 2, nothing written, for every route (to ONNX and to Caffe)."""
    key = option.split("=")[0]
    lines = [option if ln.startswith(f"{key}=") else ln for ln in (NET + section).splitlines()]
    cfg = tmp_path / "net.cfg"
    cfg.write_text("\n".join(lines) + "\n")
    line = 1 + next(i for i, ln in enumerate(lines) if ln == option)
    for dest in ("onnx", "caffe"):
        out = tmp_path / f"o.{dest}"
        result = subprocess.run([sys.executable, "-m", "convert", f"darknet:{dest}", str(cfg), "--random-weights",
                                 "-o", str(out)], capture_output=True, text=True, timeout=120)
        assert result.returncode == 2, result.stderr
        err = result.stderr.strip().splitlines()[-1]
        assert f"net.cfg:{line}:" in err and option in err and why in err and "Traceback" not in result.stderr, err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["net.cfg"]


def _random_weights_cli(cfg: Path, out: str) -> tuple[int, str]:
    from click.testing import CliRunner

    from convert.cli import cli

    result = CliRunner().invoke(cli, ["random-weights", "darknet", str(cfg), "-o", out])
    return result.exit_code, result.stderr


@pytest.mark.parametrize("where", ["through-a-file", "missing-folder", "read-only"])
def test_random_weights_into_an_unwritable_place_is_one_line(tmp_path: Path, where: str) -> None:
    """#29: OSError writing the weights (the user's folder, not a bug) was an exit 3."""
    cfg = write_cfg(tmp_path, NET + CONV)
    (tmp_path / "afile").write_text("x")
    if where == "read-only":
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        target = str(ro / "x.weights") if os.geteuid() != 0 else "/sys/x.weights"  # root ignores chmod
    else:
        target = str(tmp_path / ("afile" if where == "through-a-file" else "nope") / "x.weights")
    code, err = _random_weights_cli(cfg, target)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and "cannot write the random weights of net.cfg" in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["afile", "net.cfg", *(["ro"] if where == "read-only"
                                                                                          else [])])


def test_random_weights_on_a_full_disk_is_one_line_and_leaves_nothing(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC while writing (simulated: every write to the weights fails as a full disk does)."""
    import builtins
    import errno

    from convert.frontends.darknet import random_weights

    real_open = builtins.open

    class FullDisk:
        def __init__(self, fh: object) -> None:
            self.fh = fh

        def __enter__(self) -> FullDisk:
            return self

        def __exit__(self, *exc: object) -> None:
            self.fh.close()  # type: ignore[attr-defined]

        def write(self, data: bytes) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(random_weights, "open", lambda *a, **kw: FullDisk(real_open(*a, **kw)), raising=False)
    cfg = write_cfg(tmp_path, NET + CONV)
    with pytest.raises(ConvertError, match=r"cannot write the random weights of net\.cfg .*: the disk is full: "
                                           r"they need 516 bytes and the folder has .* free\. Nothing was written"):
        write_random_weights(cfg, tmp_path / "x.weights")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.cfg"]


def test_random_weights_into_a_folder_names_the_file_after_the_cfg(tmp_path: Path) -> None:
    cfg = write_cfg(tmp_path, NET + CONV)
    (tmp_path / "out").mkdir()
    assert write_random_weights(cfg, tmp_path / "out") == tmp_path / "out" / "net.weights"
    assert (tmp_path / "out" / "net.weights").stat().st_size == 20 + 4 * CONV_PARAMS
