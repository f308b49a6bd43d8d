"""`rsc coordinator`: run the coordinator (flags as in docs/protocol.md, Command line)."""

from __future__ import annotations

import argparse
import functools
import logging
import signal
import sys
from typing import TYPE_CHECKING

from rsc.actors.config import DEFAULT_MAX_GROUP_SIZE, DEFAULT_MAX_GROUPS, CoordinatorConfig
from rsc.commands.arg_types import non_negative, positive
from rsc.common.env_config import parse_args
from rsc.common.exit_codes import EXIT_FAILED, EXIT_OK
from rsc.common.logs import add_logging_arguments, configure_logging, log_event

if TYPE_CHECKING:
    from rsc.actors.ops.metrics import CoordinatorMetrics

log = logging.getLogger("rsc.coordinator")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    defaults = CoordinatorConfig()
    parser = subparsers.add_parser("coordinator", help="run the group coordinator")
    parser.add_argument("--redis-url", default=None,
                        help="Redis for metadata (default: $RSC_REDIS_URL, else start an embedded "
                             "redis-server unless --no-embedded-redis)")
    parser.add_argument("--no-embedded-redis", action="store_true",
                        help="without a Redis URL, exit 1 instead of starting a throw-away "
                             "redis-server (deployments set it: a missing URL is a mistake)")
    parser.add_argument("--host", default=defaults.host,
                        help="address to listen on, for sessions and the metrics port (default %(default)s)")
    parser.add_argument("--port", type=int, default=defaults.port,
                        help="websocket port; 0 picks a free one (default %(default)s)")
    parser.add_argument("--tick-interval-ms", type=int, default=defaults.tick_interval_ms,
                        help="how often leases and revoke timeouts are checked and the coordinator's "
                             "own lease is renewed (default %(default)s)")
    parser.add_argument("--lease-ttl-ms", type=int, default=defaults.lease_ttl_ms,
                        help="a member without an accepted heartbeat for this long is expired; a "
                             "Redis call slower than a third of it is given up (default %(default)s)")
    parser.add_argument("--heartbeat-interval-ms", type=int, default=defaults.heartbeat_interval_ms,
                        help="how often members are told to heartbeat (default %(default)s)")
    parser.add_argument("--revoke-timeout-ms", type=int, default=defaults.revoke_timeout_ms,
                        help="a member still holding a shard it was asked to give up after this long "
                             "is removed from its group (default %(default)s)")
    parser.add_argument("--static-session-timeout-ms", type=positive,
                        default=defaults.static_session_timeout_ms,
                        help="how long the shards of a static member that went away wait for it to "
                             "come back before they move to others (default %(default)s)")
    parser.add_argument("--empty-group-retention-ms", type=non_negative,
                        default=defaults.empty_group_retention_ms,
                        help="a group with no live member for this long is deleted, as deleteGroup "
                             "does (Kafka's offsets.retention.minutes); 0 keeps groups for ever "
                             "(default %(default)s: 7 days)")
    # tokens may come from the environment so they stay out of `ps` (docs/protocol.md, Transport)
    parser.add_argument("--admin-token", default=None,
                        help="require this bearer token on /v1/admin (default: $RSC_ADMIN_TOKEN)")
    parser.add_argument("--viewer-token", default=None,
                        help="also accept this bearer token on /v1/admin, for read requests only "
                             "(changes get NOT_AUTHORIZED); needs --admin-token "
                             "(default: $RSC_VIEWER_TOKEN)")
    parser.add_argument("--member-token", default=None,
                        help="require this bearer token on /v1/member (default: $RSC_MEMBER_TOKEN)")
    parser.add_argument("--allow-unauthenticated", action="store_true",
                        help="start even though --host is beyond loopback and a token is missing "
                             "(the open endpoints are logged at WARNING at every start)")
    parser.add_argument("--allowed-origins", default="", metavar="ORIGINS",
                        help="comma list of browser origins (scheme://host[:port]) whose "
                             "handshakes are accepted; any other Origin header gets HTTP 403 "
                             "(default: none)")
    parser.add_argument("--console-hosts", default="", metavar="NAMES",
                        help="comma list of further names the console answers to (its Host "
                             "header); besides localhost, 127.0.0.1, [::1] and --host, any other "
                             "gets HTTP 421 (default: none)")
    parser.add_argument("--max-frame-bytes", type=int, default=defaults.max_frame_bytes,
                        help="largest message accepted, in UTF-8 bytes; a larger one closes the "
                             "session with code 1009 (default %(default)s)")
    parser.add_argument("--max-sessions", type=positive, default=None,
                        help="open sessions allowed; past it a handshake gets HTTP 503 "
                             "(default: 80%% of the fd limit, raised to the hard limit at start)")
    parser.add_argument("--max-groups", type=positive, default=DEFAULT_MAX_GROUPS,
                        help="groups allowed; past it a join gets GROUP_LIMIT_REACHED "
                             f"(default {DEFAULT_MAX_GROUPS})")
    parser.add_argument("--max-group-size", type=positive, default=DEFAULT_MAX_GROUP_SIZE,
                        help="members per group; past it a join gets GROUP_MAX_SIZE_REACHED "
                             f"(default {DEFAULT_MAX_GROUP_SIZE})")
    parser.add_argument("--metrics-port", type=int, default=None,
                        help="serve Prometheus metrics, /healthz and /readyz on this port (0 picks one)")
    parser.add_argument("--console-port", type=int, default=None,
                        help="serve the read-only web console on this port (0 picks one)")
    parser.add_argument("--tls-cert", default=None, metavar="FILE",
                        help="serve wss:// with this certificate chain, PEM (default: $RSC_TLS_CERT)")
    parser.add_argument("--tls-key", default=None, metavar="FILE",
                        help="the private key of --tls-cert, PEM (default: $RSC_TLS_KEY)")
    parser.add_argument("--metrics-tls", action="store_true",
                        help="serve the metrics, health and console ports over HTTPS with the same "
                             "certificate")
    parser.add_argument("--min-replicas", type=non_negative,
                        default=0,
                        help="every metadata write waits (Redis WAIT, within a third of the lease) "
                             "until this many replicas hold it; fewer is a failed write, answered "
                             "COORDINATOR_NOT_AVAILABLE (default: 0)")
    parser.add_argument("--lag-metrics-interval-ms", type=positive,
                        default=defaults.lag_metrics_interval_ms,
                        help="how often the lag in time of every group is read from Redis for "
                             "rsc_group_lag_seconds and rsc_group_pending_age_seconds "
                             "(default %(default)s)")
    parser.add_argument("--no-push", dest="push", action="store_false",
                        help="do not push assignmentChanged hints (members poll)")
    parser.add_argument("--keep-drained-streams", action="store_true",
                        help="keep a resharded prefix's old streams instead of deleting them")
    add_logging_arguments(parser)
    parser.set_defaults(run=run)


