"""The shape of the code (docs/architecture.md), checked from the source: who may import whom.

protocol/ imports nothing of ours and no I/O library; actors/ and member/ never import each
other, the composition layer (rsc/*.py) or bench/; rsc/common/, the leaf package both sides
run, imports only rsc.protocol and third-party libraries; everything imports through the one
`rsc` namespace (never a bare `protocol`, `actors` or `member`). rsc/tools/, the produce and
consume command lines' shell over member/, is composition too: the library never imports it,
and it imports neither the coordinator's actors nor the other command code.

From the real import graph (every import statement of a module, those in functions and under
TYPE_CHECKING too; rsc/protocol, rsc/actors and rsc/member are the top-level folders they link
to): no pure core imports an I/O module, directly or through a module of ours, and no import
cycle exists among our modules (the `rsc` namespace and bench/). Inside actors/ and member/,
a room imports none above it, and the pure room (actors/core/, member/pure/) reaches no I/O.
"""

from __future__ import annotations

import ast
import re
from collections import deque
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINKED = ("protocol", "actors", "member")  # rsc/<name> links to the top-level folder
COMPOSITION = ({path.stem for path in (ROOT / "rsc").glob("*.py")}
               | {path.parent.name for path in (ROOT / "rsc").glob("*/__init__.py")}) \
    - {"__init__", "__main__", "common", *LINKED}
"""rsc's composition modules and packages (rsc/cli.py, rsc/admin/, rsc/commands/, ...)."""
FOLDERS = {"protocol": ROOT / "protocol", "actors": ROOT / "actors", "member": ROOT / "member",
           "common": ROOT / "rsc" / "common"}

IO_LIBRARIES = frozenset({"trio", "trio_websocket", "wsproto", "redis", "socket", "subprocess",
                          "threading", "asyncio"})
"""A module importing one of these does I/O; so does every module of ours that imports it."""

PURE_CORES = ("protocol/*.py", "actors/core/*.py", "member/pure/ledger.py", "member/pure/reconcile.py")
OPTIONAL_PURE_CORES = ("member/pure/producer_core.py",)
PURE_MARKER = re.compile(r"(?:^|[.:;]\s+)Pure\b|\bno I/O\b|\bpure \(no\b")
"""A docstring declares its module pure: a sentence opening with "Pure", or "no I/O", or
"pure (no ...)"."""


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            if node.module == "rsc":  # `from rsc.commands import demo` names a module of the package
                names.update(f"rsc.{alias.name}" for alias in node.names)
    return names


def sources(folder: str) -> list[Path]:
    return sorted(FOLDERS[folder].rglob("*.py"))


def forbidden(name: str, folder: str) -> bool:
    top, _, rest = name.partition(".")
    if top in {"protocol", "actors", "member", "bench", "tests"}:
        return True  # bare top-level names would land in a user's site-packages
    if top != "rsc" or not rest:
        return folder == "protocol" and top in IO_LIBRARIES
    part = rest.split(".")[0]
    if part in COMPOSITION:
        return True
    allowed = {"protocol": {"protocol"}, "actors": {"protocol", "common", "actors"},
               "member": {"protocol", "common", "member"}, "common": {"protocol", "common"}}[folder]
    return part not in allowed


@pytest.mark.parametrize("folder", ["protocol", "actors", "member", "common"])
def test_layers_import_only_what_design_md_allows(folder: str) -> None:
    offending = {f"{path.relative_to(ROOT)}: {name}"
                 for path in sources(folder) for name in imported_modules(path)
                 if forbidden(name, folder)}
    assert not offending, sorted(offending)


def test_the_namespace_symlinks_point_at_the_top_level_folders() -> None:
    for folder in LINKED:
        link = ROOT / "rsc" / folder
        assert link.is_symlink() and link.resolve() == (ROOT / folder).resolve()


TOOLS_MAY_IMPORT = frozenset({"protocol", "common", "member", "tools"})
"""rsc/tools/, the produce and consume command lines' shell over the library: it imports the
member side (and what it runs on), never the coordinator's actors nor the other command code."""


def test_tools_is_a_shell_layer_the_library_does_not_import() -> None:
    assert "tools" in COMPOSITION  # so the layer check above forbids it to protocol, actors, member, common
    graph = graph_of_the_repository()
    tools = {module for module in graph.modules if module.split(".")[:2] == ["rsc", "tools"]}
    assert "rsc.tools.peek" in tools
    library = [module for module in graph.modules
               if module.split(".")[:2] in (["rsc", name] for name in (*LINKED, "common"))]
    importing = sorted(f"{module} -> {target}" for module in library
                       for target in graph.edges[module] & tools)
    assert not importing, importing
    outside = sorted(f"{module} -> {target}" for module in tools for target in graph.edges[module]
                     if target.split(".")[0] == "rsc" and target != "rsc"
                     and target.split(".")[1] not in TOOLS_MAY_IMPORT)
    assert not outside, outside


