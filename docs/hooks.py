"""mkdocs hook: refuse to build the site while a generated reference page is stale.

docs/reference/cli.md, metrics.md and the tables of configuration.md are generated from the code by
docs/reference_gen.py; `mkdocs build` fails naming the stale page and the command to run.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parent.parent


def on_pre_build(config: Any, **kwargs: Any) -> None:
    for path in (str(ROOT), str(ROOT / "docs")):
        if path not in sys.path:
            sys.path.insert(0, path)
    import reference_gen

    stale = reference_gen.stale_pages()
    if stale:
        names = ", ".join(str(page.relative_to(ROOT)) for page in stale)
        raise PluginError(f"{names} no longer match the code: run `python docs/reference_gen.py`")
