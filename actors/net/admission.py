"""Admission (A1): the fd budget, the session limit, and an accept loop that outlives EMFILE.

What any peer can make the coordinator hold is bounded here, before a byte of
the handshake is read:

- the process raises its fd limit from the soft to the hard limit at start;
  `--max-sessions` defaults to 80 % of it;
- connections (handshakes in progress plus sessions) are capped a little above
  the session limit and below the fd limit, so Redis, the metrics port and
  the threads always have descriptors; a connection past that cap is closed
  at once, a handshake past the session limit gets HTTP 503 (server.py);
- when `accept` itself fails with EMFILE/ENFILE, a reserve descriptor is
  given up to accept the waiting peer and close it (refused, not left in the
  backlog), and the loop backs off briefly; the process never stops for it.
"""

from __future__ import annotations

import errno
import logging
import os

import trio

from rsc.actors.logs import log_event
from rsc.actors.ports import SessionMetrics

log = logging.getLogger("rsc.coordinator")

FD_RESERVE = 32  # descriptors kept for Redis connections, listeners, wakeup pipes, stdio
CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
_BACKOFF_START_S = 0.01
_BACKOFF_MAX_S = 0.5
_REMINDER_S = 10.0


def raise_fd_limit() -> int:
    """Raise RLIMIT_NOFILE's soft limit to the hard one; the soft limit now in force."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return int(soft if soft != resource.RLIM_INFINITY else target)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        return int(soft)
    return int(target)


def default_max_sessions(fd_limit: int) -> int:
    """80 % of the fd limit (A1)."""
    return max(1, fd_limit * 8 // 10)


def connection_limit(max_sessions: int, fd_limit: int) -> int:
    """Open connections allowed: the sessions, some room for handshakes, never the last fds."""
    wanted = max_sessions + max(8, max_sessions // 8)
    return max(1, min(wanted, fd_limit - FD_RESERVE))


class Admission:
    """Counts connections and sessions against their limits; the numbers the metrics show."""

    def __init__(self, *, max_sessions: int, max_connections: int,
                 metrics: SessionMetrics | None = None,
                 handshake_timeout_s: float = 10.0) -> None:
        self.max_sessions = max_sessions
        self.max_connections = max_connections
        self.handshake_timeout_s = handshake_timeout_s
        self.metrics = metrics
        self.connections = 0
        self.sessions = 0

    def open_session(self) -> bool:
        """Admit one more session after its handshake; False past `--max-sessions` (503)."""
        if self.sessions >= self.max_sessions:
            self.refused("max_sessions")
            return False
        self.sessions += 1
        self._gauge()
        return True

    def close_session(self) -> None:
        self.sessions -= 1
        self._gauge()

    def refused(self, reason: str) -> None:
        """A connection or session was refused (`reason`: the limit it hit)."""
        if self.metrics is not None:
            self.metrics.session_refused(reason)

    def timed_out(self) -> None:
        """A connection closed without finishing its handshake in time."""
        if self.metrics is not None:
            self.metrics.handshake_timed_out()

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.set_sessions(self.sessions, self.connections)


class TrackedStream(trio.abc.Stream):
    """A accepted connection that gives its slot back once, when closed.

    The server sends nothing before the handshake response, so a connection
    closed without a byte sent after `handshake_timeout_s` timed out its handshake.
    """

    def __init__(self, stream: trio.SocketStream, admission: Admission) -> None:
        self._stream = stream
        self._admission = admission
        self._accepted_at = trio.current_time()
        self._answered = False
        self._closed = False
        self.socket = stream.socket

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self._answered = True
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self._stream.receive_some(max_bytes)

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._admission.connections -= 1
            self._admission._gauge()
            age = trio.current_time() - self._accepted_at
            if not self._answered and age >= self._admission.handshake_timeout_s - 0.1:
                self._admission.timed_out()
        await self._stream.aclose()


class AdmissionListener(trio.abc.Listener[trio.abc.Stream]):
    """A SocketListener whose `accept` refuses what admission cannot hold and survives EMFILE."""

    def __init__(self, inner: trio.SocketListener, admission: Admission) -> None:
        self.inner = inner
        self.admission = admission
        self._reserve: int | None = _open_reserve()
        self._backoff = _BACKOFF_START_S
        self._shedding_since: float | None = None
        self._last_reminder = 0.0
        self._shed = 0

    @property
    def port(self) -> int:
        return int(self.inner.socket.getsockname()[1])

    async def accept(self) -> trio.abc.Stream:
        while True:
            try:
                stream = await self.inner.accept()
            except OSError as exc:
                if exc.errno not in CAPACITY_ERRNOS:
                    raise
                await self._out_of_descriptors(exc)
                continue
            self._recovered()
            if self.admission.connections >= self.admission.max_connections:
                self.admission.refused("max_connections")
                await trio.aclose_forcefully(stream)
                continue
            self.admission.connections += 1
            self.admission._gauge()
            return TrackedStream(stream, self.admission)

    async def aclose(self) -> None:
        if self._reserve is not None:
            os.close(self._reserve)
            self._reserve = None
        await self.inner.aclose()

    async def _out_of_descriptors(self, exc: OSError) -> None:
        """Refuse the waiting peer with the reserve fd, say so (rate-limited), back off."""
        self._shed += 1
        self.admission.refused("fd_exhausted")
        now = trio.current_time()
        if self._shedding_since is None:
            self._shedding_since = self._last_reminder = now
            log_event(log, "accept.fd_exhausted", level=logging.WARNING, error=os.strerror(exc.errno or 0),
                      connections=self.admission.connections, sessions=self.admission.sessions)
        elif now - self._last_reminder >= _REMINDER_S:
            self._last_reminder = now
            log_event(log, "accept.fd_exhausted", level=logging.WARNING, refused=self._shed,
                      connections=self.admission.connections, sessions=self.admission.sessions)
        if self._reserve is not None:
            os.close(self._reserve)
            self._reserve = None
            with trio.move_on_after(0.01):
                try:
                    peer, _ = await self.inner.socket.accept()
                except OSError:
                    pass  # the freed fd went elsewhere; the backoff below still applies
                else:
                    peer.close()
            self._reserve = _open_reserve()
        await trio.sleep(self._backoff)
        self._backoff = min(self._backoff * 2, _BACKOFF_MAX_S)

    def _recovered(self) -> None:
        self._backoff = _BACKOFF_START_S
        if self._shedding_since is not None:
            self._shedding_since = None
            log_event(log, "accept.fd_available", refused=self._shed)
            self._shed = 0
        if self._reserve is None:
            self._reserve = _open_reserve()


def _open_reserve() -> int | None:
    try:
        return os.open(os.devnull, os.O_RDONLY)
    except OSError:
        return None
