"""One home for each decision both sides make (rsc/common), each with its named test.

- the XACKDEL probe asks the server (`COMMAND INFO XACKDEL`), on every master of a
  cluster; it never compares versions;
- the lag rule: Redis's lag, or where Redis says nil what the stream's ends tell, the
  same number for the coordinator's reads and the member's gauge;
- the one Lua runner: scripts are package files, run by EVALSHA, loaded again on NOSCRIPT;
- the one backoff;
- exception-group unwrapping.

Redis behaviour is checked on the real redis-server of the test session (and the local
cluster where marked).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
import trio

from rsc.actors.redis_io import shard_ops
from rsc.common import lag, lua, server_features
from rsc.common.backoff import (
    ACK_RETRY,
    HEARTBEAT_RECONNECT,
    MEMBERS_RESTART,
    RECORD_RETRY,
    RETRY,
    ROUTING_WAIT,
    Backoff,
    BackoffPreset,
    no_jitter,
)
from rsc.common.errors import ErrorBoundary, single_exception
from rsc.member.redis_io.streams import StreamOps

STREAM = "{orders:v1:0}"


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(redis_url, decode_responses=True)
    yield connection
    connection.close()


# --- XACKDEL: asked of the server --------------------------------------------------------


def xackdel_runs(client: redis.Redis) -> bool:
    """Whether the server runs XACKDEL at all (an unknown command is an error naming it)."""
    client.xadd(STREAM, {"k": "v"})
    client.xgroup_create(STREAM, "probe", id="0")
    try:
        client.execute_command("XACKDEL", STREAM, "probe", "IDS", 1, "0-1")
    except redis.ResponseError as exc:
        if "unknown command" in str(exc).lower():
            return False
        raise
    return True


def test_xackdel_probe_asks_the_server_which_commands_it_has(client: redis.Redis) -> None:
    assert server_features.supports_xackdel(client) == xackdel_runs(client)
    assert shard_ops.supports_xackdel(client) == server_features.supports_xackdel(client)
    assert StreamOps(client, "g", "m").use_xackdel == server_features.supports_xackdel(client)


def test_xackdel_probe_reads_command_info_replies_not_versions() -> None:
    assert not server_features.names_command([None])
    assert not server_features.names_command([])
    assert server_features.names_command([["xackdel", -5, ["write"], 1, 1, 1]])
    assert server_features.names_command({"xackdel": {"arity": -5}})
    assert not server_features.names_command({"xackdel": None})


@pytest.mark.cluster
def test_xackdel_probe_asks_every_master_of_a_cluster(cluster_url: str) -> None:
    from rsc.common.redis_connect import connect

    cluster: Any = connect(cluster_url, decode_responses=True)
    try:
        masters = [node.redis_connection for node in cluster.get_primaries()]
        assert len(masters) == 3
        assert server_features.supports_xackdel(cluster) == all(
            server_features.supports_xackdel(master) for master in masters)
    finally:
        cluster.close()


# --- the lag rule -------------------------------------------------------------------------


def test_lag_rule_keeps_redis_lag_and_tells_the_two_exact_cases_without_it() -> None:
    assert lag.known_lag(7, 10, "5-0", "1-0", "9-0") == 7
    assert lag.known_lag(None, 0, "5-0", None, None) == 0
    assert lag.known_lag(None, 4, "9-0", "6-0", "9-0") == 0, "the last entry was delivered"
    assert lag.known_lag(None, 4, "5-0", "6-0", "9-0") == 4, "everything left is undelivered"
    assert lag.known_lag(None, 4, "7-0", "6-0", "9-0") is None, "a gap inside: Redis cannot tell"
    assert lag.known_lag(None, 4, None, "6-0", "9-0") is None
    assert lag.known_lag(None, None, "5-0", "6-0", "9-0") is None, "the length was not read"


def test_lag_rule_gives_the_coordinator_and_the_member_the_same_lag_after_a_trim(
        client: redis.Redis) -> None:
    """Trim entries a slow group never read (what `acked` retention does): Redis 7.x says nil
    lag for it; both sides still say 6, the entries left, and 0 for the group that read all."""
    for index in range(10):
        client.xadd(STREAM, {"n": str(index)})
    client.xgroup_create(STREAM, "fast", id="0")
    client.xgroup_create(STREAM, "slow", id="0")
    entries: Any = client.xreadgroup("fast", "c", {STREAM: ">"}, count=10)
    read = [entry_id for entry_id, _ in entries[0][1]]
    client.xack(STREAM, "fast", *read)
    client.xtrim(STREAM, minid=read[4], approximate=False)
    for group, expected in (("fast", 0), ("slow", 6)):
        [coordinator] = shard_ops.shard_lag(client, [STREAM], group)
        member = StreamOps(client, group, "m", use_xackdel=False).lag([STREAM])
        assert coordinator.lag == member[STREAM] == expected, group
    assert StreamOps(client, "absent", "m", use_xackdel=False).lag([STREAM]) == {STREAM: None}


# --- the one Lua runner -------------------------------------------------------------------


def test_lua_runner_scripts_are_package_files_that_say_their_keys_and_argv() -> None:
    from importlib import resources

    files = sorted((resources.files("rsc.common") / "scripts").iterdir(), key=lambda f: f.name)
    assert {f.name for f in files} >= {"ack.lua", "produce.lua", "cas_write.lua", "retention.lua"}
    for file in files:
        first = file.read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("-- KEYS[1]") or first.startswith("-- A library"), file.name


def test_lua_runner_loads_again_on_noscript_and_sends_only_those_calls(
        client: redis.Redis) -> None:
    script = lua.Script("produce")
    client.xgroup_create(STREAM, "g", id="0", mkstream=True)
    client.script_flush()
    sent: list[int] = []
    execute = lua.pipelined(client)

    def counting(commands: Any) -> list[Any]:
        sent.append(len(commands))
        return execute(commands)

    results = script.run([([STREAM, f"{STREAM}:sealed"], ["k", str(n)]) for n in range(3)],
                         counting, client.script_load)
    assert sent == [3, 3], "NOSCRIPT for all three, then the three again once loaded"
    assert all(isinstance(result, str) for result in results) and client.xlen(STREAM) == 3
    sent.clear()
    script.run([([STREAM, f"{STREAM}:sealed"], ["k", "v"])], counting, client.script_load)
    assert sent == [1]
    client.set(f"{STREAM}:sealed", "1")
    with pytest.raises(redis.ResponseError, match="SEALED"):
        script.call(client, [STREAM, f"{STREAM}:sealed"], ["k", "v"])


# --- the one backoff ----------------------------------------------------------------------


def test_backoff_doubles_to_its_maximum_and_starts_again_after_a_reset() -> None:
    backoff = Backoff(0.05, 0.3, jitter=no_jitter)
    assert [backoff.next() for _ in range(5)] == [0.05, 0.1, 0.2, 0.3, 0.3]
    backoff.reset()
    assert backoff.next() == 0.05
    halved = Backoff(0.2, 0.2, jitter=lambda: 0.0)
    assert halved.next() == pytest.approx(0.1), "jitter takes off at most half"


def test_backoff_is_one_class_for_members_and_the_coordinator() -> None:
    from rsc.actors import router
    assert router.Backoff is Backoff


def test_a_backoff_preset_starts_a_fresh_backoff_of_its_delays() -> None:
    preset = BackoffPreset(0.05, 0.2)
    first = preset.start(jitter=no_jitter)
    assert [first.next() for _ in range(4)] == [0.05, 0.1, 0.2, 0.2]
    again = preset.start(jitter=no_jitter)
    assert again.next() == 0.05, "each start is its own backoff"
    assert preset.start(maximum=0.1, jitter=no_jitter).maximum == 0.1


def test_a_preset_without_jitter_waits_exactly_and_a_bad_one_fails_at_definition() -> None:
    fixed = BackoffPreset(0.2, 0.2, jittered=False).start()
    assert [fixed.next() for _ in range(3)] == [0.2, 0.2, 0.2]
    assert ACK_RETRY.start().next() == RECORD_RETRY.start().next() == 0.2
    jittered = RETRY.start()
    assert all(0.025 <= jittered.next() <= 2.0 for _ in range(10))
    with pytest.raises(ValueError, match="initial <= maximum"):
        BackoffPreset(1.0, 0.5)


def test_the_member_side_names_its_delays() -> None:
    assert (RETRY.initial, RETRY.maximum) == (0.05, 2.0)
    assert (ROUTING_WAIT.initial, ROUTING_WAIT.maximum) == (0.05, 1.0)
    assert (HEARTBEAT_RECONNECT.initial, HEARTBEAT_RECONNECT.maximum) == (0.05, 1.0)
    assert (MEMBERS_RESTART.initial, MEMBERS_RESTART.maximum) == (0.5, 5.0)


# --- exception groups ---------------------------------------------------------------------


def test_single_exception_unwraps_a_group_of_one_real_exception() -> None:
    error = ValueError("the body's own")
    nested = BaseExceptionGroup("outer", [BaseExceptionGroup("inner", [error])])
    assert single_exception(nested) is error
    several = BaseExceptionGroup("two", [ValueError("a"), KeyError("b")])
    assert single_exception(several) is several


async def test_single_exception_leaves_out_the_cancellations_of_the_helper_tasks() -> None:
    error = ValueError("the body's own")
    with pytest.raises(BaseExceptionGroup) as caught:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            await trio.sleep(0)
            raise error
    assert single_exception(caught.value) is error


async def test_l1_error_boundary_raises_the_first_real_error_of_a_nursery_never_a_group() -> None:
    error = ValueError("the member's own")
    context = KeyError("what it met first")
    said: list[BaseException] = []

    async def fail() -> None:
        try:
            raise context
        except KeyError:
            raise error from None

    with pytest.raises(ValueError) as caught:
        with ErrorBoundary(on_failure=said.append):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.sleep_forever)
                nursery.start_soon(fail)
    assert caught.value is error and said == [error]
    assert error.__context__ is context, "its own context, not the group"
    assert not getattr(error, "__notes__", None), "the helper's cancellation is no error"


def test_l1_error_boundary_names_the_others_once_and_lets_interrupts_win() -> None:
    first, second = ValueError("a"), KeyError("b")
    with pytest.raises(ValueError) as caught, ErrorBoundary():
        raise ExceptionGroup("two", [first, second])
    assert caught.value.__notes__ == ["at the same time: KeyError: 'b'"]
    with pytest.raises(KeyboardInterrupt), ErrorBoundary():
        raise BaseExceptionGroup("interrupted", [ValueError("c"), KeyboardInterrupt()])


def test_l1_error_boundary_passes_anything_else_as_it_is() -> None:
    said: list[BaseException] = []
    error = RuntimeError("plain")
    with pytest.raises(RuntimeError) as caught, ErrorBoundary(on_failure=said.append):
        raise error
    assert caught.value is error
    with ErrorBoundary(on_failure=said.append):
        pass
    assert said == []
