"""`getFormatVersion` and `setFormatVersion`: the store's metadata format, which no prefix owns.

The decision is actors/core/records.py's `format_change`; this shell reads the format the
store was loaded in, runs the one write on a worker thread within D4's budget (a third of
the lease: past it, or when Redis fails, the answer is COORDINATOR_NOT_AVAILABLE and the
store may or may not have moved up; asking again is safe, a raise never lowers anything).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from rsc.actors.core.records import LATEST_FORMAT_VERSION, format_change
from rsc.actors.logs import log_event
from rsc.actors.redis_io.store import MetadataStore, StoreError
from rsc.actors.redis_io.store_deadline import StoreStalled, run_by_deadline
from rsc.protocol import messages as m
from rsc.protocol.errors import Status

log = logging.getLogger("rsc.coordinator")


class FormatVersionAdmin:
    """Answers the two format version requests for one coordinator epoch's store."""

    def __init__(self, store: MetadataStore, *, deadline_s: float,
                 on_raised: Callable[[int], None] | None = None) -> None:
        self.store = store
        self.deadline_s = deadline_s
        self.on_raised = on_raised  # B6: what the new format adds is written from memory
        self._writing = trio.Lock()  # one raise at a time: each decides on the format in use

    async def answer(self, request: m.GetFormatVersion | m.SetFormatVersion) -> m.Response:
        if isinstance(request, m.GetFormatVersion):
            return m.FormatVersion(request_id=request.request_id, status=Status.OK,
                                   format_version=self.store.format_version,
                                   latest_format_version=LATEST_FORMAT_VERSION)
        async with self._writing:
            return await self._raise(request)

    async def _raise(self, request: m.SetFormatVersion) -> m.Response:
        current = self.store.format_version
        change = format_change(current, request.format_version, LATEST_FORMAT_VERSION)
        if change.refusal is not None:
            return request.error(Status.UNSUPPORTED_FORMAT_VERSION, change.refusal)
        previous: int | None = current
        if change.changed:
            try:
                previous = await run_by_deadline(
                    trio.current_time() + self.deadline_s, "format version raise",
                    self.store.raise_format_version, request.format_version)
            except StoreStalled:  # D4: abandoned; the raise may still land, which is harmless
                return request.error(Status.COORDINATOR_NOT_AVAILABLE,
                                     "Redis did not answer in time; retry")
            except StoreError as exc:
                return request.error(Status.COORDINATOR_NOT_AVAILABLE,
                                     f"the format version was not written: {exc}")
            log_event(log, "store.format_raised", level=logging.WARNING, previous=previous,
                      format_version=request.format_version)
            if self.on_raised is not None:
                self.on_raised(request.format_version)
        return m.FormatVersionChanged(request_id=request.request_id, status=Status.OK,
                                      format_version=request.format_version,
                                      previous_format_version=previous)
