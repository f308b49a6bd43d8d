"""Transport rules over real websockets: the UTF-8 frame limit, error typing, auth headers."""

from __future__ import annotations

import json

import pytest
import trio
from trio_websocket import ConnectionClosed, ConnectionRejected, open_websocket_url

from rsc.actors.core.handshake_gate import authorized
from rsc.actors.net.ws_server import utf8_bytes as frame_bytes
from rsc.protocol.codec import encode
from rsc.protocol.messages import Heartbeat

EMOJI = "\N{GRINNING FACE}"  # 1 character, 4 bytes in UTF-8


def heartbeat_frame(**fields) -> str:
    message = {"type": "heartbeat", "requestId": 7, "streamPrefix": "orders",
               "consumerGroup": "billing", "memberId": "m-1", "memberEpoch": 0}
    message.update(fields)
    return json.dumps(message, ensure_ascii=False)


async def exchange(url: str, frame: str, *, headers=None, path: str = "/v1/member") -> dict:
    async with open_websocket_url(url + path, extra_headers=headers) as ws:
        await ws.send_message(frame)
        with trio.fail_after(10):
            return json.loads(await ws.get_message())


# --- pure -------------------------------------------------------------------------------


def test_frame_size_is_counted_in_utf8_bytes():
    assert frame_bytes("abc") == 3
    assert frame_bytes(EMOJI * 10) == 40
    assert frame_bytes("é") == 2


@pytest.mark.parametrize(("headers", "expected"), [
    ([(b"Authorization", b"Bearer s3cret")], True),
    ([(b"authorization", b"bearer s3cret")], True),  # scheme is case-insensitive (RFC 7235)
    ([(b"AUTHORIZATION", b"BEARER s3cret")], True),
    ([(b"Authorization", b"Bearer  s3cret ")], True),
    ([(b"Authorization", b"Bearer wrong")], False),
    ([(b"Authorization", b"Basic s3cret")], False),
    ([(b"Authorization", b"s3cret")], False),
    ([], False),
    # two headers are refused even when one of them is right
    ([(b"Authorization", b"Bearer s3cret"), (b"Authorization", b"Bearer s3cret")], False),
    ([(b"Authorization", b"Bearer wrong"), (b"authorization", b"Bearer s3cret")], False),
])
def test_authorization_wants_exactly_one_bearer_header(headers, expected):
    assert authorized(headers, "s3cret") is expected


# --- over websockets --------------------------------------------------------------------


async def test_emoji_frame_over_the_byte_limit_is_closed_with_1009(coordinator):
    # 263,144 emoji: fewer characters than 1 MiB, but 1.05 MB of UTF-8
    padding = EMOJI * 263_144
    frame = heartbeat_frame(memberId="m-" + padding[:10], consumerGroup="g" + padding)
    assert len(frame) < coordinator.config.max_frame_bytes < frame_bytes(frame)
    async with open_websocket_url(coordinator.url + "/v1/member") as ws:
        await ws.send_message(frame)
        with trio.fail_after(10), pytest.raises(ConnectionClosed) as closed:
            await ws.get_message()
    assert closed.value.reason.code == 1009


async def test_frame_just_under_the_byte_limit_is_answered(coordinator_factory):
    coordinator = await coordinator_factory(max_frame_bytes=4096)
    frame = heartbeat_frame(consumerGroup="g" * 100, memberId="m" + "é" * 150)
    assert frame_bytes(frame) < 4096
    answer = await exchange(coordinator.url, frame)
    assert answer["status"] == "OK"
    too_big = heartbeat_frame(consumerGroup="g", memberId="m" + EMOJI * 1100)
    assert len(too_big) < 4096 < frame_bytes(too_big)
    async with open_websocket_url(coordinator.url + "/v1/member") as ws:
        await ws.send_message(too_big)
        with trio.fail_after(10), pytest.raises(ConnectionClosed) as closed:
            await ws.get_message()
    assert closed.value.reason.code == 1009


@pytest.mark.parametrize("frame", [
    "not json",
    "[1, 2]",
    '{"type": "heartbeat", "requestId": 7}',
    heartbeat_frame(memberEpoch=-5),
    heartbeat_frame(memberEpoch="1"),
    heartbeat_frame(ownedShards=["orders:v1:0"]),  # a join that lists shards (H4/PROTOCOL)
    heartbeat_frame(type="setShardCount"),  # an admin request on /v1/member
])
async def test_every_invalid_request_for_a_malformed_frame_is_typed_error(coordinator, redis_url, frame):
    import redis

    answer = await exchange(coordinator.url, frame)
    assert answer["type"] == "error", answer
    assert answer["status"] == "INVALID_REQUEST"
    assert answer["error"]
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.smembers("rsc:prefixes") == set()  # nothing was looked up or created
    finally:
        client.close()


async def test_auth_header_cases_over_the_wire(coordinator_factory):
    coordinator = await coordinator_factory(member_token="s3cret")
    join = encode(Heartbeat(request_id=1, stream_prefix="orders", consumer_group="billing",
                            member_id="m-1", member_epoch=0))
    ok = await exchange(coordinator.url, join, headers=[(b"Authorization", b"bearer s3cret")])
    assert ok["status"] == "OK"
    for headers in ([(b"Authorization", b"Bearer wrong")], None,
                    [(b"Authorization", b"Bearer s3cret"), (b"Authorization", b"Bearer s3cret")],
                    [(b"Authorization", b"Bearer wrong"), (b"Authorization", b"Bearer s3cret")]):
        with pytest.raises(ConnectionRejected) as refused:
            await exchange(coordinator.url, join, headers=headers)
        assert refused.value.status_code == 401, headers
