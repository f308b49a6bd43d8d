"""Testing a module-level `@listener`: `rsc_kit.bind` points a copy of it at the kit."""

from billing_service import bill, invoices


async def test_a_paid_order_is_invoiced(rsc_kit):  # trio (pytest-trio's trio_mode)
    prefix = rsc_kit.unique("orders")
    handle = rsc_kit.bind(bill, stream_prefix=prefix)  # same handler and options, the kit's URLs
    await rsc_kit.create_prefix(prefix, shards=2)
    await rsc_kit.send(prefix, [("customer-7", "paid")])
    await rsc_kit.run_until(handle, handled=1)
    assert invoices == ["invoice for customer-7: paid"]
