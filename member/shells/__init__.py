"""The member side's shells: the trio tasks that run one member (heartbeats, reads, workers,
acks), the routing follower, the producer's coordinator side, and what `rsc consume` needs
before its members start. They feed the pure decisions (`rsc.member.pure`) and do their I/O
through `rsc.member.redis_io`."""
