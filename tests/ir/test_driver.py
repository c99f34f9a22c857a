"""The shared conversion loop (convert.ir.driver): gaps listed at once, the user's errors named, bugs kept bugs."""

from __future__ import annotations

from pathlib import Path

import pytest

from convert import api, ir
from convert.exporters.caffe import writer


def _registry() -> ir.Registry:
    reg: ir.Registry = ir.Registry("test ops")

    @reg.register("double")
    def double(x: int) -> int:
        return 2 * x

    @reg.register("refuse")
    def refuse(x: int) -> int:
        raise ir.RefusedError(f"{x} is odd")

    @reg.register("bug")
    def bug(x: int) -> int:
        return {}[x]  # type: ignore[no-any-return]

    return reg


def _run(items: list[tuple[str, int]]) -> list[int]:
    return ir.convert_all(items, _registry(), key=lambda it: it[0], where=lambda it: f"item {it[0]}({it[1]})",
                          call=lambda handler, it: handler(it[1]))


def test_handlers_run_in_order() -> None:
    assert _run([("double", 1), ("double", 5)]) == [2, 10]


def test_a_refusal_is_the_users_error_and_names_the_item() -> None:
    with pytest.raises(ir.ConversionError, match=r"cannot convert item refuse\(3\): 3 is odd"):
        _run([("double", 1), ("refuse", 3)])


def test_a_crash_in_a_handler_is_an_internal_error_not_the_users() -> None:
    with pytest.raises(ir.InternalError, match=r"while converting item bug\(7\): KeyError: 7") as info:
        _run([("bug", 7)])
    assert not isinstance(info.value, ir.ConvertError)  # the CLI gives it exit 3, not 2
    assert isinstance(info.value.__cause__, KeyError)  # --debug shows the handler's traceback


def test_gaps_are_counted_with_their_first_place() -> None:
    gaps = ir.GapCollector()
    gaps.add("Foo", "a.txt:3")
    gaps.add("Foo", "a.txt:9")
    gaps.add("Bar", "a.txt:5", "needs a constant")
    assert [(g.op, g.count, g.first, g.reason) for g in gaps.items()] == [
        ("Foo", 2, "a.txt:3", ""), ("Bar", 1, "a.txt:5", "needs a constant")]
    with pytest.raises(ir.UnsupportedOpsError, match=r"2 unsupported layers: Foo x2 \(first at a.txt:3\), Bar"):
        gaps.raise_if_any("net", what="layer")
    one = ir.GapCollector(by_reason=False)
    one.add("Baz", "x", "first reason")
    one.add("Baz", "y", "second reason")
    assert [(g.op, g.count, g.reason) for g in one.items()] == [("Baz", 2, "first reason")]


def test_the_caffe_exporter_lowers_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b = ir.GraphBuilder("relu")
    b.output(b.op("Relu", [b.input("x", ir.DataType.FLOAT, (1, 3, 4, 4))]), "y")
    model = b.build()
    calls: list[int] = []
    build_net = writer.build_net

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return build_net(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(writer, "build_net", counting)
    written = api.save(model, tmp_path / "relu.prototxt", format="caffe")
    assert len(calls) == 1  # checked, then written from the same lowering
    assert [p.name for p in written] == ["relu.prototxt", "relu.caffemodel"]
    assert "type: \"ReLU\"" in written[0].read_text()
