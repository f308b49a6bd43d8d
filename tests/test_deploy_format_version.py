"""The store's metadata format version (docs/operations/upgrading.md; docs/protocol.md, Admin).

Pure: the format a stored value names, when a coordinator refuses to load a store, and what
`setFormatVersion` may do (actors/core/records.py). Against a real redis-server and coordinator:
the layout a released version wrote (tests/fixtures/metadata_v1.json, captured from that
code by tests/fixtures/capture_metadata.py) loads under this code with every record
intact; a store in a newer format is refused at start in one line; the format in use is
kept until an operator raises it, never lowered, and a coordinator of the release before
refuses the store once it was raised (a newer release is simulated by raising the newest
format this code writes).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
import trio

from rsc.actors.admin import format_admin as format_admin_module
from rsc.actors.app import serve
from rsc.actors.config import CoordinatorConfig
from rsc.actors.core.records import (
    FORMAT_VERSIONS,
    LATEST_FORMAT_VERSION,
    FormatChange,
    format_change,
    load_refusal,
    parse_member_field,
    replay,
    stored_format_version,
)
from rsc.actors.redis_io import store as store_module
from rsc.actors.redis_io.store import FORMAT_VERSION_KEY, MetadataStore, StoreError, UnsupportedFormatVersion
from rsc.member.session import open_session
from rsc.protocol import messages as m
from rsc.protocol.codec import ADMIN_REQUESTS, MEMBER_REQUESTS, decode, encode
from rsc.protocol.errors import ProtocolError, Status
from rsc.protocol.vocabulary import MemberState, MigrationState
from tests.processes import log_message

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "metadata_v1.json"
LONG_LEASE = {"lease_ttl_ms": 60_000}  # the fixture's members stay as stored while we look


# --- pure --------------------------------------------------------------------------------


def test_a_store_without_a_format_version_is_in_format_1():
    assert stored_format_version(None) == 1
    assert stored_format_version("1") == 1 and stored_format_version(" 7\n") == 7


@pytest.mark.parametrize("value", ["", "x", "0", "-1", "1.5", "two"])
def test_a_value_that_is_no_format_version_is_refused_naming_it(value):
    with pytest.raises(ValueError, match=repr(value).replace(".", r"\.")):
        stored_format_version(value)


def test_every_format_up_to_the_latest_is_read():
    assert sorted(FORMAT_VERSIONS) == list(range(1, LATEST_FORMAT_VERSION + 1))
    assert all(load_refusal(version) is None for version in FORMAT_VERSIONS)


def test_a_newer_format_is_refused_at_load_naming_both_versions():
    refusal = load_refusal(LATEST_FORMAT_VERSION + 1)
    assert refusal is not None
    assert f"format {LATEST_FORMAT_VERSION + 1}" in refusal and "reads format" in refusal
    assert load_refusal(3, latest=2) is not None and "formats 1 to 2" in str(load_refusal(3, latest=2))


@pytest.mark.parametrize(("current", "requested", "latest", "allowed", "changed"), [
    (1, 1, 1, True, False),   # already in it: OK, nothing written
    (1, 2, 2, True, True),    # raise to what this coordinator writes
    (1, 3, 3, True, True),    # several steps at once
    (1, 2, 1, False, False),  # unknown to this coordinator
    (2, 1, 2, False, False),  # never lowered
    (3, 2, 3, False, False),
])
def test_set_format_version_raises_only_to_a_format_the_coordinator_writes(
        current, requested, latest, allowed, changed):
    change = format_change(current, requested, latest)
    assert isinstance(change, FormatChange)
    assert (change.refusal is None, change.changed) == (allowed, changed)


def test_the_refusals_say_why():
    assert "unknown to this coordinator" in str(format_change(1, 2, 1).refusal)
    assert "never lowered" in str(format_change(2, 1, 2).refusal)


def test_the_format_version_requests_are_admin_requests_with_a_checked_version():
    assert {"getFormatVersion", "setFormatVersion"} <= ADMIN_REQUESTS
    assert not {"getFormatVersion", "setFormatVersion"} & MEMBER_REQUESTS
    request = decode('{"type": "setFormatVersion", "requestId": 4, "formatVersion": 2}', ADMIN_REQUESTS)
    assert request == m.SetFormatVersion(request_id=4, format_version=2)
    with pytest.raises(ProtocolError, match="formatVersion"):
        decode('{"type": "setFormatVersion", "requestId": 4, "formatVersion": 0}', ADMIN_REQUESTS)
    with pytest.raises(ProtocolError, match="getFormatVersion"):
        decode('{"type": "getFormatVersion", "requestId": 1}', MEMBER_REQUESTS)
    answer = json.loads(encode(m.FormatVersion(request_id=1, status=Status.OK, format_version=1,
                                               latest_format_version=2)))
    assert answer == {"type": "formatVersion", "requestId": 1, "status": "OK", "formatVersion": 1,
                      "latestFormatVersion": 2, "error": None}


# --- the released layout, loaded by this code ----------------------------------------------


def load_fixture(redis_url: str) -> dict[str, Any]:
    """Write every key of the fixture into the (flushed) store; the fixture's keys."""
    keys: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))["keys"]
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        for key, entry in keys.items():
            kind, value = entry["type"], entry["value"]
            if kind == "string":
                client.set(key, value)
            elif kind == "hash":
                client.hset(key, mapping=value)
            elif kind == "set":
                client.sadd(key, *value)
            elif kind == "stream":
                load_stream(client, key, value)
            else:
                raise AssertionError(f"the fixture holds a {kind} key {key}")
    finally:
        client.close()
    return keys


