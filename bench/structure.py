"""`python -m bench.structure [--json]`: the house in figures (issue 42's closing figures).

Per layer (a folder of product code; each room of actors/ and member/, such as actors/core or
member/pure, is a layer of its own, and their top modules are the layers actors and member):
modules and lines. Then the lines of product code that name `Any` (imports left out), and how
much of the product mypy checks with `--strict`: the modules that pyproject.toml's strict
override matches, by count and by lines. Nothing here is timed, so the figures are exact on any
machine; compare two commits by running it in each.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import sys
import tomllib
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parent.parent

# the product's folders, each a layer (the top-level protocol/, actors/, member/ are the
# package's rsc/protocol, rsc/actors, rsc/member through symlinks: counted once, here)
LAYERS = {
    "protocol": "rsc.protocol",
    "actors": "rsc.actors",
    "member": "rsc.member",
}
RSC = ROOT / "rsc"
ANY = re.compile(r"\bAny\b")
IMPORT = re.compile(r"^\s*(from\s+\S+\s+)?import\b")
WIDTH = 17  # the layer column: "actors/redis_io" and "member/redis_io" fit


@attrs.frozen
class Module:
    name: str  # dotted, as mypy names it
    layer: str
    lines: int
    any_lines: int


def module_name(package: str, path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def count(path: Path) -> tuple[int, int]:
    """(non-blank lines, non-import lines that name Any)."""
    lines = any_lines = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        lines += 1
        if ANY.search(line) and not IMPORT.match(line) and not line.lstrip().startswith("#"):
            any_lines += 1
    return lines, any_lines


def product_modules() -> list[Module]:
    found: list[Module] = []
    for folder, package in LAYERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            inner = path.relative_to(ROOT / folder).parts
            layer = f"{folder}/{inner[0]}" if len(inner) > 1 else folder  # a room: actors/core
            found.append(Module(module_name(package, path, ROOT / folder), layer, *count(path)))
    for path in sorted(RSC.rglob("*.py")):
        relative = path.relative_to(RSC)
        if relative.parts[0] in LAYERS or relative.name == "_version.py":
            continue  # the symlinked layers, counted above; the generated version file
        layer = "rsc/" + relative.parts[0] if len(relative.parts) > 1 else "rsc"
        found.append(Module(module_name("rsc", path, RSC), layer, *count(path)))
    return found


def strict_patterns() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns: list[str] = []
    for override in config["tool"]["mypy"].get("overrides", []):
        if override.get("disallow_untyped_defs") and override.get("disallow_any_generics"):
            modules = override["module"]
            patterns.extend([modules] if isinstance(modules, str) else modules)
    return patterns


def is_strict(name: str, patterns: list[str]) -> bool:
    for pattern in patterns:
        if pattern.endswith(".*") and (name == pattern[:-2] or name.startswith(pattern[:-1])):
            return True
        if fnmatch.fnmatchcase(name, pattern):
            return True
    return False


def figures() -> dict[str, object]:
    modules = product_modules()
    patterns = strict_patterns()
    layers: dict[str, dict[str, int]] = {}
    for module in modules:
        row = layers.setdefault(module.layer, {"modules": 0, "lines": 0, "anyLines": 0,
                                               "strictModules": 0})
        row["modules"] += 1
        row["lines"] += module.lines
        row["anyLines"] += module.any_lines
        row["strictModules"] += is_strict(module.name, patterns)
    strict = [m for m in modules if is_strict(m.name, patterns)]
    return {
        "layers": layers,
        "modules": len(modules),
        "lines": sum(m.lines for m in modules),
        "anyLines": sum(m.any_lines for m in modules),
        "strictModules": len(strict),
        "strictLines": sum(m.lines for m in strict),
        "largest": [[m.name, m.lines] for m in sorted(modules, key=lambda m: -m.lines)[:10]],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.structure", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    result = figures()
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    layers = result["layers"]
    assert isinstance(layers, dict)
    print(f"{'layer':<{WIDTH}}{'modules':>8}{'lines':>8}{'Any':>6}{'strict':>8}")
    for layer, row in sorted(layers.items()):
        print(f"{layer:<{WIDTH}}{row['modules']:>8}{row['lines']:>8}{row['anyLines']:>6}"
              f"{row['strictModules']:>8}")
    modules, lines = result["modules"], result["lines"]
    assert isinstance(modules, int) and isinstance(lines, int)
    strict_modules, strict_lines = result["strictModules"], result["strictLines"]
    assert isinstance(strict_modules, int) and isinstance(strict_lines, int)
    print(f"{'total':<{WIDTH}}{modules:>8}{lines:>8}{result['anyLines']!s:>6}{strict_modules:>8}")
    print(f"mypy --strict: {strict_modules}/{modules} modules ({strict_modules / modules:.0%}), "
          f"{strict_lines}/{lines} lines ({strict_lines / lines:.0%})")
    largest = result["largest"]
    assert isinstance(largest, list)
    print("largest modules: " + ", ".join(f"{name} {n}" for name, n in largest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
