"""A1 caps over the wire: --max-groups (every prefix, setShardCount registrations included) and
--max-group-size, against a real coordinator and Redis. Each refusal changes nothing (Redis
included) and is counted in `rsc_joins_refused{limit}`.
"""

from __future__ import annotations

import redis
import trio

from rsc.actors.actor import PrefixActor
from rsc.actors.app import serve
from rsc.actors.config import CoordinatorConfig
from rsc.actors.core.group import GroupSettings
from rsc.actors.core.prefix import GroupBudget
from rsc.actors.ops.metrics import CoordinatorMetrics
from rsc.actors.redis_io.store import MetadataStore, meta_key
from rsc.actors.router import Router
from rsc.actors.server import Collect, CoordinatorServer
from rsc.member.session import open_session
from rsc.protocol import messages as m
from rsc.protocol.errors import Status
from rsc.protocol.vocabulary import JOIN_EPOCH
from tests.conftest import FAST

# Members join once and never heartbeat, and D4 abandons a metadata write slower than a third
# of the lease: a long lease keeps both out of the way on a loaded machine.
LONG_LEASE_MS = 60_000
SETTINGS = GroupSettings(heartbeat_interval_ms=200, lease_ttl_ms=LONG_LEASE_MS,
                         revoke_timeout_ms=5000)


def join(prefix: str, group: str, member_id: str) -> m.Heartbeat:
    return m.Heartbeat(request_id=1, stream_prefix=prefix, consumer_group=group,
                       member_id=member_id, member_epoch=JOIN_EPOCH, owned_shards=())


def hash_of(redis_url: str, prefix: str) -> dict[str, str]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        fields: dict[str, str] = client.hgetall(meta_key(prefix))  # type: ignore[assignment]
        fields.pop("writeSequence", None)
        return fields
    finally:
        client.close()


async def start(nursery: trio.Nursery, redis_url: str, **caps: int) -> tuple[str, CoordinatorMetrics]:
    metrics = CoordinatorMetrics()
    options = {**FAST, "lease_ttl_ms": LONG_LEASE_MS, **caps}
    config = CoordinatorConfig(redis_url=redis_url, port=0, **options)  # type: ignore[arg-type]
    url = await nursery.start(lambda task_status: serve(config, metrics=metrics,
                                                        task_status=task_status))
    return url, metrics


def refusals(metrics: CoordinatorMetrics, limit: str) -> float:
    return metrics.joins_refused.labels(limit)._value.get()


async def test_a1_max_groups_counts_every_prefix_and_set_shard_count_registrations(redis_url, nursery):
    url, metrics = await start(nursery, redis_url, max_groups=2)
    with trio.fail_after(20):
        async with open_session(url, "admin") as admin, open_session(url, "member") as member:
            registered = await admin.request(m.SetShardCount(
                request_id=0, stream_prefix="orders", consumer_group="billing", shard_count=2))
            assert registered.status == Status.OK  # group 1 (registered with the routing)
            assert (await member.request(join("audit", "trail", "a"))).status == Status.OK  # 2
            before = hash_of(redis_url, "orders")
            refused = await member.request(join("orders", "search", "b"))
            assert isinstance(refused, m.HeartbeatResponse)
            assert refused.status == Status.GROUP_LIMIT_REACHED and "--max-groups" in refused.error
            assert hash_of(redis_url, "orders") == before  # nothing changed in Redis
            also = await admin.request(m.SetShardCount(
                request_id=0, stream_prefix="invoices", consumer_group="books", shard_count=2))
            assert also.status == Status.GROUP_LIMIT_REACHED
            assert hash_of(redis_url, "invoices") == {}
            # joins into existing groups still work
            assert (await member.request(join("orders", "billing", "c"))).status == Status.OK
            listed = await admin.request(m.ListGroups(request_id=0))
            assert isinstance(listed, m.Groups)
            assert sorted((g.stream_prefix, g.consumer_group) for g in listed.groups) == [
                ("audit", "trail"), ("orders", "billing")]
            # a deleted group frees its place
            assert (await member.request(m.Heartbeat(
                request_id=2, stream_prefix="audit", consumer_group="trail", member_id="a",
                member_epoch=-1, owned_shards=None))).status == Status.OK
            deleted = await admin.request(m.DeleteGroup(request_id=0, stream_prefix="audit",
                                                        consumer_group="trail"))
            assert deleted.status == Status.OK
            assert (await member.request(join("orders", "search", "b"))).status == Status.OK
    assert refusals(metrics, "max_groups") == 2