def load_stream(client: Any, key: str, value: dict[str, Any]) -> None:
    """A stream with its entries and consumer groups, each group's pending entries delivered
    again to the consumer that held them (one XREADGROUP each, from the entry before it)."""
    ids = [entry_id for entry_id, _ in value["entries"]]
    for entry_id, fields in value["entries"]:
        client.xadd(key, fields, id=entry_id)
    for group in value["groups"]:
        client.xgroup_create(key, group["name"], id="0-0", mkstream=True)
        for entry_id, consumer in group["pending"]:
            index = ids.index(entry_id)
            client.xgroup_setid(key, group["name"], ids[index - 1] if index else "0-0")
            delivered = client.xreadgroup(group["name"], consumer, {key: ">"}, count=1)
            assert delivered[0][1][0][0] == entry_id, delivered
        client.xgroup_setid(key, group["name"], group["lastDeliveredId"])


def fixture_meta(keys: dict[str, Any], prefix: str) -> dict[str, Any]:
    """A prefix hash of the fixture with its JSON values read (the raw layout, not replay)."""
    return {field: json.loads(value) for field, value in keys[f"rsc:meta:{{{prefix}}}"]["value"].items()}


def fixture_members(meta: dict[str, Any], group: str) -> dict[str, dict[str, Any]]:
    return {parse_member_field(field)[1]: value for field, value in meta.items()
            if field.startswith("member:") and parse_member_field(field)[0] == group}


def test_the_fixture_holds_every_kind_of_record():
    """So a recapture that lost a case fails here instead of passing with less."""
    keys: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))["keys"]
    assert FORMAT_VERSION_KEY not in keys  # the layout from before format versions
    orders = fixture_meta(keys, "orders")
    assert orders["migration"]["state"] == "DRAINING" and orders["retention"]["maxLength"] == 100000
    assert orders["group:billing"]["maxConcurrency"] == 2 and "group:audit" in orders
    members = fixture_members(orders, "billing")
    assert sorted(str(member.get("instanceId")) for member in members.values()) == [
        "None", "billing-a", "billing-b"]
    assert [member["away"] for member in members.values()
            if member.get("instanceId") == "billing-b"] == [True]
    assert any(key.endswith(":sealed") for key in keys) and any(":owner:" in key for key in keys)
    assert set(keys["rsc:prefixes"]["value"]) == {"orders", "payments"}


