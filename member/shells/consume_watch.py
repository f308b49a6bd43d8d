"""`ConsumeWatch`: what `rsc consume` needs before its members start, said while it is missing (D3).

Both console tools fail loudly: every expected failure is one line on stderr, said
when it starts, again every 15 s while it lasts, and when it is over.
"""

from __future__ import annotations

import math

import redis
import trio

from rsc.common.errors import unwrap_single
from rsc.member.notices import REPEAT_S, Notices
from rsc.member.producer import no_routing_line
from rsc.member.pure.health import may_take_messages
from rsc.member.redis_io.redis_retry import RedisRetry
from rsc.member.redis_io.streams import connect, store_id_of
from rsc.member.redis_io.unrecoverable import tls_checked
from rsc.member.shells.routing_follower import RoutingFollower
from rsc.member.shells.tool_config import Endpoints
from rsc.protocol import Routing, Status


class ConsumeWatch(RoutingFollower):
    """What `rsc consume` needs before its members start, and says while it is missing.

    Follows the routing on its own session to the coordinator (the member side's one
    `RoutingFollower`: getRouting with subscribe, asked again while there is none) and pings
    Redis, so an unreachable or refusing coordinator, a prefix with no routing, a
    down Redis or another Redis (storeId) each get their line. `ready` is set once
    Redis answers and the storeId was checked (or the prefix has routing and the
    coordinator sends no storeId): only then may members start taking messages.
    """

    def __init__(self, urls: Endpoints, stream_prefix: str, notices: Notices, *,
                 redis_interval_s: float = 2.0) -> None:
        super().__init__(urls.coordinator_url, stream_prefix, notices, token=urls.token,
                         ca_file=urls.ca_file)
        self.urls = urls
        self.ready = trio.Event()
        self._redis_interval_s = redis_interval_s
        self._client = connect(urls.redis_url, timeout_s=2.0, retries=False)
        self._retry = RedisRetry(urls.redis_url, notices)
        self._redis_ok = False
        self._store_checked = False
        self._routed = False

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch_redis)
                nursery.start_soon(self.keep_session)
        except BaseExceptionGroup as group:
            unwrap_single(group)
        finally:
            self._client.close()

    def _check_ready(self) -> None:
        # before routing it is not known whether the coordinator names a storeId to check
        if may_take_messages(reached=self._redis_ok, store_checked=self._store_checked,
                     store_to_check=not self._routed):
            self.ready.set()

    async def _watch_redis(self) -> None:
        url = self.urls.redis_url
        while True:  # a health poll: every `redis_interval_s`, whatever the last answer was
            try:
                await trio.to_thread.run_sync(tls_checked, self._client.ping, url)
            except redis.RedisError as exc:
                self._redis_ok = False
                self._retry.failed(exc)  # said; D3: a bad db index never heals (raised)
            else:
                self._redis_ok = True
                self._retry.answered()
                self._check_ready()
            await trio.sleep(self._redis_interval_s)

    def retry_suffix(self) -> str:
        return "retrying (members keep their shards while their lease lasts)" \
            if self.ready.is_set() else "retrying"

    def reask_after_s(self) -> float:
        """While there is no routing, ask again now and then, so the hint is repeated."""
        return REPEAT_S / 3 if not self._routed else math.inf

    async def adopt(self, message: Routing) -> None:
        expected = store_id_of(message)
        if expected is not None and not self._store_checked:
            await self._check_store(expected)
            self._store_checked = True
        if message.status == Status.OK:
            if not self._routed and self.notices.active("routing"):
                self.notices.clear("routing", f"prefix {self.stream_prefix!r} has routing now: "
                                   f"version {message.version}, {message.shard_count} shards")
            self._routed = True
        elif message.status == Status.UNKNOWN_STREAM:
            self.notices.say("routing", no_routing_line(self.stream_prefix))
        self._check_ready()

    async def _check_store(self, expected: str) -> None:
        """StoreMismatch unless this Redis is the coordinator's (Redis errors retried)."""
        await self._retry.check_store(self._client, expected,
                                      coordinator_url=self.urls.coordinator_url)
