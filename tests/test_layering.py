"""The shape of DESIGN.md, checked from the source: who may import whom.

protocol/ imports nothing of ours and no I/O library; rsc/common/ (what both sides run) imports
only protocol/; actors/ and member/ never import each other, the composition layer (rsc/*.py)
or bench/; everything imports through the one `rsc` namespace (never a bare `protocol`,
`actors` or `member`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMPOSITION = {path.stem for path in (ROOT / "rsc").glob("*.py")} - {"__init__", "__main__"}


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            if node.module == "rsc":  # `from rsc import demo` names a module of the package
                names.update(f"rsc.{alias.name}" for alias in node.names)
    return names


def sources(folder: str) -> list[Path]:
    return sorted((ROOT / folder).glob("*.py"))


def forbidden(name: str, folder: str) -> bool:
    top, _, rest = name.partition(".")
    if top in {"protocol", "actors", "member", "bench"}:
        return True  # bare top-level names would land in a user's site-packages
    if top != "rsc" or not rest:
        return folder == "protocol" and top in {"trio", "redis", "trio_websocket"}
    part = rest.split(".")[0]
    if part in COMPOSITION:
        return True
    allowed = {"protocol": {"protocol"}, "rsc/common": {"protocol", "common"},
               "actors": {"protocol", "common", "actors"},
               "member": {"protocol", "common", "member"}}[folder]
    return part not in allowed


@pytest.mark.parametrize("folder", ["protocol", "rsc/common", "actors", "member"])
def test_layers_import_only_what_design_md_allows(folder: str) -> None:
    offending = {f"{path.relative_to(ROOT)}: {name}"
                 for path in sources(folder) for name in imported_modules(path)
                 if forbidden(name, folder)}
    assert not offending, sorted(offending)


def test_the_namespace_symlinks_point_at_the_top_level_folders() -> None:
    for folder in ("protocol", "actors", "member"):
        link = ROOT / "rsc" / folder
        assert link.is_symlink() and link.resolve() == (ROOT / folder).resolve()


def test_the_check_catches_a_forbidden_import() -> None:
    assert forbidden("rsc.member.session", "actors")
    assert forbidden("rsc.actors.store", "member")
    assert forbidden("rsc.demo", "member")
    assert forbidden("redis", "protocol")
    assert forbidden("protocol.messages", "actors")
    assert not forbidden("rsc.protocol.messages", "member")
    assert not forbidden("redis", "member")
    assert forbidden("rsc.actors.store", "rsc/common") and forbidden("rsc.member.streams", "rsc/common")
    assert not forbidden("rsc.common.tls", "member") and not forbidden("rsc.common.tls", "actors")
