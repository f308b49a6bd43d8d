"""The producer's coordinator side: one session kept open, routing asked for and followed.

`ProducerRoutingFollower` is the member side's one `RoutingFollower` (routing_follower.py:
a session to the coordinator reopened with backoff, the prefix's routing asked for on each,
with `subscribe` for pushes, K8's known storeId and routing presented) handing every routing
it hears to the pure `ProducerCore` (producer_core.py), which decides what it means. It says
through `notices` while the coordinator is unreachable or the prefix has no routing. The
producer (producer.py) asks it for routing before writing, and again when a write finds a
sealed or missing shard.
"""

from __future__ import annotations

import logging
import math
import ssl

import trio

from rsc.common.backoff import ROUTING_WAIT
from rsc.common.error_family import CoordinatorUnavailable
from rsc.common.wording import log_final
from rsc.member.notices import Notices
from rsc.member.pure.producer_core import Adoption, ProducerCore, RoutingTable
from rsc.member.session import ResponseUndecodable, SessionClosed, check_coordinator_url
from rsc.member.shells.routing_follower import CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S, RoutingFollower
from rsc.protocol import GetRouting, Routing

__all__ = ["CONNECT_TIMEOUT_S", "REQUEST_TIMEOUT_S", "ProducerRoutingFollower",
           "RoutingUnavailable", "no_routing_line"]

log = logging.getLogger("rsc.member.producer")


class RoutingUnavailable(CoordinatorUnavailable):
    """The coordinator has no routing for the prefix (no shards yet) within the wait."""


def no_routing_line(stream_prefix: str) -> str:
    """The line for a prefix that has no routing (no shards) yet."""
    return (f"prefix {stream_prefix!r} has no routing yet: create its shards with "
            f"`rsc admin set-shards {stream_prefix} N`; waiting")


class ProducerRoutingFollower(RoutingFollower):
    """See the module text. `core` is the producer's: routing adopted here is what it writes with."""

    def __init__(self, coordinator_url: str, stream_prefix: str, core: ProducerCore,
                 notices: Notices, *, token: str | None, subscribe: bool,
                 routing_wait_s: float | None, ca_file: str | None,
                 ssl_context: ssl.SSLContext | None) -> None:
        super().__init__(check_coordinator_url(coordinator_url), stream_prefix, notices,
                         token=token, subscribe=subscribe, ca_file=ca_file,
                         ssl_context=ssl_context)
        self._core = core
        self._routing_wait_s = routing_wait_s

    @property
    def routing(self) -> RoutingTable | None:
        return self._core.routing

    async def first_routing(self) -> RoutingTable:
        """The routing, waiting for it (forever, or `routing_wait_s`: then RoutingUnavailable)."""
        wait_s = math.inf if self._routing_wait_s is None else self._routing_wait_s
        backoff = ROUTING_WAIT.start()
        with trio.move_on_after(wait_s):
            while self.routing is None:
                self.raise_fatal()
                await self.ask(wait_s=2.0, unless_known=True)
                if self.routing is None:
                    with trio.move_on_after(backoff.next()):
                        await self.changed.wait()
        self.raise_fatal()
        routing = self.routing
        if routing is None:
            raise RoutingUnavailable(f"no routing for stream prefix {self.stream_prefix!r}")
        return routing

    async def ask(self, *, wait_s: float, unless_known: bool = False) -> None:
        """One getRouting on the current session, waiting up to `wait_s` for one to be open
        (`unless_known`: not if some routing arrived meanwhile)."""
        with trio.move_on_after(wait_s):
            while self.session is None or self.session.closed:
                self.raise_fatal()
                await self.changed.wait()
            if unless_known and self.routing is not None:
                return
            try:
                await self.request(self.session, subscribe=self.subscribe)
            except (SessionClosed, ResponseUndecodable, trio.TooSlowError):
                pass  # the session keeper says so and reconnects

    def routing_request(self, *, subscribe: bool) -> GetRouting:
        store_id, known = self._core.known()  # K8: what a coordinator that lost it may adopt
        return GetRouting(request_id=0, stream_prefix=self.stream_prefix, subscribe=subscribe,
                          known_store_id=store_id, known_routing=known)

    async def adopt(self, message: Routing) -> None:
        self.adopt_now(message)

    def adopt_now(self, message: Routing) -> None:
        """A routing heard from the coordinator (an answer or a push)."""
        adoption = self._core.adopt(message)
        if adoption is Adoption.NO_ROUTING:
            self.notices.say("routing", no_routing_line(self.stream_prefix))
        elif adoption is Adoption.ARRIVED and (table := self._core.routing) is not None:
            self.notices.clear("routing", f"prefix {self.stream_prefix!r} has routing now: "
                               f"version {table.version}, {len(table.streams)} shards")
        self.changed.fire()

    def retry_suffix(self) -> str:
        if self.routing is None:
            return "retrying (a producer needs routing once: waiting for it)"
        return f"retrying (writing with routing version {self.routing.version} meanwhile)"

    def unanswered_line(self, exc: BaseException) -> str:
        return (f"the coordinator at {self.coordinator_url} did not answer in time or "
                f"answered garbage ({exc or type(exc).__name__})")

    def said_final(self, line: str) -> None:
        log_final(log, line)  # L2: said once, at ERROR
