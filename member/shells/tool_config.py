"""Where `rsc produce` and `rsc consume` connect: flags first, then the environment.

URLs and the token come from the flags, else from RSC_COORDINATOR_URL (default
ws://127.0.0.1:8765), RSC_REDIS_URL, RSC_TOKEN and RSC_CA_FILE, so they stay out
of `ps`. What no retry can fix is `BadConfig` (exit 1) or `Unrecoverable` (exit 2).
"""

from __future__ import annotations

import argparse
import urllib.parse
from collections.abc import Mapping

import attrs

from rsc.common.error_family import ConfigurationError
from rsc.common.redact import redact_url
from rsc.common.redis_connect import SentinelServiceUnknown
from rsc.member.redis_io.streams import connect
from rsc.member.redis_io.unrecoverable import (
    redis_unrecoverable,
    redis_url_problem,
)
from rsc.member.session import BadCoordinatorUrl, check_coordinator_url

DEFAULT_COORDINATOR_URL = "ws://127.0.0.1:8765"


class BadConfig(ValueError):
    """A URL or setting no retry can fix; its text is the line to print."""


@attrs.frozen
class Endpoints:
    """Where a console tool connects, from its flags or the environment."""

    coordinator_url: str
    redis_url: str
    token: str | None
    ca_file: str | None = None  # what a wss:// coordinator is verified against, beside the system store


def endpoints(args: argparse.Namespace, environ: Mapping[str, str]) -> Endpoints:
    """Flags first, then RSC_COORDINATOR_URL / RSC_REDIS_URL / RSC_TOKEN; BadConfig if unusable."""
    if args.token is not None and not args.token.strip():  # B2: never "any token will do"
        raise ConfigurationError("--token is empty: give the coordinator's member token (or set "
                            "RSC_TOKEN), or leave the flag out")
    coordinator = args.coordinator or environ.get("RSC_COORDINATOR_URL") or DEFAULT_COORDINATOR_URL
    try:
        coordinator = check_coordinator_url(coordinator)
    except BadCoordinatorUrl as exc:
        raise BadConfig(str(exc)) from None
    redis_url = args.redis_url or environ.get("RSC_REDIS_URL")
    if not redis_url:
        raise BadConfig("no Redis URL: pass --redis-url or set RSC_REDIS_URL "
                        "(the coordinator's Redis)")
    problem = redis_url_problem(redis_url)
    if problem is not None:  # D3: redis-py would silently use db 0
        raise ConfigurationError(problem)
    try:
        connect(redis_url).close()
    except ValueError as exc:
        raise BadConfig(f"bad Redis URL {redact_url(redis_url)!r}: {exc}") from None
    except SentinelServiceUnknown as exc:  # K1: no waiting makes the sentinels know it
        raise redis_unrecoverable(exc, redis_url) from None
    if _same_address(coordinator, redis_url):
        raise BadConfig(f"the coordinator URL {coordinator} is the address of the Redis server "
                        f"of --redis-url ({redact_url(redis_url)}): the coordinator listens on its "
                        "own port (it prints `listening on ws://HOST:PORT` when it starts, 8765 by "
                        "default)")
    return Endpoints(coordinator_url=coordinator, redis_url=redis_url,
                     token=args.token or environ.get("RSC_TOKEN") or None,
                     ca_file=args.ca_file or environ.get("RSC_CA_FILE") or None)


def _same_address(coordinator_url: str, redis_url: str) -> bool:
    """Whether a coordinator URL names the host and port of a plain Redis URL."""
    redis_parts = urllib.parse.urlsplit(redis_url)
    if redis_parts.scheme.lower() not in ("redis", "rediss"):
        return False  # a socket path or sentinels: no one port to mistake
    coordinator_parts = urllib.parse.urlsplit(coordinator_url)
    try:
        redis_port = redis_parts.port or 6379
        coordinator_port = coordinator_parts.port or (443 if coordinator_parts.scheme == "wss" else 80)
    except ValueError:
        return False
    return (coordinator_port == redis_port
            and (coordinator_parts.hostname or "").lower() == (redis_parts.hostname or "").lower())
