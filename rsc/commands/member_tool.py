"""What `rsc produce`, `rsc consume` and `rsc consume --peek` share (docs/protocol.md, Command line).

Their endpoint flags and flag types, and `run_tool`: trio.run with one line, not a
traceback, for what stops a tool at once (D3). A URL no retry can fix, and a Redis
that is not the coordinator's (storeId), exit 1 with one line; what waiting cannot
heal exits 2.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from rsc.member.shells.tool_config import DEFAULT_COORDINATOR_URL


def add_endpoint_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--coordinator", default=None,
                        help="coordinator URL, ws://H:P (default: $RSC_COORDINATOR_URL, "
                        f"else {DEFAULT_COORDINATOR_URL})")
    parser.add_argument("--redis-url", default=None,
                        help="Redis URL of the shard streams (default: $RSC_REDIS_URL)")
    parser.add_argument("--token", default=None,
                        help="member endpoint token (default: $RSC_TOKEN)")
    parser.add_argument("--ca-file", default=None, metavar="FILE",
                        help="CA certificates (PEM) a wss:// coordinator is verified against, beside "
                             "the system trust store (default: $RSC_CA_FILE)")


def run_tool(tool: str, main: Callable[..., Awaitable[int]], *args: object) -> int:
    """trio.run(main, *args) with one line, not a traceback, for what stops a tool at once."""
    import trio

    from rsc.common.tls import TlsFailed
    from rsc.member.pure.store_identity import StoreChanged, StoreMismatch
    from rsc.member.redis_io.unrecoverable import EXIT_UNRECOVERABLE, Unrecoverable
    from rsc.member.session import BadCoordinatorUrl
    from rsc.member.shells.runtime import InstanceFenced
    from rsc.member.shells.tool_config import BadConfig
    from rsc.tools.tool_output import EXIT_INTERRUPTED, line_writer

    say = line_writer(tool)
    try:
        return trio.run(main, *args)
    except KeyboardInterrupt:  # before the signal handlers were installed
        return EXIT_INTERRUPTED
    except StoreChanged as exc:  # K9: the store changed under a running tool
        say(str(exc), level=logging.ERROR)
        return EXIT_UNRECOVERABLE
    except (StoreMismatch, BadConfig, BadCoordinatorUrl, InstanceFenced) as exc:
        say(str(exc), level=logging.ERROR)
        return 1
    except TlsFailed as exc:  # D3: a certificate that does not verify cannot heal by waiting
        say(exc.line, level=logging.ERROR)
        return EXIT_UNRECOVERABLE
    except Unrecoverable as exc:  # D3: what waiting cannot heal
        say(str(exc), level=logging.ERROR)
        return EXIT_UNRECOVERABLE
    except BaseExceptionGroup as group:
        found = unrecoverable_in(group)
        if found is None:
            raise
        say(str(found), level=logging.ERROR)
        return EXIT_UNRECOVERABLE


def unrecoverable_in(exc: BaseException) -> BaseException | None:
    """The Unrecoverable somewhere in a (nested) exception group, None when there is none."""
    from rsc.member.redis_io.unrecoverable import Unrecoverable

    if isinstance(exc, Unrecoverable):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = unrecoverable_in(inner)
            if found is not None:
                return found
    return None


async def dispatch_signals(signals: AsyncIterator[int], on_signal: Callable[[int], None]) -> None:
    async for signum in signals:
        on_signal(signum)
