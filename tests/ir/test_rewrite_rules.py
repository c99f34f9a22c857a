"""The rewrite-rule engine: first matching rule wins, sweeps to a fixed point, keeps provenance,
says why a rule declined, and refuses rules that never settle. ONNX Runtime runs the results."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from convert import ir
from convert.exporters.onnx import save_onnx
from convert.ir.passes import Match, Rewriter, RewriteRules, Rule


def _scalar(value: ir.Value | None) -> float | None:
    if value is None or value.const_value is None or value.const_value.size != 1:
        return None
    return float(np.asarray(value.const_value.numpy()).reshape(-1)[0])


def _check_sub(node: ir.Node) -> Match | str:
    c = _scalar(node.inputs[1])
    return "not by a constant scalar" if c is None else Match(node, {"c": c})


def _sub_to_add(rw: Rewriter, m: Match) -> None:
    node = m.node
    neg = rw.const(np.asarray(-m["c"], np.float32), f"{node.name}_neg")
    rw.substitute(node, ir.Node("", "Add", [node.inputs[0], neg], outputs=[ir.Value(name=rw.fresh("add"))],
                                name=f"{node.name}_add"))


def _check_add_add(node: ir.Node) -> Match | str:
    inner = node.inputs[0].producer() if node.inputs[0] is not None else None
    c2 = _scalar(node.inputs[1])
    if inner is None or inner.op_type != "Add" or c2 is None:
        return "its input is not an Add's"
    c1 = _scalar(inner.inputs[1])
    if c1 is None or len(inner.outputs[0].uses()) != 1:
        return "the inner Add is not by a constant, or has other readers"
    return Match(node, {"inner": inner, "c": c1 + c2})


def _merge_adds(rw: Rewriter, m: Match) -> None:
    node, inner = m.node, m["inner"]
    c = rw.const(np.asarray(m["c"], np.float32), f"{node.name}_sum")
    rw.substitute(node, ir.Node("", "Add", [inner.inputs[0], c], outputs=[ir.Value(name=rw.fresh("sum"))],
                                name=node.name))
    rw.remove(inner)


RULES = [
    Rule("Sub by a constant -> Add", ("Sub",), _check_sub, _sub_to_add),
    Rule("Add(Add(x, a), b) -> Add(x, a + b)", ("Add",), _check_add_add, _merge_adds),
]


def _model() -> ir.Model:
    b = ir.GraphBuilder("subs", source="demo.cfg")
    x = b.input("x", ir.DataType.FLOAT, (2, 5))
    y = b.op("Sub", [x, b.const(np.asarray(1.0, np.float32), "one")], name="s1",
             prov=ir.Provenance(line=3, kind="shift", layer="s1"))
    y = b.op("Sub", [y, b.const(np.asarray(2.0, np.float32), "two")], name="s2",
             prov=ir.Provenance(line=4, kind="shift", layer="s2"))
    b.output(b.op("Relu", [y], name="relu"), "out")
    return b.build()


def test_rules_reach_a_fixed_point_and_keep_provenance(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = _model()
    with caplog.at_level(logging.DEBUG, logger="convert.ir.passes.rewrite"):
        result = RewriteRules(RULES)(model)
    assert result.modified
    # sweep 1 turns both Subs into Adds; only sweep 2 sees the two Adds it made and merges them
    assert [n.op_type for n in model.graph] == ["Add", "Relu"]
    add = next(iter(model.graph))
    assert ir.get_provenance(add) == ir.Provenance(file="demo.cfg", layer="s2", kind="shift", line=4)
    assert "does not apply to" in caplog.text and "its input is not an Add's" in caplog.text
    assert not RewriteRules(RULES)(model).modified  # idempotent
    out = save_onnx(model, tmp_path / "o.onnx", ir.Options())[0]
    x = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32) * 3 + 3
    (got,) = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    ref = np.maximum(x.astype(np.float64) - 3.0, 0.0)
    assert np.ptp(ref) > 1.0
    assert float(np.abs(got - ref).max() / np.abs(ref).max()) < 1e-6


def test_first_matching_rule_wins() -> None:
    calls: list[str] = []

    def never(node: ir.Node) -> Match | str:
        calls.append("never")
        return "declines"

    def record(name: str):
        def rewrite(rw: Rewriter, m: Match) -> None:
            calls.append(name)
            _sub_to_add(rw, m)
        return rewrite

    rules = [Rule("no", ("Sub",), never, record("no")), Rule("a", ("Sub",), _check_sub, record("a")),
             Rule("b", ("Sub",), _check_sub, record("b"))]
    RewriteRules(rules)(_model())
    assert calls == ["never", "a", "never", "a"]


def test_rules_that_never_settle_are_refused() -> None:
    def relu_again(rw: Rewriter, m: Match) -> None:
        rw.substitute(m.node, ir.Node("", "Relu", [m.node.inputs[0]], outputs=[ir.Value(name=rw.fresh("r"))]))

    rules = [Rule("Relu -> Relu", ("Relu",), lambda node: Match(node), relu_again)]
    with pytest.raises(RuntimeError, match="no fixed point after 3 sweeps"):
        RewriteRules(rules, max_sweeps=3)(_model())
