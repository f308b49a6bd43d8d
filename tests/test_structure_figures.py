"""bench/structure.py: the house's figures count each product module once, and right."""

from __future__ import annotations

from pathlib import Path

from bench import structure


def test_count_leaves_out_imports_comments_and_blank_lines(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("from typing import Any\n\n# Any in a comment\n"
                      "def f(x: Any) -> Any:\n    return x\n", encoding="utf-8")
    assert structure.count(source) == (4, 1)


def test_strict_patterns_match_like_mypy() -> None:
    patterns = ["rsc.protocol.*", "rsc.actors.core.lease", "rsc.errors"]
    assert structure.is_strict("rsc.protocol", patterns)
    assert structure.is_strict("rsc.protocol.messages", patterns)
    assert structure.is_strict("rsc.actors.core.lease", patterns)
    assert not structure.is_strict("rsc.actors.core.lease_runner", patterns)
    assert not structure.is_strict("rsc.protocolx", patterns)


def test_every_product_module_is_counted_once() -> None:
    modules = structure.product_modules()
    names = [m.name for m in modules]
    assert len(names) == len(set(names))
    assert "rsc.actors.app" in names and "rsc.member.shells.runtime" in names and "rsc.errors" in names
    layers = {m.layer for m in modules}
    assert {"actors", "actors/core", "actors/net", "actors/redis_io", "actors/admin", "actors/ops",
            "member", "member/pure"} <= layers
    assert {m.name: m.layer for m in modules}["rsc.actors.core.group"] == "actors/core"
    assert not any(name.startswith(("rsc.rsc", "bench", "tests")) for name in names)
    figures = structure.figures()
    assert figures["modules"] == len(modules)
    assert "rsc.errors" in [m.name for m in modules
                            if structure.is_strict(m.name, structure.strict_patterns())]


def test_product_code_names_any_on_fewer_than_50_lines() -> None:
    """Issue 42's bound: JSON-shaped data is `Mapping[str, object]` or rsc.common.json_types,
    duck-typed objects get a Protocol; what is left names Any for a reason said beside it."""
    any_lines = structure.figures()["anyLines"]
    assert isinstance(any_lines, int) and any_lines < 50, any_lines
