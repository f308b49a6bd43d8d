"""Sticky uniform assignor (H2): counts differ by at most one, minimal movement.

Pure. Like Kafka's uniform assignor: every member keeps the shards it already
has while that stays balanced; only the surplus of over-full members and the
shards of departed members move, to the members with the fewest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence


def assign(
    members: Iterable[str],
    shards: Sequence[str],
    previous: Mapping[str, Iterable[str]],
) -> dict[str, frozenset[str]]:
    """Target assignment of `shards` over `members`, sticky to `previous`.

    Members with no shard get an empty set. Deterministic: the same inputs
    give the same output.
    """
    member_ids = sorted(set(members))
    if not member_ids:
        return {}
    order = {shard: index for index, shard in enumerate(shards)}
    base, extra = divmod(len(order), len(member_ids))

    kept: dict[str, list[str]] = {}
    for member_id in member_ids:
        still_valid = [s for s in previous.get(member_id, ()) if s in order]
        still_valid.sort(key=order.__getitem__)
        kept[member_id] = still_valid

    # the `extra` members that may hold base+1 are those already holding the most
    by_holding = sorted(member_ids, key=lambda m: (-len(kept[m]), m))
    quota = {m: base + (1 if rank < extra else 0) for rank, m in enumerate(by_holding)}

    taken: set[str] = set()
    for member_id in member_ids:
        keep = kept[member_id][: quota[member_id]]
        kept[member_id] = keep
        taken.update(keep)

    free = [s for s in shards if s not in taken]
    free.reverse()
    for member_id in member_ids:
        want = quota[member_id] - len(kept[member_id])
        while want > 0:
            kept[member_id].append(free.pop())
            want -= 1
    return {m: frozenset(kept[m]) for m in member_ids}