def test_the_released_layout_replays_into_the_same_records():
    keys: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))["keys"]
    orders = fixture_meta(keys, "orders")
    snapshot = replay(keys["rsc:meta:{orders}"]["value"])
    assert snapshot.routing is not None and snapshot.routing.streams == tuple(orders["routing"]["streams"])
    assert snapshot.migration is not None and snapshot.migration.state == MigrationState.DRAINING
    assert snapshot.migration.from_streams == tuple(orders["migration"]["fromStreams"])
    assert snapshot.retention.max_length == 100000
    assert set(snapshot.groups) == {"billing", "audit"}
    billing = snapshot.groups["billing"]
    assert billing.group.group_epoch == orders["group:billing"]["groupEpoch"]
    assert billing.group.max_concurrency == 2
    for member_id, stored in fixture_members(orders, "billing").items():
        record = billing.members[member_id]
        assert (record.epoch, record.instance_id, record.away) == (
            stored["epoch"], stored.get("instanceId"), stored.get("away", False))
        assert record.assigned == frozenset(stored["assigned"])
        assert record.target == frozenset(stored["target"])


async def test_a_coordinator_loads_the_released_layout_and_serves_it(redis_url, coordinator_factory):
    keys = load_fixture(redis_url)
    orders = fixture_meta(keys, "orders")
    members = fixture_members(orders, "billing")
    coordinator = await coordinator_factory(**LONG_LEASE)
    async with open_session(coordinator.url, "admin") as admin:
        described = await admin.request(m.DescribeGroup(request_id=0, stream_prefix="orders",
                                                        consumer_group="billing"))
        audit = await admin.request(m.DescribeGroup(request_id=0, stream_prefix="orders",
                                                    consumer_group="audit"))
        ledger = await admin.request(m.DescribeGroup(request_id=0, stream_prefix="payments",
                                                     consumer_group="ledger"))
        version = await admin.request(m.GetFormatVersion(request_id=0))
    assert described.status == Status.OK and audit.status == Status.OK and ledger.status == Status.OK
    assert (described.group_epoch, described.assignment_epoch) == (
        orders["group:billing"]["groupEpoch"], orders["group:billing"]["assignmentEpoch"])
    assert described.max_concurrency == 2
    assert described.routing.version == 2 and described.routing.shard_count == 4
    assert described.migration is not None and described.migration.state == MigrationState.DRAINING
    assert described.migration.from_version == 1 and described.migration.to_version == 2
    assert "audit" in {blocking.consumer_group for blocking in described.migration.blocking_groups}
    assert described.retention is not None and described.retention.max_length == 100000
    assert {member.member_id: (member.instance_id, member.state == MemberState.AWAY)
            for member in described.members} == {
        member_id: (stored.get("instanceId"), stored.get("away", False))
        for member_id, stored in members.items()}
    assert described.current_assignment == {
        member_id: tuple(sorted(stored["assigned"])) for member_id, stored in members.items()}
    assert [member.member_id for member in ledger.members] == list(fixture_members(
        fixture_meta(keys, "payments"), "ledger"))
    # format 1 in use, and now written down: a store with metadata and no version was format 1
    assert (version.format_version, version.latest_format_version) == (1, LATEST_FORMAT_VERSION)
    assert redis.Redis.from_url(redis_url).get(FORMAT_VERSION_KEY) == b"1"

    # a static member of the released layout comes back (S3): its stored target, at once
    away_id, away = next((member_id, stored) for member_id, stored in members.items() if stored["away"])
    async with open_session(coordinator.url, "member") as member:
        back = await member.request(m.Heartbeat(
            request_id=0, stream_prefix="orders", consumer_group="billing",
            member_id="returned-" + away_id, member_epoch=0, instance_id=away["instanceId"]))
    assert back.status == Status.OK, back
    assert set(back.assignment.assigned_shards) == set(away["target"])


