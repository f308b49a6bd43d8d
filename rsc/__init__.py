"""Redis Stream Coordinator: a KIP-848 style consumer-group coordinator for sharded Redis Streams.

One distribution namespace:

- `rsc.protocol`: the wire contract (messages, codec, errors, routing hash, vocabulary); pure.
- `rsc.actors`: the coordinator (pure group and prefix machines, trio shells, Redis store).
- `rsc.member`: the data plane (listener API, member runtime, producer).
- `rsc` itself: the composition layer, the only code that imports both sides:
  `rsc.cli` (the `rsc` command), `rsc.commands` (one module per console command:
  coordinator, admin, demo), `rsc.admin` (the admin session, arguments, views, runner and
  watch), `rsc.demo`, `rsc.console` (the web console). `rsc.common`: what both sides run
  (Redis connect, redis-server, TLS, the Lua runner, backoff, the lag rule).

Applications import the data plane from `rsc.member`:

    from rsc.member.listener import listener
    from rsc.member.producer import open_producer

In the repository `protocol/`, `actors/` and `member/` sit at the top level (the design card's
layout); `rsc/protocol`, `rsc/actors` and `rsc/member` point at them.
"""

from rsc._versions import WIRE_PROTOCOL, package_version

__version__ = package_version()
"""The package version (L7): from the git tags at build time (setuptools-scm)."""

__all__ = ["WIRE_PROTOCOL", "__version__"]
