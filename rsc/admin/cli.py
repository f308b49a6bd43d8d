"""`rsc admin`: run one admin command against the coordinator and print its answer.

The arguments and requests are `rsc.admin.args`, the pictures `rsc.admin.views` (and
`rsc.admin.describe`),
`watch` is `rsc.admin.watch`. This module is the runner: connect, send, print
(a view, or with `--json` the raw response as one line), and turn every
expected failure into one line on stderr and exit code 1 (D3), never a
traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

import trio
from rich.console import Console, RenderableType

from rsc.admin.args import admin_token, build_request, coordinator_url
from rsc.admin.client import (
    AdminClient,
    AdminConnectError,
    AdminError,
    SessionLost,
    open_admin_client,
    read_answer,
)
from rsc.admin.describe import dead_letters_line, describe_view
from rsc.admin.view_text import plain_width, render_plain
from rsc.admin.views import response_view
from rsc.common.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from rsc.common.logs import LogFormat, configure_logging, format_line
from rsc.common.redact import redact_text
from rsc.common.wording import cli_words
from rsc.protocol import GroupDescription, Status
from rsc.protocol.messages import AdminRequest, DeadLetters, FieldValueError, ListDeadLetters


def run(args: argparse.Namespace) -> int:
    """Entry point of `rsc admin`: run the command, return the exit code."""
    return execute(args, sys.stdout, sys.stderr)


def execute(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """Run an admin command writing to the given streams; 0 on success, 1 on any error.
    Its hints name the flags (`--token`), not the library's parameters."""
    with cli_words():
        return _execute(args, stdout, stderr)


def _execute(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    log_format: LogFormat = "json" if getattr(args, "log_format", "text") == "json" else "text"
    configure_logging(getattr(args, "log_level", "warning"), log_format, stream=stderr)
    url, source = coordinator_url(args)
    console = make_console(stdout)
    try:
        trio.run(_connect_and_run, args, url, source, console)
    except KeyboardInterrupt:
        return EXIT_OK if args.admin_command == "watch" else EXIT_INTERRUPTED
    except (AdminError, AdminConnectError, SessionLost, FieldValueError, ValueError,
            trio.TooSlowError, OSError) as exc:
        line = error_line(exc, url, args.timeout)
        if log_format == "json":  # {"ts", "level", "status", "message"} (docs/protocol.md)
            status = exc.status if isinstance(exc, AdminError) else None
            line = format_line("json", "ERROR", "admin.failed",
                               status=getattr(status, "value", status), message=line)
        print(redact_text(line), file=stderr, flush=True)  # K7
        return EXIT_FAILED
    return EXIT_OK


def error_line(exc: BaseException, url: str, timeout: float) -> str:
    """The one line printed on stderr for a failed admin command."""
    if isinstance(exc, AdminError):
        status = getattr(exc.status, "value", exc.status)
        return f"error: {status}: {exc.error}" if exc.error else f"error: {status}"
    if isinstance(exc, FieldValueError | ValueError) and not isinstance(exc, AdminConnectError):
        return f"error: invalid argument: {exc}"
    if isinstance(exc, trio.TooSlowError):
        return (f"error: no answer from the coordinator at {url} within {timeout:g}s "
                "(is it overloaded, or its Redis stalled? --timeout waits longer)")
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"error: {text}"


def make_console(stream: TextIO) -> Console:
    """A rich console on `stream` that never reads markup or emoji codes in what it prints."""
    return Console(file=stream, highlight=False, markup=False, emoji=False)


def print_view(console: Console, view: RenderableType) -> None:
    """Print a view: styled on a terminal, plain into a pipe or file ($COLUMNS wide, else 200)."""
    if console.is_terminal:
        console.print(view)
    else:
        console.file.write(render_plain(view, width=plain_width()))
        console.file.flush()


def print_json(console: Console, body: dict[str, object]) -> None:
    console.file.write(json.dumps(body, ensure_ascii=False, separators=(",", ":")) + "\n")
    console.file.flush()


async def _connect_and_run(args: argparse.Namespace, url: str, source: str,
                           console: Console) -> None:
    request = None if args.admin_command == "watch" else build_request(args)
    async with open_admin_client(url, token=admin_token(args), connect_timeout=args.timeout,
                                 url_source=source, ca_file=args.ca_file,
                                 retry_unavailable_s=args.timeout) as admin:
        if request is None:
            from rsc.admin.watch import watch

            await watch(admin, args, console)
        else:
            await run_command(admin, request, args, console)


async def _dead_letters_line(admin: AdminClient, description: GroupDescription
                             ) -> RenderableType | None:
    """`describe`'s last line: the group's dead letters and their own retention (P2, P3), or
    nothing when the coordinator does not answer `listDeadLetters`."""
    request = ListDeadLetters(request_id=0, stream_prefix=description.stream_prefix,
                              consumer_group=description.consumer_group, count=1)
    try:
        answer = read_answer(request, await admin.session.request(request))
    except Exception:  # noqa: BLE001 - an older coordinator, a lost session: the line is left out
        return None
    if not isinstance(answer, DeadLetters) or answer.status != Status.OK:
        return None
    return dead_letters_line(answer)


async def run_command(admin: AdminClient, request: AdminRequest, args: argparse.Namespace,
                      console: Console) -> None:
    """Send one request; print its answer (raises AdminError unless OK)."""
    with trio.fail_after(args.timeout):
        raw, response = await admin.exchange(request)
    if args.json:
        print_json(console, raw)
    elif isinstance(response, GroupDescription):
        print_view(console, describe_view(response, shards=getattr(args, "shards", None),
                                          members=getattr(args, "members", None)))
        line = await _dead_letters_line(admin, response)
        if line is not None:
            print_view(console, line)
    else:
        print_view(console, response_view(response))
