"""`rsc`: the command-line dispatcher (coordinator, produce, consume, admin, demo)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    raise SystemExit("rsc: not built yet")


if __name__ == "__main__":
    sys.exit(main())
