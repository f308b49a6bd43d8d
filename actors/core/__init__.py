"""Pure: the coordinator's decisions (no trio, no Redis, no sockets; `now` passed in): the group
and prefix machines and their parts, the assignor, the metadata record schema, the lifecycle
(lease, store went back), watch and subscription rules, the handshake gate. The shells at the
top of `rsc.actors` and the other rooms feed them and carry out what they decide."""
