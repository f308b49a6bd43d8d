"""A listener whose handler kills its process on one "poison" value (tests/test_poison.py).

`python -m tests.poison_listener COORDINATOR_URL REDIS_URL PREFIX GROUP CALLS_FILE POISON
[MAX_DELIVERIES]`: every handler call appends "<value> <attempt>" to CALLS_FILE (one
`write`, so a line survives `os._exit`), and the call on POISON ends the process at once
with status 1, as a segfault or an OOM kill would; a call on the value of $POISON_HANG never
returns (the test SIGKILLs the process mid-message). Runs until SIGTERM.
"""

from __future__ import annotations

import os
import signal
import sys

import trio

from rsc.member.listener import Listener
from rsc.member.message import Message
from rsc.member.policies import RetryPolicy


def main() -> None:
    coordinator_url, redis_url, prefix, group, calls_file, poison = sys.argv[1:7]
    max_deliveries = int(sys.argv[7]) if len(sys.argv) > 7 else 3
    hang = os.environ.get("POISON_HANG")

    async def handle(message: Message) -> None:
        descriptor = os.open(calls_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(descriptor, f"{message.value} {message.attempt}\n".encode())
        os.close(descriptor)
        if message.value == poison:
            os._exit(1)
        if message.value == hang:
            await trio.sleep_forever()

    listener = Listener(handle, stream_prefix=prefix, consumer_group=group,
                        coordinator_url=coordinator_url, redis_url=redis_url,
                        member_ids=["poison-pod"],
                        retry=RetryPolicy(max_deliveries=max_deliveries, backoff_ms=0))

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(listener.run)
            with trio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    listener.stop()
                    return

    trio.run(run)


if __name__ == "__main__":
    main()
