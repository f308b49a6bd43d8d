"""M5: a member and a producer written from docs/protocol.md alone (tests/plain_client.py,
plain redis-py and trio-websocket, nothing of the project) take part in a group beside an
`rsc` member and producer, through a 4 -> 8 reshard: 0 lost, and no write into a sealed
version (every entry of a version-1 shard is older than its seal)."""

from __future__ import annotations

import redis
import trio

from rsc.member.listener import Listener
from rsc.member.message import Message
from rsc.member.producer import open_producer
from tests.plain_client import PlainMember, PlainProducer, Session
from tests.test_member_support import set_shards

PREFIX, GROUP = "contract", "billing"
PER_PRODUCER = 400


async def test_m5_a_client_from_the_page_alone_works_beside_ours_through_a_reshard(coordinator):
    from trio_websocket import open_websocket_url

    url, redis_url = coordinator.url, coordinator.redis_url
    v1 = await set_shards(url, PREFIX, GROUP, 4)
    ours: list[str] = []
    our_headers: dict[str, dict[str, bytes]] = {}
    plain_handled: list[tuple[str, str, dict[bytes, bytes]]] = []

    async def handle(message: Message) -> None:
        ours.append(message.value)
        our_headers[message.value] = dict(message.headers)

    listener = Listener(handle, stream_prefix=PREFIX, consumer_group=GROUP, coordinator_url=url,
                        redis_url=redis_url)
    binary = redis.Redis.from_url(redis_url)  # the plain client's: bytes in, bytes out
    plain = PlainMember(url, binary, PREFIX, GROUP, "plain-member-1", plain_handled)
    sealed_at = None
    with trio.fail_after(90):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(plain.run)
            await nursery.start(listener.run)
            async with open_producer(url, redis_url, PREFIX) as producer, \
                    open_websocket_url(url + "/v1/member") as websocket:
                plain_producer = PlainProducer(Session(websocket), binary, PREFIX)
                for n in range(PER_PRODUCER):
                    if n == PER_PRODUCER // 2:
                        await set_shards(url, PREFIX, GROUP, 8)
                        sealed_at = int(binary.time()[0]) * 1000 + int(binary.time()[1]) // 1000
                    await producer.send(f"k{n % 37}", f"ours-{n}")
                    await plain_producer.send(f"k{n % 41}", f"plain-{n}", {"trace": f"t{n}"})
            expected = {f"ours-{n}" for n in range(PER_PRODUCER)} | {
                f"plain-{n}" for n in range(PER_PRODUCER)}
            while not expected <= set(ours) | {value for _, value, _ in plain_handled}:
                await trio.sleep(0.05)
            listener.stop()
            plain.stopping = True
    seen = set(ours) | {value for _, value, _ in plain_handled}
    assert not expected - seen, sorted(expected - seen)[:10]  # 0 lost
    assert ours and plain_handled, "both members took part"
    # the headers of the plain producer reach our member, and ours the plain member (M2)
    assert all(our_headers[f"plain-{n}"] == {"trace": f"t{n}".encode()}
               for n in range(PER_PRODUCER) if f"plain-{n}" in our_headers)
    assert all(headers == {b"trace": value.replace("plain-", "t").encode()}
               for _, value, headers in plain_handled if value.startswith("plain-"))
    assert any(value.startswith("plain-") for value in our_headers), "ours read the plain one's"
    assert sealed_at is not None
    for stream in v1:  # no write into the sealed version: every entry older than the seal
        newest = binary.xrevrange(stream, count=1)
        if newest:
            assert int(newest[0][0].split(b"-")[0]) <= sealed_at, (stream, newest, sealed_at)
    print(f"ours handled {len(ours)}, the plain member {len(plain_handled)}, "
          f"the plain producer re-routed {plain_producer.refused} writes")
    binary.close()
