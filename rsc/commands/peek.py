"""`rsc consume PREFIX --peek`: the current routing's shards, read with XRANGE (rsc/tools/peek.py).

Joins no group and acks nothing; the same JSON lines as `rsc consume`, with
`memberId` null. Every failure is one line and exit 1 (exit 2 for what waiting
cannot heal).
"""

from __future__ import annotations

import argparse

import redis
import trio

from rsc.commands.member_tool import run_tool
from rsc.member.notices import redis_problem
from rsc.member.producer import no_routing_line
from rsc.member.redis_io.streams import connect
from rsc.member.redis_io.unrecoverable import (
    redis_error_is_permanent,
    redis_unrecoverable,
    refusal_error,
    refusal_is_permanent,
    tls_checked,
)
from rsc.member.session import ResponseUndecodable, SessionClosed, SessionRefused, open_session
from rsc.member.shells.tool_config import Endpoints
from rsc.protocol import Routing, Status
from rsc.tools.output_lines import PipeClosed, StdoutLines
from rsc.tools.peek import peek, routing_request
from rsc.tools.tool_output import line_writer


def run(args: argparse.Namespace, urls: Endpoints) -> int:
    return run_tool("consume", _peek, args, urls)


async def _peek(args: argparse.Namespace, urls: Endpoints) -> int:
    say = line_writer("consume")
    out = StdoutLines(on_closed=lambda: None)
    try:  # Redis first: refused credentials are a configuration error whatever the coordinator does
        await trio.to_thread.run_sync(tls_checked, lambda: _ping(urls.redis_url), urls.redis_url)
    except redis.RedisError as exc:
        if redis_error_is_permanent(exc):
            raise redis_unrecoverable(exc, urls.redis_url) from exc
        say(redis_problem(exc, urls.redis_url))
        return 1
    try:
        async with open_session(urls.coordinator_url, "member", token=urls.token,
                                connect_timeout=5.0, ca_file=urls.ca_file) as session:
            with trio.fail_after(10):
                routing = await session.request(routing_request(args.prefix))
    except SessionRefused as exc:
        if refusal_is_permanent(exc.status_code):
            raise refusal_error(exc.status_code, exc.line) from exc
        say(exc.line)
        return 1
    except (SessionClosed, ResponseUndecodable, trio.TooSlowError) as exc:
        say(getattr(exc, "line", None) or f"the coordinator at {urls.coordinator_url} did not "
            "answer in time")
        return 1
    if not isinstance(routing, Routing) or routing.status != Status.OK:
        say(no_routing_line(args.prefix))
        return 1
    try:
        await peek(args.prefix, routing=routing, redis_url=urls.redis_url,
                   limit=args.max_messages, write=out.write)
    except PipeClosed:
        return 0
    except redis.RedisError as exc:
        if redis_error_is_permanent(exc):
            raise redis_unrecoverable(exc, urls.redis_url) from exc
        say(redis_problem(exc, urls.redis_url))
        return 1
    return 0


def _ping(redis_url: str) -> None:
    client = connect(redis_url, timeout_s=5.0, retries=False)
    try:
        client.ping()
    finally:
        client.close()
