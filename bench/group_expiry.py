"""B6: what throw-away groups cost a coordinator, and what is left once they expired.

    python -m bench.group_expiry [--groups 2000] [--retention-ms 60000]

Starts a private redis-server and a coordinator with a short `--empty-group-retention-ms`,
creates `--groups` groups with one join and one leave each (what a one-off `rsc consume` of a
new group name leaves behind), and prints the coordinator's RSS before, with the groups, and
once every one of them expired, with the time that took. Every process it starts is stopped
by its pid.
"""

from __future__ import annotations

import argparse
import json
import time

import trio

from bench.procs import Redis, start_coordinator
from rsc.member.session import open_session
from rsc.protocol import messages as m
from rsc.protocol.vocabulary import JOIN_EPOCH, LEAVE_EPOCH

PREFIX = "oneoff"


async def run(args: argparse.Namespace, url: str, rss_mb) -> dict[str, object]:  # noqa: ANN001
    result: dict[str, object] = {"rss_start_mb": round(rss_mb(), 1)}
    async with open_session(url, "admin") as admin, open_session(url, "member") as member:
        await admin.request(m.SetShardCount(request_id=0, stream_prefix=PREFIX,
                                            consumer_group="g0", shard_count=4))
        created = time.monotonic()
        for n in range(args.groups):
            for epoch in (JOIN_EPOCH, LEAVE_EPOCH):
                await member.request(m.Heartbeat(
                    request_id=0, stream_prefix=PREFIX, consumer_group=f"g{n}",
                    member_id=f"m{n}", member_epoch=epoch,
                    owned_shards=() if epoch == JOIN_EPOCH else None))
        listed = await admin.request(m.ListGroups(request_id=0))
        assert isinstance(listed, m.Groups)
        result["groups_created"] = len(listed.groups)
        result["create_s"] = round(time.monotonic() - created, 1)
        result["rss_with_groups_mb"] = round(rss_mb(), 1)
        started = time.monotonic()
        while listed.groups:
            await trio.sleep(0.5)
            listed = await admin.request(m.ListGroups(request_id=0))
            assert isinstance(listed, m.Groups)
        result["expired_after_s"] = round(time.monotonic() - started, 1)
        await trio.sleep(2)
        result["rss_after_expiry_mb"] = round(rss_mb(), 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", type=int, default=2000)
    parser.add_argument("--retention-ms", type=int, default=60000)
    args = parser.parse_args(argv)
    redis = Redis()
    try:
        coordinator = start_coordinator(
            redis.url, heartbeat_interval_ms=1000, lease_ttl_ms=6000,
            extra=["--empty-group-retention-ms", str(args.retention_ms)])
        try:
            print(json.dumps(trio.run(run, args, coordinator.url, coordinator.rss_mb)))
        finally:
            coordinator.stop()
    finally:
        redis.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
