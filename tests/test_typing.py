"""mypy --strict covers the wire contract, rsc.common and the pure cores of the coordinator and member.

pyproject.toml lists them in one `[[tool.mypy.overrides]]` with every per-module flag that
`--strict` turns on; CI's `mypy .` applies it. This test keeps the list whole: a new pure
core (or a new rsc.common module) cannot go unchecked.
"""

from __future__ import annotations

import fnmatch
import tomllib

import pytest

from tests.test_layering import ROOT, our_sources, pure_cores

STRICT_FLAGS = {"disallow_any_generics", "disallow_subclassing_any", "disallow_untyped_calls",
                "disallow_untyped_defs", "disallow_incomplete_defs", "check_untyped_defs",
                "disallow_untyped_decorators", "warn_unused_ignores", "warn_return_any",
                "no_implicit_reexport", "strict_equality", "extra_checks"}


def strict_patterns() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    for override in config["tool"]["mypy"].get("overrides", []):
        if STRICT_FLAGS <= {flag for flag, on in override.items() if on is True}:
            return list(override["module"])
    raise AssertionError("no [[tool.mypy.overrides]] turns on every --strict flag")


def covered(module: str, patterns: list[str]) -> bool:
    return any(module == pattern or (pattern.endswith(".*") and (
        module == pattern[:-2] or fnmatch.fnmatch(module, pattern))) for pattern in patterns)


def test_strict_typing_covers_protocol_common_and_every_pure_core() -> None:
    patterns = strict_patterns()
    wanted = {module for module in our_sources()
              if module.startswith(("rsc.protocol", "rsc.common"))}
    wanted |= {module for module in pure_cores() if module.startswith(("rsc.actors.", "rsc.member."))}
    wanted |= {"rsc.errors"}  # L1: the library's error family is typed
    assert {"rsc.actors.core.group", "rsc.actors.core.prefix", "rsc.common.lua",
            "rsc.member.pure.ledger"} <= wanted
    missing = sorted(module for module in wanted if not covered(module, patterns))
    assert not missing, f"add to the strict mypy override in pyproject.toml: {missing}"


def test_only_third_party_modules_may_be_missing() -> None:
    # a broken import of our own (rsc.*, tests.*, bench.*) must be a mypy error, not an Any
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert not config.get("ignore_missing_imports", False), "set it per third-party module"
    ignored = [module for override in config.get("overrides", [])
               if override.get("ignore_missing_imports") for module in override["module"]]
    assert ignored, "no third-party module is missing its types?"
    ours = [module for module in ignored
            if module.split(".")[0] in {"rsc", "tests", "bench", "protocol", "actors", "member"}]
    assert not ours, f"our own modules cannot be ignored when missing: {ours}"


def test_the_coverage_check_reads_patterns_as_mypy_does() -> None:
    assert covered("rsc.common.lua", ["rsc.common.*"])
    assert covered("rsc.common", ["rsc.common.*"])
    assert not covered("rsc.actors.core.prefix_new", ["rsc.actors.core.prefix"])


MISSPELT = '''
from rsc.member.listener import listener
from rsc.member import aio, sync


@listener("orders", "billing", coordinator_url="ws://h:1", redis_url="redis://h:2/0",
          concurency=2)
async def handle(message: object) -> None: ...


@aio.listener("orders", "billing", coordinator_url="ws://h:1", redis_url="redis://h:2/0",
              concurency=2)
async def handle_on_asyncio(message: object) -> None: ...


producer = sync.open_producer("ws://h:1", "redis://h:2/0", "orders", tokn="t")
'''


def test_l6_a_misspelt_keyword_is_a_mypy_error(tmp_path) -> None:
    # the [dev] extra's tool (CI's main venv has it; the lowest-versions venv has [test] only)
    api = pytest.importorskip("mypy.api", reason="mypy ([dev]) is not installed")

    snippet = tmp_path / "snippet.py"
    snippet.write_text(MISSPELT, encoding="utf-8")
    out, err, code = api.run([str(snippet), "--strict", "--cache-dir", str(tmp_path / "cache"),
                              "--follow-imports", "silent"])
    assert code == 1, (out, err)
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 3, out
    assert sum('"concurency"' in line for line in errors) == 2, out
    assert sum('"tokn"' in line for line in errors) == 1, out


def test_l6_a_misspelt_keyword_is_a_type_error_at_the_call() -> None:
    import pytest

    from rsc.member import aio, sync
    from rsc.member.listener import listener

    with pytest.raises(TypeError, match="'concurency'"):
        listener("orders", "billing", coordinator_url="ws://h:1", redis_url="redis://h:2/0",
                 concurency=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="'concurency'"):
        aio.listener("orders", "billing", coordinator_url="ws://h:1", redis_url="redis://h:2/0",
                     concurency=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="'tokn'"):
        sync.open_producer("ws://h:1", "redis://h:2/0", "orders", tokn="t")  # type: ignore[call-arg]