MEMBER_LAYERS = ("pure", "redis_io", "shells")
"""member/'s rooms, lowest first: a room imports none above it. The top of member/ is the
library's public surface (listener, aio, sync, producer, policies, codecs, ...), which the rooms
may use for its plain parts (config, message, notices) and which runs them."""


def member_room(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["rsc", "member"] or len(parts) < 4:
        return None
    return parts[2] if parts[2] in MEMBER_LAYERS else None


def test_member_rooms_import_none_above_them() -> None:
    graph = graph_of_the_repository()
    rooms = {module: member_room(module) for module in graph.modules}
    assert {"rsc.member.pure.ledger", "rsc.member.redis_io.streams",
            "rsc.member.shells.reader"} <= set(rooms)
    upward = sorted(f"{module} -> {target}" for module, room in rooms.items() if room is not None
                    for target in graph.edges[module]
                    if (above := member_room(target)) is not None
                    and MEMBER_LAYERS.index(above) > MEMBER_LAYERS.index(room))
    assert not upward, upward
    pure_reaching_up = sorted(f"{module} -> {target}" for module, room in rooms.items()
                              if room == "pure" for target in graph.edges[module]
                              if target.startswith("rsc.member.") and member_room(target) is None
                              and target not in PURE_TOP)
    assert not pure_reaching_up, pure_reaching_up


PURE_TOP = frozenset({"rsc.member.policies", "rsc.member.message", "rsc.member.config",
                      "rsc.member.ids", "rsc.member.stats"})
"""The plain parts of member/'s public surface that the pure room may read."""


def test_the_pure_room_reaches_no_io_module() -> None:
    """Every module under member/pure/ is a pure core: nothing it imports, however deep, does
    I/O (IO_LIBRARIES)."""
    graph = graph_of_the_repository()
    pure = sorted(module for module in graph.modules if member_room(module) == "pure")
    assert "rsc.member.pure.ledger" in pure
    chains = {module: graph.io_chain(module) for module in pure}
    assert not {module: chain for module, chain in chains.items() if chain}, chains


ACTORS_ROOMS: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "net": frozenset({"core"}),
    "redis_io": frozenset({"core"}),
    "admin": frozenset({"core", "redis_io"}),
    "ops": frozenset({"core", "redis_io"}),
}
"""actors/'s rooms, lowest first, each with the rooms it may import: none above it, and none
beside it (the sockets never touch Redis; the admin requests and the operators' figures do not
meet). The top of actors/ runs them and assembles the coordinator (app, server, router, actor,
mailbox, delivery, listing); the rooms may use only its plain parts (ACTORS_PLAIN_TOP)."""
ACTORS_PLAIN_TOP = frozenset({"rsc.actors.config", "rsc.actors.ports", "rsc.actors.logs"})
"""What every room of actors/ reads at the top: the settings, the collaborators' protocols and
the log events. They import no room but core (config the handshake gate, ports the machines'
values)."""


