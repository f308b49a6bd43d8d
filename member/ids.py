"""Member ids: `<pod ip>-<pid>-<listener index>-<random>` (docs/protocol.md, Names)."""

from __future__ import annotations

import os
import secrets
import socket


def primary_address() -> str:
    """The pod IP from env POD_IP, else the address of the host's default route, else loopback."""
    pod_ip = os.environ.get("POD_IP", "").strip()
    if pod_ip:
        return pod_ip
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.255.255.255", 1))  # no packet is sent: UDP connect only routes
            return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def make_member_id(listener_index: int = 0) -> str:
    """A fresh member id for listener member number `listener_index` of this process."""
    return f"{primary_address()}-{os.getpid()}-{listener_index}-{secrets.token_hex(3)}"
