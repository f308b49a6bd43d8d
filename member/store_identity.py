"""The errors of a client whose Redis or coordinator is not the store it started with.

docs/protocol.md, Producer routing (the check at start) and K9 (the re-check on every new
coordinator session and every Redis reconnect).
"""

from __future__ import annotations

__all__ = ["StoreChanged", "StoreMismatch", "store_changed_line"]


class StoreMismatch(Exception):
    """This Redis is not the coordinator's: their storeIds differ (docs/protocol.md, Producer
    routing)."""


class StoreChanged(StoreMismatch):
    """K9: a re-check (a new coordinator session, a Redis reconnect) found another storeId
    than the one this client started with: it stops before reading, acking or writing more
    (the console tools exit 2)."""


def store_changed_line(where: str, known: str, found: str) -> str:
    """The one line a client stops with when its store changed under it (K9)."""
    return (f"{where} now names storeId {found!r}, not {known!r} as when this client started: "
            "it is another store (a new Redis or coordinator on the same address?); stopping "
            "before reading or writing anything more (K9)")
