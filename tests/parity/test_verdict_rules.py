"""docs/verdict.md and the verdict's driver read the same way: the rules the doc lists under
"PASS, FAIL, NOT VERIFIED", in its order, are ``convert.parity.rules.RULES``, in the driver's order,
and each bullet names the functions that apply its rule."""

from __future__ import annotations

import re
from pathlib import Path

from convert.parity import rules

DOC = Path(__file__).resolve().parents[2] / "docs" / "verdict.md"
#: A rule's bullet: ``- **Name** (`rules.function`, ...)`` at the start of a line.
BULLET = re.compile(r"^- \*\*(?P<name>[^*]+)\*\* \((?P<functions>[^)]*)\)", re.M)


def _doc_rules() -> list[tuple[str, list[str]]]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## PASS, FAIL, NOT VERIFIED", 1)[1].split("\n## ", 1)[0]
    return [(m["name"], re.findall(r"`rules\.(\w+)`", m["functions"])) for m in BULLET.finditer(section)]


def test_the_doc_lists_the_drivers_rules_in_its_order() -> None:
    documented = _doc_rules()
    assert [name for name, _ in documented] == [rule.name for rule in rules.RULES]


def test_each_bullet_names_the_functions_of_its_rule() -> None:
    for (name, functions), rule in zip(_doc_rules(), rules.RULES, strict=True):
        assert functions == rule.functions, name
        for function in functions:
            assert getattr(rules, function) in (rule.judge, rule.settle), function


def test_each_rule_does_something_and_is_named_once() -> None:
    names = [rule.name for rule in rules.RULES]
    assert len(set(names)) == len(names)
    assert all(rule.judge is not None or rule.settle is not None for rule in rules.RULES)
