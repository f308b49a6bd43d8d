"""C3 audit log: every change and every refused admin request appends one entry to rsc:audit
before its answer; C1's roles on /v1/admin. A real redis-server and a real coordinator; the
entries are read back from Redis itself, and through `rsc admin audit`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import trio

from rsc.actors.admin import audit
from rsc.actors.config import CoordinatorConfig
from rsc.actors.ops.metrics import CoordinatorMetrics
from rsc.actors.server import admin_role, console_client
from rsc.admin.client import AdminConnectError, decode_response, open_admin_client
from rsc.member.session import open_session
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import RetentionMode
from tests.conftest import FAST
from tests.test_admin_cli import rsc_admin

PREFIX, GROUP = "orders", "billing"
ADMIN, VIEWER = "admin-secret-token", "viewer-secret-token"


@pytest.fixture
def client(redis_url: str) -> Iterator[Any]:
    connection = redis.Redis.from_url(redis_url, decode_responses=True)
    yield connection
    connection.close()


def entries(client: Any) -> list[dict[str, Any]]:
    """rsc:audit as Redis holds it, oldest first."""
    return [json.loads(fields["entry"]) for _, fields in client.xrange(audit.AUDIT_KEY)]


async def start(nursery: trio.Nursery, redis_url: str, metrics: CoordinatorMetrics | None = None,
                **overrides: Any) -> str:
    from rsc.actors.app import serve

    config = CoordinatorConfig(redis_url=redis_url, port=0,
                               **{**FAST, "lease_ttl_ms": 60_000, **overrides})
    url: str = await nursery.start(lambda task_status: serve(config, metrics=metrics,
                                                             task_status=task_status))
    return url


async def ask(url: str, request: m.Request, token: str | None = ADMIN) -> Any:
    async with open_admin_client(url, token=token) as admin:
        raw = await admin.session.request(request)
    return decode_response(raw)


async def register_empty_group(url: str) -> None:
    async with open_session(url, "member") as session:
        await session.request(m.Heartbeat(request_id=0, stream_prefix=PREFIX, consumer_group=GROUP,
                                          member_id="m1", member_epoch=0, capacity=1))
        await session.request(m.Heartbeat(request_id=0, stream_prefix=PREFIX, consumer_group=GROUP,
                                          member_id="m1", member_epoch=-1, capacity=1))


# --- pure ------------------------------------------------------------------------------------


def test_c3_secrets_are_masked_in_the_request_and_the_error():
    body = {"token": "abc123", "nested": [{"adminPassword": "hunter22"}],
            "url": "redis://user:s3cret@redis:6379/0", "plain": 5, "none": None, "apiToken": None}
    assert audit.masked(body) == {"token": "***", "nested": [{"adminPassword": "***"}],
                                  "url": "redis://user:***@redis:6379/0", "plain": 5,
                                  "none": None, "apiToken": None}


def test_c3_changes_and_refusals_are_audited_reads_are_not():
    ok = m.GroupDescription(request_id=1, status=Status.OK, stream_prefix=PREFIX,
                            consumer_group=GROUP)
    describe = m.DescribeGroup(request_id=1, stream_prefix=PREFIX, consumer_group=GROUP)
    delete = m.DeleteGroup(request_id=1, stream_prefix=PREFIX, consumer_group=GROUP)
    assert not audit.audited(describe, ok)
    assert audit.audited(describe, describe.error(Status.NOT_AUTHORIZED, "no"))
    assert audit.audited(delete, delete.error(Status.GROUP_NOT_EMPTY, "busy"))
    entry = audit.entry(audit.Client(peer="10.0.0.9:5000", role="admin", via="console"), delete,
                        delete.error(Status.GROUP_NOT_EMPTY, "busy"), time_ms=7,
                        before={"groupEpoch": 3})
    assert entry == {"timeMs": 7, "endpoint": "/v1/admin", "peer": "10.0.0.9:5000",
                     "role": "admin", "via": "console",
                     "request": {"type": "deleteGroup", "requestId": 1, "streamPrefix": PREFIX,
                                 "consumerGroup": GROUP},
                     "status": "GROUP_NOT_EMPTY", "error": "busy", "before": {"groupEpoch": 3}}


def test_c1_the_role_of_a_token_and_the_console_client_header():
    def bearer(token: str) -> list[tuple[bytes, bytes]]:
        return [(b"authorization", f"Bearer {token}".encode())]

    assert admin_role(bearer(ADMIN), ADMIN, VIEWER) == "admin"
    assert admin_role(bearer(VIEWER), ADMIN, VIEWER) == "viewer"
    assert admin_role(bearer("wrong"), ADMIN, VIEWER) is None
    assert admin_role(bearer(VIEWER), ADMIN, None) is None
    assert admin_role([], None, None) == "open"
    assert admin_role(bearer(ADMIN) * 2, ADMIN, VIEWER) is None
    header = [(b"rsc-console-client", b"192.0.2.7:51000")]
    assert console_client(header, "127.0.0.1:40000") == "192.0.2.7:51000"
    assert console_client(header, "[::1]:40000") == "192.0.2.7:51000"
    assert console_client(header, "10.1.1.1:40000") is None  # only the console, on loopback


def test_c1_a_viewer_token_without_an_admin_token_is_a_configuration_error():
    with pytest.raises(ValueError, match="--viewer-token needs --admin-token"):
        CoordinatorConfig(viewer_token=VIEWER)


# --- a real coordinator ----------------------------------------------------------------------


async def test_c3_every_change_appends_one_entry_with_peer_role_and_before(redis_url, client,
                                                                            nursery):
    url = await start(nursery, redis_url, admin_token=ADMIN, viewer_token=VIEWER)
    with trio.fail_after(30):
        first = await ask(url, m.SetShardCount(request_id=0, stream_prefix=PREFIX,
                                               consumer_group=GROUP, shard_count=1))
        assert first.status == Status.OK
        assert len(entries(client)) == 1  # appended before the answer came
        [stream] = first.routing.streams
        client.xadd(stream, {"key": "k", "value": "v"})
        await register_empty_group(url)
        await ask(url, m.ListGroups(request_id=0))  # a read: not audited
        await ask(url, m.SetShardCount(request_id=0, stream_prefix=PREFIX, consumer_group=GROUP,
                                       shard_count=2))
        reset = await ask(url, m.ResetOffsets(request_id=0, stream_prefix=PREFIX,
                                              consumer_group=GROUP, to="latest"))
        assert reset.status == Status.MIGRATION_IN_PROGRESS or reset.status == Status.OK
        deleted = await ask(url, m.DeleteGroup(request_id=0, stream_prefix="other",
                                               consumer_group=GROUP))
        assert deleted.status == Status.UNKNOWN_GROUP
    found = entries(client)
    assert [(e["request"]["type"], e["status"]) for e in found] == [
        ("setShardCount", "OK"), ("setShardCount", "OK"), ("resetOffsets", reset.status.value),
        ("deleteGroup", "UNKNOWN_GROUP")]
    assert all(e["peer"].startswith("127.0.0.1:") and e["role"] == "admin"
               and e["endpoint"] == "/v1/admin" and "via" not in e for e in found)
    assert found[0]["before"] == {"routing": None}
    assert found[1]["before"]["routing"]["version"] == 1
    assert found[1]["before"]["routing"]["streams"] == [stream]
    assert found[2]["before"]["shards"][0]["shard"] == stream
    assert found[3]["before"] == {"group": None}
    assert ADMIN not in json.dumps(found)


async def test_c1_the_viewer_token_reads_and_is_refused_every_change(redis_url, client, nursery):
    url = await start(nursery, redis_url, admin_token=ADMIN, viewer_token=VIEWER)
    with trio.fail_after(30):
        listed = await ask(url, m.ListGroups(request_id=0), token=VIEWER)
        assert listed.status == Status.OK
        refused = await ask(url, m.SetShardCount(request_id=0, stream_prefix=PREFIX,
                                                 consumer_group=GROUP, shard_count=3), token=VIEWER)
        assert refused.status == Status.NOT_AUTHORIZED and "viewer" in refused.error
        described = await ask(url, m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                   consumer_group=GROUP), token=VIEWER)
        assert described.status == Status.UNKNOWN_GROUP  # nothing was registered
        with pytest.raises(AdminConnectError):
            await ask(url, m.ListGroups(request_id=0), token="not-a-token")
    found = entries(client)
    assert [(e["request"] and e["request"]["type"], e["status"], e["role"]) for e in found] == [
        ("setShardCount", "NOT_AUTHORIZED", "viewer"), (None, "UNAUTHORIZED", "none")]
    assert client.keys("rsc:meta:*") == []  # the refused change changed nothing


async def test_c3_a_failed_append_is_counted_and_the_request_still_answers(redis_url, client,
                                                                           nursery):
    metrics = CoordinatorMetrics()
    url = await start(nursery, redis_url, metrics=metrics)
    client.set(audit.AUDIT_KEY, "not a stream")  # XADD fails: WRONGTYPE
    with trio.fail_after(30):
        answer = await ask(url, m.SetShardCount(request_id=0, stream_prefix=PREFIX,
                                                consumer_group=GROUP, shard_count=1), token=None)
    assert answer.status == Status.OK
    assert "rsc_audit_lost_total 1.0" in metrics.exposition().decode()


async def test_c3_a_burst_of_appends_is_written_in_groups_each_before_its_caller_returns(
        redis_url, client):
    """Appends that queue while one is written go together in the next write; every caller
    returns only once its own entry is in the stream, in the order they were queued."""
    writes: list[int] = []
    real = audit.append_entries

    def counted(connection: Any, bodies: Any) -> Any:
        writes.append(len(bodies))
        return real(connection, bodies)

    log = audit.AuditLog(client, deadline_s=10)
    returned: list[tuple[int, int]] = []  # (n, entries in the stream when append n returned)
    queued: list[int] = []  # the order the appends were queued in (trio runs tasks in any order)

    async def one(n: int) -> None:
        queued.append(n)  # no checkpoint between this and the append's queueing
        assert await log.append({"n": n})
        returned.append((n, client.xlen(audit.AUDIT_KEY)))

    audit.append_entries = counted  # type: ignore[assignment]
    try:
        with trio.fail_after(30):
            async with trio.open_nursery() as burst:
                for n in range(40):
                    burst.start_soon(one, n)
    finally:
        audit.append_entries = real  # type: ignore[assignment]
    assert [body["n"] for body in entries(client)] == queued and sorted(queued) == list(range(40))
    assert sum(writes) == 40 and len(writes) < 40, writes  # grouped: fewer writes than entries
    position = {n: i for i, n in enumerate(queued)}
    assert all(in_stream > position[n] for n, in_stream in returned)  # its own entry was there


async def test_c3_a_group_that_cannot_be_written_is_lost_whole_and_counted(redis_url, client):
    metrics = CoordinatorMetrics()
    log = audit.AuditLog(client, deadline_s=10, metrics=metrics)
    client.set(audit.AUDIT_KEY, "not a stream")  # every XADD fails: WRONGTYPE
    results: list[bool] = []

    async def one(n: int) -> None:
        results.append(await log.append({"n": n}))

    with trio.fail_after(30):
        async with trio.open_nursery() as burst:
            for n in range(5):
                burst.start_soon(one, n)
    assert results == [False] * 5
    assert "rsc_audit_lost_total 5.0" in metrics.exposition().decode()


async def test_c3_rsc_admin_audit_shows_the_entries_as_text_and_json(redis_url, nursery):
    url = await start(nursery, redis_url, admin_token=ADMIN)
    with trio.fail_after(60):
        await ask(url, m.SetShardCount(request_id=0, stream_prefix=PREFIX, consumer_group=GROUP,
                                       shard_count=2))
        await ask(url, m.SetRetention(request_id=0, stream_prefix=PREFIX,
                                      retention=m.Retention(max_length=1000)))
        code, out, err = await rsc_admin(url, "audit", "--json", token=ADMIN)
        assert code == 0, err
        body = json.loads(out)
        assert [e["request"]["type"] for e in body["entries"]] == ["setRetention", "setShardCount"]
        newest = body["entries"][0]["id"]
        code, out, _ = await rsc_admin(url, "audit", "--before", newest, "--json", token=ADMIN)
        assert [e["request"]["type"] for e in json.loads(out)["entries"]] == ["setShardCount"]
        code, out, err = await rsc_admin(url, "audit", token=ADMIN)
        assert code == 0, err
        assert "setRetention orders" in out and "setShardCount orders billing" in out
        assert "127.0.0.1:" in out and "admin" in out
        code, _, err = await rsc_admin(url, "audit", "--count", "2000", token=ADMIN)
        assert code == 1 and "'count' must be in 1..1000" in err



async def test_c1_a_reset_dry_run_answers_the_ids_moves_nothing_and_is_not_audited(
        redis_url, client, nursery):
    url = await start(nursery, redis_url, admin_token=ADMIN)
    with trio.fail_after(30):
        changed = await ask(url, m.SetShardCount(request_id=0, stream_prefix=PREFIX,
                                                 consumer_group=GROUP, shard_count=1))
        [stream] = changed.routing.streams
        last = [client.xadd(stream, {"key": "k", "value": str(n)}) for n in range(3)][-1]
        await register_empty_group(url)
        dry = await ask(url, m.ResetOffsets(request_id=0, stream_prefix=PREFIX,
                                            consumer_group=GROUP, to="latest", dry_run=True))
    assert dry.status == Status.OK and dry.dry_run
    assert [(s.shard, s.last_delivered_id) for s in dry.shards] == [(stream, last)]
    [info] = client.xinfo_groups(stream)
    assert info["last-delivered-id"] == "0-0" and info["lag"] == 3  # nothing moved
    assert [e["request"]["type"] for e in entries(client)] == ["setShardCount"]


def test_c3_a_redrive_is_a_change_its_dry_run_is_not():
    redrive = m.RedriveDeadLetters(request_id=1, stream_prefix=PREFIX, consumer_group=GROUP)
    dry = m.RedriveDeadLetters(request_id=1, stream_prefix=PREFIX, consumer_group=GROUP,
                               dry_run=True)
    done = m.DeadLettersRedriven(request_id=1, status=Status.OK, stream_prefix=PREFIX,
                                 consumer_group=GROUP)
    assert isinstance(redrive, audit.CHANGING)  # so a viewer token gets NOT_AUTHORIZED (C1)
    assert audit.audited(redrive, done)
    assert not audit.audited(dry, done)
    assert audit.audited(dry, dry.error(Status.NOT_AUTHORIZED, "viewer"))


async def test_c3_a_b6_expiry_appends_one_entry_with_what_the_group_held(redis_url, client,
                                                                          nursery):
    url = await start(nursery, redis_url, empty_group_retention_ms=1500)
    with trio.fail_after(30):
        changed = await ask(url, m.SetShardCount(request_id=0, stream_prefix=PREFIX,
                                                 consumer_group=GROUP, shard_count=1), token=None)
        [stream] = changed.routing.streams
        client.xadd(stream, {"key": "k", "value": "v"})
        await register_empty_group(url)
        described = await ask(url, m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                   consumer_group=GROUP), token=None)
        assert described.status == Status.OK
        while len(entries(client)) < 2:
            await trio.sleep(0.05)
    gone = await ask(url, m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                          consumer_group=GROUP), token=None)
    assert gone.status == Status.UNKNOWN_GROUP
    found = entries(client)
    assert [e["request"]["type"] for e in found] == ["setShardCount", "expireGroup"]
    expiry = found[1]
    assert (expiry["endpoint"], expiry["peer"], expiry["role"]) == ("coordinator", "-",
                                                                    "coordinator")
    assert expiry["status"] == "OK" and expiry["error"] is None and "via" not in expiry
    assert expiry["request"]["streamPrefix"] == PREFIX
    assert expiry["request"]["consumerGroup"] == GROUP
    assert expiry["request"]["retentionMs"] == 1500
    assert isinstance(expiry["request"]["emptySinceMs"], int)
    assert expiry["before"]["groupEpoch"] == described.group_epoch
    assert expiry["before"]["members"] == []
    assert expiry["before"]["shards"] == [{"shard": stream, "lastDeliveredId": "0-0", "lag": 1,
                                           "pending": 0}]
    code, out, err = await rsc_admin(url, "audit")
    assert code == 0 and "expireGroup orders billing" in out and "coordinator" in out, err


def test_c1_the_confirmation_fields_are_checked_where_they_can_be():
    with pytest.raises(m.FieldValueError, match="ifGroupEpoch.*consumerGroup"):
        m.SetShardCount(request_id=0, stream_prefix=PREFIX, shard_count=2, if_group_epoch=1)
    with pytest.raises(m.FieldValueError, match="ifRoutingVersion.*deadLettersOf"):
        m.SetRetention(request_id=0, stream_prefix=PREFIX, dead_letters_of=GROUP,
                       retention=m.Retention(mode=RetentionMode.NONE, max_length=5),
                       if_routing_version=1)
    with pytest.raises(m.FieldValueError, match="ifGroupEpoch"):
        m.DeleteGroup(request_id=0, stream_prefix=PREFIX, consumer_group=GROUP, if_group_epoch=-1)


async def test_c1_a_change_confirmed_at_a_moved_group_or_routing_is_stale_and_changes_nothing(
        redis_url, client, nursery):
    url = await start(nursery, redis_url)
    group = {"stream_prefix": PREFIX, "consumer_group": GROUP}
    with trio.fail_after(30):
        first = await ask(url, m.SetShardCount(request_id=0, shard_count=1, **group), token=None)
        assert first.status == Status.OK and first.routing.version == 1
        await register_empty_group(url)
        epoch = (await ask(url, m.DescribeGroup(request_id=0, **group), token=None)).group_epoch
        stale = [
            m.SetShardCount(request_id=0, shard_count=2, if_group_epoch=epoch + 1, **group),
            m.SetShardCount(request_id=0, shard_count=2, if_routing_version=2, **group),
            m.SetMaxConcurrency(request_id=0, max_concurrency=3, if_group_epoch=epoch - 1,
                                **group),
            m.DeleteGroup(request_id=0, if_group_epoch=epoch, if_routing_version=0, **group),
            m.ResetOffsets(request_id=0, to="latest", if_group_epoch=epoch + 1, **group),
            m.RemoveMember(request_id=0, member_id="m1", if_routing_version=7, **group),
            m.SetRetention(request_id=0, stream_prefix=PREFIX, if_routing_version=0,
                           retention=m.Retention(mode=RetentionMode.NONE, max_length=5)),
            m.SetMaxConcurrency(request_id=0, stream_prefix=PREFIX, consumer_group="nobody",
                                max_concurrency=3, if_group_epoch=0),
        ]
        for request in stale:
            answer = await ask(url, request, token=None)
            assert answer.status == Status.STALE_CONFIRMATION, (request, answer)
            assert "nothing changed" in answer.error
        described = await ask(url, m.DescribeGroup(request_id=0, **group), token=None)
        assert (described.group_epoch, described.routing.version) == (epoch, 1)
        assert described.max_concurrency is None
        # confirmed at what it is: it changes
        changed = await ask(url, m.SetMaxConcurrency(request_id=0, max_concurrency=3,
                                                     if_group_epoch=epoch, if_routing_version=1,
                                                     **group), token=None)
        assert changed.status == Status.OK and changed.group_epoch > epoch
        # two changes confirmed at the same state, sent together: the prefix takes one, then
        # the other is stale (the check is made with the change, in the prefix's order)
        answers: list[Any] = []

        async def reshard(count: int) -> None:
            answers.append(await ask(url, m.SetShardCount(
                request_id=0, shard_count=count, if_group_epoch=changed.group_epoch,
                if_routing_version=1, **group), token=None))

        async with trio.open_nursery() as both:
            both.start_soon(reshard, 2)
            both.start_soon(reshard, 3)
        assert sorted(answer.status.value for answer in answers) == ["OK", "STALE_CONFIRMATION"]
    found = entries(client)  # every change is audited, a stale one too
    assert [e["status"] for e in found].count("STALE_CONFIRMATION") == len(stale) + 1
    assert found[-1]["request"].get("ifRoutingVersion") == 1


async def test_c1_rsc_admin_sends_if_group_epoch_and_if_routing_version(redis_url, nursery):
    url = await start(nursery, redis_url)
    with trio.fail_after(60):
        code, _, err = await rsc_admin(url, "set-shards", PREFIX, GROUP, "1")
        assert code == 0, err
        code, _, err = await rsc_admin(url, "set-shards", PREFIX, GROUP, "2",
                                       "--if-routing-version", "5")
        assert code == 1 and err.startswith("error: STALE_CONFIRMATION: "), err
        code, _, err = await rsc_admin(url, "set-max-concurrency", PREFIX, GROUP, "2",
                                       "--if-group-epoch", "999")
        assert code == 1 and "group epoch 999 ->" in err
        code, _, err = await rsc_admin(url, "set-retention", PREFIX, "--acked",
                                       "--if-routing-version", "1")
        assert code == 0, err
        epoch = (await ask(url, m.DescribeGroup(request_id=0, stream_prefix=PREFIX,
                                                consumer_group=GROUP), token=None)).group_epoch
        code, out, err = await rsc_admin(url, "set-max-concurrency", PREFIX, GROUP, "2", "--json",
                                         "--if-group-epoch", str(epoch),
                                         "--if-routing-version", "1")
        assert code == 0 and json.loads(out)["maxConcurrency"] == 2, err
        code, _, err = await rsc_admin(url, "set-shards", PREFIX, "2", "--if-group-epoch", "1")
        assert code == 1 and "ifGroupEpoch" in err  # a group's epoch needs the group
