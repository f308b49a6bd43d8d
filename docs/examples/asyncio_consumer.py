"""A plain asyncio consumer: `python asyncio_consumer.py`, Ctrl-C or SIGTERM leaves the group.

Prints one line per message of prefix `orders` (group `billing`); the URLs come
from RSC_COORDINATOR_URL and RSC_REDIS_URL.
"""

import asyncio
import os
import signal

from rsc.member.aio import listener


@listener(os.environ.get("RSC_PREFIX", "orders"), os.environ.get("RSC_GROUP", "billing"),
          coordinator_url=os.environ.get("RSC_COORDINATOR_URL", "ws://127.0.0.1:8765"),
          redis_url=os.environ.get("RSC_REDIS_URL", "redis://127.0.0.1:6379/0"))
async def handle(message):
    await asyncio.sleep(0.001)  # an asyncio call, as a real handler makes
    print(message.shard, message.id, message.key, message.value, flush=True)


async def main():
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, handle.stop)  # drain, leave, then run() returns
    await handle.run()
    print("left the group", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
