"""A service whose listener is declared at module level, with production's addresses."""

import os

from rsc.member.listener import listener

invoices: list[str] = []


@listener("orders", "billing",
          coordinator_url=os.environ.get("RSC_COORDINATOR_URL", "ws://coordinator:8765"),
          redis_url=os.environ.get("RSC_REDIS_URL", "redis://redis:6379/0"),
          token=os.environ.get("RSC_TOKEN"), runtime_max_concurrency=8)
async def bill(message):
    invoices.append(f"invoice for {message.key}: {message.value}")