async def test_a1_max_group_size_refuses_a_new_member_of_a_full_group(redis_url, nursery):
    url, metrics = await start(nursery, redis_url, max_group_size=2)
    with trio.fail_after(20):
        async with open_session(url, "admin") as admin, open_session(url, "member") as member:
            await admin.request(m.SetShardCount(request_id=0, stream_prefix="orders",
                                                consumer_group="billing", shard_count=4))
            for member_id in ("a", "b"):
                assert (await member.request(join("orders", "billing", member_id))).status == Status.OK
            before = hash_of(redis_url, "orders")
            refused = await member.request(join("orders", "billing", "c"))
            assert isinstance(refused, m.HeartbeatResponse)
            assert refused.status == Status.GROUP_MAX_SIZE_REACHED
            assert "--max-group-size (2)" in refused.error
            assert hash_of(redis_url, "orders") == before
            described = await admin.request(m.DescribeGroup(request_id=0, stream_prefix="orders",
                                                            consumer_group="billing"))
            assert isinstance(described, m.GroupDescription)
            assert sorted(mb.member_id for mb in described.members) == ["a", "b"]
            # a live member rejoining is not a new member
            assert (await member.request(join("orders", "billing", "a"))).status == Status.OK
    assert refusals(metrics, "max_group_size") == 1


async def test_a1_heartbeats_and_refused_registrations_on_unknown_prefixes_start_no_actor(
        redis_url, nursery):
    store = MetadataStore(redis_url, lease_ms=1000)
    budget = GroupBudget(1)
    budget.count("elsewhere", 1)  # the coordinator already has its one group
    router = Router(nursery, lambda prefix: PrefixActor(prefix, store, SETTINGS, budget=budget),
                    budget=budget)
    server = CoordinatorServer(router, nursery, admin_token=None, member_token=None)

    async def ask(message: m.Request) -> m.Response:
        slot = Collect()
        await server._dispatch(message, slot, None)
        return await slot.wait()

    with trio.fail_after(20):
        for index in range(100):
            prefix = f"never-{index}"
            leave = await ask(m.Heartbeat(request_id=1, stream_prefix=prefix, consumer_group="g",
                                          member_id="a", member_epoch=-1, owned_shards=None))
            assert leave.status == Status.OK and leave.member_epoch == -1  # H9: a retried leave
            stale = await ask(m.Heartbeat(request_id=2, stream_prefix=prefix, consumer_group="g",
                                          member_id="a", member_epoch=5, owned_shards=None))
            assert stale.status == Status.UNKNOWN_MEMBER_ID
            assert (await ask(join(prefix, "g", "a"))).status == Status.GROUP_LIMIT_REACHED
            registered = await ask(m.SetShardCount(request_id=3, stream_prefix=prefix,
                                                   consumer_group="g", shard_count=2))
            assert registered.status == Status.GROUP_LIMIT_REACHED
        assert router.actors == {} and budget.total == 1
        assert hash_of(redis_url, "never-0") == {}
        # routing alone is no group: setShardCount without a group starts the prefix's actor
        routed = await ask(m.SetShardCount(request_id=4, stream_prefix="routed", consumer_group=None,
                                           shard_count=2))
        assert routed.status == Status.OK and set(router.actors) == {"routed"}
        assert budget.total == 1
    nursery.cancel_scope.cancel()
    store.close()
