"""A few decoder layers are captured and cloned in the graph to the config's depth (replicate.py).

A Llama of 5 layers (period 1: 2 captured, 3 cloned) and a Gemma 3 of 10 layers whose
``layer_types`` repeat (sliding, sliding, full) (period 3: 7 captured, layers 7-9 cloned from 4-6,
the last of a kind with layer 6, which the final norm reads) give, node for node, the graph a
capture of every layer gives: same ops, attributes, provenance, float32 tags, input and output
names, initializers (names, shapes, types, the shard tensor each reads), but for the names
torch.export numbers itself (``sym_size_int_N``). Each converted folder passes the route's
generation check against transformers. Layers that are not periodic (a Qwen2 whose last layers
slide) and a period the graph contradicts (Gemma 2's alternating layers replicated as if alike)
are captured whole, and still pass.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from _llm import NEW_TOKENS, decoders

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = [pytest.mark.torch, pytest.mark.transformers]

from convert import ir  # noqa: E402
from convert.frontends.hf import replicate  # noqa: E402
from convert.frontends.hf.capture import REPLICATED, capture_folder  # noqa: E402
from convert.frontends.hf.folder import read_folder  # noqa: E402

_FX_NAME = re.compile(r"sym_size_int_\d+")
SLIDING, FULL = "sliding_attention", "full_attention"


def _capture(folder: Path) -> ir.Model:
    options = ir.Options()
    options.external_data = True
    return capture_folder(read_folder(folder), options)[0]


def _whole(folder: Path, monkeypatch: pytest.MonkeyPatch) -> ir.Model:
    """The capture of every layer (replication refused up front)."""
    def refuse(*_: object) -> replicate.Plan:
        raise replicate.NotReplicable("every layer, for the comparison")

    with monkeypatch.context() as patch:
        patch.setattr(replicate, "plan_replication", refuse)
        return _capture(folder)


def _plain(text: str | None) -> str:
    return _FX_NAME.sub("sym_size_int_N", text or "")


def _node(node: ir.Node) -> tuple[object, ...]:
    attrs = {k: repr(a.value) for k, a in node.attributes.items()}
    meta = {k: _plain(v) for k, v in node.metadata_props.items()}
    inputs = [_plain(v.name) if v is not None else None for v in node.inputs]
    return (node.domain, node.op_type, _plain(node.name), inputs, [_plain(v.name) for v in node.outputs],
            [str(v.shape) for v in node.outputs], attrs, meta)


def _init(value: ir.Value) -> tuple[object, ...]:
    tensor = value.const_value
    return (value.name, str(value.shape), value.dtype, type(tensor).__name__, getattr(tensor, "source_name", None))


def _graph(model: ir.Model) -> dict[str, object]:
    g = model.graph
    return {"inputs": [(v.name, str(v.shape)) for v in g.inputs],
            "outputs": [(v.name, str(v.shape)) for v in g.outputs],
            "initializers": [_init(v) for v in g.initializers.values()],
            "nodes": [_node(n) for n in g], "replicated": model.meta.get(REPLICATED)}


def _assert_same_graph(got: dict[str, object], want: dict[str, object]) -> None:
    for key in ("inputs", "outputs", "initializers"):
        assert got[key] == want[key], key
    got_nodes, want_nodes = got["nodes"], want["nodes"]
    assert len(got_nodes) == len(want_nodes)  # type: ignore[arg-type]
    for i, (a, b) in enumerate(zip(got_nodes, want_nodes, strict=True)):  # type: ignore[call-overload]
        assert a == b, (i, a, b)


def _converts_and_generates(folder: Path, tmp_path: Path) -> tuple[int, dict[str, object]]:
    """Convert ``folder`` with the route's check; return the converted graph's cache layers and the graph
    as captured."""
    import json

    import convert

    seen: dict[str, object] = {}
    result = convert.convert(folder, to="onnx", out=tmp_path / "out", new_tokens=NEW_TOKENS,
                             on_loaded=lambda model: seen.update(_graph(model)))
    report = result.report  # type: ignore[attr-defined]
    assert report is not None and report.verdict == "PASS", report.table()
    assert all(row.matched == row.steps == NEW_TOKENS for row in report.rows[:2])
    genai = json.loads((tmp_path / "out" / "genai_config.json").read_text())
    return int(genai["model"]["decoder"]["num_hidden_layers"]), seen


@pytest.mark.parametrize(("arch", "layers", "overrides", "replicated"), [
    ("llama", 5, {}, (2, 5, 1)),
    ("gemma3_text", 7, {"layer_types": [SLIDING, FULL] * 3 + [SLIDING]}, (5, 7, 2)),
], ids=["llama-5-period-1", "gemma3-7-period-2"])
def test_replicated_layers_are_the_capture_of_every_layer(arch: str, layers: int, overrides: dict[str, object],
                                                          replicated: tuple[int, int, int], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    folder = decoders().write_folder(arch, tmp_path / arch, num_hidden_layers=layers, **overrides)
    with caplog.at_level(logging.INFO, logger="convert.frontends.hf.capture"):
        count, got = _converts_and_generates(folder, tmp_path)
    assert count == layers and got["replicated"] == replicated
    assert f"{replicated[0]} of {layers} layers captured" in caplog.text
    _assert_same_graph(got, _graph(_whole(folder, monkeypatch)))


def test_layers_that_are_not_periodic_are_captured_whole(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Qwen2 with sliding windows from layer 2 on: layer types full, full, sliding, sliding."""
    folder = decoders().write_folder("qwen2", tmp_path / "qwen2", num_hidden_layers=4, use_sliding_window=True,
                                     sliding_window=8, max_window_layers=2)
    with caplog.at_level(logging.INFO, logger="convert.frontends.hf.capture"):
        count, got = _converts_and_generates(folder, tmp_path)
    assert count == 4 and got["replicated"] is None
    assert "every layer captured: the 4 layers have no period" in caplog.text
    assert "layers captured (period" not in caplog.text


def test_a_period_the_graph_contradicts_falls_back_to_every_layer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """Gemma 2's sliding and full layers told to be alike (period 1): the captured layers 0 and 1 differ
    (other masks), which the check of the graph finds; every layer is captured instead."""
    folder = decoders().write_folder("gemma2", tmp_path / "gemma2", num_hidden_layers=3,
                                     layer_types=[SLIDING, FULL, SLIDING])
    monkeypatch.setattr(replicate, "plan_replication", lambda *_: replicate.Plan(1, 2, 3, "lm.model.layers"))
    with caplog.at_level(logging.INFO, logger="convert.frontends.hf.capture"):
        model = _capture(folder)
    assert REPLICATED not in model.meta
    assert "2 captured layers do not replicate: node" in caplog.text
    assert [v.name for v in model.graph.outputs][-2:] == ["present.2.key", "present.2.value"]
