"""Exception groups as the callers of a tiny nursery want them: the one real exception.

A context manager that runs a helper task beside its body (a websocket's reader, a
session's receive loop) wraps whatever ends it in an exception group; its caller wants
the body's own exception, or the helper's, not a group of one.

`ErrorBoundary` is L1's boundary (docs/protocol.md), the one place a public entry point
turns its task groups into one error; every entry point wraps its nurseries in it:

    with ErrorBoundary(on_failure=say_once):
        async with trio.open_nursery() as nursery:
            ...
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import NoReturn

import trio


def leaves(group: BaseExceptionGroup) -> list[BaseException]:
    """Every exception inside `group`, nested groups flattened, in order."""
    found: list[BaseException] = []

    def collect(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                collect(inner)
        else:
            found.append(exc)

    collect(group)
    return found


def single_exception(group: BaseExceptionGroup) -> BaseException:
    """The one exception that is not a `trio.Cancelled` inside `group` (all of them being
    Cancelled: the first); `group` itself when there are several."""
    inside = leaves(group)
    real = [exc for exc in inside if not isinstance(exc, trio.Cancelled)]
    if len(real) == 1:
        return real[0]
    return inside[0] if not real else group


def unwrap_single(group: BaseExceptionGroup) -> NoReturn:
    """Raise the one real exception of `group` (see `single_exception`), keeping its own
    context, or the group itself when there are several."""
    leaf = single_exception(group)
    if leaf is group:
        raise group
    context = leaf.__context__
    try:
        raise leaf
    finally:
        leaf.__context__ = context


def first_of(group: BaseExceptionGroup) -> BaseException:
    """L1: the one exception a public call raises for `group`: the first that is not a
    `trio.Cancelled` (a KeyboardInterrupt or SystemExit before any other), the others named
    in its `__notes__`; a group of nothing but Cancelled gives its first (the host's own
    cancellation, which trio's cancel scope then catches)."""
    inside = leaves(group)
    real = [exc for exc in inside if not isinstance(exc, trio.Cancelled)]
    if not real:
        return inside[0]
    first = next((exc for exc in real if not isinstance(exc, Exception)), real[0])
    for other in real:
        if other is not first:
            first.add_note(f"at the same time: {type(other).__name__}: {other}")
    return first


def raise_first(group: BaseExceptionGroup) -> NoReturn:
    """Raise `first_of(group)` (never a group: L1's one boundary), keeping its own context."""
    _raise_keeping_context(first_of(group))


def _raise_keeping_context(leaf: BaseException) -> NoReturn:
    context = leaf.__context__
    try:
        raise leaf
    finally:
        leaf.__context__ = context


class ErrorBoundary:
    """L1: no exception group leaves the `with` block; a group raises `first_of(group)`, the
    others named in its `__notes__`, its own context kept. `on_failure` sees that error first
    (to say a final one once, L2). Anything else passes as it is."""

    def __init__(self, on_failure: Callable[[BaseException], None] | None = None) -> None:
        self._on_failure = on_failure

    def __enter__(self) -> ErrorBoundary:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if not isinstance(value, BaseExceptionGroup):
            return
        leaf = first_of(value)
        if self._on_failure is not None:
            self._on_failure(leaf)
        _raise_keeping_context(leaf)