async def refused_at_start(redis_url: str) -> UnsupportedFormatVersion:
    """What `serve` raises at start (inside the groups its nurseries make); a coordinator that
    started instead would run until fail_after."""
    config = CoordinatorConfig(redis_url=redis_url, port=0, tick_interval_ms=50, lease_ttl_ms=1000)
    with trio.fail_after(20):
        try:
            await serve(config)
        except UnsupportedFormatVersion as refusal:  # L1: the real error, not a group of it
            return refusal
        except BaseExceptionGroup as group:
            matched = group.subgroup(UnsupportedFormatVersion)
            assert matched is not None, group
            found: BaseException = matched
            while isinstance(found, BaseExceptionGroup):
                found = found.exceptions[0]
            assert isinstance(found, UnsupportedFormatVersion)
            return found
    raise AssertionError("the coordinator returned instead of refusing the store")


async def test_a_store_in_a_newer_format_is_refused_before_anything_is_loaded(redis_url):
    keys = load_fixture(redis_url)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    client.set(FORMAT_VERSION_KEY, LATEST_FORMAT_VERSION + 1)
    before = client.hgetall("rsc:meta:{orders}")
    refusal = await refused_at_start(redis_url)
    assert "metadata format" in str(refusal)
    assert client.hgetall("rsc:meta:{orders}") == before == keys["rsc:meta:{orders}"]["value"]
    assert client.get("rsc:coordinator:lease") is None  # the refusing coordinator let go of it
    client.close()


async def test_l1_coordinator_stopped_logs_the_real_error_of_a_format_refusal(redis_url, caplog):
    redis.Redis.from_url(redis_url).set(FORMAT_VERSION_KEY, LATEST_FORMAT_VERSION + 1)
    with caplog.at_level(logging.INFO, logger="rsc"):
        refusal = await refused_at_start(redis_url)
    stopped = [record for record in caplog.records if "coordinator.stopped" in record.getMessage()]
    assert len(stopped) == 1
    text = stopped[0].getMessage() + repr(vars(stopped[0]))
    assert "Exceptions from Trio nursery" not in text
    assert str(refusal) in text or "metadata format" in text, text


