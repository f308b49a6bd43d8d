"""What a build says it is (L7): its package version, wire protocol and metadata formats.

The package version is setuptools-scm's, from the git tags at build time: the file it writes
(`rsc/_version.py`, not in git), else the installed distribution's metadata, else
`0.0.0+unknown` (a checkout that was never installed).
"""

from __future__ import annotations

import importlib
from importlib import metadata

WIRE_PROTOCOL = 1
"""The wire protocol version this build speaks (docs/protocol.md, `/v1/member`, `/v1/admin`)."""



METADATA_FORMATS = (1, 2)
"""The oldest and newest metadata format (the store's format version) this build reads: written
here so that `rsc --version` imports nothing of the coordinator; tests/test_packaging.py keeps it
equal to rsc.actors.core.records.FORMAT_VERSIONS."""


def metadata_formats() -> tuple[int, int]:
    """The oldest and newest metadata format this build reads."""
    return METADATA_FORMATS


DISTRIBUTION = "redis-stream-coordinator"


def package_version() -> str:
    try:
        generated = importlib.import_module("rsc._version")
    except ImportError:
        pass
    else:
        return str(generated.version)
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0.0.0+unknown"


def version_line(version: str) -> str:
    """`rsc --version`: e.g. `rsc 0.3.0.dev12+g1a2b3c4 (wire protocol v1, metadata format 1)`."""
    oldest, newest = metadata_formats()
    formats = f"{oldest}" if oldest == newest else f"{oldest}-{newest}"
    return f"rsc {version} (wire protocol v{WIRE_PROTOCOL}, metadata format {formats})"
