"""The metrics every process with a metrics port exports, the coordinator's and `rsc consume`'s:
`process_*` (CPU seconds, resident and virtual memory, open and maximum file descriptors, start
time) and `rsc_build_info{version, python}` (always 1).
"""

from __future__ import annotations

import importlib.metadata
import platform

from prometheus_client import CollectorRegistry, Gauge, ProcessCollector

BUILD_INFO = "rsc_build_info"


def version() -> str:
    """The installed distribution's version (`rsc --version`), `unknown` outside an install."""
    try:
        return importlib.metadata.version("redis-stream-coordinator")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def register_process_metrics(registry: CollectorRegistry, who: str) -> None:
    """Add `process_*` and `rsc_build_info` to `registry`; `who` names the process in the help."""
    ProcessCollector(registry=registry)
    build = Gauge(BUILD_INFO, f"The {who}'s version and Python (always 1)", ("version", "python"),
                  registry=registry)
    build.labels(version(), platform.python_version()).set(1)
