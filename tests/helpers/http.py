"""One plain HTTP/1.1 request to a local port, read until the server closes (metrics, health,
the web console)."""

from __future__ import annotations

import attrs
import trio


@attrs.frozen
class HttpResponse:
    """What the server sent: the status code, the body after the head, and every byte."""

    status: int
    body: bytes
    raw: bytes


async def http_get(port: int, path: str, *, method: str = "GET", host: str = "localhost",
                   timeout_s: float = 10.0) -> HttpResponse:
    """`method path` on 127.0.0.1:`port` with `Host: host`; the whole response, within
    `timeout_s`."""
    with trio.fail_after(timeout_s):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            raw = b""
            while chunk := await stream.receive_some(65536):
                raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    return HttpResponse(status=int(head.split(b" ", 2)[1]), body=body, raw=raw)
