"""Pure: the member side's decisions (no trio, no Redis): membership from heartbeat answers,
the ledger of what is in flight, pacing, ordering, attempts, health, the producer's routing.
The shells (`rsc.member.shells`) feed them events and carry out what they decide."""
