"""D1 on the asyncio host against real processes: an asyncio consumer frozen (SIGSTOP) past
its lease never starts a handler call on the lease it lost.

As tests/test_member_sigstop.py does for `rsc consume`, with two asyncio consumer
processes (this module run as a program: `rsc.member.aio` listeners whose handlers await
`asyncio.sleep`), a real redis-server and a real `rsc coordinator` (lease 1500 ms). Each
consumer traces every D1 decision (RSC_MEMBER_TRACE); each in turn is SIGSTOPped until
its shards moved to the other, then SIGCONTed. Afterwards: no handler call started on a
lease sent before a pause, nor at the epoch held before it, nor outside the member's own
lease; every message processed (lost = 0); both leave on SIGTERM (exit 0).
"""

from __future__ import annotations

import asyncio
import signal
import sys

import pytest

from rsc.member.aio import listener
from rsc.member.pure.reconcile import Event
from rsc.member.shells.runtime import Message
from rsc.tools.output_lines import event_line, message_line
from tests.test_member_sigstop import (
    freeze_each_consumer_in_turn,
    handler_starts_after_pauses,
    lost_and_duplicates,
)

pytestmark = pytest.mark.faults  # the fault step of .ci/run: python -m pytest -q -m faults

PREFIX, GROUP = "faults", "aio-sigstop"
WORK_MS = 20


def consumer_main(url: str, redis_url: str) -> None:
    """The child: one asyncio member (4 workers) printing what it handled and its events."""

    def on_event(member_id: str, event: Event) -> None:
        sys.stderr.write(event_line(member_id, event) + "\n")
        sys.stderr.flush()

    @listener(PREFIX, GROUP, coordinator_url=url, redis_url=redis_url,
              runtime_max_concurrency=4, on_event=on_event)
    async def handle(message: Message) -> None:
        await asyncio.sleep(WORK_MS / 1000)
        sys.stdout.write(message_line(message) + "\n")
        sys.stdout.flush()

    async def main() -> None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, handle.stop)
        await handle.run()

    asyncio.run(main())


async def test_d1_an_asyncio_consumer_frozen_past_its_lease_starts_no_handler_on_the_lost_lease(
        redis_url, tmp_path, nursery):
    run = await freeze_each_consumer_in_turn(redis_url, tmp_path, nursery, GROUP, lambda url, redis: [
        sys.executable, "-m", "tests.test_aio_sigstop", url, redis])
    left = [c.name for c in run.consumers if any(e["event"] == "left" for e in c.events)]
    assert left == ["a", "b"], left
    for victim, _, _ in run.pauses:
        assert any(e["event"] == "fenced" for e in victim.events), victim.name
    found = handler_starts_after_pauses(run.pauses)
    lost, duplicates = lost_and_duplicates(run)
    print(f"\nasyncio SIGSTOP x{len(run.pauses)}: {run.written} messages, handler calls after a "
          f"lost lease {len(found.after_lost_lease)}, at the pre-pause epoch "
          f"{len(found.at_old_epoch)}, out of the member's own lease {len(found.out_of_lease)}, "
          f"lost {len(lost)}, duplicates {duplicates}, handler calls refused on waking "
          f"{sum(found.refused_after_waking.values())}")
    assert found.after_lost_lease == [], found.after_lost_lease[:5]
    assert found.at_old_epoch == [], found.at_old_epoch[:5]
    assert found.out_of_lease == [], found.out_of_lease[:5]
    assert not lost, sorted(lost)[:10]


if __name__ == "__main__":
    consumer_main(sys.argv[1], sys.argv[2])