def config_from_args(args: argparse.Namespace) -> CoordinatorConfig:
    return CoordinatorConfig(
        redis_url=args.redis_url, host=args.host, port=args.port,
        tick_interval_ms=args.tick_interval_ms, lease_ttl_ms=args.lease_ttl_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms, revoke_timeout_ms=args.revoke_timeout_ms,
        static_session_timeout_ms=args.static_session_timeout_ms,
        empty_group_retention_ms=args.empty_group_retention_ms,
        admin_token=args.admin_token, member_token=args.member_token,
        viewer_token=args.viewer_token,
        max_frame_bytes=args.max_frame_bytes, metrics_port=args.metrics_port,
        console_port=args.console_port, push=args.push,
        keep_drained_streams=args.keep_drained_streams, max_sessions=args.max_sessions,
        max_groups=args.max_groups, max_group_size=args.max_group_size,
        tls_cert=args.tls_cert, tls_key=args.tls_key, metrics_tls=args.metrics_tls,
        min_replicas=args.min_replicas, allowed_origins=args.allowed_origins,
        console_hosts=args.console_hosts, allow_unauthenticated=args.allow_unauthenticated,
        lag_metrics_interval_ms=args.lag_metrics_interval_ms,
    )


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    try:
        config = config_from_args(args)
    except ValueError as exc:  # flags that do not go together
        _fail(str(exc))
        return EXIT_FAILED
    if config.redis_url is None and args.no_embedded_redis:
        _fail("no Redis URL: pass --redis-url or set RSC_REDIS_URL (--no-embedded-redis "
              "refuses to start a throw-away redis-server)")
        return EXIT_FAILED
    import trio

    try:
        trio.run(_main, config)
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # one clear line, not a traceback, for what an operator can fix
        problem = _operator_error(exc)
        if problem is None:
            raise
        _fail(str(problem))  # redacted by the formatter (K7: the safety net)
        return EXIT_FAILED
    return EXIT_OK


