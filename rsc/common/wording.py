"""Whose words a hint uses: the library's parameters, or the command line's flags (L2).

A hint in an error names what to change. An application calling the library changes a
parameter (`token=`, `redis_url`); a user of `rsc` changes a flag (`--token`, `RSC_TOKEN`).
The library's words are the default; `rsc`'s `main()` switches the process to the flags'.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

_cli = False


def use_cli_wording(cli: bool = True) -> None:
    """Hints name the command line's flags from now on (`rsc`'s main calls it)."""
    global _cli
    _cli = cli


def cli_wording() -> bool:
    return _cli


def option(parameter: str, flag: str) -> str:
    """`parameter` (the library's word) or `flag` (the command line's), as this process speaks."""
    return flag if _cli else parameter


def log_final(logger: logging.Logger, line: object) -> None:
    """L2: a final error, said once at ERROR on the library's logger. In `rsc` the tool
    prints that line itself (and exits), so it is not logged twice."""
    if not _cli:
        logger.error("%s", line)


@contextmanager
def cli_words() -> Iterator[None]:
    """Within: hints name the command line's flags (a tool's run), then as before."""
    before = _cli
    use_cli_wording()
    try:
        yield
    finally:
        use_cli_wording(before)
