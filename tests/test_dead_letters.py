"""Dead letters read and sent back (P2, P3 of docs/protocol.md): the pure rules, then a real
coordinator, Redis and listeners of two groups."""

from __future__ import annotations

import json

import trio

from rsc.actors.admin.dead_letter_admin import DeadLetterAdmin
from rsc.common.dead_letters import (
    MAX_REDRIVES,
    read_dead_letter,
    redrive_fields,
    redrive_plan,
    source_prefix,
)
from rsc.member.listener import Listener
from rsc.member.message import Message
from rsc.member.policies import RetryPolicy, default_dead_letter_stream
from rsc.member.redis_io.streams import connect
from rsc.member.session import open_session
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import RetentionMode
from tests.test_member_support import pending_count, set_shards, write_messages

PREFIX, GROUP, OTHER = "orders", "billing", "audit"
NEW = {b"key": b"k1", b"value": b"\xff v", b"h:trace": b"t", b"rsc-source-stream": b"{orders:v1:0}",
       b"rsc-source-id": b"5-0", b"rsc-group": b"billing", b"rsc-deliveries": b"3",
       b"rsc-error": b"RuntimeError: no", b"rsc-member": b"m-1", b"rsc-dead-at-ms": b"1700"}


def test_p2_a_dead_letter_is_read_with_its_story_and_its_bytes():
    record = read_dead_letter("9-0", NEW)
    assert (record.source_stream, record.source_id, record.consumer_group, record.deliveries,
            record.error, record.member_id, record.dead_at_ms) == (
        "{orders:v1:0}", "5-0", "billing", 3, "RuntimeError: no", "m-1", 1700)
    assert (record.key, record.value, record.headers) == (b"k1", b"\xff v", (("trace", b"t"),))
    assert record.error_type == "RuntimeError" and record.redriven == 0


def test_p2_a_dead_letter_of_the_format_before_is_read_too():
    old = {"key": "k", "value": "v", "shard": "{orders:v1:1}", "id": "4-0",
           "error": "ValueError('bad')", "attempts": "2", "consumerGroup": "billing",
           "memberId": "m-2"}
    record = read_dead_letter("1733000000000-0", old)
    assert (record.source_stream, record.source_id, record.consumer_group, record.deliveries,
            record.member_id, record.dead_at_ms) == (
        "{orders:v1:1}", "4-0", "billing", 2, "m-2", 1733000000000)
    assert record.error_type == "ValueError"


def test_p3_an_entry_goes_back_with_its_headers_and_the_redrive_headers():
    record = read_dead_letter("9-0", {**NEW, b"h:rsc-redriven": b"1",
                                      b"h:rsc-redrive-group": b"billing"})
    assert redrive_fields(record, "billing") == [
        b"key", b"k1", b"value", b"\xff v", b"h:trace", b"t",
        b"h:rsc-redriven", b"2", b"h:rsc-redrive-group", b"billing"]
    assert source_prefix("{orders:v12:3}") == "orders" and source_prefix("dlq") is None


def test_p3_the_plan_names_what_stays_and_why():
    fresh = read_dead_letter("1-0", NEW)
    tired = read_dead_letter("2-0", {**NEW, b"rsc-source-id": b"7-0",
                                      b"h:rsc-redriven": str(MAX_REDRIVES).encode()})
    foreign = read_dead_letter("3-0", {**NEW, b"rsc-source-stream": b"{refunds:v1:0}"})
    plan = redrive_plan([fresh, tired, foreign], PREFIX, limit=10, force=False)
    assert [r.id for r in plan.send] == ["1-0"]
    assert [entry_id for entry_id, _ in plan.skipped] == ["2-0", "3-0"]
    assert "sent back 3 times already" in plan.skipped[0][1]
    forced = redrive_plan([fresh, tired], PREFIX, limit=10, force=True)
    assert [r.id for r in forced.send] == ["1-0", "2-0"]
    named = redrive_plan([fresh, tired], PREFIX, ids=["2-0", "7-0"], limit=10, force=True)
    assert [r.id for r in named.send] == ["2-0"] and named.skipped == (("7-0", "no such dead letter"),)
    assert [r.id for r in redrive_plan([fresh, tired], PREFIX, limit=1, force=True).send] == ["1-0"]


