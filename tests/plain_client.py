"""A member and a producer written from docs/protocol.md alone (Member heartbeat, M5).

Nothing of the project is imported: plain redis-py, trio and trio-websocket, JSON by hand,
and the two Lua scripts read from the files the page names. What another language's client
would do, kept small: one task per member that heartbeats and, between heartbeats, reads,
handles and acks; a producer that routes by crc32 and writes through the produce script.
"""

from __future__ import annotations

import itertools
import json
import time
import zlib
from pathlib import Path
from typing import Any

import redis
import trio
from trio_websocket import open_websocket_url

SCRIPTS = Path(__file__).resolve().parent.parent / "rsc" / "common" / "scripts"
PRODUCE = (SCRIPTS / "produce.lua").read_text()
ACK = (SCRIPTS / "ack.lua").read_text()


class Session:
    """A websocket to the coordinator: one request at a time (pushes are ignored: every
    change reaches a member through its next heartbeat anyway)."""

    def __init__(self, websocket: Any) -> None:
        self.websocket = websocket
        self.ids = itertools.count(1)

    async def request(self, body: dict[str, Any]) -> dict[str, Any]:
        request_id = next(self.ids)
        await self.websocket.send_message(json.dumps({**body, "requestId": request_id}))
        while True:
            answer = json.loads(await self.websocket.get_message())
            if answer.get("requestId") == request_id:
                return dict(answer)


class PlainProducer:
    """Routes by `crc32(key) mod shardCount`; writes only through produce.lua."""

    def __init__(self, session: Session, client: redis.Redis, prefix: str) -> None:
        self.session, self.client, self.prefix = session, client, prefix
        self.produce = client.register_script(PRODUCE)
        self.streams: list[str] = []
        self.refused = 0  # SEALED or MISSING: re-routed

    async def refresh(self) -> None:
        answer = await self.session.request({"type": "getRouting", "streamPrefix": self.prefix})
        assert answer["status"] == "OK", answer
        self.streams = answer["streams"]

    async def send(self, key: str, value: str, headers: dict[str, str] | None = None) -> str:
        fields: list[bytes] = [b"key", key.encode(), b"value", value.encode()]
        for name, text in (headers or {}).items():
            fields += [b"h:" + name.encode(), text.encode()]
        while True:
            if not self.streams:
                await self.refresh()
            shard = self.streams[zlib.crc32(key.encode()) % len(self.streams)]
            def write(shard: str = shard) -> Any:
                return self.produce(keys=[shard, f"{shard}:sealed"], args=fields)

            try:
                return str(await trio.to_thread.run_sync(write))
            except redis.ResponseError as exc:
                if not str(exc).startswith(("SEALED", "MISSING")):
                    raise
                self.refused += 1
                await self.refresh()


class PlainMember:
    """One member: heartbeats (full ownership every time), reads, handles, acks, revokes."""

    def __init__(self, url: str, client: redis.Redis, prefix: str, group: str, member_id: str,
                 handled: list[tuple[str, str, dict[bytes, bytes]]]) -> None:
        self.url, self.client, self.prefix, self.group = url, client, prefix, group
        self.member_id, self.handled = member_id, handled
        self.ack = client.register_script(ACK)
        self.epoch, self.held, self.revoked = 0, set[str](), set[str]()
        self.interval_s, self.lease_s = 1.0, 10.0
        self.accepted_at: float | None = None  # when the last accepted heartbeat was sent
        self.stopping = False

    def leased(self) -> bool:  # D1
        return self.accepted_at is not None and time.monotonic() - self.accepted_at < self.lease_s

    async def run(self) -> None:
        async with open_websocket_url(self.url + "/v1/member") as websocket:
            session = Session(websocket)
            while True:
                sent_at = time.monotonic()
                leaving = self.stopping  # nothing is in flight between reads: leave at once (H9)
                answer = await session.request({
                    "type": "heartbeat", "streamPrefix": self.prefix, "consumerGroup": self.group,
                    "memberId": self.member_id, "memberEpoch": -1 if leaving else self.epoch,
                    "capacity": 1, "ownedShards": sorted(self.held) if self.epoch > 0 else [],
                    "revokingShards": [{"shard": s, "state": "REVOKED"} for s in sorted(self.revoked)]
                    if self.epoch > 0 else []})
                if leaving:
                    return
                await self.follow(answer, sent_at)
                deadline = trio.current_time() + self.interval_s * 0.8
                while trio.current_time() < deadline and self.held and self.leased():
                    await self.read_once()
                if not self.held:
                    await trio.sleep_until(deadline)

    async def follow(self, answer: dict[str, Any], sent_at: float) -> None:
        status = answer["status"]
        if status in ("UNKNOWN_MEMBER_ID", "FENCED_MEMBER_EPOCH"):  # rejoin, holding nothing
            self.epoch, self.held, self.revoked, self.accepted_at = 0, set(), set(), None
            return
        if status not in ("OK", "REVOKE_PENDING", "SYNC_METADATA"):
            return  # COORDINATOR_NOT_AVAILABLE and the like: try again next time
        self.accepted_at = sent_at
        self.epoch = answer["memberEpoch"]
        self.interval_s = answer["heartbeatIntervalMs"] / 1000
        self.lease_s = answer["leaseTtlMs"] / 1000
        if status == "OK":
            self.revoked = set()  # an OK answers our REVOKED reports
        assigned = set((answer.get("assignment") or {}).get("assignedShards", []))
        for shard in self.held - assigned:  # revoke: nothing is in flight between reads
            self.held.discard(shard)
            self.revoked.add(shard)
        if status == "OK" and not self.stopping:
            for shard in sorted(assigned - self.held):
                self.held.add(shard)
                await self.recover(shard)

    async def recover(self, shard: str) -> None:
        """XAUTOCLAIM what a previous owner was given and did not ack; handle it first."""
        cursor = "0-0"
        while True:
            def claim(start: str = cursor) -> Any:
                return self.client.xautoclaim(shard, self.group, self.member_id, 0, start,
                                              count=100)

            cursor, entries, *_ = await trio.to_thread.run_sync(claim)
            await self.handle(shard, [entry for entry in entries if entry and entry[1]])
            if cursor in ("0-0", b"0-0"):
                return

    async def read_once(self) -> None:
        shards = sorted(self.held)
        reply: Any = await trio.to_thread.run_sync(lambda: self.client.xreadgroup(
            self.group, self.member_id, {shard: ">" for shard in shards}, count=50, block=100))
        for stream, entries in reply or []:
            await self.handle(stream.decode() if isinstance(stream, bytes) else stream, entries)

    async def handle(self, shard: str, entries: list[Any]) -> None:
        ids = []
        for entry_id, fields in entries:
            if shard not in self.held or not self.leased():  # D1, in the same step
                return
            key = fields.get(b"key")
            self.handled.append((shard, fields[b"value"].decode(), {
                name[2:]: value for name, value in fields.items() if name.startswith(b"h:")}))
            ids.append(entry_id)
            assert key is None or isinstance(key, bytes)
        if ids:
            acked = await trio.to_thread.run_sync(lambda: self.ack(
                keys=[shard, f"{shard}:owner:{self.group}"],
                args=[self.member_id, self.group, 0, *ids]))
            if int(acked) == -1:  # the owner record names another member: stop this shard
                self.held.discard(shard)
