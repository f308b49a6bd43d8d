"""`RoutingFollower`: a coordinator session kept open, a prefix's routing asked for and followed.

The one loop of the member side's routing, under the producer's (producer_routing.py) and
`rsc consume`'s watch (consume_watch.py): a session to the coordinator is opened (reopened
with a backoff preset), the prefix's routing asked for on every new session (`getRouting`,
with `subscribe` for pushes: K9, a new session is asked whether routing is known or not, so
its storeId is compared), and every routing heard (an answer, a push) handed to `adopt`,
the subclass's answer to what it means. While the session is down it is said through
`notices` (topic "coordinator": once, then slowly, then "connected", D3). A refusal no retry
changes (HTTP 401, 403, 404) or a certificate that does not verify is final (L2): kept in
`fatal` and raised.

A subclass says what it asks (`routing_request`), what a routing means (`adopt`), what the
retry line adds (`retry_suffix`), and how often it asks again while it has no routing
(`reask_after_s`, never by default).
"""

from __future__ import annotations

import math
import ssl

import trio

from rsc.common.backoff import RETRY
from rsc.common.tls import TlsFailed
from rsc.member.notices import Notices, then
from rsc.member.redis_io.unrecoverable import refusal_error, refusal_is_permanent
from rsc.member.session import (
    ResponseUndecodable,
    Session,
    SessionClosed,
    SessionRefused,
    open_session,
)
from rsc.member.shells.workqueue import Signal
from rsc.protocol import GetRouting, Routing

REQUEST_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 5.0
COORDINATOR_TOPIC = "coordinator"


class RoutingFollower:
    """See the module text. `session` is the open one once its first ask was answered (None
    while down); `changed` fires when a session opens, a routing is adopted or a final error
    is met."""

    def __init__(self, coordinator_url: str, stream_prefix: str, notices: Notices, *,
                 token: str | None, subscribe: bool = True, ca_file: str | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.coordinator_url = coordinator_url
        self.stream_prefix = stream_prefix
        self.subscribe = subscribe
        self.notices = notices
        self.session: Session | None = None
        self.changed = Signal()
        self.fatal: BaseException | None = None  # L2: a final refusal; every waiting call raises it
        self._token = token
        self._ca_file, self._ssl_context = ca_file, ssl_context  # for a wss:// coordinator

    # --- what a subclass decides -------------------------------------------------------

    def routing_request(self, *, subscribe: bool) -> GetRouting:
        """The getRouting to send."""
        return GetRouting(request_id=0, stream_prefix=self.stream_prefix, subscribe=subscribe)

    async def adopt(self, message: Routing) -> None:
        """A routing of the prefix heard from the coordinator (an answer or a push)."""
        raise NotImplementedError

    def retry_suffix(self) -> str:
        """What the line of a lost session says the follower does about it."""
        return "retrying"

    def unanswered_line(self, exc: BaseException) -> str:
        """The line for an ask that got no answer in time, or one that does not decode."""
        return f"the coordinator at {self.coordinator_url} did not answer a request in time"

    def reask_after_s(self) -> float:
        """How long to wait for a push before asking again (without subscribing)."""
        return math.inf

    def said_final(self, line: str) -> None:
        """A final error met (L2), before it is raised: to say it once."""

    # --- the loop ------------------------------------------------------------------------

    def raise_fatal(self) -> None:
        """Raise the final refusal the session keeper met, if it met one (L2)."""
        if self.fatal is not None:
            raise self.fatal

    async def request(self, session: Session, *, subscribe: bool) -> None:
        """One getRouting on `session`; its routing adopted (TooSlowError after 10 s)."""
        with trio.fail_after(REQUEST_TIMEOUT_S):
            response = await session.request(self.routing_request(subscribe=subscribe))
        if isinstance(response, Routing):
            await self.adopt(response)

    async def keep_session(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                           ) -> None:
        """Keep a coordinator session open (reopened with backoff), following the routing.

        `started` after the first attempt (L2): a final refusal is raised before it, so the
        caller's open fails with it; anything else is said and retried. A later final refusal
        is raised here (and kept in `fatal`)."""
        backoff = RETRY.start()
        url = self.coordinator_url
        first = True
        while True:
            try:
                async with open_session(url, "member", token=self._token,
                                        connect_timeout=CONNECT_TIMEOUT_S, ca_file=self._ca_file,
                                        ssl_context=self._ssl_context) as session:
                    # K9: every new session is asked (its storeId compared), routing known or not
                    await self.request(session, subscribe=self.subscribe)
                    self.session = session
                    self.changed.fire()
                    self.notices.clear(COORDINATOR_TOPIC, f"connected to the coordinator at {url}")
                    backoff.reset()
                    if first:
                        first = False
                        task_status.started()
                    await self._follow(session)
                    line = (f"lost the coordinator session at {url} "
                            f"({session.close_reason or 'connection closed'})")
            except SessionRefused as exc:
                if refusal_is_permanent(exc.status_code):  # D3: a wrong token never heals
                    raise self._final(refusal_error(exc.status_code, exc.line), exc.line) from exc
                line = exc.line
            except SessionClosed as exc:
                line = exc.line
            except (ResponseUndecodable, trio.TooSlowError) as exc:
                line = self.unanswered_line(exc)
            except TlsFailed as exc:  # a certificate that does not verify: final (L2)
                self._final(exc, exc.line)
                raise
            finally:
                self.session = None
            self.notices.say(COORDINATOR_TOPIC, then(line, self.retry_suffix()))
            if first:
                first = False
                task_status.started()
            await trio.sleep(backoff.next())

    async def _follow(self, session: Session) -> None:
        """Adopt the prefix's routing pushes until the session ends, asking again after
        `reask_after_s` without one."""
        pushes = session.pushes
        while True:
            with trio.move_on_after(self.reask_after_s()):
                try:
                    push = await pushes.receive()
                except (trio.EndOfChannel, trio.ClosedResourceError):
                    return
                if isinstance(push, Routing) and push.stream_prefix == self.stream_prefix:
                    await self.adopt(push)
                continue
            await self.request(session, subscribe=False)

    def _final(self, error: BaseException, line: str) -> BaseException:
        self.fatal = error
        self.changed.fire()
        self.said_final(line)
        return error