def test_p2_a_dead_letter_written_twice_for_one_entry_is_sent_back_once():
    first = read_dead_letter("1-0", NEW)
    twin = read_dead_letter("2-0", NEW)  # a refused ack: the next owner dead-lettered it again
    other = read_dead_letter("3-0", {**NEW, b"rsc-source-id": b"6-0"})
    plan = redrive_plan([first, twin, other], PREFIX, limit=10, force=False)
    assert [r.id for r in plan.send] == ["1-0", "3-0"]
    assert plan.duplicates == (("2-0", "1-0"),)


async def run_until(listeners: list[Listener], condition, timeout: float = 20) -> None:
    async with trio.open_nursery() as nursery:
        for listener in listeners:
            await nursery.start(listener.run)
        with trio.fail_after(timeout):
            while not condition():
                await trio.sleep(0.02)
        for listener in listeners:
            listener.stop()


async def admin_request(url: str, request: m.Request) -> m.Message:
    async with open_session(url, "admin") as admin:
        return await admin.request(request)


async def test_p3_a_dead_letter_sent_back_after_the_fix_is_handled_once_by_its_own_group(
        coordinator):
    streams = await set_shards(coordinator.url, PREFIX, GROUP, 2)
    write_messages(coordinator.redis_url, streams, [("k1", "bad"), ("k2", "good")])
    fixed = False
    billing: list[Message] = []
    audit: list[str] = []

    async def handle_billing(message: Message) -> None:
        billing.append(message)
        if message.value == "bad" and not fixed:
            raise RuntimeError("cannot bill it")

    async def handle_audit(message: Message) -> None:
        audit.append(message.value)

    def listeners() -> list[Listener]:
        return [Listener(handle_billing, stream_prefix=PREFIX, consumer_group=GROUP,
                         coordinator_url=coordinator.url, redis_url=coordinator.redis_url,
                         retry=RetryPolicy(max_deliveries=2, backoff_ms=0)),
                Listener(handle_audit, stream_prefix=PREFIX, consumer_group=OTHER,
                         coordinator_url=coordinator.url, redis_url=coordinator.redis_url)]

    dead_stream = default_dead_letter_stream(PREFIX, GROUP)
    client = connect(coordinator.redis_url)

    def settled() -> bool:
        return (pending_count(coordinator.redis_url, streams, GROUP) == 0
                and pending_count(coordinator.redis_url, streams, OTHER) == 0)

    try:
        await run_until(listeners(), lambda: client.xlen(dead_stream) == 1 and len(audit) == 2
                        and settled())
        listed = await admin_request(coordinator.url, m.ListDeadLetters(
            request_id=0, stream_prefix=PREFIX, consumer_group=GROUP))
        assert isinstance(listed, m.DeadLetters) and listed.status == Status.OK, listed
        assert (listed.stream, listed.count, listed.errors_by_type) == (
            dead_stream, 1, {"RuntimeError": 1})
        [entry] = listed.entries
        assert (entry.value, entry.key, entry.deliveries, entry.error, entry.redriven) == (
            "bad", "k1", 2, "RuntimeError: cannot bill it", 0)
        dry = await admin_request(coordinator.url, m.RedriveDeadLetters(
            request_id=0, stream_prefix=PREFIX, consumer_group=GROUP, dry_run=True))
        assert isinstance(dry, m.DeadLettersRedriven) and dry.dry_run
        assert [(e.id, e.new_id) for e in dry.redriven] == [(entry.id, None)]
        assert client.xlen(dead_stream) == 1, "a dry run changes nothing"

        fixed = True
        calls_before = len(billing)
        sent = await admin_request(coordinator.url, m.RedriveDeadLetters(
            request_id=0, stream_prefix=PREFIX, consumer_group=GROUP))
        assert isinstance(sent, m.DeadLettersRedriven) and sent.status == Status.OK, sent
        [back] = sent.redriven
        assert back.shard == entry.source_stream and back.new_id is not None
        assert client.xlen(dead_stream) == 0, "deleted once its write was confirmed"
        audit_listener = listeners()
        await run_until(audit_listener, lambda: len(billing) == calls_before + 1
                        and audit_listener[1].members[0].stats.acked == 1 and settled())
    finally:
        client.close()
    again = billing[calls_before]
    assert (again.value, again.key, again.id) == ("bad", "k1", back.new_id)
    assert again.headers["rsc-redriven"] == b"1" and again.headers["rsc-redrive-group"] == b"billing"
    assert sorted(audit) == ["bad", "good"], "no second call in the other group"
    assert audit_listener[1].members[0].stats.redrives_passed == 1, \
        "the other group acked it without a handler call"


