"""listGroups over every prefix: where each prefix's summaries come from.

An idle prefix (its actor serving, no batch running, nothing queued: the router's
`idle_machine`) holds only durable state (a failed write rolled it back, H12), so it is
read where it stands, its lag and pending totals in the coordinator-wide pipelines shared
with the other idle prefixes (actors/redis_io/shard_work.py). A busy one answers after its current
batch is durable (a SummariesRequest in its mailbox), as does every prefix without those
pipelines. A prefix that became busy while the totals were read is asked too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence

import trio

from rsc.actors.core.prefix import PrefixMachine
from rsc.actors.core.shard_reports import GroupTotals
from rsc.actors.mailbox import Envelope, SummariesRequest
from rsc.actors.redis_io.shard_work import ShardWork
from rsc.protocol import messages as m


async def list_groups(prefixes: Sequence[str],
                      idle_machine: Callable[[str], PrefixMachine | None],
                      send: Callable[[str, Envelope], Awaitable[None]],
                      shard_work: ShardWork | None) -> tuple[m.GroupSummary, ...]:
    """Every group of `prefixes`, in their order (module docstring)."""
    idle: dict[str, PrefixMachine] = {}
    totals: Mapping[str, Mapping[str, GroupTotals] | None] = {}
    if shard_work is not None:
        idle = {prefix: machine for prefix in prefixes
                if (machine := idle_machine(prefix)) is not None}
        wanted = [(prefix, read) for prefix, machine in idle.items()
                  if (read := machine.totals_read()) is not None]
        if wanted:
            deadline = trio.current_time() + shard_work.deadline_s
            values = await shard_work.totals_many(
                [(read.streams, read.groups) for _, read in wanted], deadline)
            totals = {prefix: value for (prefix, _), value in zip(wanted, values, strict=True)}
    asked: dict[str, SummariesRequest] = {}
    for prefix in prefixes:
        if prefix in idle and idle_machine(prefix) is idle[prefix]:
            continue  # still idle after the read: summarized below
        asked[prefix] = SummariesRequest()
        await send(prefix, Envelope(asked[prefix], None, None))
    groups: list[m.GroupSummary] = []
    for prefix in prefixes:
        request = asked.get(prefix)
        if request is None:
            groups.extend(idle[prefix].summaries(totals.get(prefix)))
        else:
            await request.done.wait()
            groups.extend(request.summaries)
    return tuple(groups)
