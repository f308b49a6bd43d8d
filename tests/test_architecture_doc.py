"""docs/architecture.md's module tables list every module of the tree, and nothing that is gone.

Each table row names its modules in the first column (`actors/router.py`, several separated
by commas, or a folder such as `rsc/console/` for everything in it). A new module that is not
listed fails here, so the map cannot fall behind the code.
"""

from __future__ import annotations

import re

from tests.test_layering import ROOT

DOC = ROOT / "docs" / "architecture.md"
FOLDERS = ("protocol", "actors", "member", "rsc")
LINKED = ("protocol", "actors", "member")  # rsc/<name> links to the top-level folder
NAMED = re.compile(r"`([a-z_/]+(?:\.py|/))`")


def listed() -> set[str]:
    """What the first column of every table row names."""
    names: set[str] = set()
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("| `"):
            names.update(NAMED.findall(line.split("|")[1]))
    return names


GENERATED = {"rsc/_version.py"}  # setuptools-scm writes it at build time (L7); not in git


def modules() -> set[str]:
    """Every module of the tree (package markers `__init__.py` aside), as a relative path."""
    found = set()
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            relative = path.relative_to(ROOT)
            if relative.parts[0] == "rsc" and relative.parts[1] in LINKED:
                continue  # the link, listed under its top-level folder
            if path.name != "__init__.py" and relative.as_posix() not in GENERATED:
                found.add(relative.as_posix())
    return found


def covered(module: str, names: set[str]) -> bool:
    return module in names or any(name.endswith("/") and module.startswith(name) for name in names)


def test_every_module_of_the_tree_is_in_the_architecture_tables() -> None:
    names = listed()
    missing = sorted(module for module in modules() if not covered(module, names))
    assert not missing, f"list these in docs/architecture.md: {missing}"


def test_every_module_the_tables_list_exists() -> None:
    gone = sorted(name for name in listed() if not (ROOT / name).exists())
    assert not gone, f"docs/architecture.md lists what is gone: {gone}"


def test_the_check_reads_rows_and_folders() -> None:
    names = {"rsc/console/", "actors/router.py"}
    assert covered("rsc/console/views.py", names) and covered("actors/router.py", names)
    assert not covered("actors/server.py", names)
    assert "actors/core/prefix.py" in listed() and "member/pure/ledger.py" in listed()
