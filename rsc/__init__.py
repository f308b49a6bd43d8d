"""Redis Stream Coordinator: a KIP-848 style consumer-group coordinator for sharded Redis Streams.

One distribution namespace:

- `rsc.protocol`: the wire contract (messages, codec, errors, routing hash, vocabulary); pure.
- `rsc.actors`: the coordinator (pure group and prefix machines, trio shells, Redis store).
- `rsc.member`: the data plane (listener API, member runtime, producer).
- `rsc` itself: the composition layer (the `rsc` command, admin client and views, demo,
  embedded redis-server), the only code that imports both sides.

In the repository `protocol/`, `actors/` and `member/` sit at the top level (the design card's
layout); `rsc/protocol`, `rsc/actors` and `rsc/member` point at them.
"""

__version__ = "0.2.0"