def actors_room(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["rsc", "actors"] or len(parts) < 3:
        return None
    return parts[2] if parts[2] in ACTORS_ROOMS else None


def test_actors_rooms_import_none_above_them() -> None:
    graph = graph_of_the_repository()
    rooms = {module: actors_room(module) for module in graph.modules}
    assert {"rsc.actors.core.group", "rsc.actors.net.ws_server", "rsc.actors.redis_io.store",
            "rsc.actors.admin.audit", "rsc.actors.ops.metrics"} <= set(rooms)
    assert list(ACTORS_ROOMS)[0] == "core" and all(
        set(ACTORS_ROOMS[room]) <= set(list(ACTORS_ROOMS)[:index])
        for index, room in enumerate(ACTORS_ROOMS))  # lowest first
    outside = sorted(f"{module} -> {target}" for module, room in rooms.items() if room is not None
                     for target in graph.edges[module]
                     if (other := actors_room(target)) not in (None, room)
                     and other not in ACTORS_ROOMS[room])
    assert not outside, outside
    top = sorted(f"{module} -> {target}" for module, room in rooms.items() if room is not None
                 for target in graph.edges[module]
                 if target.startswith("rsc.actors") and actors_room(target) is None
                 and target not in ACTORS_PLAIN_TOP | {"rsc.actors"})
    assert not top, top
    plain = sorted(f"{module} -> {target}" for module in ACTORS_PLAIN_TOP
                   for target in graph.edges[module]
                   if target.startswith("rsc.actors") and actors_room(target) != "core")
    assert not plain, plain


def test_the_actors_pure_room_reaches_no_io_module() -> None:
    """Every module under actors/core/ is a pure core: nothing it imports, however deep, does
    I/O (IO_LIBRARIES), and it imports nothing of the top of actors/."""
    graph = graph_of_the_repository()
    core = sorted(module for module in graph.modules if actors_room(module) == "core")
    assert "rsc.actors.core.prefix" in core
    chains = {module: graph.io_chain(module) for module in core}
    assert not {module: chain for module, chain in chains.items() if chain}, chains
    reaching_up = sorted(f"{module} -> {target}" for module in core for target in graph.edges[module]
                         if target.startswith("rsc.actors") and actors_room(target) != "core")
    assert not reaching_up, reaching_up


def test_the_check_catches_a_forbidden_import() -> None:
    assert forbidden("rsc.member.session", "actors")
    assert forbidden("rsc.actors.redis_io.store", "member")
    assert forbidden("rsc.demo", "member")
    assert forbidden("rsc.commands.coordinator", "actors")
    assert forbidden("rsc.admin.client", "member")
    assert forbidden("redis", "protocol")
    assert forbidden("protocol.messages", "actors")
    assert forbidden("rsc.actors.redis_io.store", "common")
    assert forbidden("rsc.member.session", "common")
    assert forbidden("tests.cluster", "common")
    assert forbidden("rsc.tools.peek", "member")
    assert forbidden("rsc.tools.tool_output", "common")
    assert not forbidden("rsc.protocol.messages", "member")
    assert not forbidden("rsc.common.gc_policy", "member")
    assert not forbidden("rsc.protocol.codec", "common")
    assert not forbidden("redis", "member")
    assert not forbidden("redis", "common")


# --- the import graph -------------------------------------------------------------------------


def module_name(relative: Path) -> str:
    """`actors/app.py` -> `rsc.actors.app`, `rsc/common/__init__.py` -> `rsc.common`."""
    parts = list(relative.with_suffix("").parts)
    if parts[0] in LINKED:
        parts.insert(0, "rsc")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def our_sources() -> dict[str, Path]:
    """Every module of ours and its file; rsc/protocol etc. are read once, at the top level."""
    found: dict[str, Path] = {}
    for top in (*LINKED, "rsc", "bench"):
        for path in sorted((ROOT / top).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if relative.parts[0] == "rsc" and relative.parts[1] in LINKED:
                continue  # the link, not a second copy
            found[module_name(relative)] = path
    return found


class ImportGraph:
    """Modules of ours -> the modules of ours they import, and the libraries each imports."""

    def __init__(self, texts: Mapping[str, tuple[str, bool]]) -> None:
        """`texts`: module name -> (source text, whether it is a package's __init__)."""
        self.modules = set(texts)
        self.edges: dict[str, set[str]] = {}
        self.libraries: dict[str, set[str]] = {}
        for module, (text, is_package) in texts.items():
            edges, libraries = set(), set()
            for target in self._targets(module, is_package, ast.parse(text)):
                ours = self._ours(target)
                if ours is None:
                    libraries.add(target.split(".")[0])
                elif ours != module:
                    edges.add(ours)
            self.edges[module], self.libraries[module] = edges, libraries

    def _targets(self, module: str, is_package: bool, tree: ast.Module) -> Iterator[str]:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                yield from (alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = module if is_package else module.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        package = package.rpartition(".")[0]
                    base = f"{package}.{base}" if base else package
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    yield submodule if submodule in self.modules else base

    def _ours(self, name: str) -> str | None:
        """The module of ours that `name` imports (its longest known prefix), or None."""
        while name and name not in self.modules:
            name = name.rpartition(".")[0]
        return name or None

    def io_chain(self, module: str) -> list[str] | None:
        """The shortest import chain from `module` to an I/O library, or None if it has none."""
        previous: dict[str, str | None] = {module: None}
        queue = deque([module])
        while queue:
            current = queue.popleft()
            io = sorted(self.libraries[current] & IO_LIBRARIES)
            if io:
                chain = [io[0]]
                step: str | None = current
                while step is not None:
                    chain.insert(0, step)
                    step = previous[step]
                return chain
            for target in sorted(self.edges[current]):
                if target not in previous:
                    previous[target] = current
                    queue.append(target)
        return None

    def cycles(self) -> list[list[str]]:
        """Each group of modules that import each other (strongly connected, more than one)."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        groups: list[list[str]] = []

        def visit(module: str) -> None:
            index[module] = low[module] = len(index)
            stack.append(module)
            for target in self.edges[module]:
                if target not in index:
                    visit(target)
                    low[module] = min(low[module], low[target])
                elif target in stack:
                    low[module] = min(low[module], index[target])
            if low[module] == index[module]:
                group = []
                while True:
                    member = stack.pop()
                    group.append(member)
                    if member == module:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))

        for module in sorted(self.edges):
            if module not in index:
                visit(module)
        return sorted(groups)


def graph_of_the_repository() -> ImportGraph:
    return ImportGraph({module: (path.read_text(encoding="utf-8"), path.name == "__init__.py")
                        for module, path in our_sources().items()})


def declares_pure(text: str) -> bool:
    docstring = ast.get_docstring(ast.parse(text)) or ""
    return PURE_MARKER.search(docstring) is not None


def pure_cores() -> dict[str, Path]:
    """The pure cores docs/architecture.md names, and every module whose docstring declares it pure."""
    listed = {path for pattern in (*PURE_CORES, *OPTIONAL_PURE_CORES) for path in ROOT.glob(pattern)}
    return {module: path for module, path in our_sources().items()
            if path in listed or declares_pure(path.read_text(encoding="utf-8"))}


def test_pure_cores_import_no_io_module() -> None:
    graph = graph_of_the_repository()
    chains = {module: graph.io_chain(module) for module in pure_cores()}
    offending = [" -> ".join(chain) for chain in chains.values() if chain is not None]
    assert not offending, offending


def test_no_import_cycle_among_our_modules() -> None:
    cycles = graph_of_the_repository().cycles()
    assert not cycles, [" <-> ".join(cycle) for cycle in cycles]


def test_common_imports_only_protocol_and_third_party_libraries() -> None:
    graph = graph_of_the_repository()
    common = [module for module in graph.modules if module.split(".")[:2] == ["rsc", "common"]]
    assert "rsc.common.gc_policy" in common
    offending = sorted(f"{module} -> {target}" for module in common
                       for target in graph.edges[module]
                       if target.split(".")[:2] not in (["rsc", "protocol"], ["rsc", "common"]))
    assert not offending, offending


def test_every_listed_pure_core_is_a_file() -> None:
    for pattern in PURE_CORES:
        assert list(ROOT.glob(pattern)), f"{pattern} names no file: update PURE_CORES"
    assert set(pure_cores()) >= {"rsc.protocol.codec", "rsc.actors.core.group", "rsc.member.pure.ledger"}


def test_the_marker_reads_a_declaration_not_a_mention() -> None:
    assert declares_pure('"""The group machine.\n\nPure: events in, state out."""')
    assert declares_pure('"""Key-ordered work queue: pure, no I/O."""')
    assert declares_pure('"""The member ledger, pure (no trio, no Redis)."""')
    assert not declares_pure('"""Prefix actors: the trio shell around the pure prefix machine."""')
    assert not declares_pure('"""Metrics; `render` is its pure core."""')


def test_the_graph_finds_io_through_our_modules_and_cycles() -> None:
    graph = ImportGraph({
        "rsc.actors": ("", True),
        "rsc.actors.core": ("from rsc.actors import helper\n", False),
        "rsc.actors.helper": ("from . import shell\n", False),
        "rsc.actors.shell": ("def later():\n    import redis.asyncio\n", False),
        "rsc.actors.clean": ("import attrs\nfrom rsc.actors.core import x\n", False),
        "rsc.member.a": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                         "    from rsc.member.b import B\n", False),
        "rsc.member.b": ("import rsc.member.a\n", False),
    })
    assert graph.io_chain("rsc.actors.core") == ["rsc.actors.core", "rsc.actors.helper",
                                                 "rsc.actors.shell", "redis"]
    assert graph.io_chain("rsc.actors.clean") == ["rsc.actors.clean", "rsc.actors.core",
                                                  "rsc.actors.helper", "rsc.actors.shell", "redis"]
    assert graph.io_chain("rsc.member.b") is None
    assert graph.libraries["rsc.actors.clean"] == {"attrs"}
    assert graph.cycles() == [["rsc.member.a", "rsc.member.b"]]


def test_the_graph_reads_each_linked_folder_once_under_its_rsc_name() -> None:
    found = our_sources()
    assert found["rsc.actors.core.group"] == ROOT / "actors" / "core" / "group.py"
    assert found["rsc.common"] == ROOT / "rsc" / "common" / "__init__.py"
    assert found["rsc"] == ROOT / "rsc" / "__init__.py"
    assert not [module for module in found if module.startswith(("protocol", "actors", "member"))]