async def test_p3_a_dead_letter_is_deleted_only_once_its_write_is_confirmed(coordinator):
    [shard] = await set_shards(coordinator.url, PREFIX, GROUP, 1)
    client = connect(coordinator.redis_url)
    stream = default_dead_letter_stream(PREFIX, GROUP)
    fields = {**{name.decode(): value for name, value in NEW.items()}, "value": b"v"}
    first, twin = client.xadd(stream, fields), client.xadd(stream, fields)  # a refused ack's twin
    try:
        async with open_session(coordinator.url, "admin") as session, \
                open_session(coordinator.url, "member") as member:
            async def ask(request: m.Request) -> m.Response:
                response = await (member if isinstance(request, m.GetRouting)
                                  else session).request(request)
                assert isinstance(response, m.Response)
                return response

            # no replica answers the WAIT: written, not confirmed, so nothing is deleted
            waiting = DeadLetterAdmin(coordinator.redis_url, ask, min_replicas=1,
                                      wait_timeout_ms=50)
            unconfirmed = await waiting.answer(m.RedriveDeadLetters(
                request_id=0, stream_prefix=PREFIX, consumer_group=GROUP))
            waiting.client.close()
            assert isinstance(unconfirmed, m.DeadLettersRedriven) and unconfirmed.redriven == ()
            reasons = {entry.id: entry.reason for entry in unconfirmed.skipped}
            assert "confirmed by 0 of 1 replicas" in reasons[first]
            assert reasons[twin].startswith(f"a duplicate of {first}")
            assert [entry_id for entry_id, _ in client.xrange(stream)] == [first, twin]
            assert client.xlen(shard) == 1, "the write landed: a duplicate, never a loss"

            plain = DeadLetterAdmin(coordinator.redis_url, ask)
            sent = await plain.answer(m.RedriveDeadLetters(
                request_id=0, stream_prefix=PREFIX, consumer_group=GROUP))
            plain.client.close()
        assert isinstance(sent, m.DeadLettersRedriven)
        assert [entry.id for entry in sent.redriven] == [first]
        assert client.xlen(stream) == 0, "the twin went with the one sent back"
    finally:
        client.close()


async def test_p3_one_redrive_at_a_time_per_group(coordinator):
    await set_shards(coordinator.url, PREFIX, GROUP, 1)
    async with open_session(coordinator.url, "admin") as session, \
            open_session(coordinator.url, "member") as member:
        async def ask(request: m.Request) -> m.Response:
            session_for = member if isinstance(request, m.GetRouting) else session
            response = await session_for.request(request)
            assert isinstance(response, m.Response)
            return response

        admin = DeadLetterAdmin(coordinator.redis_url, ask)
        admin._redriving.add((PREFIX, GROUP))
        busy = await admin.answer(m.RedriveDeadLetters(request_id=0, stream_prefix=PREFIX,
                                                       consumer_group=GROUP))
        admin._redriving.clear()
        empty = await admin.answer(m.RedriveDeadLetters(request_id=0, stream_prefix=PREFIX,
                                                        consumer_group=GROUP))
        admin.client.close()
    assert busy.status == Status.REDRIVE_IN_PROGRESS
    assert isinstance(empty, m.DeadLettersRedriven) and empty.status == Status.OK
    assert (empty.redriven, empty.skipped) == ((), ())


