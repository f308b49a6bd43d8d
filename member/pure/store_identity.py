"""The errors of a client whose Redis or coordinator is not the store it started with.

docs/protocol.md, Producer routing (the check at start) and K9 (the re-check on every new
coordinator session and every Redis reconnect).
"""

from __future__ import annotations

from rsc.common.error_family import StoreChanged, StoreMismatch

__all__ = ["StoreChanged", "StoreMismatch", "store_changed_line"]


def store_changed_line(where: str, known: str, found: str) -> str:
    """The one line a client stops with when its store changed under it (K9)."""
    return (f"{where} now names storeId {found!r}, not {known!r} as when this client started: "
            "it is another store (a new Redis or coordinator on the same address?); stopping "
            "before reading or writing anything more (K9)")
