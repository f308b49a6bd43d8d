"""The producer's coordinator side: one session kept open, routing asked for and followed.

`RoutingFollower` keeps a session to the coordinator (reopened with backoff), asks for the
prefix's routing (`getRouting`, with `subscribe` for pushes) and hands every routing it
hears to the pure `ProducerCore` (producer_core.py), which decides what it means. It says
through `notices` while the coordinator is unreachable or the prefix has no routing. The
producer (producer.py) asks it for routing before writing, and again when a write finds a
sealed or missing shard.
"""

from __future__ import annotations

import logging
import math
import ssl

import trio

from rsc.common.backoff import RETRY, ROUTING_WAIT
from rsc.common.error_family import CoordinatorUnavailable
from rsc.common.tls import TlsFailed
from rsc.common.wording import log_final
from rsc.member.notices import Notices, then
from rsc.member.producer_core import Adoption, ProducerCore, RoutingTable
from rsc.member.session import (
    ResponseUndecodable,
    Session,
    SessionClosed,
    SessionRefused,
    check_coordinator_url,
    open_session,
)
from rsc.member.unrecoverable import refusal_error, refusal_is_permanent
from rsc.member.workqueue import Signal
from rsc.protocol import GetRouting, Routing

log = logging.getLogger("rsc.member.producer")

REQUEST_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 5.0


class RoutingUnavailable(CoordinatorUnavailable):
    """The coordinator has no routing for the prefix (no shards yet) within the wait."""


def no_routing_line(stream_prefix: str) -> str:
    """The line for a prefix that has no routing (no shards) yet."""
    return (f"prefix {stream_prefix!r} has no routing yet: create its shards with "
            f"`rsc admin set-shards {stream_prefix} N`; waiting")


class RoutingFollower:
    """See the module text. `core` is the producer's: routing adopted here is what it writes with."""

    def __init__(self, coordinator_url: str, stream_prefix: str, core: ProducerCore,
                 notices: Notices, *, token: str | None, subscribe: bool,
                 routing_wait_s: float | None, ca_file: str | None,
                 ssl_context: ssl.SSLContext | None) -> None:
        self.coordinator_url = check_coordinator_url(coordinator_url)
        self.stream_prefix = stream_prefix
        self.subscribe = subscribe
        self._core = core
        self._notices = notices
        self._token = token
        self._routing_wait_s = routing_wait_s
        self._ca_file, self._ssl_context = ca_file, ssl_context  # for a wss:// coordinator
        self._session: Session | None = None
        self._changed = Signal()
        self.fatal: BaseException | None = None  # L2: a final refusal; every waiting call raises it

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
                        await self._changed.wait()
        self.raise_fatal()
        routing = self.routing
        if routing is None:
            raise RoutingUnavailable(f"no routing for stream prefix {self.stream_prefix!r}")
        return routing

    async def ask(self, *, wait_s: float, unless_known: bool = False) -> None:
        """One getRouting on the current session, waiting up to `wait_s` for one to be open
        (`unless_known`: not if some routing arrived meanwhile)."""
        with trio.move_on_after(wait_s):
            while self._session is None or self._session.closed:
                self.raise_fatal()
                await self._changed.wait()
            if unless_known and self.routing is not None:
                return
            try:
                await self._request(self._session)
            except (SessionClosed, ResponseUndecodable, trio.TooSlowError):
                pass  # the session keeper says so and reconnects

    async def _request(self, session: Session) -> None:
        with trio.fail_after(REQUEST_TIMEOUT_S):
            store_id, known = self._core.known()  # K8: what a coordinator that lost it may adopt
            response = await session.request(GetRouting(
                request_id=0, stream_prefix=self.stream_prefix, subscribe=self.subscribe,
                known_store_id=store_id, known_routing=known))
        if isinstance(response, Routing):
            self.adopt(response)

    def adopt(self, message: Routing) -> None:
        """A routing heard from the coordinator (an answer or a push)."""
        adoption = self._core.adopt(message)
        if adoption is Adoption.NO_ROUTING:
            self._notices.say("routing", no_routing_line(self.stream_prefix))
        elif adoption is Adoption.ARRIVED and (table := self._core.routing) is not None:
            self._notices.clear("routing", f"prefix {self.stream_prefix!r} has routing now: "
                                f"version {table.version}, {len(table.streams)} shards")
        self._changed.fire()

    def raise_fatal(self) -> None:
        """Raise the final refusal the session keeper met, if it met one (L2)."""
        if self.fatal is not None:
            raise self.fatal

    async def keep_session(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                           ) -> None:
        """Keep a coordinator session open (reopened with backoff), adopting routing pushes.

        `started` after the first attempt (L2): a refusal that no retry changes (HTTP 401,
        403, 404) is raised before it, so the producer's open fails with it; anything else
        is said and retried in the background. A later final refusal is raised here and by
        every call waiting for routing (`fatal`)."""
        backoff = RETRY.start()
        url = self.coordinator_url
        first = True
        while True:
            try:
                async with open_session(url, "member", token=self._token,
                                        connect_timeout=CONNECT_TIMEOUT_S, ca_file=self._ca_file,
                                        ssl_context=self._ssl_context) as session:
                    # K9: every new session is asked (its storeId compared), routing known or not
                    await self._request(session)
                    self._session = session  # usable by writers once routing was asked for
                    self._changed.fire()
                    self._notices.clear("coordinator", f"connected to the coordinator at {url}")
                    backoff.reset()
                    if first:
                        first = False
                        task_status.started()
                    async for push in session.pushes:
                        if isinstance(push, Routing) and push.stream_prefix == self.stream_prefix:
                            self.adopt(push)
                    reason = session.close_reason or "connection closed"
                    self._trouble(f"lost the coordinator session at {url} ({reason})")
            except SessionRefused as exc:
                if refusal_is_permanent(exc.status_code):  # D3: a wrong token never heals
                    self.fatal = refusal_error(exc.status_code, exc.line)
                    self._changed.fire()
                    log_final(log, exc.line)  # L2: said once, at ERROR
                    raise self.fatal from exc
                self._trouble(exc.line)
            except SessionClosed as exc:
                self._trouble(exc.line)
            except (ResponseUndecodable, trio.TooSlowError) as exc:
                self._trouble(f"the coordinator at {url} did not answer in time or "
                              f"answered garbage ({exc or type(exc).__name__})")
            except TlsFailed as exc:  # a certificate that does not verify: final (L2)
                self.fatal = exc
                self._changed.fire()
                log_final(log, exc.line)
                raise
            finally:
                self._session = None
            if first:
                first = False
                task_status.started()
            await trio.sleep(backoff.next())

    def _trouble(self, line: str) -> None:
        if self.routing is None:
            suffix = "retrying (a producer needs routing once: waiting for it)"
        else:
            suffix = f"retrying (writing with routing version {self.routing.version} meanwhile)"
        self._notices.say("coordinator", then(line, suffix))