async def test_p3_rsc_admin_dead_letters_and_redrive_read_both_formats(coordinator):
    from tests.test_admin_cli import rsc_admin

    await set_shards(coordinator.url, PREFIX, GROUP, 1)
    client = connect(coordinator.redis_url)
    stream = default_dead_letter_stream(PREFIX, GROUP)
    try:
        new_id = client.xadd(stream, {name.decode(): value for name, value in NEW.items()})
        old_id = client.xadd(stream, {"key": "k9", "value": "v9", "shard": "{orders:v1:0}",
                                      "id": "6-0", "error": "ValueError('bad')", "attempts": "1",
                                      "consumerGroup": "billing", "memberId": "m-2"})
        code, out, err = await rsc_admin(coordinator.url, "dead-letters", PREFIX, GROUP)
        assert code == 0, err
        assert "2 dead letter(s) of" in out and "RuntimeError 1" in out and "ValueError 1" in out
        code, out, err = await rsc_admin(coordinator.url, "dead-letters", PREFIX, GROUP, "--json")
        assert code == 0 and '"count":2' in out and '"sourceId":"6-0"' in out, err
        code, out, err = await rsc_admin(coordinator.url, "redrive", PREFIX, GROUP, "--dry-run",
                                         "--id", old_id, "--max", "5")
        assert code == 0, err
        assert "would send back 1 dead letter(s)" in out and f"{old_id} -> {{orders:v1:0}}" in out
        code, out, err = await rsc_admin(coordinator.url, "redrive", PREFIX, GROUP, "--id", new_id)
        assert code == 0 and "sent back 1 dead letter(s)" in out, err
        assert [entry_id for entry_id, _ in client.xrange(stream)] == [old_id]
        raw = connect(coordinator.redis_url, decode=False)
        (_, fields), = raw.xrange("{orders:v1:0}")
        raw.close()
        assert fields[b"value"] == b"\xff v", "bytes kept (M1)"
        assert fields[b"h:rsc-redriven"] == b"1" and fields[b"h:rsc-redrive-group"] == b"billing"
    finally:
        client.close()


# --- P2: a dead-letter stream's retention is its own --------------------------------------


def test_p2_a_dead_letter_retention_trims_by_length_then_by_age():
    from rsc.actors.admin.dead_letter_admin import trim_commands
    from rsc.protocol.vocabulary import RetentionMode

    both = m.Retention(mode=RetentionMode.NONE, max_length=100, max_age_ms=60_000)
    assert trim_commands(both, 1_000_000) == [("MAXLEN", 100), ("MINID", "940000-0")]
    assert trim_commands(m.Retention(mode=RetentionMode.NONE), 1_000_000) == []
    young = m.Retention(mode=RetentionMode.NONE, max_age_ms=5_000_000)
    assert trim_commands(young, 1_000) == [("MINID", "0-0")]  # never a negative id


