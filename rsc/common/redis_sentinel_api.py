"""redis-py's Sentinel calls, typed in one place.

redis-py's annotations of `Sentinel` changed between the releases our range allows (8.1 left
`__init__`, `discover_master` and `master_for` unannotated; 8.2 annotates some of their
parameters), so a `type: ignore` that one release needs is an unused ignore on the other. The rest
of rsc calls these three functions instead, each of which states the types we rely on once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from redis import Redis
from redis.sentinel import Sentinel

S = TypeVar("S", bound=Sentinel)
R = TypeVar("R", bound=Redis)


def new_sentinel(cls: type[S], sentinels: Iterable[tuple[str, int]],
                 sentinel_kwargs: Mapping[str, object]) -> S:
    """`cls(sentinels, sentinel_kwargs=...)`: the sentinels' addresses and their clients' options."""
    make: Callable[..., S] = cls
    return make(list(sentinels), sentinel_kwargs=dict(sentinel_kwargs))


def base_discover_master(sentinel: Sentinel, service: str) -> tuple[str, int]:
    """redis-py's own `Sentinel.discover_master` (for a subclass that overrides it)."""
    discover: Callable[[Sentinel, str], tuple[str, int]] = Sentinel.discover_master
    host, port = discover(sentinel, service)
    return str(host), int(port)


def master_for(sentinel: Sentinel, service: str, redis_class: type[R],
               options: Mapping[str, object]) -> R:
    """The master's client of `service`, of `redis_class`, built with `options`."""
    build: Callable[..., R] = sentinel.master_for
    return build(service, redis_class=redis_class, **options)
