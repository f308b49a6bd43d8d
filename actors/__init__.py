"""The coordinator. Its top runs the request path and assembles it (app, server, router, the prefix
actor with its mailbox and delivery, listing) and holds what every room reads (config, ports,
logs); its rooms, lowest first: core/ (the pure machines), net/ (the sockets), redis_io/ (the
metadata store and the shard streams' I/O), admin/ (the admin requests no prefix owns), ops/
(metrics, readiness, latency, lag gauges)."""