async def test_p2_set_retention_on_dead_letters_is_stored_shown_applied_and_audited(coordinator):
    from tests.test_admin_cli import rsc_admin

    [shard] = await set_shards(coordinator.url, PREFIX, GROUP, 1)
    client = connect(coordinator.redis_url)
    stream = default_dead_letter_stream(PREFIX, GROUP)
    other = default_dead_letter_stream(PREFIX, OTHER)
    fields = {**{name.decode(): value for name, value in NEW.items()}, "value": b"v"}
    try:
        old = [client.xadd(stream, fields, id=f"{n}-0") for n in (1000, 2000)]  # long dead
        young = [client.xadd(stream, fields) for _ in range(4)]
        client.xadd(other, fields, id="1000-0")  # another group's: no retention, kept
        client.xadd(shard, {"value": "v"}, id="1000-0")  # the prefix's own entries: untouched
        code, out, err = await rsc_admin(coordinator.url, "dead-letters", PREFIX, GROUP)
        assert code == 0 and "retention: none (kept until re-driven or trimmed)" in out, err

        code, out, err = await rsc_admin(coordinator.url, "set-retention", PREFIX, "--none",
                                         "--max-length", "3", "--max-age", "1h",
                                         "--dead-letters", GROUP)
        assert code == 0, err
        assert "retention of the dead letters of" in out and "max length 3" in out
        with trio.fail_after(15):  # the coordinator's retention round (tick x 10) trims it
            while client.xlen(stream) != 3:
                await trio.sleep(0.05)
        assert [entry_id for entry_id, _ in client.xrange(stream)] == young[1:]
        assert not set(old) & {entry_id for entry_id, _ in client.xrange(stream)}
        assert client.xlen(other) == 1 and client.xlen(shard) == 1

        code, out, err = await rsc_admin(coordinator.url, "dead-letters", PREFIX, GROUP, "--json")
        assert code == 0, err
        assert '"retention":{"mode":"none","maxLength":3,"maxAgeMs":3600000}' in out
        code, out, err = await rsc_admin(coordinator.url, "describe", PREFIX, GROUP)
        assert code == 0, err
        assert f"dead letters: 3 in {stream}; their retention: none" in out
        assert "max length 3, max age 1h" in out
        async with open_session(coordinator.url, "admin") as session:
            described = await session.request(m.DescribeGroup(
                request_id=0, stream_prefix=PREFIX, consumer_group=GROUP))
        assert isinstance(described, m.GroupDescription)
        assert described.retention is None or described.retention.mode == "acked", \
            "the prefix's own retention is not the dead letters'"

        entries = [json.loads(body["entry"]) for _, body in client.xrange("rsc:audit")]
        [audited] = [entry for entry in entries
                     if entry["request"].get("deadLettersOf") == GROUP]
        assert audited["request"]["type"] == "setRetention" and audited["status"] == "OK"

        # none again, no caps: the setting is removed and nothing more is trimmed
        code, out, err = await rsc_admin(coordinator.url, "set-retention", PREFIX, "--none",
                                         "--dead-letters", GROUP)
        assert code == 0 and "none (kept until re-driven)" in out, err
        assert client.hlen("rsc:dead-letter-retention") == 0
    finally:
        client.close()


async def test_p2_dead_letter_retention_takes_mode_none_and_a_known_prefix(coordinator):
    from tests.test_admin_cli import rsc_admin

    code, out, err = await rsc_admin(coordinator.url, "set-retention", PREFIX, "--acked",
                                     "--max-length", "3", "--dead-letters", GROUP)
    assert code != 0 and "--dead-letters takes --none" in err
    async with open_session(coordinator.url, "admin") as session:
        acked = await session.request(m.SetRetention(
            request_id=0, stream_prefix=PREFIX, dead_letters_of=GROUP,
            retention=m.Retention(max_length=3)))
        unknown = await session.request(m.SetRetention(
            request_id=0, stream_prefix="nowhere", dead_letters_of=GROUP,
            retention=m.Retention(mode=RetentionMode.NONE, max_length=3)))
    assert isinstance(acked, m.RetentionChanged) and acked.status == Status.INVALID_REQUEST
    assert "mode 'none'" in (acked.error or "")
    assert unknown.status == Status.UNKNOWN_STREAM
    client = connect(coordinator.redis_url)
    assert client.hlen("rsc:dead-letter-retention") == 0, "a refused request changes nothing"
    client.close()
