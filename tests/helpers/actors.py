"""Serve one prefix actor the way the coordinator does: through a Router, which wakes the actor
when its mailbox holds something and supervises it (no task of the actor's own)."""

from __future__ import annotations

import gc
from typing import Any

import attrs
import trio

from rsc.actors.actor import PrefixActor, now_ms
from rsc.actors.core.prefix import PrefixMachine
from rsc.actors.mailbox import Envelope, Tick
from rsc.actors.router import Router
from rsc.actors.server import Collect


@attrs.frozen
class Served:
    """A prefix actor served by a router of its own, in a test's nursery."""

    router: Router
    actor: PrefixActor

    @property
    def machine(self) -> PrefixMachine:
        return self.actor.machine

    async def ask(self, request: Any) -> Any:
        """Send `request` and wait for its response."""
        slot = Collect()
        await self.router.send(self.actor.prefix, Envelope(request, slot, None))
        return await slot.wait()

    async def send(self, request: Any, slot: Collect) -> None:
        """Send `request`; its response goes to `slot`."""
        await self.router.send(self.actor.prefix, Envelope(request, slot, None))

    async def tick(self, retention: bool | None = None) -> None:
        """Hand the actor a tick (a batch of its own, after whatever it holds)."""
        await self.router.send(self.actor.prefix, Envelope(Tick(now_ms(), retention), None, None))

    def queue(self, request: Any, slot: Collect | None = None) -> None:
        """Put `request` in the mailbox without waking the actor: it joins the next batch."""
        self.actor.send_channel.send_nowait(Envelope(request, slot, None))


def serve(nursery: trio.Nursery, actor: PrefixActor) -> Served:
    router = Router(nursery, lambda prefix: actor)
    router.add(actor)
    return Served(router, actor)


def live_watch_count() -> int:
    """Watches held by every prefix actor of this process (the coordinator runs in-process).

    The coordinator's GC policy freezes what lives at its ticks, which hides those objects from
    `gc.get_objects`: they are unfrozen first, and actors of coordinators that earlier tests
    stopped are collected.
    """
    gc.unfreeze()
    gc.collect()
    return sum(len(watches) for obj in gc.get_objects() if isinstance(obj, PrefixActor)
               for watches in obj.delivery.watches.values())