def _fail(problem: str) -> None:
    log_event(log, f"rsc coordinator: {problem}", level=logging.ERROR)


def _operator_error(exc: BaseException) -> BaseException | None:
    """The store or embedded-redis error inside `exc` (nurseries wrap errors in groups)."""
    from rsc.actors.redis_io.store import StoreError
    from rsc.common.errors import leaves
    from rsc.common.redis_server import EmbeddedRedisError
    from rsc.common.tls import TlsConfigError
    from rsc.console import ConsoleError

    inside = leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    return next((leaf for leaf in inside
                 if isinstance(leaf, StoreError | EmbeddedRedisError | TlsConfigError | ConsoleError)),
                None)


async def _main(config: CoordinatorConfig) -> None:
    if config.redis_url is not None:
        await _serve_until_signal(config)
        return
    import attrs
    import trio

    from rsc.common.redis_server import EmbeddedRedis

    embedded = await trio.to_thread.run_sync(lambda: EmbeddedRedis().start())
    log_event(log, f"no --redis-url given: started a private redis-server at {embedded.url}; "
              "its data is lost on exit", level=logging.WARNING, redis=embedded.url)
    try:
        await _serve_until_signal(attrs.evolve(config, redis_url=embedded.url))
    finally:
        embedded.stop()


async def _serve_until_signal(config: CoordinatorConfig) -> None:
    """Serve until SIGTERM or SIGINT (Ctrl-C), from the first moment: a coordinator still
    waiting for the lease (D5) stops at once; a serving one releases its lease on the way
    out (serve's own cleanup), before the caller stops an embedded redis-server."""
    import trio

    from rsc.actors.app import serve

    metrics: CoordinatorMetrics | None = None
    if config.metrics_port is not None:
        from rsc.actors.ops.metrics import CoordinatorMetrics

        metrics = CoordinatorMetrics()
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def stop_on_signal() -> None:
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(stop_on_signal)
            url = await nursery.start(lambda task_status: serve(config, metrics=metrics,
                                                                task_status=task_status))
            print(f"listening on {url}", flush=True)
            if config.console_port is not None:
                from rsc.console import console_url, serve_console

                port = await nursery.start(functools.partial(  # --metrics-tls: HTTPS, wss:// feed
                    serve_console, url, config.host, config.console_port, tls_cert=config.tls_cert,
                    tls_key=config.tls_key, https=config.metrics_tls,
                    console_hosts=config.console_hosts,
                    admin_token=config.admin_token, viewer_token=config.viewer_token))
                print(f"console at {console_url(config.host, port, https=config.metrics_tls)}", flush=True)


def main(argv: list[str] | None = None) -> int:
    """`python -m rsc.commands.coordinator ...`: `rsc coordinator ...` without loading the other commands."""
    parser = argparse.ArgumentParser(prog="rsc")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parse_args(parser, ["coordinator", *(sys.argv[1:] if argv is None else argv)])
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
