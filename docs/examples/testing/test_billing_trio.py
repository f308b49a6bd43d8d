"""A trio service's handler, tested with rsc.testing's `rsc_kit` (pytest-trio, trio_mode)."""

from rsc.member.listener import listener


async def test_paid_orders_are_billed_once_each(rsc_kit):
    prefix = rsc_kit.unique("orders")  # the kit is shared by the session: names of our own
    billed = {}

    @listener(prefix, "billing", coordinator_url=rsc_kit.coordinator_url,
              redis_url=rsc_kit.redis_url)
    async def bill(message):
        billed[message.key] = billed.get(message.key, 0) + 1

    await rsc_kit.create_prefix(prefix, shards=2)
    await rsc_kit.send(prefix, [("customer-7", "paid"), ("customer-9", "paid")])
    await rsc_kit.run_until(bill, handled=2)
    assert billed == {"customer-7": 1, "customer-9": 1}
