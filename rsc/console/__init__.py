"""The operator console: a read-only web view of every group, live, served by the coordinator.

`rsc coordinator --console-port P` runs `serve_console` in the coordinator's own
trio nursery; it talks to the coordinator only through the coordinator's admin
endpoint (`listGroups`, `describeGroup` with `watch`), so the token gate is the
coordinator's own and the console never reaches into its state.

- `rsc.console.http`: pure HTTP request parsing, routing and responses.
- `rsc.console.views`: pure view logic (rows, totals, migration progress, throttle).
- `rsc.console.server`: the trio shell (listener, page feeds).
- `static/`: the pages, their script, the chart, the style (our own code, no CDN).
"""

from __future__ import annotations

from rsc.console.server import ConsoleError, console_url, serve_console

__all__ = ["ConsoleError", "console_url", "serve_console"]
