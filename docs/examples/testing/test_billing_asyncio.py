"""An asyncio service's handler, tested with rsc.testing's `rsc_kit` (anyio's pytest plugin)."""

import pytest

from rsc.member.aio import listener


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_shipped_orders_are_counted(rsc_kit):
    prefix = rsc_kit.unique("orders")
    shipped = []

    @listener(prefix, "shipping", coordinator_url=rsc_kit.coordinator_url,
              redis_url=rsc_kit.redis_url)
    async def ship(message):  # runs on the test's own asyncio loop
        shipped.append(message.value)

    await rsc_kit.create_prefix(prefix, shards=2)
    await rsc_kit.send(prefix, [(f"customer-{n}", f"order-{n}") for n in range(5)])
    await rsc_kit.run_until(ship, handled=5)
    assert sorted(shipped) == [f"order-{n}" for n in range(5)]
