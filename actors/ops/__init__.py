"""What the coordinator tells its operators: the Prometheus metrics and the health port,
`/readyz`, the request latency histogram, the per-group lag gauges (C4). No other room imports
them: the shells report through `rsc.actors.ports`' protocols, and the top runs them."""
