"""The lock file (.ci/requirements.lock) that CI and development install from keeps up with
pyproject.toml: every direct dependency of the locked extras is pinned, at a version its range
allows, with its hashes. A range changed without `bash .ci/lock` fails here, not in CI's install."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
LOCKED_EXTRAS = ("test", "bench", "dev", "cli", "embedded", "docs")  # .ci/lock's --extra list


def locked() -> dict[str, tuple[str, str]]:
    """name -> (version, the entry's text) of .ci/requirements.lock."""
    text = (ROOT / ".ci" / "requirements.lock").read_text(encoding="utf-8")
    entries = re.split(r"\n(?=[a-zA-Z0-9])", text)
    pins: dict[str, tuple[str, str]] = {}
    for entry in entries:
        found = re.match(r"([A-Za-z0-9._-]+)==([^ ;\\\n]+)", entry)
        if found:
            pins[canonicalize_name(found[1])] = (found[2], entry)
    return pins


def direct_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    texts = list(project["dependencies"])
    for extra in LOCKED_EXTRAS:
        texts += project["optional-dependencies"][extra]
    requirements = [Requirement(text) for text in texts]
    return [r for r in requirements if canonicalize_name(r.name) != "redis-stream-coordinator"]


def test_every_direct_dependency_is_locked_within_its_range_with_hashes():
    pins = locked()
    for requirement in direct_requirements():
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue  # for another platform
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in .ci/requirements.lock: run bash .ci/lock"
        version, entry = pins[name]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{name}=={version} in the lock is outside pyproject.toml's {requirement}: run bash .ci/lock")
        assert "--hash=sha256:" in entry, name


def test_the_redis_floor_is_the_release_with_sentinel_close():
    # rsc/common/redis_connect.py closes a Sentinel's clients with Sentinel.close (redis-py 8.1)
    [redis] = [r for r in direct_requirements() if canonicalize_name(r.name) == "redis"]
    assert not redis.specifier.contains("8.0.1") and redis.specifier.contains("8.1.0")
