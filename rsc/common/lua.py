"""The one Lua script runner of both sides: scripts shipped as files, run by EVALSHA.

The scripts are files of this package (rsc/common/scripts/*.lua, each opening
with a comment that says its KEYS and ARGV). A `Script` runs by EVALSHA only,
inside whatever pipeline its caller sends: redis-py's own `Script` asks SCRIPT
EXISTS before every pipeline (one more round trip per batch). Where Redis
answers NOSCRIPT (a restart, a flush, a promoted replica) the script is loaded
again and only those calls are sent again, so an unloaded script costs one
round trip once and never fails a call.

How commands reach Redis is the caller's `Execute`: `pipelined(client)` for one
server or a `RedisCluster` (its pipeline routes every EVALSHA by its first key),
or the member's per-node router on a cluster (member/redis_io/cluster_streams.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib import resources
from typing import NamedTuple

import redis
from redis.exceptions import NoScriptError

from rsc.common.redis_connect import remember_script

Client = redis.Redis | redis.RedisCluster
"""One Redis server, or a Redis Cluster through its slot map."""

Word = str | bytes | int | float
"""One word of a command."""

Command = tuple[str, Sequence[Word]]
"""One command: the key it routes by (on a cluster), and its words."""

Reply = object
"""What Redis answered to one command (its parsed reply, or the error as a value)."""



def reply_int(reply: Reply) -> int:
    """An integer reply (or one Redis sent as a bulk string, as Lua numbers in arrays are not);
    TypeError naming what came instead."""
    if isinstance(reply, int | str | bytes):
        return int(reply)
    raise TypeError(f"expected an integer reply from Redis, got {reply!r}")


def reply_list(reply: Reply) -> list[Reply]:
    """An array reply; TypeError naming what came instead."""
    if isinstance(reply, list):
        return reply
    raise TypeError(f"expected an array reply from Redis, got {reply!r}")


Execute = Callable[[Sequence[Command]], list[Reply]]
"""Send commands, return their replies in order, each error as a value."""

Call = tuple[Sequence[str], Sequence[Word]]
"""One script call: its KEYS and its ARGV."""


def script_text(name: str) -> str:
    """The text of rsc/common/scripts/<name>.lua."""
    return (resources.files("rsc.common") / "scripts" / f"{name}.lua").read_text(encoding="utf-8")


def pipelined(client: Client) -> Execute:
    """Commands sent in one pipeline of `client` (one server, or a cluster client's pipeline)."""

    def execute(commands: Sequence[Command]) -> list[Reply]:
        pipe = client.pipeline(transaction=False)
        for _, words in commands:
            pipe.execute_command(*words)
        return list(pipe.execute(raise_on_error=False))

    return execute


class ScriptPlan(NamedTuple):
    """The one NOSCRIPT fallback, as a plan every executor follows (sync or async):

    1. send `commands` (EVALSHA only: no SCRIPT EXISTS round trip);
    2. `resend(results)`: the commands Redis answered NOSCRIPT (a restart, a flush, a promoted
       replica); when there are any, load `text` (SCRIPT LOAD), send those again and
    3. `merge` their replies into `results`, in place.

    (A named tuple: one is made per script round trip, on the acks' path.)
    """

    text: str
    commands: list[Command]

    def missing(self, results: Sequence[Reply]) -> list[int]:
        """The indexes of the calls Redis answered NOSCRIPT."""
        return [index for index, result in enumerate(results) if isinstance(result, NoScriptError)]

    def resend(self, results: Sequence[Reply]) -> list[Command]:
        """The commands to send again once the script is loaded ([]: none)."""
        commands = self.commands
        return [commands[index] for index, result in enumerate(results)
                if isinstance(result, NoScriptError)]

    def merge(self, results: list[Reply], again: Sequence[Reply]) -> None:
        """Put the replies to `resend(results)` in their places of `results`."""
        for index, result in zip(self.missing(results), again, strict=True):
            results[index] = result


class Script:
    """A Lua script: the files it is made of (a library first, then the script), its SHA1."""

    def __init__(self, *names: str) -> None:
        if not names:
            raise ValueError("a script needs at least one file")
        self.name = names[-1]
        self.text = "\n".join(script_text(name) for name in names)
        self.sha = remember_script(self.text)  # a denial inside it names the command (K6)

    def commands(self, calls: Sequence[Call]) -> list[Command]:
        """The EVALSHA commands of `calls`, each routed by its first key."""
        return [(keys[0], ("EVALSHA", self.sha, len(keys), *keys, *args)) for keys, args in calls]

    def plan(self, calls: Sequence[Call]) -> ScriptPlan:
        """What running `calls` sends, as a value (no I/O): see `ScriptPlan`."""
        return ScriptPlan(self.text, self.commands(calls))

    def run(self, calls: Sequence[Call], execute: Execute,
            load: Callable[[str], object]) -> list[Reply]:
        """Run every call through `execute`; the calls Redis answered NOSCRIPT are sent again
        once `load` loaded the text. Replies in order, errors as values."""
        if not calls:
            return []
        plan = self.plan(calls)
        results = execute(plan.commands)
        again = plan.resend(results)
        if again:
            load(plan.text)
            plan.merge(results, execute(again))
        return results

    def run_on(self, client: Client, calls: Sequence[Call]) -> list[Reply]:
        """`run` in one pipeline of `client`, loading with its SCRIPT LOAD (every master)."""
        return self.run(calls, pipelined(client), client.script_load)

    def call(self, client: Client, keys: Sequence[str], args: Sequence[Word]) -> Reply:
        """One call; its error reply raised."""
        [result] = self.run_on(client, [(keys, args)])
        if isinstance(result, Exception):
            raise result
        return result

    def __repr__(self) -> str:
        return f"Script({self.name!r}, sha={self.sha[:8]})"


def load_all(client: Client, scripts: Sequence[Script]) -> None:
    """Load `scripts` now (at start), so their first calls cost no NOSCRIPT round trip."""
    for script in scripts:
        client.script_load(script.text)
