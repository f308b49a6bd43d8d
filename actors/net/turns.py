"""Fair turns for reading requests while the coordinator is saturated (one busy group must not
slow the others).

trio runs every runnable task once per scheduler pass. When 500 members of one prefix restart
at once, hundreds of sessions become readable together, and each one's frame is parsed,
decoded and handed to its actor in the same pass: passes of 15-60 ms, and a heartbeat of
another prefix that arrives meanwhile waits for two of them (its read, then its actor's batch).

So each session asks for a turn once its bytes have arrived and before anything is parsed
(actors/net/ws_server.py; a new connection asks before its handshake is parsed). While fewer
than `per_window` turns were taken in the current window (`window_s`) and nobody waits, the
turn is granted in place: no await, no task, the common case at any steady load. Past that,
the session waits in the queue of its key (the stream prefix of its last request; "" before
its first) and one dispatcher grants a share of turns every scheduler pass, round robin over
the keys: a key with one waiting frame is served in the next pass, however long the queue of a
busy key is. The share follows the passes: smaller after a pass longer than `pass_target_s`,
larger after a shorter one, so a saturated coordinator's passes stay near the target (a quiet
heartbeat needs two: its read, then its prefix's batch) while a join storm alone still uses
the whole CPU (a fixed rate would leave it idle between windows).
"""

from __future__ import annotations

import collections
import math

import trio

PER_WINDOW = 16  # frames parsed in place per window while nobody waits
WINDOW_S = 0.002
PASS_TARGET_S = 0.002  # while sessions wait: the scheduler pass length the share aims at
MIN_SHARE, MAX_SHARE = 4, 256


def next_share(share: int, pass_s: float, target_s: float) -> int:
    """The turns to grant in the next pass: fewer after a pass longer than the target (in
    proportion), a quarter more after a shorter one."""
    if pass_s > target_s:
        share = int(share * target_s / pass_s)
    else:
        share += max(1, share // 4)
    return max(MIN_SHARE, min(MAX_SHARE, share))


class Turns:
    """Turns to parse a frame: granted in place until a window's are used, then round robin."""

    def __init__(self, per_window: int = PER_WINDOW, window_s: float = WINDOW_S,
                 pass_target_s: float = PASS_TARGET_S) -> None:
        if per_window < 1 or window_s <= 0 or pass_target_s <= 0:
            raise ValueError("per_window must be >= 1, window_s and pass_target_s > 0")
        self.per_window = per_window
        self.window_s = window_s
        self.pass_target_s = pass_target_s
        self.share = per_window  # turns granted per pass while sessions wait
        self._window_end = -math.inf
        self._used = 0
        # the keys with waiting sessions, in the order they are served next
        self._waiting: dict[str, collections.deque[trio.lowlevel.Task]] = {}
        self._waiters = 0
        self._wake = trio.Event()
        self.waited = 0  # turns that had to wait (a saturated coordinator)
        self._waited_seen = 0

    @property
    def waiting(self) -> int:
        return self._waiters

    def saturated_since_last_asked(self) -> bool:
        """Whether a frame waited for its turn since the last call, or one waits now."""
        saturated = self.waited != self._waited_seen or self._waiters > 0
        self._waited_seen = self.waited
        return saturated

    def admits(self) -> bool:
        """A turn now, in place (nobody waits and the window has turns left); else False."""
        if self._waiters:
            return False
        now = trio.current_time()
        if now >= self._window_end:
            self._window_end = now + self.window_s
            self._used = 0
        if self._used < self.per_window:
            self._used += 1
            return True
        return False

    async def wait(self, key: str) -> None:
        """Wait for a turn in `key`'s queue (after `admits` said no)."""
        queue = self._waiting.get(key)
        if queue is None:
            queue = self._waiting[key] = collections.deque()
        task = trio.lowlevel.current_task()
        queue.append(task)
        self._waiters += 1
        self.waited += 1
        self._wake.set()

        def abort(_: object) -> trio.lowlevel.Abort:
            # cancelled while waiting (its session is closing): out of the queue
            waiting = self._waiting.get(key)
            if waiting is not None and task in waiting:
                waiting.remove(task)
                self._waiters -= 1
                if not waiting:
                    del self._waiting[key]
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    async def run(self) -> None:
        """The dispatcher: while anyone waits, a share of turns every scheduler pass, round
        robin, the share sized so that a pass lasts about `pass_target_s`."""
        last = trio.current_time()
        while True:
            if not self._waiters:
                self._wake = trio.Event()
                await self._wake.wait()
                last = trio.current_time()
                continue
            await trio.lowlevel.cancel_shielded_checkpoint()  # one scheduler pass
            now = trio.current_time()
            self.share = next_share(self.share, now - last, self.pass_target_s)
            last = now
            self._window_end = now + self.window_s
            self._used = self._grant(self.share)

    def _grant(self, budget: int) -> int:
        """Up to `budget` turns, one per key in turn: the first key waiting is served and, if it
        has more waiting, goes to the back (O(1) per turn, however many keys wait)."""
        granted = 0
        waiting = self._waiting
        while granted < budget and waiting:
            key = next(iter(waiting))
            queue = waiting.pop(key)
            trio.lowlevel.reschedule(queue.popleft())
            self._waiters -= 1
            granted += 1
            if queue:
                waiting[key] = queue
        return granted