def test_rsc_coordinator_refuses_a_newer_format_in_one_line_and_exits_1(redis_url):
    redis.Redis.from_url(redis_url).set(FORMAT_VERSION_KEY, LATEST_FORMAT_VERSION + 1)
    done = subprocess.run([sys.executable, "-m", "rsc", "coordinator", "--redis-url", redis_url,
                           "--port", "0", "--tick-interval-ms", "50"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 1, done
    refusal = [log_message(line) for line in done.stderr.splitlines()
               if log_message(line).startswith("rsc coordinator:")]
    assert refusal == [f"rsc coordinator: the store is in metadata format {LATEST_FORMAT_VERSION + 1}, "
                       f"and this coordinator reads format 1: run the release that raised it, or a "
                       f"newer one ({FORMAT_VERSION_KEY} is {LATEST_FORMAT_VERSION + 1})"] \
        if LATEST_FORMAT_VERSION == 1 else refusal[:1]
    assert "Traceback" not in done.stderr and "listening on" not in done.stdout


# --- the format in use is kept until raised; rollback until then --------------------------


def test_the_script_raises_and_never_lowers(redis_url):
    store = MetadataStore(redis_url, lease_ms=1000)
    try:
        assert store.raise_format_version(3) == 1  # from a store without the key
        with pytest.raises(StoreError, match="the store is in format 3"):
            store.raise_format_version(2)
        assert store.client.get(FORMAT_VERSION_KEY) == "3"
        assert store.raise_format_version(3) == 3 and store.format_version == 3
    finally:
        store.close()


def test_an_empty_store_starts_in_the_latest_format_and_a_used_one_in_its_own(redis_url, monkeypatch):
    monkeypatch.setattr(store_module, "LATEST_FORMAT_VERSION", 2)  # as a release writing format 2
    fresh = MetadataStore(redis_url, lease_ms=1000)
    assert fresh.load_all() == {} and fresh.format_version == 2
    assert fresh.client.get(FORMAT_VERSION_KEY) == "2"
    fresh.client.flushall()
    load_fixture(redis_url)
    used = MetadataStore(redis_url, lease_ms=1000)
    assert set(used.load_all()) == {"orders", "payments"} and used.format_version == 1
    assert used.client.get(FORMAT_VERSION_KEY) == "1"
    fresh.close()
    used.close()


async def test_a_newer_release_keeps_format_1_until_raised_then_the_older_one_refuses(
        redis_url, coordinator_factory, monkeypatch):
    # a release one format ahead of this one (B6 made this one write format 2)
    newest = LATEST_FORMAT_VERSION + 1
    load_fixture(redis_url)
    for module in (store_module, format_admin_module):  # this coordinator writes up to `newest`
        monkeypatch.setattr(module, "LATEST_FORMAT_VERSION", newest)
    newer = await coordinator_factory(**LONG_LEASE)
    async with open_session(newer.url, "admin") as admin:
        kept = await admin.request(m.GetFormatVersion(request_id=0))
        assert (kept.format_version, kept.latest_format_version) == (1, newest)
        assert redis.Redis.from_url(redis_url).get(FORMAT_VERSION_KEY) == b"1"
        too_new = await admin.request(m.SetFormatVersion(request_id=0, format_version=newest + 1))
        assert too_new.status == Status.UNSUPPORTED_FORMAT_VERSION and "unknown" in too_new.error
        raised = await admin.request(m.SetFormatVersion(request_id=0, format_version=newest))
        assert raised.status == Status.OK, raised
        assert (raised.previous_format_version, raised.format_version) == (1, newest)
        lower = await admin.request(m.SetFormatVersion(request_id=0, format_version=1))
        assert lower.status == Status.UNSUPPORTED_FORMAT_VERSION and "never lowered" in lower.error
        again = await admin.request(m.SetFormatVersion(request_id=0, format_version=newest))
        assert again.status == Status.OK and again.previous_format_version == newest
        shown = await admin.request(m.GetFormatVersion(request_id=0))
        assert shown.format_version == newest
    await newer.stop()
    assert redis.Redis.from_url(redis_url).get(FORMAT_VERSION_KEY) == str(newest).encode()
    monkeypatch.undo()  # the release before: it writes up to LATEST_FORMAT_VERSION only
    assert f"metadata format {newest}" in str(await refused_at_start(redis_url))


async def test_rsc_admin_shows_and_sets_the_format_version(coordinator):
    env_base = {"RSC_COORDINATOR_URL": coordinator.url, "PATH": str(Path(sys.executable).parent)}

    def admin(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "rsc", "admin", *args], capture_output=True,
                              text=True, timeout=30, cwd=ROOT, env=env_base)

    shown, as_json, same, unknown = await trio.to_thread.run_sync(lambda: (
        admin("format-version"), admin("format-version", "--json"),
        admin("set-format-version", str(LATEST_FORMAT_VERSION)),
        admin("set-format-version", str(LATEST_FORMAT_VERSION + 1))))
    assert shown.returncode == 0
    assert shown.stdout.startswith(f"metadata format version {LATEST_FORMAT_VERSION}")
    assert json.loads(as_json.stdout)["formatVersion"] == LATEST_FORMAT_VERSION
    assert same.returncode == 0 and "unchanged" in same.stdout
    assert unknown.returncode == 1
    assert unknown.stderr.startswith("error: UNSUPPORTED_FORMAT_VERSION: ")
