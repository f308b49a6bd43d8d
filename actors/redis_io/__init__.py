"""The coordinator's Redis: the metadata store and the lease key, the shard streams' reads and
trims, the D4 deadline every store call runs under, the coordinator-wide shard pipelines and
what runs a prefix machine's store requests and retention passes. Imports only `rsc.actors.core`
of the rooms."""
